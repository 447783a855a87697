//! Spans as an OTLP receiver decodes them: an OTLP/HTTP endpoint of our
//! own that reads each export with the OpenTelemetry protobufs
//! (`opentelemetry-proto`), as Jaeger, Tempo and Honeycomb do, so that what
//! the wire carries (the resource above all) is checked, not what a UI
//! makes of it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::json;
use tokio::sync::Mutex;

use crate::helpers::*;

/// What the receiver was sent, each export decoded.
type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// Serves `POST /v1/traces` on a free loopback port; returns its base URL
/// and what it receives.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(export))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

async fn export(
    State(received): State<Received>,
    body: Bytes,
) -> ([(axum::http::HeaderName, &'static str); 1], Vec<u8>) {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    received.lock().await.push(request);
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    ([(CONTENT_TYPE, "application/x-protobuf")], answer)
}

/// The string attribute `key` of `resource`.
fn attribute<'a>(resource: &'a Resource, key: &str) -> Option<&'a str> {
    resource
        .attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .and_then(
            |attribute| match attribute.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(value) => Some(value.as_str()),
                _ => None,
            },
        )
}

/// Every exported span carries the service's resource: the configured
/// `service_name` as `service.name`, so that a tracing backend files the
/// spans under it (an empty resource shows as "unknown_service").
#[tokio::test]
async fn every_span_carries_the_services_name_in_its_resource() {
    let (endpoint, received) = receiver().await;
    let app = spawn_with(move |config| {
        config.tracing.otlp_endpoint = Some(endpoint);
        config.tracing.service_name = Some("runs-eu".into());
    })
    .await;
    let run = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let trace_id = hex::decode(run["trace_id"].as_str().unwrap()).unwrap();
    // The run's span, its two model calls and its tool call, at least.
    let exports = eventually("the run's spans exported", async || {
        let exports = received.lock().await.clone();
        let spans = exports
            .iter()
            .flat_map(|export| &export.resource_spans)
            .flat_map(|resource| &resource.scope_spans)
            .flat_map(|scope| &scope.spans)
            .filter(|span| span.trace_id == trace_id)
            .count();
        (spans >= 4).then_some(exports)
    })
    .await;
    for resource_spans in exports.iter().flat_map(|export| &export.resource_spans) {
        let resource = resource_spans
            .resource
            .as_ref()
            .expect("every batch has its resource");
        assert_eq!(
            attribute(resource, "service.name"),
            Some("runs-eu"),
            "{resource:?}"
        );
    }
}
