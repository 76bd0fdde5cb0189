//! `swarm-local serve`'s listener: the answers hyper writes itself to a request head it refuses before routing (414 URI too long, 431 header fields too large, 400 a request line or field that does not parse — a bare status with `content-length: 0`) go out in the API's one error shape instead.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A TCP listener whose connections rewrite hyper's bare refusals (see the module).
pub struct EdgeListener(pub TcpListener);

impl axum::serve::Listener for EdgeListener {
    type Io = EdgeStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (EdgeStream { inner: stream, pending: None }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// One connection. Writes are not vectored, so hyper hands each response over as one flat buffer.
pub struct EdgeStream {
    inner: TcpStream,
    /// A rewritten answer still being written: its bytes, how many are out, and the length of the
    /// buffer it replaces (what hyper is told was written).
    pending: Option<(Vec<u8>, usize, usize)>,
}

/// The status of `buf` when it is hyper's own refusal of a request head: a 400, 414 or 431 head
/// with `content-length: 0` and nothing after it (every answer of the router's carries a body).
fn refused_status(buf: &[u8]) -> Option<StatusCode> {
    let head = std::str::from_utf8(buf.strip_suffix(b"\r\n\r\n")?).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let empty = lines.any(|line| line.eq_ignore_ascii_case("content-length: 0"));
    let status = StatusCode::from_u16(status).ok()?;
    let refusal = [StatusCode::BAD_REQUEST, StatusCode::URI_TOO_LONG, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE];
    (empty && refusal.contains(&status)).then_some(status)
}

/// The whole answer (head and problem document) for a head refused with `status`; the connection closes after it.
fn problem_answer(status: StatusCode) -> Vec<u8> {
    let error = orchestrator::api::head_refused(status);
    let body = serde_json::to_vec(&error.problem()).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        orchestrator::api::PROBLEM_JSON,
        body.len()
    );
    [head.into_bytes(), body].concat()
}

impl EdgeStream {
    /// Writes out a pending rewritten answer; `Ready(Some(n))` once it is all out (n: the replaced length).
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        while let Some((bytes, out, replaced)) = self.pending.as_mut() {
            if *out == bytes.len() {
                let replaced = *replaced;
                self.pending = None;
                return Poll::Ready(Ok(Some(replaced)));
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*out..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *out += n;
        }
        Poll::Ready(Ok(None))
    }
}

impl AsyncRead for EdgeStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for EdgeStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none()
            && let Some(status) = refused_status(buf)
        {
            self.pending = Some((problem_answer(status), 0, buf.len()));
        }
        match ready!(self.drain(cx))? {
            Some(replaced) => Poll::Ready(Ok(replaced)),
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_refusal_is_rewritten() {
        let bare = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 21:00:00 GMT\r\n\r\n";
        assert_eq!(refused_status(bare), Some(StatusCode::URI_TOO_LONG));
        let routed =
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 120\r\n\r\n";
        assert_eq!(refused_status(routed), None);
        assert_eq!(refused_status(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"), None);
        let answer = String::from_utf8(problem_answer(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)).unwrap();
        assert!(answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{answer}");
        assert!(answer.contains(r#""code":"headers_too_large""#), "{answer}");
    }
}
