//! One model over HTTP, whatever the provider: what differs between the
//! OpenAI-compatible and the Anthropic adapters is their [`Dialect`] (the
//! request body, the response, the stream); the call itself (retries,
//! deadline, cancellation, secrets) is the shared [`HttpClient`]'s.

use async_trait::async_trait;
use serde_json::Value;

use super::http::{CallContext, HttpClient, ProviderError, SseStream, read_json};
use crate::harness::{DeltaSink, Model, ModelError, ModelRequest, ModelResponse};

/// A provider's wire format.
#[async_trait]
pub trait Dialect: Send + Sync + std::fmt::Debug {
    /// The request body for one step; `stream` asks for server-sent events.
    fn request_body(&self, request: &ModelRequest<'_>, stream: bool) -> Value;

    /// A whole (not streamed) response.
    fn parse_response(
        &self,
        value: Value,
        http: &HttpClient,
    ) -> Result<ModelResponse, ProviderError>;

    /// A streamed response: forwards text as it arrives and assembles the
    /// response a whole one would have been.
    async fn read_stream(
        &self,
        events: SseStream,
        deltas: &dyn DeltaSink,
        http: &HttpClient,
    ) -> Result<ModelResponse, ProviderError>;
}

/// A model behind an HTTP API that speaks `D`. Holds no state between calls,
/// so one instance (and its connection pool) serves every run of a profile.
#[derive(Debug)]
pub struct HttpModel<D> {
    pub(super) http: HttpClient,
    pub(super) dialect: D,
    pub(super) stream: bool,
}

impl<D: Dialect> HttpModel<D> {
    /// The request body for one step.
    pub fn request_body(&self, request: &ModelRequest<'_>) -> Value {
        self.dialect.request_body(request, self.stream)
    }
}

#[async_trait]
impl<D: Dialect> Model for HttpModel<D> {
    async fn generate(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let body = self.request_body(&request);
        let context = CallContext {
            cancel: request.cancel,
            deadline: request.deadline,
            traceparent: request.traceparent.as_deref(),
        };
        let deltas = request.deltas;
        let (http, dialect, stream) = (&self.http, &self.dialect, self.stream);
        self.http
            .execute(&body, context, move |mut response| async move {
                if stream {
                    dialect
                        .read_stream(SseStream::new(response), deltas, http)
                        .await
                } else {
                    dialect.parse_response(read_json(&mut response).await?, http)
                }
            })
            .await
    }
}
