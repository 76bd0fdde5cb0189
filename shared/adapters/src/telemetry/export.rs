//! The span exporter: OTLP/HTTP protobuf (`opentelemetry-otlp`) over the reqwest client the functions already link, SigV4-signed for X-Ray's OTLP endpoint — no gRPC, no collector layer, no second HTTP stack.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};

use super::config::{CREDENTIAL_VARS, TraceExport, XRAY_SIGNING_SERVICE};

/// Longest wait for one export request (the flush's deadline bounds it too).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// `AWS_ACCESS_KEY_ID` or `AWS_SECRET_ACCESS_KEY` is unset (Lambda always sets them).
    #[error("no AWS credentials in the environment ({0} is unset)")]
    NoCredentials(&'static str),
    #[error("SigV4 signing failed: {0}")]
    Signing(String),
}

/// Signs requests with SigV4 for one region and service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signer {
    pub region: String,
    /// The signing name (`xray` for X-Ray's OTLP endpoint).
    pub service: &'static str,
}

impl Signer {
    /// Adds `Authorization`, `X-Amz-Date` (and `X-Amz-Security-Token` with a session token) to
    /// `request`, signing its method, URI, headers and body at `time`.
    pub fn sign(
        &self,
        request: &mut Request<Bytes>,
        credentials: Credentials,
        time: SystemTime,
    ) -> Result<(), SignError> {
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SignError::Signing(e.to_string()))?
            .into();
        let uri = request.uri().to_string();
        let headers = request.headers().iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str(), v)));
        let signable =
            SignableRequest::new(request.method().as_str(), uri.as_str(), headers, SignableBody::Bytes(request.body()))
                .map_err(|e| SignError::Signing(e.to_string()))?;
        let (instructions, _signature) =
            sign(signable, &params).map_err(|e| SignError::Signing(e.to_string()))?.into_parts();
        instructions.apply_to_request_http1x(request);
        // The signature and the session token never show in a debug print of the request.
        for name in ["authorization", "x-amz-security-token"] {
            if let Some(v) = request.headers_mut().get_mut(name) {
                v.set_sensitive(true);
            }
        }
        Ok(())
    }
}

/// The function's credentials from `lookup` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// optional `AWS_SESSION_TOKEN`), read at each export: Lambda rotates them with the sandbox.
pub fn credentials_from(lookup: impl Fn(&str) -> Option<String>) -> Result<Credentials, SignError> {
    let get = |var: &'static str| lookup(var).filter(|v| !v.trim().is_empty());
    let [key_var, secret_var, token_var] = [CREDENTIAL_VARS[0], CREDENTIAL_VARS[1], CREDENTIAL_VARS[2]];
    let key = get(key_var).ok_or(SignError::NoCredentials(key_var))?;
    let secret = get(secret_var).ok_or(SignError::NoCredentials(secret_var))?;
    Ok(Credentials::new(key, secret, get(token_var), None, "environment"))
}

/// Where the signing credentials are read: the process environment on Lambda, a map in tests.
pub type CredentialLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment as a [`CredentialLookup`].
pub fn environment() -> CredentialLookup {
    Arc::new(|k| std::env::var(k).ok())
}

/// The exporter's HTTP client: reqwest (the functions' own), signing each request when a
/// [`Signer`] is set. Status codes are answered as they are; the exporter reads them.
#[derive(Clone)]
pub struct OtlpHttpClient {
    http: reqwest::Client,
    signer: Option<Signer>,
    credentials: CredentialLookup,
}

impl std::fmt::Debug for OtlpHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpHttpClient").field("signer", &self.signer).finish_non_exhaustive()
    }
}

impl OtlpHttpClient {
    pub fn new(signer: Option<Signer>, credentials: CredentialLookup) -> Result<Self, reqwest::Error> {
        // A sandbox frozen between invocations leaves pooled connections to die: keep them briefly.
        let http = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .connect_timeout(EXPORT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self { http, signer, credentials })
    }
}

#[async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        if let Some(signer) = &self.signer {
            let credentials = credentials_from(|k| (self.credentials)(k))?;
            signer.sign(&mut request, credentials, SystemTime::now())?;
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

