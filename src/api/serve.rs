//! Serving the router over TCP: how connections are accepted, timed and
//! capped, so that slow or idle clients never starve the others.
//!
//! Each connection is served by hyper (HTTP/1.1, or HTTP/2 with prior
//! knowledge) and watched by one timer of its own, against two deadlines:
//! - **the request head** (`request_header_timeout`): from the moment the
//!   connection is accepted, or the first byte after a finished response,
//!   until a complete request head reached the router. A client that sends
//!   nothing, or dribbles its headers (slowloris), is cut then;
//! - **idleness** (`idle_timeout`): a keep-alive connection with no request
//!   in flight and no byte moved for that long is closed. On HTTP/2 only
//!   requests count: a client that sends nothing but PINGs or window
//!   updates is idle.
//!
//! A request's body has a deadline of its own (`body_timeout`), counted from
//! its head: a client that announces a body and stops sending it is
//! answered 408 `request_timeout` and the connection is closed, so that it
//! holds neither a slot nor a buffer for long.
//!
//! hyper's own `header_read_timeout` is not used: it runs from the end of a
//! response, so it would also close idle keep-alive connections at the
//! header deadline. A request in flight (a `?wait=true`, an event stream)
//! is never cut by either deadline: a response ends when its body ends.
//!
//! At most `max_connections` are open at once. Past that, a connection is
//! accepted and closed at once, so the kernel's backlog never fills with
//! connections nobody will serve and clients see the refusal immediately.
//! Each client holds at most `max_connections_per_client` of them
//! ([`super::clients`]): counted against its remote address from the
//! accept, and against its tenant once a request authenticates. An address
//! past its share is answered 429 and closed at the accept.
//! A failed `accept` (out of descriptors) is retried after a short pause
//! rather than ending the server.
//!
//! hyper answers what it cannot parse itself (400 for bytes that are not a
//! request, 414 and 431 past its own buffers), with an empty body, before
//! any service sees it. Those answers are recognised as they are written (a
//! 4xx with `content-length: 0` while no request is in flight: every
//! response of the router carries a JSON body) and replaced with the same
//! status in the JSON error shape.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

use super::clients::{Client, ClientShares, ConnectionClient};
use super::error::ApiError;

/// The head hyper buffers before it refuses a request itself.
const HYPER_MAX_BUF_BYTES: usize = 256 * 1024;

/// Header lines hyper parses before it refuses a request itself.
const HYPER_MAX_HEADERS: usize = 512;

/// How long to wait before accepting again after `accept` failed.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// How the HTTP layer treats connections.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub request_header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    /// The connections each client holds (shared with the authentication,
    /// which moves a connection to its tenant).
    pub clients: Arc<ClientShares>,
}

