//! The span exporter: OTLP/HTTP protobuf (`opentelemetry-otlp`) over the reqwest client the functions already link, SigV4-signed for X-Ray's OTLP endpoint by the swarm's one signer — no gRPC, no collector layer, no second HTTP stack.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};

use super::config::{TraceExport, XRAY_SIGNING_SERVICE};
use crate::sigv4::SigV4Signer;

/// Longest wait for one export request (the flush's deadline bounds it too).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The exporter's HTTP client: reqwest (the functions' own), signing each request when a
/// [`SigV4Signer`] is set. Status codes are answered as they are; the exporter reads them.
#[derive(Clone, Debug)]
pub struct OtlpHttpClient {
    http: reqwest::Client,
    signer: Option<SigV4Signer>,
}

impl OtlpHttpClient {
    pub fn new(signer: Option<SigV4Signer>) -> Result<Self, reqwest::Error> {
        // A sandbox frozen between invocations leaves pooled connections to die: keep them briefly.
        let http = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .connect_timeout(EXPORT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, signer })
    }
}

#[async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        if let Some(signer) = &self.signer {
            signer.sign_request(&mut request).await?;
        }
        let request = reqwest::Request::try_from(request)?;
        let response = self.http.execute(request).await?;
        let mut answer = Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            *headers = response.headers().clone();
        }
        let body = response.bytes().await?;
        Ok(answer.body(body)?)
    }
}

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the span exporter: {0}")]
pub struct ExporterError(String);

/// The OTLP/HTTP protobuf exporter of `traces` (X-Ray's signed with credentials from the default
/// provider chain); `None` for [`TraceExport::Off`].
pub fn exporter(traces: &TraceExport) -> Result<Option<opentelemetry_otlp::SpanExporter>, ExporterError> {
    let signer = match traces {
        TraceExport::XRay { region, .. } => Some(SigV4Signer::from_env(XRAY_SIGNING_SERVICE, region)),
        _ => None,
    };
    exporter_signed_by(traces, signer)
}

