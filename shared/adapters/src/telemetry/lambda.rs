//! Telemetry flushed after the response on Lambda, the runtime's internal-extension pattern: the handler's answer goes out first, then an extension in the same process exports the invocation's spans and writes its metrics before it lets the sandbox freeze — so no caller waits on the span export, and nothing is lost to the freeze.
//!
//! Lambda freezes a sandbox only once the runtime *and every extension* have
//! asked for their next event. The extension registered here receives each
//! `INVOKE`, waits until the handler's future has finished (the
//! [`FlushAfterResponse`] layer around the handler signals it, also when the
//! handler fails or panics), flushes, and only then asks for the next event.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_extension::tower::{Layer, Service};
use lambda_extension::{Extension, LambdaEvent, NextEvent, service_fn};
use tokio::sync::{Mutex, mpsc};

use super::Telemetry;

/// The error type of the Lambda runtime and extension clients.
pub type Error = lambda_extension::Error;

/// Name of the internal extension (unique within a function).
pub const EXTENSION_NAME: &str = "swarm-telemetry-flush";

/// Runs a function's runtime loop (`runtime`, given the layer to put around its handler) beside
/// the internal extension that flushes `telemetry` after each response. Registers the extension
/// first (it must be registered before the runtime asks for its first event).
///
/// Errors: the extension cannot register (not on Lambda: `AWS_LAMBDA_RUNTIME_API` unset), or the
/// runtime loop's own error.
pub async fn run<F, Fut>(telemetry: &Telemetry, runtime: F) -> Result<(), Error>
where
    F: FnOnce(FlushAfterResponse) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let (done, answered) = mpsc::unbounded_channel();
    let answered = Arc::new(Mutex::new(answered));
    let flusher = telemetry.clone();
    let extension = Extension::new()
        .with_events(&["INVOKE"])
        .with_events_processor(service_fn(move |event: LambdaEvent| {
            let (answered, telemetry) = (answered.clone(), flusher.clone());
            async move {
                flush_once_answered(event.next, &answered, &telemetry).await;
                Ok::<(), Error>(())
            }
        }))
        .with_extension_name(EXTENSION_NAME)
        .register()
        .await?;
    tokio::try_join!(runtime(FlushAfterResponse { done }), extension.run())?;
    Ok(())
}

/// Waits until the handler of this invocation has answered — at most until the invocation's
/// deadline (past it Lambda ends the sandbox anyway) — then flushes. Never fails: an extension
/// that returns an error takes the whole function down.
async fn flush_once_answered(event: NextEvent, answered: &Mutex<mpsc::UnboundedReceiver<()>>, telemetry: &Telemetry) {
    let deadline_ms = match event {
        NextEvent::Invoke(invoke) => invoke.deadline_ms,
        NextEvent::Shutdown(shutdown) => shutdown.deadline_ms,
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let left = Duration::from_millis(deadline_ms).saturating_sub(now);
    let mut answered = answered.lock().await;
    if tokio::time::timeout(left, answered.recv()).await.is_err() {
        tracing::warn!("the handler did not answer before the invocation's deadline; flushing what there is");
    }
    telemetry.flush().await;
}

/// The layer around a handler that tells the flushing extension when the handler has answered.
#[derive(Clone, Debug)]
pub struct FlushAfterResponse {
    done: mpsc::UnboundedSender<()>,
}

impl FlushAfterResponse {
    /// `handler` wrapped (the same as [`Layer::layer`]).
    pub fn wrap<S>(&self, handler: S) -> Answered<S> {
        Answered { inner: handler, done: self.done.clone() }
    }
}

impl<S> Layer<S> for FlushAfterResponse {
    type Service = Answered<S>;

    fn layer(&self, inner: S) -> Answered<S> {
        self.wrap(inner)
    }
}

/// A handler that signals once each of its calls has finished (answered, failed or panicked).
#[derive(Clone, Debug)]
pub struct Answered<S> {
    inner: S,
    done: mpsc::UnboundedSender<()>,
}

/// Sends the "answered" signal when dropped: after the handler's future finished, or when it is
/// dropped unfinished (a panic unwinding through it).
struct Signal(mpsc::UnboundedSender<()>);

impl Drop for Signal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl<S, R> Service<R> for Answered<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let signal = Signal(self.done.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(signal);
            answer
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_call_signals_once_when_it_has_answered_or_failed() {
        let (done, mut answered) = mpsc::unbounded_channel();
        let layer = FlushAfterResponse { done };
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let wait = Arc::new(Mutex::new(Some(wait)));
        let mut handler = layer.wrap(service_fn(move |fail: bool| {
            let wait = wait.clone();
            async move {
                if let Some(wait) = wait.lock().await.take() {
                    let _ = wait.await;
                }
                if fail { Err::<u8, Error>("boom".into()) } else { Ok(7) }
            }
        }));
        let first = tokio::spawn(handler.call(false));
        tokio::task::yield_now().await;
        assert!(answered.try_recv().is_err(), "no signal while the handler still works");
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 7);
        assert!(answered.try_recv().is_ok());
        assert!(handler.call(true).await.is_err());
        assert!(answered.try_recv().is_ok(), "a failed call signals too");
        drop(handler.call(false));
        assert!(answered.try_recv().is_ok(), "a call dropped unfinished (a panic) signals too");
        assert!(answered.try_recv().is_err(), "one signal per call");
    }
}
