//! Fixtures: a mock provider on loopback that records what it receives and
//! answers from a queue, a log capture, a recording observer, and a weather
//! tool shaped like the providers' documentation examples.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::harness::{
    ContextView, DeltaSink, Event, Harness, Message, Model, ModelError, ModelRequest,
    ModelResponse, Observer, ObserverError, RunConfig, RunResult, Stop, Tool, ToolDefinition,
    ToolError, ToolRegistry,
};
use agent_runner::models::{HttpSettings, RetryPolicy, Secret};
use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A key that must never show anywhere but in the request header.
pub const KEY: &str = "sk-test-9f8e7d6c5b4a-DO-NOT-LEAK";

/// What the mock answers to one request.
#[derive(Clone)]
pub enum Reply {
    /// A JSON body with a status and extra headers.
    Json {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Value,
    },
    /// A raw body (for malformed answers).
    Text { status: u16, body: String },
    /// A `text/event-stream` body sent chunk by chunk, `gap` apart.
    Stream { chunks: Vec<String>, gap: Duration },
    /// A `text/event-stream` body that sends `head`, then `repeated` over
    /// and over without end.
    Endless { head: String, repeated: String },
    /// Never answers.
    Hang,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Self::Json {
            status: 200,
            headers: Vec::new(),
            body,
        }
    }

    pub fn status(status: u16, body: Value) -> Self {
        Self::Json {
            status,
            headers: Vec::new(),
            body,
        }
    }

    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        if let Self::Json { headers, .. } = &mut self {
            headers.push((name, value.to_owned()));
        }
        self
    }

    /// A stream from `(event, data)` pairs, in SSE framing.
    pub fn sse(events: &[(Option<&str>, Value)]) -> Self {
        let chunks = events
            .iter()
            .map(|(event, data)| match event {
                Some(name) => format!("event: {name}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            })
            .collect();
        Self::Stream {
            chunks,
            gap: Duration::from_millis(5),
        }
    }
}

/// A request as the mock saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    pub at: tokio::time::Instant,
}

#[derive(Default)]
struct MockState {
    replies: Mutex<VecDeque<Reply>>,
    /// Answer once the queue is empty.
    otherwise: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    /// Requests whose handling was dropped before an answer (the client went
    /// away).
    abandoned: AtomicUsize,
}

/// A provider double on 127.0.0.1, port chosen by the system.
pub struct MockServer {
    pub base: String,
    state: Arc<MockState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Answers with `replies` in order, then with 500s.
    pub async fn start(replies: Vec<Reply>) -> Self {
        let state = Arc::new(MockState {
            replies: Mutex::new(replies.into()),
            ..MockState::default()
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base, state, task }
    }

    /// Answers every request, after the queue, with `reply`.
    pub fn otherwise(&self, reply: Reply) {
        *self.state.otherwise.lock().unwrap() = Some(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    pub fn abandoned(&self) -> usize {
        self.state.abandoned.load(Ordering::SeqCst)
    }
}

/// Counts a request as abandoned if its handler is dropped before it ends.
struct Pending(Arc<MockState>, bool);

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.1 {
            self.0.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn handle(State(state): State<Arc<MockState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                value.to_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    state.requests.lock().unwrap().push(Recorded {
        path: parts.uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        at: tokio::time::Instant::now(),
    });
    let reply = state.replies.lock().unwrap().pop_front();
    let reply = reply
        .or_else(|| state.otherwise.lock().unwrap().clone())
        .unwrap_or_else(|| {
            Reply::status(
                500,
                json!({"error": {"message": "the mock has no more replies"}}),
            )
        });
    match reply {
        Reply::Json {
            status,
            headers,
            body,
        } => {
            let mut response = Response::new(Body::from(body.to_string()));
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            let map = response.headers_mut();
            map.insert("content-type", HeaderValue::from_static("application/json"));
            for (name, value) in headers {
                map.insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(&value).unwrap(),
                );
            }
            response
        }
        Reply::Text { status, body } => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            response
        }
        Reply::Stream { chunks, gap } => {
            let stream =
                futures_util::stream::unfold(chunks.into_iter(), move |mut rest| async move {
                    let chunk = rest.next()?;
                    tokio::time::sleep(gap).await;
                    Some((Ok::<_, Infallible>(Bytes::from(chunk)), rest))
                });
            let mut response = Response::new(Body::from_stream(stream));
            response.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Reply::Endless { head, repeated } => {
            let head = Bytes::from(head);
            let repeated = Bytes::from(repeated);
            let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(head) })
                .chain(futures_util::stream::repeat_with(move || {
                    Ok(repeated.clone())
                }));
            let mut response = Response::new(Body::from_stream(stream));
            response.headers_mut().insert(
                "content-type",
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Reply::Hang => {
            let mut pending = Pending(Arc::clone(&state), false);
            std::future::pending::<()>().await;
            pending.1 = true;
            unreachable!()
        }
    }
}

/// HTTP settings for a mock at `base`, with quick retries so tests stay fast.
pub fn settings(base: String, key: Option<&str>) -> HttpSettings {
    let mut settings = HttpSettings::new(base);
    settings.api_key = key.map(Secret::new);
    settings.api_key_env = key.map(|_| "TEST_PROVIDER_KEY".to_owned());
    settings.timeout = Duration::from_secs(10);
    settings.retry = RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        max_retry_after: Duration::from_secs(5),
    };
    settings
}

/// Collects streamed text.
#[derive(Default)]
pub struct Deltas(pub Mutex<Vec<String>>);

impl DeltaSink for Deltas {
    fn delta(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}

impl Deltas {
    pub fn texts(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Calls `model` once with `messages` and `tools`, outside any run.
pub async fn generate(
    model: &dyn Model,
    messages: &[Message],
    tools: &[ToolDefinition],
    cancel: &CancellationToken,
    deadline: Option<tokio::time::Instant>,
    deltas: &dyn DeltaSink,
) -> Result<ModelResponse, ModelError> {
    let messages: Vec<Arc<Message>> = messages.iter().cloned().map(Arc::new).collect();
    let tools: Vec<Arc<ToolDefinition>> = tools.iter().cloned().map(Arc::new).collect();
    let request = ModelRequest {
        instructions: None,
        messages: ContextView::new(&messages[..1], &messages[1..]),
        tools: &tools,
        answer_now: false,
        must_use_tool: false,
        output_schema: None,
        cancel,
        deadline,
        traceparent: None,
        deltas,
        temperature: None,
        cache_key: None,
    };
    model.generate(request).await
}

/// A call that asks the model to answer now (a stuck loop), after a step
/// with a tool call and its result.
pub async fn generate_answer_now(model: &dyn Model) -> Result<ModelResponse, ModelError> {
    let messages: Vec<Arc<Message>> = [
        Message::user("What is the weather?"),
        Message::assistant(
            "",
            vec![agent_runner::harness::ToolCall::new(
                "call_1",
                "get_weather",
                serde_json::json!({"location": "Paris"}),
            )],
        ),
        Message::tool("call_1", "sunny", false),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let tools = [Arc::new(weather_definition())];
    let request = ModelRequest {
        instructions: None,
        messages: ContextView::new(&messages[..1], &messages[1..]),
        tools: &tools,
        answer_now: true,
        must_use_tool: false,
        output_schema: None,
        cancel: &CancellationToken::new(),
        deadline: None,
        traceparent: None,
        deltas: &Deltas::default(),
        temperature: None,
        cache_key: None,
    };
    model.generate(request).await
}

/// A single call with no cancellation, deadline or streaming sink.
pub async fn generate_simple(
    model: &dyn Model,
    messages: &[Message],
) -> Result<ModelResponse, ModelError> {
    generate(
        model,
        messages,
        &[weather_definition()],
        &CancellationToken::new(),
        None,
        &Deltas::default(),
    )
    .await
}

pub fn weather_definition() -> ToolDefinition {
    ToolDefinition {
        name: "get_weather".into(),
        description: "Get the current weather in a given location".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
            },
            "required": ["location"],
            "additionalProperties": false
        }),
    }
}

/// Answers with a fixed forecast for the location it is given.
pub struct WeatherTool(ToolDefinition);

#[async_trait]
impl Tool for WeatherTool {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::new(self.0.clone())
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let location = arguments["location"].as_str().unwrap_or_default();
        if location.is_empty() {
            return Err(ToolError::new("location must not be empty"));
        }
        Ok(json!(format!("Sunny, 22 C in {location}")))
    }
}

pub fn weather_tools() -> ToolRegistry {
    ToolRegistry::new(vec![
        Arc::new(WeatherTool(weather_definition())) as Arc<dyn Tool>
    ])
    .unwrap()
}

/// Keeps every event and delta, serialised as the service would send them.
#[derive(Default)]
pub struct Recorder {
    pub events: Mutex<Vec<Event>>,
    pub deltas: Mutex<Vec<String>>,
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event) -> Result<(), ObserverError> {
        self.events.lock().unwrap().push(event.clone());
        Ok(())
    }

    fn on_delta(&self, _run_id: Uuid, text: &str) {
        self.deltas.lock().unwrap().push(text.to_owned());
    }
}

impl Recorder {
    pub fn types(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|event| event.kind.type_name())
            .collect()
    }

    pub fn json(&self) -> String {
        serde_json::to_string(&*self.events.lock().unwrap()).unwrap()
    }
}

/// Runs the harness with `model` and the weather tool.
pub async fn run(model: &dyn Model, prompt: &str, observer: &Recorder) -> RunResult {
    let tools = weather_tools();
    let harness = Harness {
        model,
        tools: &tools,
        observer: Some(observer),
    };
    harness.run(RunConfig::new(prompt), &Stop::new()).await
}

/// The transcript as the API serves it.
pub fn transcript(result: &RunResult) -> Value {
    serde_json::to_value(&result.messages).unwrap()
}

/// Captures every log line written while it is installed on this thread.
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

#[derive(Clone)]
struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Everything at TRACE and above, from every crate, on the current
    /// thread (tests using it run on a current-thread runtime).
    pub fn install() -> Self {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = Writer(Arc::clone(&buffer));
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        Self {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}
