//! `McpHttpClient`: rmcp's HTTP client with what rmcp passes only per session added per request — the headers in a request's extensions ([`RequestHeaders`]) — and, for an `AWS_IAM` function URL, a SigV4 signature over exactly the bytes sent.

use std::{collections::HashMap, sync::Arc};

use http::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, GetExtensions},
    transport::{
        common::client_side_sse::BoxedSseResponse,
        streamable_http_client::{
            StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
        },
    },
};

/// Per-request HTTP headers, put into an rmcp request's extensions and added to that
/// request's POST by [`McpHttpClient`]. Never serialized into the JSON-RPC body.
#[derive(Clone, Debug, Default)]
pub struct RequestHeaders(pub Arc<Vec<(HeaderName, HeaderValue)>>);

/// A reqwest client for rmcp's Streamable HTTP transport that adds the [`RequestHeaders`]
/// found in a request's extensions to its POST and, with a signer, signs every request with
/// SigV4 (feature `sigv4`). Errors keep rmcp's reqwest error type, so callers classify them
/// as before.
#[derive(Clone)]
pub struct McpHttpClient {
    inner: reqwest::Client,
    #[cfg(feature = "sigv4")]
    signer: Option<Arc<super::sigv4::SigV4Signer>>,
}

impl McpHttpClient {
    pub fn new(inner: reqwest::Client) -> Self {
        Self {
            inner,
            #[cfg(feature = "sigv4")]
            signer: None,
        }
    }

    /// Signs every request with `signer` (an `AWS_IAM` function URL).
    #[cfg(feature = "sigv4")]
    pub fn signed(mut self, signer: super::sigv4::SigV4Signer) -> Self {
        self.signer = Some(Arc::new(signer));
        self
    }

    pub(crate) fn with_request_headers(
        message: &ClientJsonRpcMessage,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> HashMap<HeaderName, HeaderValue> {
        if let ClientJsonRpcMessage::Request(request) = message
            && let Some(extra) = request.request.extensions().get::<RequestHeaders>()
        {
            for (name, value) in extra.0.iter() {
                headers.insert(name.clone(), value.clone());
            }
        }
        headers
    }

    /// Adds the SigV4 headers for `method uri` with `body` (the bytes reqwest will send).
    #[cfg_attr(not(feature = "sigv4"), allow(clippy::unnecessary_wraps, unused_variables))]
    async fn sign(
        &self,
        method: &str,
        uri: &str,
        body: &[u8],
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<HashMap<HeaderName, HeaderValue>, StreamableHttpError<reqwest::Error>> {
        #[cfg(feature = "sigv4")]
        if let Some(signer) = &self.signer {
            let signed = signer
                .sign(method, uri, &[], body)
                .await
                .map_err(|e| StreamableHttpError::Io(std::io::Error::other(e.to_string())))?;
            let mut headers = headers;
            headers.extend(signed);
            return Ok(headers);
        }
        Ok(headers)
    }
}

impl StreamableHttpClient for McpHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = Self::with_request_headers(&message, custom_headers);
        // reqwest's `.json()` sends `serde_json::to_vec` of the message: sign those same bytes.
        let body = if self.signs() { serde_json::to_vec(&message)? } else { Vec::new() };
        let headers = self.sign("POST", &uri, &body, headers).await?;
        self.inner.post_message_with_response_limits(uri, message, session_id, auth_header, headers, limits).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let headers = self.sign("DELETE", &uri, &[], custom_headers).await?;
        self.inner.delete_session(uri, session_id, auth_header, headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        let headers = self.sign("GET", &uri, &[], custom_headers).await?;
        self.inner.get_stream(uri, session_id, last_event_id, auth_header, headers).await
    }
}

impl McpHttpClient {
    /// Whether requests are SigV4-signed (and so `Authorization` is the signature's).
    pub fn signs(&self) -> bool {
        #[cfg(feature = "sigv4")]
        return self.signer.is_some();
        #[cfg(not(feature = "sigv4"))]
        false
    }
}
