//! Traces (SPEC section 17): every run execution a span tree in the
//! operator's OpenTelemetry stack, named per the GenAI semantic
//! conventions: `invoke_agent` for the run's execution, `chat MODEL` for
//! each model call, `execute_tool NAME` for each tool call, pauses and
//! resumes as events of the run's span. Spans are made from the run's
//! events (see [`RunSpans`]) and exported off the run's path (see
//! [`export`]). Without an endpoint there is no tracer at all, and nothing
//! is paid.

mod context;
mod export;

use std::collections::HashMap;
use std::sync::Mutex;

use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use prometheus_client::metrics::counter::Counter;

pub use context::{RunTrace, traceparent_of};

use crate::config::TracingConfig;
use crate::harness::{EventKind, Outcome};
use crate::sync::lock;

/// The name runs' spans give the agent (`gen_ai.agent.name`).
pub const AGENT_NAME: &str = "agent-runner";

/// The server's tracer, if it exports spans.
pub struct Telemetry {
    tracer: Option<SdkTracer>,
    provider: Option<SdkTracerProvider>,
    record_content: bool,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.tracer.is_some())
            .finish()
    }
}

impl Telemetry {
    /// No tracer: nothing is made or exported.
    pub fn off() -> Self {
        Self {
            tracer: None,
            provider: None,
            record_content: false,
        }
    }

    /// A tracer exporting to `config`'s endpoint (or the standard
    /// variable's), spans it cannot export counted in `dropped`; none
    /// without an endpoint.
    pub fn start(config: &TracingConfig, dropped: Counter) -> Self {
        let env = |name: &str| std::env::var(name).ok();
        let Some(url) = config.traces_url(env) else {
            return Self::off();
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = url.clone();
        let batcher = export::Batcher::start(
            move || {
                use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_endpoint(endpoint)
                    .with_timeout(std::time::Duration::from_secs(10))
                    .with_headers(HashMap::new())
                    .build()
                    .map_err(|error| error.to_string())
            },
            dropped,
        );
        // A caller's sampled flag decides for its spans' children; a trace
        // of our own is recorded at the configured ratio, by its id.
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batcher)
            .with_sampler(sampler)
            .with_id_generator(context::RunIds::default())
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service(env))
                    .build(),
            )
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, AGENT_NAME);
        tracing::info!(endpoint = %url, sample_ratio = config.sample_ratio, "exporting traces");
        Self {
            tracer: Some(tracer),
            provider: Some(provider),
            record_content: config.record_content,
        }
    }

    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    /// The spans of one execution of a run (see [`RunSpans`]); `None`
    /// without a tracer.
    pub fn run(&self, run: &RunTrace, attributes: RunAttributes) -> Option<RunSpans> {
        let tracer = self.tracer.clone()?;
        let parent = run.parent_context();
        let builder = tracer
            .span_builder("invoke_agent")
            .with_kind(SpanKind::Internal)
            .with_attributes(vec![
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", AGENT_NAME),
                KeyValue::new("agent_runner.run_id", attributes.run_id),
                KeyValue::new("agent_runner.tenant", attributes.tenant),
            ]);
        let mut span = match run.parent_span_id {
            Some(_) => tracer.build_with_context(builder, &parent),
            None => {
                context::with_trace_id(run.trace_id, || tracer.build_with_context(builder, &parent))
            }
        };
        if attributes.resumed {
            span.add_event("resumed", Vec::new());
        }
        let context = Context::new().with_span(span);
        Some(RunSpans {
            tracer,
            run: context,
            provider: attributes.provider,
            model: attributes.model,
            record_content: self.record_content,
            open: Mutex::new(Open::default()),
        })
    }

    /// The span of an HTTP request answered (`METHOD ROUTE`, the route
    /// being the route table's template), a child of the caller's span if
    /// its `traceparent` named one.
    pub fn http_span(&self, request: HttpRequest<'_>) {
        let Some(tracer) = &self.tracer else {
            return;
        };
        let parent = request
            .traceparent
            .and_then(RunTrace::from_traceparent)
            .map_or_else(Context::new, |trace| trace.parent_context());
        let mut span = tracer
            .span_builder(format!("{} {}", request.method, request.route))
            .with_kind(SpanKind::Server)
            .with_start_time(request.started)
            .with_attributes(vec![
                KeyValue::new("http.request.method", request.method.to_owned()),
                KeyValue::new("http.route", request.route),
                KeyValue::new("http.response.status_code", i64::from(request.status)),
            ])
            .start_with_context(tracer, &parent);
        if request.status >= 500 {
            span.set_status(Status::error(format!("HTTP {}", request.status)));
        }
        span.end();
    }

    /// A client span `name` of `trace` (a child of the caller's span, or a
    /// root of the run's own trace), ended when dropped: a request made for
    /// a run outside its execution (a webhook's delivery), whose
    /// `traceparent` it sends.
    pub fn client_span(&self, name: &'static str, trace: &RunTrace) -> Option<ClientSpan> {
        let tracer = self.tracer.as_ref()?;
        let builder = tracer.span_builder(name).with_kind(SpanKind::Client);
        let parent = trace.parent_context();
        let span = match trace.parent_span_id {
            Some(_) => tracer.build_with_context(builder, &parent),
            None => context::with_trace_id(trace.trace_id, || {
                tracer.build_with_context(builder, &parent)
            }),
        };
        Some(ClientSpan(span))
    }

    /// Exports what is queued (at shutdown).
    pub fn flush(&self) {
        if let Some(provider) = &self.provider {
            let _ = provider.force_flush();
        }
    }
}