/// The OTLP/HTTP protobuf exporter of `traces`, signing with the credentials `credentials` reads;
/// `None` for [`TraceExport::Off`].
pub fn exporter(
    traces: &TraceExport,
    credentials: CredentialLookup,
) -> Result<Option<opentelemetry_otlp::SpanExporter>, ExporterError> {
    let (endpoint, signer) = match traces {
        TraceExport::Off => return Ok(None),
        TraceExport::Otlp { endpoint } => (endpoint, None),
        TraceExport::XRay { endpoint, region } => {
            (endpoint, Some(Signer { region: region.clone(), service: XRAY_SIGNING_SERVICE }))
        }
    };
    let client = OtlpHttpClient::new(signer, credentials).map_err(|e| ExporterError(e.to_string()))?;
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

    fn request() -> Request<Bytes> {
        Request::post("https://xray.us-east-1.amazonaws.com/v1/traces")
            .header("content-type", "application/x-protobuf")
            .body(Bytes::from_static(b"\x0a\x00"))
            .unwrap()
    }

    #[test]
    fn an_xray_export_is_signed_for_the_xray_service_in_its_region() {
        let signer = Signer { region: "us-east-1".into(), service: XRAY_SIGNING_SERVICE };
        let mut r = request();
        let credentials =
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", Some("tok".into()), None, "t");
        // 2024-01-02T03:04:05Z
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645);
        signer.sign(&mut r, credentials, time).unwrap();
        let auth = r.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240102/us-east-1/xray/aws4_request, SignedHeaders="
            ),
            "{auth}"
        );
        assert!(auth.contains("content-type") && auth.contains("x-amz-date"), "{auth}");
        assert_eq!(r.headers()["x-amz-date"], "20240102T030405Z");
        assert_eq!(r.headers()["x-amz-security-token"], "tok");
        assert!(r.headers()["authorization"].is_sensitive(), "the signature is never logged");
        assert!(!format!("{:?}", r.headers()).contains("wJalr"), "the secret key is not in the request");
    }

    #[test]
    fn the_same_request_signed_twice_at_the_same_time_gets_the_same_signature() {
        let signer = Signer { region: "eu-west-1".into(), service: XRAY_SIGNING_SERVICE };
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645);
        let sign = || {
            let mut r = request();
            signer.sign(&mut r, Credentials::new("AKID", "secret", None, None, "t"), time).unwrap();
            r.headers()["authorization"].to_str().unwrap().to_owned()
        };
        assert_eq!(sign(), sign());
        assert!(sign().contains("/eu-west-1/xray/"));
    }

    #[test]
    fn credentials_come_from_the_lambda_variables_and_are_required() {
        let vars: HashMap<&str, &str> = HashMap::from([("AWS_ACCESS_KEY_ID", "AKID"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        let c = credentials_from(|k| vars.get(k).map(|v| (*v).to_owned())).unwrap();
        assert_eq!((c.access_key_id(), c.session_token()), ("AKID", None));
        let e = credentials_from(|k| (k == "AWS_ACCESS_KEY_ID").then(|| "AKID".to_owned())).unwrap_err();
        assert_eq!(e.to_string(), "no AWS credentials in the environment (AWS_SECRET_ACCESS_KEY is unset)");
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
        let credentials: HashMap<&str, &str> = HashMap::from([
            ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AWS_SESSION_TOKEN", "tok"),
        ]);
        let lookup: CredentialLookup = Arc::new(move |k| credentials.get(k).map(|v| (*v).to_owned()));
        let exporter = exporter(&xray, lookup).unwrap().unwrap();
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
        assert!(exporter(&TraceExport::Off, environment()).unwrap().is_none());
        let otlp = TraceExport::Otlp { endpoint: "http://127.0.0.1:4318/v1/traces".into() };
        assert!(exporter(&otlp, environment()).unwrap().is_some());
        let xray = TraceExport::XRay {
            endpoint: "https://xray.us-east-1.amazonaws.com/v1/traces".into(),
            region: "us-east-1".into(),
        };
        assert!(exporter(&xray, environment()).unwrap().is_some());
    }
}