/// [`exporter`] with the requests signed by `signer` (when set).
pub fn exporter_signed_by(
    traces: &TraceExport,
    signer: Option<SigV4Signer>,
) -> Result<Option<opentelemetry_otlp::SpanExporter>, ExporterError> {
    let endpoint = match traces {
        TraceExport::Off => return Ok(None),
        TraceExport::Otlp { endpoint } | TraceExport::XRay { endpoint, .. } => endpoint,
    };
    let client = OtlpHttpClient::new(signer).map_err(|e| ExporterError(e.to_string()))?;
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map(Some)
        .map_err(|e| ExporterError(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    use aws_credential_types::Credentials;

    fn xray_signer(region: &str, credentials: Credentials) -> SigV4Signer {
        SigV4Signer::with_credentials(XRAY_SIGNING_SERVICE, region, credentials)
    }

    #[tokio::test]
    async fn an_xray_export_is_signed_for_the_xray_service_in_its_region() {
        let credentials =
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", Some("tok".into()), None, "t");
        let mut r = Request::post("https://xray.us-east-1.amazonaws.com/v1/traces")
            .header("content-type", "application/x-protobuf")
            .body(Bytes::from_static(b"\x0a\x00"))
            .unwrap();
        xray_signer("us-east-1", credentials).sign_request(&mut r).await.unwrap();
        let auth = r.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                && auth.contains("/us-east-1/xray/aws4_request, SignedHeaders="),
            "{auth}"
        );
        assert!(auth.contains("content-type") && auth.contains("x-amz-date"), "{auth}");
        assert_eq!(r.headers()["x-amz-security-token"], "tok");
        assert!(r.headers()["authorization"].is_sensitive(), "the signature is never logged");
        assert!(!format!("{:?}", r.headers()).contains("wJalr"), "the secret key is not in the request");
    }

    #[test]
    fn the_same_request_signed_twice_at_the_same_time_gets_the_same_signature() {
        let credentials = Credentials::new("AKID", "secret", None, None, "t");
        let signer = xray_signer("eu-west-1", credentials.clone());
        let time = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645);
        let sign = || {
            let url = "https://xray.eu-west-1.amazonaws.com/v1/traces";
            let headers = signer
                .sign_at(&credentials, "POST", url, &[("content-type", "application/x-protobuf")], b"\x0a\x00", time)
                .unwrap();
            headers.iter().find(|(n, _)| n == "authorization").unwrap().1.to_str().unwrap().to_owned()
        };
        assert_eq!(sign(), sign());
        assert!(sign().contains("/20240102/eu-west-1/xray/"));
    }

    /// One HTTP request as the fake endpoint read it: request line, lower-case headers, body.
    type Received = (String, HashMap<String, String>, Vec<u8>);

    /// A one-request HTTP endpoint on a free port; answers 200 and hands the request over.
    async fn fake_endpoint() -> (String, tokio::task::JoinHandle<Received>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let (head, body_start) = loop {
                let n = socket.read(&mut buf).await.unwrap();
                raw.extend_from_slice(&buf[..n]);
                if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (String::from_utf8_lossy(&raw[..at]).into_owned(), at + 4);
                }
            };
            let mut lines = head.lines();
            let request_line = lines.next().unwrap_or_default().to_owned();
            let headers: HashMap<String, String> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            let mut body = raw[body_start..].to_vec();
            while body.len() < length {
                let n = socket.read(&mut buf).await.unwrap();
                body.extend_from_slice(&buf[..n]);
            }
            socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.unwrap();
            (request_line, headers, body)
        });
        (url, served)
    }

    #[tokio::test]
    async fn an_export_posts_signed_protobuf_spans_to_the_traces_endpoint() {
        use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
        use opentelemetry_sdk::trace::SpanExporter as _;
        let (url, served) = fake_endpoint().await;
        let buffer = std::sync::Arc::new(super::super::SpanBuffer::default());
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(super::super::SharedBuffer(buffer.clone()))
            .build();
        let mut span = provider.tracer("test").start("chat mock-model");
        span.set_attribute(opentelemetry::KeyValue::new("gen_ai.usage.input_tokens", 12));
        span.end();
        let spans = buffer.drain();
        assert_eq!(spans.len(), 1);
        let xray = TraceExport::XRay { endpoint: url, region: "us-east-1".into() };
        let signer = xray_signer("us-east-1", Credentials::new("AKIDTEST", "s3cr3t", Some("tok".into()), None, "t"));
        let exporter = exporter_signed_by(&xray, Some(signer)).unwrap().unwrap();
        exporter.export(spans).await.unwrap();
        let (request_line, headers, body) = served.await.unwrap();
        assert_eq!(request_line, "POST /v1/traces HTTP/1.1");
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert!(headers["authorization"].starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/"), "{headers:?}");
        assert!(headers["authorization"].contains("/us-east-1/xray/aws4_request"));
        assert_eq!(headers["x-amz-security-token"], "tok");
        assert!(!headers.values().any(|v| v.contains("s3cr3t")), "the secret key never travels");
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains("chat mock-model") && text.contains("gen_ai.usage.input_tokens"),
            "the span is in the body"
        );
    }

    #[test]
    fn off_builds_no_exporter_and_the_others_build_one() {
        assert!(exporter(&TraceExport::Off).unwrap().is_none());
        let otlp = TraceExport::Otlp { endpoint: "http://127.0.0.1:4318/v1/traces".into() };
        assert!(exporter(&otlp).unwrap().is_some());
        let xray = TraceExport::XRay {
            endpoint: "https://xray.us-east-1.amazonaws.com/v1/traces".into(),
            region: "us-east-1".into(),
        };
        assert!(exporter(&xray).unwrap().is_some());
    }
}