/// Serves `router` on `listener` until `shutdown` fires; then stops
/// accepting, lets every connection finish its request in flight, and
/// returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, address) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection limit reached; closing a new connection"
            );
            drop(stream);
            continue;
        };
        let Some(held) = limits.clients.hold(Client::Address(address.ip())) else {
            refuse_connection(&stream, address.ip(), limits.clients.limit());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let shutdown = shutdown.clone();
        let limits = limits.clone();
        connections.spawn(async move {
            let client = Arc::new(ConnectionClient::of(held));
            serve_connection(stream, router, &limits, client, shutdown).await;
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

/// Answers a connection of an address past its share 429 and closes it: one
/// write into the empty send buffer of a new socket, never waited on.
fn refuse_connection(stream: &TcpStream, address: std::net::IpAddr, limit: usize) {
    tracing::warn!(%address, limit, "a client's connection limit reached; refusing a connection");
    let error = ApiError::TooManyConnections(limit);
    let (code, body) = error.status_and_body();
    let response = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: {}\r\nconnection: close\r\n\r\n{body}",
        code.as_u16(),
        code.canonical_reason().unwrap_or("Error"),
        body.len(),
        super::error::RETRY_AFTER_SECONDS,
    );
    let _ = stream.try_write(response.as_bytes());
}

/// What the connection's timer reads: when a byte last moved, when the
/// current request head began (0: none is being read), how many responses
/// are unfinished. Times are milliseconds since the connection began.
struct Activity {
    origin: Instant,
    last_byte: AtomicU64,
    head_started: AtomicU64,
    in_flight: AtomicUsize,
    /// The connection speaks HTTP/2 (its first bytes were the preface):
    /// frames between requests (pings, window updates) are no request head.
    http2: AtomicBool,
}

/// `head_started` when no head is being read.
const NO_HEAD: u64 = u64::MAX;

impl Activity {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_byte: AtomicU64::new(0),
            // The first head is awaited from the moment of accept.
            head_started: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            http2: AtomicBool::new(false),
        }
    }

    fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn read(&self, bytes: &[u8], first: bool) {
        // (A preface split over two first reads is taken for HTTP/1; its
        // connection is then cut at the header deadline when idle.)
        if first && bytes.starts_with(b"PRI * HTTP/2.0") {
            self.http2.store(true, Ordering::Relaxed);
            // HTTP/2 has no head to wait for: only idleness counts, and
            // only requests end it (not PINGs, settings, window updates).
            self.head_started.store(NO_HEAD, Ordering::Release);
            return;
        }
        if self.is_http2() {
            return;
        }
        let now = self.now();
        self.last_byte.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            // The first byte of a new request; a head already begun keeps
            // its start.
            let _ = self.head_started.compare_exchange(
                NO_HEAD,
                now,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    fn wrote(&self) {
        // HTTP/2 writes between requests are frames of the connection
        // (PING acknowledgements), not activity.
        if !self.is_http2() {
            self.last_byte.store(self.now(), Ordering::Relaxed);
        }
    }

    fn request_began(&self) {
        self.last_byte.store(self.now(), Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(NO_HEAD, Ordering::Release);
    }

    fn response_ended(&self) {
        self.last_byte.store(self.now(), Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// When the connection must be closed, given what is known now; `None`
    /// while a response is unfinished (it is re-checked when it ends).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<u64> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 4);
        let idle = self
            .last_byte
            .load(Ordering::Relaxed)
            .saturating_add(millis(limits.idle_timeout));
        let head = match self.head_started.load(Ordering::Acquire) {
            NO_HEAD => u64::MAX,
            started => started.saturating_add(millis(limits.request_header_timeout)),
        };
        Some(idle.min(head))
    }
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    limits: &ConnectionLimits,
    client: Arc<ConnectionClient>,
    shutdown: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
        replacement: None,
        read_any: false,
    });
    let body_timeout = limits.body_timeout;
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let mut router = router.clone();
            activity.request_began();
            // Made now, not in the future: a future dropped unpolled still
            // ends its request.
            let guard = InFlight(Arc::clone(&activity));
            let mut request = request.map(|body| {
                if body.is_end_stream() {
                    Body::new(body)
                } else {
                    Body::new(BodyDeadline::new(body, body_timeout))
                }
            });
            request.extensions_mut().insert(Arc::clone(&client));
            async move {
                let response = router.call(request).await?;
                // The guard lives as long as the body: a response is in
                // flight until its last byte (or its stream's end).
                Ok::<_, std::convert::Infallible>(response.map(move |body| {
                    Body::new(body.map_frame(move |frame| {
                        let _ = &guard;
                        frame
                    }))
                }))
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Large enough that the router sees, and answers in JSON, what is past
    // its own limits (`super::limits`); only far larger heads meet hyper's
    // plain refusals.
    builder
        .http1()
        .max_buf_size(HYPER_MAX_BUF_BYTES)
        .max_headers(HYPER_MAX_HEADERS);
    let connection = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        let wake = match activity.deadline(limits) {
            Some(at) => activity.origin + Duration::from_millis(at),
            // Re-checked at least this often while a response runs.
            None => Instant::now() + limits.request_header_timeout.min(limits.idle_timeout),
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            // Also while closing: a graceful shutdown does not end a
            // connection whose head is half received.
            () = tokio::time::sleep_until(wake) => {
                if activity.deadline(limits).is_some_and(|at| activity.now() >= at) {
                    if activity.is_http2() && !closing {
                        // A GOAWAY lets the client finish cleanly; the
                        // next deadline drops it if it does not.
                        closing = true;
                        activity.last_byte.store(activity.now(), Ordering::Relaxed);
                        connection.as_mut().graceful_shutdown();
                        continue;
                    }
                    // Nothing is in flight: close now.
                    return;
                }
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// A request's body that fails with [`BodyTimedOut`] once `body_timeout`
/// passed from its head without its end (the JSON extractor answers 408
/// from it). The timer is made only when the body must be waited for.
struct BodyDeadline {
    inner: hyper::body::Incoming,
    deadline: Instant,
    timeout: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The error a `BodyDeadline` ends with: the handler reading the body
/// fails, and the answer is turned into 408 from it.
#[derive(Debug, thiserror::Error)]
#[error("the request's body did not arrive within {} ms", .0.as_millis())]
pub struct BodyTimedOut(pub Duration);

/// The body deadline that `error` (or an error it wraps) reports, if any.
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(BodyTimedOut(timeout)) = error.downcast_ref() {
            return Some(*timeout);
        }
        next = error.source();
    }
    None
}

impl BodyDeadline {
    fn new(inner: hyper::body::Incoming, timeout: Duration) -> Self {
        Self {
            inner,
            deadline: Instant::now() + timeout,
            timeout,
            timer: None,
        }
    }
}

impl hyper::body::Body for BodyDeadline {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(BodyTimedOut(self.timeout).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Marks a response finished when dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.response_ended();
    }
}

/// A stream that tells the connection's [`Activity`] when bytes move, and
/// turns hyper's own empty-bodied refusals into JSON ones.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// A JSON refusal written in place of hyper's, and how much of it is out.
    replacement: Option<(Vec<u8>, usize)>,
    /// Whether any byte was read yet (the first tell the protocol).
    read_any: bool,
}

impl Watched {
    /// Whether `head` is hyper's own refusal; if so, its JSON replacement is
    /// queued and the caller reports `head` as written.
    fn replace_refusal(&mut self, head: &[u8]) -> bool {
        // hyper closes the connection after its refusal: whatever it writes
        // again (the same head, retried after a pending write) is consumed.
        if self.replacement.is_some() {
            return true;
        }
        if self.activity.in_flight.load(Ordering::Acquire) > 0 {
            return false;
        }
        let Some(status) = hyper_refusal(head) else {
            return false;
        };
        let error = match status {
            414 => ApiError::UriTooLong(super::limits::MAX_URI_BYTES),
            431 => ApiError::HeadersTooLarge {
                count: super::limits::MAX_HEADER_COUNT,
                bytes: super::limits::MAX_HEADER_BYTES,
            },
            _ => ApiError::MalformedRequest,
        };
        let (code, body) = error.status_and_body();
        let response = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            code.as_u16(),
            code.canonical_reason().unwrap_or("Error"),
            body.len()
        );
        self.replacement = Some((response.into_bytes(), 0));
        true
    }

    /// Writes out a queued replacement; ready once all of it is out.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

/// The status of `head` if it is one of hyper's own refusals: a 4xx status
/// line with an empty body.
fn hyper_refusal(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.1 4")?;
    // Exactly one head, nothing after it: a buffer holding a router response
    // and the next one's head is never mistaken for a refusal.
    let end = head.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if end != head.len() || !head.windows(19).any(|w| w == b"content-length: 0\r\n") {
        return None;
    }
    let digits = rest.get(..2)?;
    let tens = std::str::from_utf8(digits).ok()?.parse::<u16>().ok()?;
    Some(400 + tens)
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let first = before == 0 && !self.read_any;
            self.read_any = true;
            self.activity.read(&buf.filled()[before..], first);
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_replacement(cx))?;
        if self.replace_refusal(buf) {
            ready!(self.poll_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_replacement(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && self.replace_refusal(first)
        {
            ready!(self.poll_replacement(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the open-file limit allows, raising the soft limit to the hard one
/// first: the descriptors left once `reserve` are set aside for the
/// database, workspaces and commands, but never less than half the limit
/// (a reserve sized for many concurrent runs must not starve their clients,
/// whose event streams are connections too). At least 16.
pub fn connection_budget(reserve: u64) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => limit = getrlimit(Resource::Nofile),
            Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
        }
    }
    budget(limit.current.unwrap_or(1 << 20), reserve)
}

fn budget(files: u64, reserve: u64) -> usize {
    let budget = files.saturating_sub(reserve.min(files / 2)).max(16);
    usize::try_from(budget).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_budget_keeps_the_reserve_but_never_less_than_half() {
        assert_eq!(budget(20_000, 768), 19_232);
        // A reserve for 2,000 concurrent runs does not starve their streams.
        assert_eq!(budget(20_000, 256 + 16 * 2_000), 10_000);
        assert_eq!(budget(1_024, 768), 512);
        assert_eq!(budget(20, 768), 16);
    }

    #[test]
    fn only_a_lone_empty_4xx_head_is_taken_for_a_refusal() {
        let refusal = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_refusal(refusal), Some(400));
        let big = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_refusal(big), Some(431));
        let with_body = b"HTTP/1.1 404 Not Found\r\ncontent-length: 52\r\n\r\n";
        assert_eq!(hyper_refusal(with_body), None);
        let two = [refusal.as_slice(), b"HTTP/1.1 200 OK\r\n\r\n"].concat();
        assert_eq!(hyper_refusal(&two), None);
        assert_eq!(
            hyper_refusal(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
    }
}
