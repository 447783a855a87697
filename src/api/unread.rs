//! A request answered before its body was read to the end (refused before
//! the body mattered: no route, no token, an unknown run, a full queue)
//! may leave its connection unable to carry another request: hyper drains
//! a body already in its read buffer and keeps the connection, but closes
//! it when the rest has yet to arrive, without a word. Such an answer says
//! `Connection: close` (HTTP/1), so that a client never sends its next
//! request on a connection about to close and sees it fail. (The cost: a
//! refused request with a body never keeps its connection.)

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// `request` with its body tracked, and the flag that tells whether it
/// was read to its end; none when there is nothing to track (an HTTP/2
/// request, or one with no body left).
pub fn track(request: Request) -> (Request, Option<Arc<AtomicBool>>) {
    if request.version() >= Version::HTTP_2 || request.body().is_end_stream() {
        return (request, None);
    }
    let read = Arc::new(AtomicBool::new(false));
    let tracked = read.clone();
    let request = request.map(|body| {
        Body::new(Tracked {
            inner: body,
            read: tracked,
        })
    });
    (request, Some(read))
}

/// `response`, saying `Connection: close` when the body `read` tracks was
/// not read to its end.
pub fn close_unread(mut response: Response, read: Option<Arc<AtomicBool>>) -> Response {
    if read.is_some_and(|read| !read.load(Ordering::Acquire)) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A body that notes when it has been read to its end.
struct Tracked {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