/// A client request's span (see [`Telemetry::client_span`]).
pub struct ClientSpan(opentelemetry_sdk::trace::Span);

impl ClientSpan {
    pub fn traceparent(&self) -> String {
        traceparent_of(self.0.span_context())
    }

    /// The request failed: `why`.
    pub fn failed(&mut self, why: &str) {
        self.0.set_status(Status::error(why.to_owned()));
    }
}

impl Drop for ClientSpan {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// An HTTP request answered, as its span tells it.
pub struct HttpRequest<'a> {
    pub method: &'a str,
    pub route: &'static str,
    pub status: u16,
    pub started: std::time::SystemTime,
    /// The request's `traceparent` header.
    pub traceparent: Option<&'a str>,
}

/// What a run's span says of it.
pub struct RunAttributes {
    pub run_id: String,
    pub tenant: String,
    /// Its provider (`gen_ai.provider.name`) and model
    /// (`gen_ai.request.model`).
    pub provider: String,
    pub model: String,
    /// Whether this execution resumes the run (after a pause or a stop).
    pub resumed: bool,
}

/// The spans of one run execution, made from its events: the run's span,
/// the model call and the tool calls open now.
pub struct RunSpans {
    tracer: SdkTracer,
    /// The run's span, as the parent of the others.
    run: Context,
    provider: String,
    model: String,
    record_content: bool,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    model: Option<opentelemetry_sdk::trace::Span>,
    tools: HashMap<String, opentelemetry_sdk::trace::Span>,
}

