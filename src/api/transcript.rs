//! `GET /v1/runs/{id}/messages`: the transcript as stored, its messages'
//! JSON spliced in. A transcript that fits one page of storage is answered
//! whole; a larger one streams, a page at a time, so that a reader (or ten
//! slow ones) never makes the server hold a whole large transcript.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use futures_util::Stream;
use uuid::Uuid;

use super::error::ApiError;
use super::state::AppState;
use super::tenant_run::TenantRun;
use crate::store::{Page, Store, StoreError};

/// What one read of the transcript takes at most.
const PAGE: Page = Page::STREAM;

/// `GET /v1/runs/{id}/messages`
pub async fn messages(
    State(state): State<AppState>,
    TenantRun { run, .. }: TenantRun,
) -> Result<Response, ApiError> {
    let store = state.runner.store().clone();
    // The first page is read before answering: a storage failure is an
    // error status, not a cut body.
    let page = store.messages_page(run.id, None, PAGE).await?;
    let json = [(header::CONTENT_TYPE, "application/json")];
    if !is_full(&page) {
        let mut body =
            String::with_capacity(16 + page.iter().map(|m| m.1.len() + 1).sum::<usize>());
        body.push_str("{\"messages\":[");
        splice(&mut body, &page, true);
        body.push_str("]}");
        return Ok((json, body).into_response());
    }
    Ok((json, Body::from_stream(pages(store, run.id, page))).into_response())
}

/// The transcript from `page` on, as the body's chunks: a page each.
fn pages(
    store: Store,
    run_id: Uuid,
    page: Vec<(i64, String)>,
) -> impl Stream<Item = Result<Bytes, StoreError>> + Send {
    async_stream::try_stream! {
        let mut body = String::from("{\"messages\":[");
        let mut page = page;
        let mut first = true;
        loop {
            splice(&mut body, &page, first);
            first = false;
            yield Bytes::from(std::mem::take(&mut body));
            let (Some((last, _)), true) = (page.last(), is_full(&page)) else {
                break;
            };
            page = store
                .messages_page(run_id, Some(*last), PAGE)
                .await
                .inspect_err(|error| {
                    // The answer began: it can only be cut, which the
                    // client sees as a body that is not JSON.
                    tracing::error!(%run_id, %error, "reading a transcript's next page failed");
                })?;
        }
        yield Bytes::from_static(b"]}");
    }
}

/// Whether `page` was cut by its rows or its bytes: more may follow.
fn is_full(page: &[(i64, String)]) -> bool {
    PAGE.is_full(page.iter().map(|(_, message)| message.len()))
}

/// Appends the messages of `page` to `body`, comma-separated (and after a
/// comma unless they are the `first`).
fn splice(body: &mut String, page: &[(i64, String)], first: bool) {
    for (i, (_, message)) in page.iter().enumerate() {
        if i > 0 || !first {
            body.push(',');
        }
        body.push_str(message);
    }
}