impl RunSpans {
    /// Takes in one of the run's events.
    pub fn on_event(&self, kind: &EventKind) {
        let mut open = lock(&self.open);
        match kind {
            EventKind::ModelStart => {
                let span = self
                    .tracer
                    .span_builder(format!("chat {}", self.model))
                    .with_kind(SpanKind::Client)
                    .with_attributes(vec![
                        KeyValue::new("gen_ai.operation.name", "chat"),
                        KeyValue::new("gen_ai.provider.name", self.provider.clone()),
                        KeyValue::new("gen_ai.request.model", self.model.clone()),
                    ])
                    .start_with_context(&self.tracer, &self.run);
                open.model = Some(span);
            }
            EventKind::ModelEnd {
                usage,
                finish_reason,
                ..
            } => {
                if let Some(mut span) = open.model.take() {
                    if let Some(reason) = finish_reason {
                        span.set_attribute(KeyValue::new(
                            "gen_ai.response.finish_reasons",
                            opentelemetry::Value::Array(opentelemetry::Array::String(vec![
                                reason.clone().into(),
                            ])),
                        ));
                    }
                    if let Some(usage) = usage {
                        if let Some(input) = usage.input_tokens {
                            span.set_attribute(KeyValue::new(
                                "gen_ai.usage.input_tokens",
                                saturate(input),
                            ));
                        }
                        if let Some(output) = usage.output_tokens {
                            span.set_attribute(KeyValue::new(
                                "gen_ai.usage.output_tokens",
                                saturate(output),
                            ));
                        }
                        let cache = [
                            (
                                "gen_ai.usage.cache_read.input_tokens",
                                usage.cached_input_tokens,
                            ),
                            (
                                "gen_ai.usage.cache_creation.input_tokens",
                                usage.cache_write_tokens,
                            ),
                        ];
                        for (name, count) in cache {
                            if let Some(count) = count {
                                span.set_attribute(KeyValue::new(name, saturate(count)));
                            }
                        }
                    }
                    span.end();
                }
            }
            EventKind::ModelError { error } => {
                if let Some(mut span) = open.model.take() {
                    span.set_status(Status::error(error.clone()));
                    span.set_attribute(KeyValue::new("error.type", "model_error"));
                    span.end();
                }
            }
            EventKind::ModelFallback { from, to, reason } => {
                if let Some(span) = &mut open.model {
                    span.add_event(
                        "model_fallback",
                        vec![
                            KeyValue::new("agent_runner.fallback.from", from.clone()),
                            KeyValue::new("agent_runner.fallback.to", to.clone()),
                            KeyValue::new("agent_runner.fallback.reason", reason.clone()),
                        ],
                    );
                }
            }
            EventKind::ToolStart { call_id, name, .. } => {
                let span = self
                    .tracer
                    .span_builder(format!("execute_tool {name}"))
                    .with_kind(SpanKind::Internal)
                    .with_attributes(vec![
                        KeyValue::new("gen_ai.operation.name", "execute_tool"),
                        KeyValue::new("gen_ai.tool.name", name.clone()),
                        KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                    ])
                    .start_with_context(&self.tracer, &self.run);
                open.tools.insert(call_id.clone(), span);
            }
            EventKind::ToolEnd {
                call_id, is_error, ..
            } => {
                if let Some(mut span) = open.tools.remove(call_id) {
                    if *is_error {
                        span.set_status(Status::error("the tool answered with an error"));
                        span.set_attribute(KeyValue::new("error.type", "tool_error"));
                    }
                    span.end();
                }
            }
            EventKind::ActionsRequired { actions } => {
                self.run.span().add_event(
                    "paused",
                    vec![KeyValue::new(
                        "agent_runner.pending_actions",
                        saturate(actions.len() as u64),
                    )],
                );
            }
            EventKind::Message { message, .. } if self.record_content => {
                if let Ok(json) = serde_json::to_string(&**message) {
                    self.run
                        .span()
                        .add_event("gen_ai.message", vec![KeyValue::new("content", json)]);
                }
            }
            EventKind::RunEnd {
                status,
                usage,
                error,
                ..
            } => {
                let span = self.run.span();
                span.set_attribute(KeyValue::new("agent_runner.status", status.as_str()));
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.input_tokens",
                    saturate(usage.input_tokens),
                ));
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.output_tokens",
                    saturate(usage.output_tokens),
                ));
                if !matches!(status, Outcome::Completed) {
                    span.set_status(Status::error(
                        error.clone().unwrap_or_else(|| status.as_str().to_owned()),
                    ));
                }
                span.end();
            }
            EventKind::RunStart
            | EventKind::Message { .. }
            | EventKind::Compaction { .. }
            | EventKind::AttemptStart { .. }
            | EventKind::AttemptEnd { .. }
            | EventKind::SubrunStart { .. }
            | EventKind::SubrunEnd { .. } => {}
        }
    }

    /// The W3C `traceparent` of the tool call `call_id` open now, if it is.
    pub fn tool_traceparent(&self, call_id: &str) -> Option<String> {
        let open = lock(&self.open);
        open.tools
            .get(call_id)
            .map(|span| traceparent_of(span.span_context()))
    }

    /// The W3C `traceparent` of the model call open now (else the run's),
    /// for the requests it makes.
    pub fn traceparent(&self) -> String {
        let open = lock(&self.open);
        match &open.model {
            Some(span) => traceparent_of(span.span_context()),
            None => traceparent_of(self.run.span().span_context()),
        }
    }
}

impl Drop for RunSpans {
    /// A run execution that stops without a `run_end` (a pause, a stop
    /// to be resumed) ends its spans as they are.
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(mut span) = open.model.take() {
            span.end();
        }
        for (_, mut span) in open.tools.drain() {
            span.end();
        }
        self.run.span().end();
    }
}

fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
