//! `openapi.yaml` is the API as served, and these tests keep it so: the
//! document is checked for structure, its paths and methods against the
//! route table and the running server, its error codes against the code's
//! table, its schemas against real responses and events, and the JSON the
//! server serves at `/openapi.json` against the YAML. A failure that comes from a difference between
//! the two starts with `drift:` and says what differs.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use agent_runner::api::create::{
    DEFAULT_CONTEXT, DEFAULT_LIMITS, MAX_REQUEST_PATH_BYTES, MAX_WORKSPACE_FILES,
};
use agent_runner::api::error::ErrorCode;
use agent_runner::api::runs::{DEFAULT_PAGE, MAX_IDEMPOTENCY_KEY, MAX_PAGE};
use agent_runner::harness::MAX_TOKEN_COUNT;
use agent_runner::models::ProfileKind;
use agent_runner::run::RunStatus;
use agent_runner::tools::BUILTIN_TOOL_NAMES;
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};

use crate::helpers::*;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// The operations an OpenAPI path item may hold.
const OPERATIONS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
/// The methods the route checks send (CONNECT is left out: HTTP clients
/// treat it as a tunnel).
const PROBED: [&str; 7] = ["get", "put", "post", "delete", "options", "patch", "trace"];
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

// ------------------------------------------------------------ the document

fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let path = Path::new(MANIFEST_DIR).join("openapi.yaml");
        let text = std::fs::read_to_string(&path).expect("openapi.yaml is readable");
        serde_yaml::from_str(&text).unwrap_or_else(|e| {
            panic!("drift: openapi.yaml is not a JSON-compatible YAML document: {e}")
        })
    })
}

/// The target of a local `$ref` (`#/json/pointer`).
fn resolve(reference: &str) -> Option<&'static Value> {
    spec().pointer(reference.strip_prefix('#')?)
}

/// Follows `$ref`s of response, parameter, header and request body objects.
fn deref(mut value: &'static Value) -> &'static Value {
    for _ in 0..16 {
        match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                value = resolve(reference)
                    .unwrap_or_else(|| panic!("drift: $ref {reference} does not resolve"));
            }
            None => return value,
        }
    }
    panic!("drift: a $ref chain in openapi.yaml does not end");
}

fn paths() -> &'static Map<String, Value> {
    spec()["paths"]
        .as_object()
        .expect("drift: openapi.yaml has no `paths` object")
}

/// Every documented operation: (path, method).
fn operations() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for (path, item) in paths() {
        for method in OPERATIONS {
            if item.get(method).is_some() {
                out.push((path.as_str(), method));
            }
        }
    }
    out
}

fn operation(method: &str, path: &str) -> &'static Value {
    paths()
        .get(path)
        .and_then(|item| item.get(method))
        .unwrap_or_else(|| {
            panic!(
                "drift: openapi.yaml documents no {} {path}",
                method.to_uppercase()
            )
        })
}

fn component_schema(name: &str) -> &'static Value {
    spec()["components"]["schemas"]
        .get(name)
        .unwrap_or_else(|| panic!("drift: openapi.yaml has no schema {name}"))
}

fn component_response(name: &str) -> &'static Value {
    deref(
        spec()["components"]["responses"]
            .get(name)
            .unwrap_or_else(|| panic!("drift: openapi.yaml has no response {name}")),
    )
}

/// Strings of an `enum` (or a single `const`).
fn enum_values(schema: &Value) -> BTreeSet<String> {
    if let Some(value) = schema.get("const").and_then(Value::as_str) {
        return BTreeSet::from([value.to_owned()]);
    }
    schema["enum"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------- schema checks

/// A validator for `schema`, a schema of the document: it is compiled with
/// the document's components beside it, so its `$ref`s resolve.
fn validator(schema: &Value) -> jsonschema::Validator {
    let mut root = match schema {
        Value::Object(map) => map.clone(),
        other => panic!("drift: a schema of openapi.yaml is not an object: {other}"),
    };
    root.insert("$schema".into(), DIALECT.into());
    root.insert("components".into(), spec()["components"].clone());
    jsonschema::options()
        .should_validate_formats(true)
        .build(&Value::Object(root))
        .unwrap_or_else(|e| panic!("drift: a schema of openapi.yaml does not compile: {e}"))
}

/// Why `instance` does not match `schema` (empty when it does).
fn mismatches(schema: &Value, instance: &Value) -> Vec<String> {
    validator(schema)
        .iter_errors(instance)
        .map(|error| {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("at {at}: {error} (schema {})", error.schema_path())
        })
        .collect()
}

fn assert_matches(schema: &Value, instance: &Value, what: &str) {
    let errors = mismatches(schema, instance);
    assert!(
        errors.is_empty(),
        "drift: {what} does not match openapi.yaml:\n  {}\nthe value: {instance}",
        errors.join("\n  ")
    );
}

fn assert_refused(schema: &Value, instance: &Value, what: &str) {
    assert!(
        !mismatches(schema, instance).is_empty(),
        "openapi.yaml accepts {what}, which it must refuse: {instance}"
    );
}

/// Checks a reply against what the document says `method path` answers with
/// its status: the status is documented, required headers are there and
/// valid, the content type is documented, and a JSON body matches.
pub(crate) fn check(method: &str, path: &str, reply: &Reply) {
    let what = format!(
        "{} {path} answering {}",
        method.to_uppercase(),
        reply.status.as_u16()
    );
    let response = operation(method, path)["responses"]
        .get(reply.status.as_str())
        .map(deref)
        .unwrap_or_else(|| {
            panic!(
                "drift: {what}, a status openapi.yaml does not document for this operation: {}",
                reply.text
            )
        });
    check_response(response, reply, &what);
}

fn check_response(response: &'static Value, reply: &Reply, what: &str) {
    if let Some(headers) = response.get("headers").and_then(Value::as_object) {
        for (name, header) in headers {
            let header = deref(header);
            let value = reply.headers.get(name.as_str());
            let Some(value) = value else {
                assert!(
                    header["required"] != true,
                    "drift: {what} without the header {name} that openapi.yaml requires"
                );
                continue;
            };
            let text = value.to_str().unwrap_or_default();
            let instance = if header["schema"]["type"] == "integer" {
                text.parse::<i64>().map_or(Value::from(text), Value::from)
            } else {
                Value::from(text)
            };
            assert_matches(
                &header["schema"],
                &instance,
                &format!("header {name} of {what}"),
            );
        }
    }
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(
            reply.text.is_empty(),
            "drift: {what} has a body where openapi.yaml documents none: {}",
            reply.text
        );
        return;
    };
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let (media_type, media) = content
        .iter()
        .find(|(media_type, _)| content_type.starts_with(media_type.as_str()))
        .unwrap_or_else(|| {
            panic!(
                "drift: {what} with Content-Type {content_type:?}; openapi.yaml documents {:?}",
                content.keys().collect::<Vec<_>>()
            )
        });
    if media_type == "application/json" {
        let body: Value = serde_json::from_str(&reply.text)
            .unwrap_or_else(|e| panic!("drift: {what} is not JSON ({e}): {}", reply.text));
        assert_matches(&media["schema"], &body, &format!("the body of {what}"));
        // One `Error` schema serves every error response; the code's table
        // says which status each code comes with.
        if let Some(code) = body["error"]["code"].as_str() {
            let status = ErrorCode::ALL
                .into_iter()
                .find(|c| c.as_str() == code)
                .map(ErrorCode::status);
            assert_eq!(
                status.map(|s| s.as_u16()),
                Some(reply.status.as_u16()),
                "drift: {what} answers the code {code} with a status the code table does not give it"
            );
        }
    }
}

/// The schema of the JSON body of a response.
fn response_schema(method: &str, path: &str, status: &str) -> &'static Value {
    &deref(&operation(method, path)["responses"][status])["content"]["application/json"]["schema"]
}

/// The schema of the body of `POST /v1/runs`.
fn request_schema() -> &'static Value {
    &deref(&operation("post", "/v1/runs")["requestBody"])["content"]["application/json"]["schema"]
}

/// The schema of the `data` of each event of the event stream.
fn event_schema() -> &'static Value {
    let schema = &stream_content()["x-sse-data"];
    assert!(
        schema.is_object(),
        "drift: the event stream's text/event-stream content has no x-sse-data schema"
    );
    schema
}

/// The `text/event-stream` content of the event stream's `200`.
fn stream_content() -> &'static Value {
    &deref(&operation("get", "/v1/runs/{id}/events")["responses"]["200"])["content"]["text/event-stream"]
}

/// The `type` of every event the Event schema lists.
fn documented_event_types() -> BTreeSet<String> {
    let event = event_schema();
    let event = match event.get("$ref").and_then(Value::as_str) {
        Some(reference) => resolve(reference).expect("the Event schema resolves"),
        None => event,
    };
    event["oneOf"]
        .as_array()
        .expect("drift: the Event schema is not a oneOf")
        .iter()
        .flat_map(|member| enum_values(&deref(member)["properties"]["type"]))
        .collect()
}

// ------------------------------------------------------ walking the document

fn walk<'a>(value: &'a Value, at: &str, visit: &mut dyn FnMut(&str, &'a Value)) {
    visit(at, value);
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let key = key.replace('~', "~0").replace('/', "~1");
                walk(child, &format!("{at}/{key}"), visit);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, &format!("{at}/{i}"), visit);
            }
        }
        _ => {}
    }
}

#[test]
fn the_document_is_a_valid_openapi_3_1_document() {
    let spec = spec();
    let mut problems = Vec::new();
    let version = spec["openapi"].as_str().unwrap_or_default();
    if !(version.starts_with("3.1.") && version[4..].parse::<u32>().is_ok()) {
        problems.push(format!("`openapi` is {version:?}, not 3.1.x"));
    }
    if spec["info"]["title"].as_str().is_none() {
        problems.push("info.title is missing".into());
    }
    if spec["info"]["version"] != env!("CARGO_PKG_VERSION") {
        problems.push(format!(
            "info.version is {}, the crate is {}",
            spec["info"]["version"],
            env!("CARGO_PKG_VERSION")
        ));
    }

    // Every $ref (and discriminator mapping) points at something.
    walk(spec, "#", &mut |at, value| {
        if let Some(reference) = value.get("$ref").and_then(Value::as_str)
            && resolve(reference).is_none()
        {
            problems.push(format!("{at}: $ref {reference} does not resolve"));
        }
        if let Some(mapping) = value["discriminator"]["mapping"].as_object() {
            let members: Vec<&Value> = value["oneOf"]
                .as_array()
                .map(|m| m.iter().map(|m| &m["$ref"]).collect())
                .unwrap_or_default();
            for (name, target) in mapping {
                let target_ref = target.as_str().unwrap_or_default();
                match resolve(target_ref) {
                    None => problems.push(format!("{at}: mapping {name} does not resolve")),
                    Some(schema) => {
                        if !members.contains(&target) {
                            problems.push(format!("{at}: mapping {name} is not one of oneOf"));
                        }
                        let property = value["discriminator"]["propertyName"]
                            .as_str()
                            .unwrap_or_default();
                        if !enum_values(&schema["properties"][property]).contains(name) {
                            problems.push(format!(
                                "{at}: mapping {name} names a schema whose {property} is not {name}"
                            ));
                        }
                    }
                }
            }
        }
    });

    // Nothing below can be read while a reference dangles.
    assert!(
        problems.is_empty(),
        "drift: openapi.yaml is not a valid OpenAPI 3.1 document:\n  {}",
        problems.join("\n  ")
    );

    let tags: BTreeSet<&str> = spec["tags"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    let schemes = spec["components"]["securitySchemes"].as_object();
    let check_security = |security: &Value, at: &str, problems: &mut Vec<String>| {
        for requirement in security.as_array().into_iter().flatten() {
            for name in requirement.as_object().into_iter().flat_map(|r| r.keys()) {
                if !schemes.is_some_and(|s| s.contains_key(name)) {
                    problems.push(format!("{at}: security scheme {name} is not defined"));
                }
            }
        }
    };
    check_security(&spec["security"], "#/security", &mut problems);

    let mut operation_ids = BTreeSet::new();
    for (path, item) in paths() {
        let at = format!("paths {path}");
        if !path.starts_with('/') {
            problems.push(format!("{at}: does not start with /"));
        }
        for key in item.as_object().into_iter().flat_map(|i| i.keys()) {
            let known = OPERATIONS.contains(&key.as_str())
                || ["parameters", "summary", "description", "servers"].contains(&key.as_str());
            if !known {
                problems.push(format!("{at}: unknown key {key}"));
            }
        }
        let templated: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        let path_level: Vec<&Value> = item["parameters"]
            .as_array()
            .map(|p| p.iter().map(deref).collect())
            .unwrap_or_default();
        let mut any_operation = false;
        for method in OPERATIONS {
            let Some(op) = item.get(method) else { continue };
            any_operation = true;
            let at = format!("{} {path}", method.to_uppercase());
            match op["operationId"].as_str() {
                Some(id) if operation_ids.insert(id.to_owned()) => {}
                Some(id) => problems.push(format!("{at}: operationId {id} is used twice")),
                None => problems.push(format!("{at}: no operationId")),
            }
            for tag in op["tags"].as_array().into_iter().flatten() {
                if !tag.as_str().is_some_and(|t| tags.contains(t)) {
                    problems.push(format!("{at}: tag {tag} is not declared"));
                }
            }
            if let Some(security) = op.get("security") {
                check_security(security, &at, &mut problems);
            }

            // Parameters: well formed, unique, and path ones match the template.
            let mut parameters = path_level.clone();
            parameters.extend(op["parameters"].as_array().into_iter().flatten().map(deref));
            let mut seen = BTreeSet::new();
            let mut in_path = BTreeSet::new();
            for parameter in parameters {
                let name = parameter["name"].as_str().unwrap_or_default();
                let place = parameter["in"].as_str().unwrap_or_default();
                if name.is_empty() {
                    problems.push(format!("{at}: a parameter has no name"));
                }
                if !["query", "header", "path", "cookie"].contains(&place) {
                    problems.push(format!("{at}: parameter {name} is in {place:?}"));
                }
                if parameter.get("schema").is_some() == parameter.get("content").is_some() {
                    problems.push(format!(
                        "{at}: parameter {name} needs exactly one of schema and content"
                    ));
                }
                if !seen.insert((place.to_owned(), name.to_ascii_lowercase())) {
                    problems.push(format!("{at}: parameter {name} in {place} is listed twice"));
                }
                if place == "path" {
                    in_path.insert(name.to_owned());
                    if parameter["required"] != true {
                        problems.push(format!("{at}: path parameter {name} is not required"));
                    }
                }
            }
            if in_path != templated {
                problems.push(format!(
                    "{at}: path parameters {in_path:?} differ from the template's {templated:?}"
                ));
            }

            if let Some(body) = op.get("requestBody")
                && deref(body)["content"]
                    .as_object()
                    .is_none_or(|c| c.is_empty())
            {
                problems.push(format!("{at}: the request body has no content"));
            }
            let responses = op["responses"].as_object();
            if responses.is_none_or(|r| r.is_empty()) {
                problems.push(format!("{at}: no responses"));
            }
            for (status, response) in responses.into_iter().flatten() {
                let valid_status = status == "default"
                    || (status.len() == 3
                        && status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s)));
                if !valid_status {
                    problems.push(format!("{at}: response key {status:?} is not a status"));
                }
                let response = deref(response);
                if response["description"].as_str().is_none() {
                    problems.push(format!("{at} {status}: no description"));
                }
                for (media_type, media) in response["content"].as_object().into_iter().flatten() {
                    if !media["schema"].is_object() {
                        problems.push(format!("{at} {status} {media_type}: no schema"));
                    }
                }
            }
        }
        if !any_operation {
            problems.push(format!("{at}: no operation"));
        }
    }

    // Every schema is a valid JSON Schema 2020-12 schema and compiles.
    let mut schemas: Vec<(String, &Value)> = Vec::new();
    for (name, schema) in spec["components"]["schemas"]
        .as_object()
        .expect("drift: openapi.yaml has no components.schemas")
    {
        schemas.push((format!("components.schemas.{name}"), schema));
    }
    walk(spec, "#", &mut |at, value| {
        if at.starts_with("#/components/schemas") {
            return;
        }
        if let Some(schema) = value.get("schema") {
            schemas.push((format!("{at}/schema"), schema));
        }
        if let Some(schema) = value.get("x-sse-data") {
            schemas.push((format!("{at}/x-sse-data"), schema));
        }
    });
    for (at, schema) in schemas {
        let mut with_dialect = schema.clone();
        if let Value::Object(map) = &mut with_dialect {
            map.insert("$schema".into(), DIALECT.into());
        }
        match jsonschema::meta::validate(&with_dialect) {
            Err(error) => problems.push(format!("{at}: not a valid JSON Schema: {error}")),
            Ok(()) => {
                let _ = validator(schema);
            }
        }
    }

    assert!(
        problems.is_empty(),
        "drift: openapi.yaml is not a valid OpenAPI 3.1 document:\n  {}",
        problems.join("\n  ")
    );
}

// --------------------------------------------------------------- the routes

/// The routes the code serves: its route table (which the router is built
/// from), path in OpenAPI form, to methods.
fn routes_in_code() -> BTreeMap<String, BTreeSet<String>> {
    let mut routes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for route in agent_runner::api::routes::table() {
        let methods = route
            .methods
            .iter()
            .map(|(method, _)| method.as_str().to_ascii_lowercase());
        routes
            .entry(route.openapi_path())
            .or_default()
            .extend(methods);
    }
    routes
}

fn routes_in_document() -> BTreeMap<String, BTreeSet<String>> {
    let mut routes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, method) in operations() {
        routes
            .entry(path.to_owned())
            .or_default()
            .insert(method.to_owned());
    }
    routes
}

#[test]
fn the_routes_in_the_code_are_the_paths_in_the_document() {
    let code = routes_in_code();
    let document = routes_in_document();
    let mut problems = Vec::new();
    for (path, methods) in &code {
        match document.get(path) {
            None => problems.push(format!("{path} is routed but not in openapi.yaml")),
            Some(documented) if documented != methods => problems.push(format!(
                "{path}: the route table has {methods:?}, openapi.yaml documents {documented:?}"
            )),
            Some(_) => {}
        }
    }
    for path in document.keys() {
        if !code.contains_key(path) {
            problems.push(format!("{path} is in openapi.yaml but not routed"));
        }
    }
    assert!(problems.is_empty(), "drift:\n  {}", problems.join("\n  "));
}

/// `openapi.json` (built into the binary, served at `/openapi.json`) is
/// `openapi.yaml` converted. `UPDATE_OPENAPI_JSON=1 cargo test` rewrites it
/// after the YAML changed.
#[test]
fn the_served_json_document_is_the_yaml_one() {
    let served: Value = serde_json::from_str(agent_runner::api::system::OPENAPI_JSON)
        .expect("openapi.json is JSON");
    if std::env::var_os("UPDATE_OPENAPI_JSON").is_some() && served != *spec() {
        let mut text = serde_json::to_string_pretty(spec()).unwrap();
        text.push('\n');
        std::fs::write(Path::new(MANIFEST_DIR).join("openapi.json"), text).unwrap();
        return;
    }
    assert!(
        served == *spec(),
        "drift: openapi.json differs from openapi.yaml; run `UPDATE_OPENAPI_JSON=1 cargo test --test api openapi` to regenerate it"
    );
}

#[tokio::test]
async fn the_document_is_served_at_openapi_json() {
    let app = spawn_app().await;
    let reply = app.get("/openapi.json").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, *spec());
}

/// A concrete URL for a documented path.
fn concrete(path: &str, run_id: &str, file: &str) -> String {
    path.replace("{id}", run_id)
        .replace("{path}", file)
        .replace("{name}", "probe")
        .replace("{version}", "1")
}

fn is_no_route(reply: &Reply) -> bool {
    reply.status == StatusCode::NOT_FOUND
        && reply.body["error"]["code"] == "not_found"
        && reply.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no route for"))
}

fn method(name: &str) -> Method {
    Method::from_bytes(name.to_uppercase().as_bytes()).unwrap()
}

/// Whether the operation answers a stream that goes on until the client
/// leaves (the tenant-wide status stream).
fn is_endless(method: &str, path: &str) -> bool {
    method == "get" && path == "/v1/runs/events"
}

#[tokio::test]
async fn every_documented_operation_is_served_and_every_other_method_is_refused() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "hi",
            "model": {"scripted": [{"content": "done"}]},
            "workspace": {"files": {"dir/f.txt": "x"}}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    let document = routes_in_document();
    for (path, methods) in &document {
        let url = concrete(path, id, "dir/f.txt");
        for name in PROBED {
            let mut request = app.request(method(name), &url);
            if name == "post" {
                request = request.json(&json!({
                    "prompt": "hi",
                    "model": {"scripted": [{"content": "done"}]}
                }));
            }
            if methods.contains(name) && is_endless(name, path) {
                // Its body never ends: its answer's head is what is checked
                // (the events are, in `statuses`).
                let response = request.send().await.expect("the server answers");
                assert_eq!(response.status(), StatusCode::OK, "GET {path}");
                assert!(
                    response.headers()["content-type"]
                        .to_str()
                        .unwrap()
                        .starts_with("text/event-stream")
                );
                continue;
            }
            let reply = app.send(request).await;
            if methods.contains(name) {
                assert!(
                    reply.status != StatusCode::METHOD_NOT_ALLOWED && !is_no_route(&reply),
                    "drift: openapi.yaml documents {} {path}, but the server has no such route: {} {}",
                    name.to_uppercase(),
                    reply.status,
                    reply.text
                );
                check(name, path, &reply);
            } else {
                assert_eq!(
                    reply.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "drift: {} {path} is served ({}), but openapi.yaml does not document it: {}",
                    name.to_uppercase(),
                    reply.status,
                    reply.text
                );
                let what = format!("{} {path} answering 405", name.to_uppercase());
                check_response(component_response("MethodNotAllowed"), &reply, &what);
                let allowed: BTreeSet<String> = reply.headers["allow"]
                    .to_str()
                    .unwrap()
                    .split(',')
                    .map(|m| m.trim().to_ascii_lowercase())
                    .filter(|m| m != "head")
                    .collect();
                assert_eq!(
                    &allowed, methods,
                    "drift: the Allow header of {path} differs from the methods openapi.yaml documents"
                );
            }
        }
        if methods.contains("get") {
            let response = app
                .request(Method::HEAD, &url)
                .send()
                .await
                .expect("the server answers");
            assert_ne!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "drift: HEAD {path} is refused, but openapi.yaml says every GET answers HEAD"
            );
        }
    }
    let reply = app.get("/v1/undocumented").await;
    assert!(is_no_route(&reply), "{}", reply.text);
    check_response(
        component_response("NoRoute"),
        &reply,
        "an unknown path answering 404",
    );
}

// ------------------------------------------------------------ the responses

#[tokio::test]
async fn responses_match_the_document() {
    let app = spawn_with(|config| config.server.max_body_bytes = 64 * 1024).await;

    // A run created, then finished, read, listed, its transcript and files.
    let body = json!({
        "prompt": "write a file",
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("c1", "write_file", json!({"path": "a.txt", "content": "hey"}))]},
            {"content": "done", "usage": {"input_tokens": 12, "output_tokens": 3}}
        ]},
        "workspace": {"files": {"src/lib.rs": "pub fn f() {}"}},
        "limits": {"max_steps": 5},
        "metadata": {"ticket": "ABC-1"}
    });
    assert_matches(request_schema(), &body, "the test's own request");
    let created = app.post_run(body).await;
    check("post", "/v1/runs", &created);
    assert_eq!(created.status, StatusCode::CREATED);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let finished = app.wait_terminal(&id).await;
    assert_eq!(finished["status"], "completed", "{finished}");
    let reply = app.get(&format!("/v1/runs/{id}")).await;
    check("get", "/v1/runs/{id}", &reply);
    let waited = app
        .send(
            app.request(Method::POST, "/v1/runs?wait=true")
                .json(&two_step("list_dir", json!({}), "listed")),
        )
        .await;
    check("post", "/v1/runs", &waited);
    assert_eq!(waited.body["status"], "completed");
    check("get", "/v1/runs", &app.get("/v1/runs").await);
    let page = app.get("/v1/runs?limit=1&status=completed").await;
    check("get", "/v1/runs", &page);
    assert!(page.body["next_cursor"].is_string(), "{}", page.text);
    let messages = app.get(&format!("/v1/runs/{id}/messages")).await;
    check("get", "/v1/runs/{id}/messages", &messages);
    let roles: Vec<&str> = messages.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    let listing = app.get(&format!("/v1/runs/{id}/workspace")).await;
    check("get", "/v1/runs/{id}/workspace", &listing);
    assert_eq!(listing.body["files"].as_array().unwrap().len(), 2);
    let file = app.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    check("get", "/v1/runs/{id}/workspace/{path}", &file);
    assert_eq!(file.text, "hey");
    check("get", "/v1/models", &app.get("/v1/models").await);
    check("get", "/healthz", &app.get("/healthz").await);
    check("get", "/readyz", &app.get("/readyz").await);
    check("get", "/metrics", &app.get("/metrics").await);

    // Idempotency: the same body again is the first run; another body is 409.
    let keyed = |body: Value| {
        app.request(Method::POST, "/v1/runs")
            .header("Idempotency-Key", "key-1")
            .json(&body)
    };
    let first = json!({"prompt": "once", "model": {"scripted": [{"content": "x"}]}});
    let reply = app.send(keyed(first.clone())).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let again = app.send(keyed(first)).await;
    check("post", "/v1/runs", &again);
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    let other = app
        .send(keyed(
            json!({"prompt": "twice", "model": {"scripted": [{"content": "x"}]}}),
        ))
        .await;
    check("post", "/v1/runs", &other);
    assert_eq!(other.status, StatusCode::CONFLICT);

    // Cancel: a live run is 202, an ended one 409.
    let slow = app
        .create_run(
            json!({"prompt": "wait", "model": {"scripted": [{"delay_ms": 5000, "content": "x"}]}}),
        )
        .await;
    let slow_id = slow["id"].as_str().unwrap();
    let cancelled = app.delete(&format!("/v1/runs/{slow_id}")).await;
    check("delete", "/v1/runs/{id}", &cancelled);
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    let aborted = app.wait_terminal(slow_id).await;
    assert_eq!(aborted["status"], "aborted");
    check(
        "get",
        "/v1/runs/{id}",
        &app.get(&format!("/v1/runs/{slow_id}")).await,
    );
    let ended = app.delete(&format!("/v1/runs/{id}")).await;
    check("delete", "/v1/runs/{id}", &ended);
    assert_eq!(ended.status, StatusCode::CONFLICT);

    // 400s.
    let post_raw = |body: &'static str, content_type: &'static str| {
        app.request(Method::POST, "/v1/runs")
            .header("content-type", content_type)
            .body(body)
    };
    let cases = [
        (
            "post",
            "/v1/runs",
            app.send(post_raw("{\"prompt\": ", "application/json"))
                .await,
            400,
        ),
        (
            "post",
            "/v1/runs",
            app.send(post_raw("", "application/json")).await,
            400,
        ),
        (
            "post",
            "/v1/runs",
            app.send(
                app.request(Method::POST, "/v1/runs?wait=maybe")
                    .json(&json!({"prompt": "x"})),
            )
            .await,
            400,
        ),
        ("get", "/v1/runs", app.get("/v1/runs?limit=0").await, 400),
        (
            "get",
            "/v1/runs",
            app.get("/v1/runs?status=done").await,
            400,
        ),
        (
            "get",
            "/v1/runs",
            app.get("/v1/runs?cursor=nope").await,
            400,
        ),
        (
            "get",
            "/v1/runs/{id}/events",
            app.get(&format!("/v1/runs/{id}/events?after=-1")).await,
            400,
        ),
        (
            "get",
            "/v1/runs/{id}/events",
            app.send(
                app.request(Method::GET, &format!("/v1/runs/{id}/events"))
                    .header("Last-Event-ID", "abc"),
            )
            .await,
            400,
        ),
        (
            "get",
            "/v1/runs/{id}/workspace/{path}",
            app.get(&format!("/v1/runs/{id}/workspace/a//b")).await,
            400,
        ),
        ("get", "/v1/runs/{id}", app.get("/v1/runs/%FF").await, 400),
        // 404s.
        (
            "get",
            "/v1/runs/{id}",
            app.get(&format!("/v1/runs/{UNKNOWN_RUN}")).await,
            404,
        ),
        (
            "get",
            "/v1/runs/{id}",
            app.get("/v1/runs/not-a-run").await,
            404,
        ),
        (
            "delete",
            "/v1/runs/{id}",
            app.delete("/v1/runs/not-a-run").await,
            404,
        ),
        (
            "get",
            "/v1/runs/{id}/messages",
            app.get("/v1/runs/not-a-run/messages").await,
            404,
        ),
        (
            "get",
            "/v1/runs/{id}/events",
            app.get("/v1/runs/not-a-run/events").await,
            404,
        ),
        (
            "get",
            "/v1/runs/{id}/workspace",
            app.get("/v1/runs/not-a-run/workspace").await,
            404,
        ),
        (
            "get",
            "/v1/runs/{id}/workspace/{path}",
            app.get(&format!("/v1/runs/{id}/workspace/missing.txt"))
                .await,
            404,
        ),
        // 413, 415, 422.
        (
            "post",
            "/v1/runs",
            app.post_run(json!({"prompt": "x".repeat(100 * 1024)}))
                .await,
            413,
        ),
        (
            "post",
            "/v1/runs",
            app.send(post_raw("{\"prompt\": \"hi\"}", "text/plain"))
                .await,
            415,
        ),
        (
            "post",
            "/v1/runs",
            app.post_run(json!({"prompt": "x", "colour": "red"})).await,
            422,
        ),
        (
            "post",
            "/v1/runs",
            app.post_run(json!({"prompt": " "})).await,
            422,
        ),
        (
            "post",
            "/v1/runs",
            app.post_run(json!({"prompt": "x", "limits": {"max_steps": 1000}}))
                .await,
            422,
        ),
        (
            "post",
            "/v1/runs",
            app.send(
                app.request(Method::POST, "/v1/runs")
                    .header("Idempotency-Key", "with space")
                    .json(&json!({"prompt": "x"})),
            )
            .await,
            422,
        ),
    ];
    for (method, path, reply, status) in cases {
        assert_eq!(
            reply.status.as_u16(),
            status,
            "{} {path}: {}",
            method.to_uppercase(),
            reply.text
        );
        check(method, path, &reply);
    }
}

/// A well-formed run id that no run has.
const UNKNOWN_RUN: &str = "7a4f1e2c-3b5d-4c6e-8f90-123456789abc";

#[tokio::test]
async fn unauthenticated_requests_get_the_documented_401() {
    let token: agent_runner::config::TokenConfig =
        toml::from_str("tenant = \"team-a\"\ntoken = \"secret-a\"").unwrap();
    let mut app = spawn_with(|config| config.auth.tokens = vec![token]).await;
    let run = app
        .run_to_end(json!({"prompt": "hi", "model": {"scripted": [{"content": "x"}]}}))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.token = None;
    let global_security = !spec()["security"].as_array().is_none_or(|s| s.is_empty());
    for (path, name) in operations() {
        let op = operation(name, path);
        let needs_token = match op.get("security").and_then(Value::as_array) {
            Some(security) => !security.is_empty(),
            None => global_security,
        };
        let mut request = app.request(method(name), &concrete(path, &id, "x.txt"));
        if name == "post" {
            request = request.json(&json!({"prompt": "x"}));
        }
        let reply = app.send(request).await;
        if needs_token {
            assert_eq!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "drift: openapi.yaml says {} {path} needs a token, but it answers without one: {}",
                name.to_uppercase(),
                reply.text
            );
            check(name, path, &reply);
        } else {
            assert_ne!(
                reply.status,
                StatusCode::UNAUTHORIZED,
                "drift: openapi.yaml says {} {path} needs no token, but it asks for one",
                name.to_uppercase()
            );
        }
    }
}

#[tokio::test]
async fn a_full_queue_gets_the_documented_429() {
    let app = spawn_with(|config| {
        config.runs.max_concurrent = 1;
        config.runs.max_queued = 0;
    })
    .await;
    let slow =
        json!({"prompt": "wait", "model": {"scripted": [{"delay_ms": 5000, "content": "x"}]}});
    let running = app.create_run(slow.clone()).await;
    let id = running["id"].as_str().unwrap();
    app.wait_status(id, "running").await;
    let refused = app.post_run(slow).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.text
    );
    check("post", "/v1/runs", &refused);
    let cancelled = app.delete(&format!("/v1/runs/{id}")).await;
    check("delete", "/v1/runs/{id}", &cancelled);
}

// --------------------------------------------------------------- the events

/// Checks one stream's events against the document: each `data` matches the
/// event schema, its `event:` is its type and its `id:` its sequence.
/// The events of a run whose server (the real binary) was killed after its
/// first step and started again.
async fn resumed_after_a_kill() -> Vec<SseEvent> {
    use crate::helpers::{Remote, binary_command, spawn_listening};
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}/runs.db", dir.path().display());
    let start = || {
        let mut command = binary_command(
            &dir,
            &[("AGENT_RUNNER_STORAGE__DATABASE_URL", database.as_str())],
        );
        command.stderr(std::process::Stdio::null());
        let (child, address) = spawn_listening(command);
        (child, Remote::new(address))
    };
    let (mut child, server) = start();
    let run = server
        .post_json(
            "/v1/runs",
            &json!({"prompt": "resume", "model": {"scripted": [
                {"content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
                {"delay_ms": 1000, "content": "done"}
            ]}}),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    crate::helpers::eventually("its first step to be stored", async || {
        let messages = server.get_json(&format!("/v1/runs/{id}/messages")).await;
        (messages["messages"].as_array().map_or(0, Vec::len) >= 3).then_some(())
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let (mut child, server) = start();
    server.wait_status(&id, "completed").await;
    let events = read_sse(server.get(&format!("/v1/runs/{id}/events")).await)
        .await
        .0;
    child.kill().unwrap();
    child.wait().unwrap();
    events
}

fn check_events(events: &[SseEvent], seen: &mut BTreeSet<String>) {
    let schema = event_schema();
    for event in events {
        let kind = event.data["type"].as_str().unwrap_or_default();
        assert_matches(schema, &event.data, &format!("a {kind} event"));
        assert_eq!(event.event, kind, "the SSE event name is the event's type");
        assert_eq!(
            event.id,
            event.data["sequence"].as_u64(),
            "the SSE id is the event's sequence (none for model_delta)"
        );
        seen.insert(kind.to_owned());
    }
}

#[tokio::test]
async fn every_event_of_a_stream_matches_the_event_schema() {
    let app = spawn_with(|config| {
        config.server.sse_keep_alive_ms = Some(100);
        let check = "program = \"true\"\ncheck = true";
        config
            .commands
            .insert("check".into(), toml::from_str(check).unwrap());
        // A profile out of retries, and the one it falls back to.
        let flaky = "kind = \"scripted\"\nscript = [{unavailable = \"HTTP 529\"}]\n\
                     fallback = [\"steady\"]";
        let steady = "kind = \"scripted\"\nscript = [{content = \"steady\"}]";
        config
            .models
            .insert("flaky".into(), toml::from_str(flaky).unwrap());
        config
            .models
            .insert("steady".into(), toml::from_str(steady).unwrap());
    })
    .await;
    let mut seen = BTreeSet::new();

    // A model call that falls back: model_fallback, and the answering
    // profile on its model_end.
    let fell_back = app
        .run_to_end(json!({"prompt": "answer", "model": "flaky"}))
        .await;
    assert_eq!(fell_back["answer"], "steady", "{fell_back}");
    check_events(
        &app.events(fell_back["id"].as_str().unwrap()).await,
        &mut seen,
    );

    // Tool calls that succeed and fail, usage, then a model failure.
    let failing = app
        .create_run(json!({
            "prompt": "try things",
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("c1", "write_file", json!({"path": "a.txt", "content": "x"})),
                    call("c2", "no_such_tool", json!({}))
                ], "usage": {"input_tokens": 5}},
                {"delay_ms": 800, "content": "", "tool_calls": [call("c3", "read_file", json!({"path": "a.txt"}))]},
                {"error": "the provider is down"}
            ]}
        }))
        .await;
    let id = failing["id"].as_str().unwrap();
    // Read live: the delay leaves the stream idle, so keep-alives come too.
    let (events, comments) = app.events_from(id, None).await;
    check_events(&events, &mut seen);
    assert!(comments > 0, "an idle stream carries keep-alive comments");
    assert_eq!(events.last().unwrap().data["status"], "model_error");

    // A completed run: run_end with an answer; replayed from storage.
    let done = app
        .run_to_end(two_step("list_dir", json!({}), "all good"))
        .await;
    let done_id = done["id"].as_str().unwrap();
    check_events(&app.events(done_id).await, &mut seen);
    // Resumed with ?after=: the rest of the stream, still valid.
    let resumed = app
        .send(app.request(Method::GET, &format!("/v1/runs/{done_id}/events?after=3")))
        .await;
    check("get", "/v1/runs/{id}/events", &resumed);

    // A run of attempts: attempt_start and attempt_end on its stream.
    let tried = app
        .run_to_end(
            json!({"prompt": "try twice", "model": {"scripted": [{"content": "done"}]},
                           "commands": ["check"], "attempts": {"n": 2, "until": "all"}}),
        )
        .await;
    assert_eq!(tried["chosen_attempt"], 1, "{tried}");
    check_events(&app.events(tried["id"].as_str().unwrap()).await, &mut seen);

    // A run that delegates: subrun_start and subrun_end on its stream.
    let delegated = app
        .run_to_end(json!({
            "prompt": "ask", "subagents": {"r": {"model": {"scripted": [{"content": "hi"}]}}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("d", "delegate", json!({"agent": "r", "prompt": "go"}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(delegated["status"], "completed", "{delegated}");
    check_events(
        &app.events(delegated["id"].as_str().unwrap()).await,
        &mut seen,
    );

    // A run whose context is compacted: a compaction event, and a summary
    // message in its transcript (the script answers the summary request).
    let compacted = app
        .run_to_end(json!({
            "prompt": "look twice",
            "tools": ["list_dir"], "instructions": "",
            "context": {"max_context_chars": 600, "compaction": {"at": 0.5}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]},
                {"content": "", "tool_calls": [call("l2", "list_dir", json!({}))]},
                {"content": "Looked once; look again.", "usage": {"input_tokens": 9}},
                {"content": "looked"}
            ]}
        }))
        .await;
    assert_eq!(compacted["status"], "completed", "{compacted}");
    let compacted_id = compacted["id"].as_str().unwrap();
    check_events(&app.events(compacted_id).await, &mut seen);
    let transcript = app.get(&format!("/v1/runs/{compacted_id}/messages")).await;
    check("get", "/v1/runs/{id}/messages", &transcript);
    assert!(
        transcript.text.contains("\"role\":\"summary\""),
        "{}",
        transcript.text
    );

    // A run that pauses for an approval, is answered, and goes on: its
    // stream carries actions_required and follows it across the pause.
    let paused = app
        .create_run(json!({
            "prompt": "write it, with permission",
            "approval": {"tools": ["write_file"]},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "b.txt", "content": "y"}))]},
                {"content": "written"}
            ]}
        }))
        .await;
    let paused_id = paused["id"].as_str().unwrap().to_owned();
    let following = {
        let app_url = app.url(&format!("/v1/runs/{paused_id}/events"));
        let request = app.client.get(app_url);
        let request = match &app.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        tokio::spawn(async move { read_sse(request.send().await.unwrap()).await.0 })
    };
    let waiting = app.wait_status(&paused_id, "requires_action").await;
    check(
        "get",
        "/v1/runs/{id}",
        &app.get(&format!("/v1/runs/{paused_id}")).await,
    );
    assert_eq!(waiting["pending_actions"][0]["kind"], "approval");
    // Approved with other arguments: tool_start and the result say so.
    let answered = app
        .send(
            app.request(Method::POST, &format!("/v1/runs/{paused_id}/actions"))
                .json(&json!({"actions": [{"call_id": "w1", "decision": "approve",
                                           "arguments": {"path": "b.txt", "content": "z"}}]})),
        )
        .await;
    check("post", "/v1/runs/{id}/actions", &answered);
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let again = app
        .send(
            app.request(Method::POST, &format!("/v1/runs/{paused_id}/actions"))
                .json(&json!({"actions": [{"call_id": "w1", "decision": "approve"}]})),
        )
        .await;
    check("post", "/v1/runs/{id}/actions", &again);
    let followed = following.await.unwrap();
    check_events(&followed, &mut seen);
    assert_eq!(followed.last().unwrap().data["status"], "completed");

    // A run whose server is killed mid-run resumes after the restart: its
    // stream carries run_resumed (the real binary, on SQLite).
    check_events(&resumed_after_a_kill().await, &mut seen);

    let mut expected = documented_event_types();
    expected.remove("model_delta");
    let missing: Vec<_> = expected.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "the scenario no longer produces {missing:?}: extend it, so every documented event is checked"
    );
}

/// A stand-in for an OpenAI-compatible provider that streams its answer
/// once `go` is notified: `model_delta` events go only to those following
/// the run live, so the test subscribes first.
async fn streaming_provider(
    go: std::sync::Arc<tokio::sync::Notify>,
) -> (String, tokio::task::JoinHandle<()>) {
    let answer = move || async move {
        go.notified().await;
        let chunk = |delta: Value, finish: Value| {
            let event = json!({
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1694268190,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
            });
            format!("data: {event}\n\n")
        };
        let chunks = vec![
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hello"}), Value::Null),
            chunk(json!({"content": ", world"}), Value::Null),
            chunk(json!({}), json!("stop")),
            "data: [DONE]\n\n".to_owned(),
        ];
        let stream = futures_util::stream::unfold(chunks.into_iter(), |mut rest| async move {
            // A gap between chunks, as a provider's tokens come.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let chunk = rest.next()?;
            Some((Ok::<_, Infallible>(chunk), rest))
        });
        axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(axum::body::Body::from_stream(stream))
            .unwrap()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let router = axum::Router::new().fallback(answer);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (base, task)
}

#[tokio::test]
async fn model_delta_events_match_the_event_schema() {
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let (base, provider) = streaming_provider(std::sync::Arc::clone(&go)).await;
    let profile = toml::from_str(&format!(
        "kind = \"openai\"\nbase_url = \"{base}\"\nmodel = \"m\"\nstream = true\nmax_attempts = 1"
    ))
    .unwrap();
    let app = spawn_with(|config| {
        config.models.insert("streamer".into(), profile);
    })
    .await;
    let run = app
        .create_run(json!({"prompt": "hi", "model": {"profile": "streamer"}}))
        .await;
    let id = run["id"].as_str().unwrap();
    let mut following = app.follow(id).await;
    following.until("model_start").await;
    go.notify_one();
    let events = following.rest().await;
    let mut seen = BTreeSet::new();
    check_events(&events, &mut seen);
    assert!(
        seen.contains("model_delta"),
        "the streamed answer produced no model_delta: {events:?}"
    );
    assert_eq!(events.last().unwrap().data["status"], "completed");
    // The run object of a provider profile names the profile and the model.
    let reply = app.get(&format!("/v1/runs/{id}")).await;
    check("get", "/v1/runs/{id}", &reply);
    assert_eq!(reply.body["model"]["name"], "m");
    provider.abort();
}

// ------------------------------------------ the schemas are not vacuous

#[test]
fn the_schemas_refuse_wrong_shapes() {
    let event = event_schema();
    let run_id = "01a22985-2898-7256-bd76-a3a04a90e80a";
    let start = json!({"run_id": run_id, "sequence": 1, "timestamp": "2026-01-02T03:04:05.123456Z", "type": "run_start"});
    assert_matches(event, &start, "a run_start event");
    let mut extra = start.clone();
    extra["extra"] = json!(1);
    assert_refused(event, &extra, "an event with an unknown property");
    let mut unknown = start.clone();
    unknown["type"] = json!("run_paused");
    assert_refused(event, &unknown, "an event of an unknown type");
    let mut no_sequence = start.clone();
    no_sequence.as_object_mut().unwrap().remove("sequence");
    assert_refused(event, &no_sequence, "a stored event without a sequence");
    let mut bad_time = start.clone();
    bad_time["timestamp"] = json!("yesterday");
    assert_refused(event, &bad_time, "an event whose timestamp is not RFC 3339");
    let end = json!({"run_id": run_id, "sequence": 9, "timestamp": "2026-01-02T03:04:05Z", "type": "run_end",
        "steps": 1, "tool_calls": 0, "usage": {"input_tokens": 0, "output_tokens": 0, "model_calls_with_usage": 0,
                  "cached_input_tokens": 0, "cache_write_tokens": 0, "cost_usd": null}});
    assert_refused(event, &end, "a run_end without a status");
    let mut live_end = end.clone();
    live_end["status"] = json!("running");
    assert_refused(event, &live_end, "a run_end with a live status");
    let mut ended = end.clone();
    ended["status"] = json!("completed");
    assert_matches(event, &ended, "a run_end event");
    let delta = json!({"run_id": run_id, "timestamp": "2026-01-02T03:04:05.123Z", "type": "model_delta", "text": "He"});
    assert_matches(event, &delta, "a model_delta event");
    let mut sequenced = delta.clone();
    sequenced["sequence"] = json!(3);
    assert_refused(event, &sequenced, "a model_delta with a sequence");
    let tool_end = json!({"run_id": run_id, "sequence": 4, "timestamp": "2026-01-02T03:04:05Z", "type": "tool_end",
        "call_id": "1", "name": "t", "duration_ms": 1.5, "is_error": "no"});
    assert_refused(
        event,
        &tool_end,
        "a tool_end whose is_error is not a boolean",
    );

    let run_schema = response_schema("get", "/v1/runs/{id}", "200");
    let run = json!({
        "id": run_id, "status": "completed", "prompt": "hi", "answer": "x", "error": null,
        "steps": 1, "tool_calls": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0, "model_calls_with_usage": 0,
                  "cached_input_tokens": 0, "cache_write_tokens": 0, "cost_usd": null},
        "resumes": 0,
        "limits": {"max_steps": 10, "max_tool_calls": 30, "timeout_ms": 120000, "action_timeout_ms": 3600000, "max_resumes": 3, "output_retries": 2},
        "context": {"max_context_chars": 32000, "max_tool_result_chars": 8000},
        "tools": ["read_file"], "commands": [], "model": {"provider": "scripted"}, "metadata": {},
        "pending_actions": [], "approval": {"tools": []}, "client_tools": [], "mcp_servers": [],
        "instructions": null, "thread_id": run_id, "previous_run_id": null,
        "agent": {"name": "triage", "version": 2}, "output_schema": {"type": "object"},
        "output": {"severity": "low"},
        "changes": {"files": 2, "insertions": 5, "deletions": 1},
        "parent_run_id": null, "attempt": null, "attempt_policy": {"n": 2, "until": "all"},
        "attempts": [{"run_id": run_id, "attempt": 1, "status": "completed", "checks_passed": true}],
        "chosen_attempt": 1,
        "schedule_id": run_id, "schedule_tick": "2026-01-02T03:00:00.000Z",
        "root_run_id": null,
        "created_at": "2026-01-02T03:04:05.123Z", "started_at": null, "finished_at": null,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"
    });
    // (Set apart: one `json!` this deep reaches the macro's recursion limit.)
    let mut run = run;
    run["subagents"] = json!({"reader": {"description": "reads", "workspace": "copy",
                                         "agent": {"name": "triage", "version": 2}}});
    run["usage_total"] = json!({"input_tokens": 3, "output_tokens": 1, "model_calls_with_usage": 1,
                                "cached_input_tokens": 0, "cache_write_tokens": 0, "cost_usd": null});
    assert_matches(run_schema, &run, "a run object");
    let mut unknown = run.clone();
    unknown["attempts"][0]["checks_passed"] = json!("yes");
    assert_refused(
        run_schema,
        &unknown,
        "an attempt whose checks_passed is not a boolean",
    );
    let mut extra = run.clone();
    extra["cost_usd"] = json!(0.5);
    assert_refused(run_schema, &extra, "a run with an unknown property");
    let mut nested = run.clone();
    nested["usage"]["cached_tokens"] = json!(1);
    assert_refused(
        run_schema,
        &nested,
        "a run whose usage has an unknown property",
    );
    let mut status = run.clone();
    status["status"] = json!("done");
    assert_refused(run_schema, &status, "a run with an unknown status");
    let mut missing = run.clone();
    missing.as_object_mut().unwrap().remove("finished_at");
    assert_refused(run_schema, &missing, "a run without finished_at");
    let mut agent = run.clone();
    agent["agent"] = json!({"name": "Triage", "version": 0});
    assert_refused(run_schema, &agent, "a run with an agent that is not one");

    let messages = response_schema("get", "/v1/runs/{id}/messages", "200");
    assert_matches(
        messages,
        &json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "name": "t", "arguments": {}}]},
            {"role": "tool", "call_id": "1", "content": "\"ok\"", "is_error": false},
            {"role": "assistant", "content": "done"}
        ]}),
        "a transcript",
    );
    assert_refused(
        messages,
        &json!({"messages": [{"role": "assistant", "content": "", "tool_calls": []}]}),
        "an assistant message with an empty tool_calls",
    );
    assert_refused(
        messages,
        &json!({"messages": [{"role": "tool", "call_id": "1", "content": ""}]}),
        "a tool message without is_error",
    );
    assert_refused(
        messages,
        &json!({"messages": [{"role": "system", "content": ""}]}),
        "a message of an unknown role",
    );

    let error = component_schema("Error");
    assert_matches(
        error,
        &json!({"error": {"code": "not_found", "message": "run not found"}}),
        "an error",
    );
    assert_refused(
        error,
        &json!({"error": {"code": "teapot", "message": "short and stout"}}),
        "an error with an unknown code",
    );
    assert_refused(
        error,
        &json!({"error": "not_found"}),
        "an error in another shape",
    );

    // The request schema takes SPEC's example and refuses what the server does.
    let request = request_schema();
    let example = json!({
        "prompt": "Inspect the project",
        "model": {"scripted": [
            {"content": "", "tool_calls": [{"id": "1", "name": "list_dir", "arguments": {}}]},
            {"content": "Done", "usage": {"input_tokens": 12, "output_tokens": 3}}
        ]},
        "tools": ["read_file", "write_file", "list_dir", "run_command"],
        "commands": ["test"],
        "workspace": {"files": {"src/lib.rs": "pub fn f() {}"}},
        "limits": {"max_steps": 10, "max_tool_calls": 30, "timeout_ms": 120000},
        "context": {"max_context_chars": 32000, "max_tool_result_chars": 8000},
        "metadata": {"ticket": "ABC-1"}
    });
    assert_matches(request, &example, "the request of SPEC's example");
    assert_matches(
        request,
        &json!({"prompt": "x", "model": null, "limits": {"max_steps": null}}),
        "a request with nulls for absent fields",
    );
    for (refused, what) in [
        (json!({}), "a request without a prompt"),
        (json!({"prompt": ""}), "an empty prompt"),
        (json!({"prompt": "   "}), "a blank prompt"),
        (json!({"prompt": "x", "colour": "red"}), "an unknown field"),
        (
            json!({"prompt": "x", "model": {"profile": "demo", "scripted": []}}),
            "a model that is both a profile and a script",
        ),
        (
            json!({"prompt": "x", "model": {"name": "demo"}}),
            "a model of neither kind",
        ),
        (
            json!({"prompt": "x", "tools": ["format_disk"]}),
            "an unknown tool",
        ),
        (
            json!({"prompt": "x", "tools": ["read_file", "read_file"]}),
            "a tool listed twice",
        ),
        (
            json!({"prompt": "x", "limits": {"max_steps": 0}}),
            "zero steps",
        ),
        (
            json!({"prompt": "x", "limits": {"steps": 1}}),
            "an unknown limit",
        ),
        (
            json!({"prompt": "x", "context": {"max_context_chars": 0}}),
            "a zero context",
        ),
        (
            json!({"prompt": "x", "model": {"scripted": [{"delay_ms": -5, "content": ""}]}}),
            "a negative delay",
        ),
        (
            json!({"prompt": "x", "metadata": [1]}),
            "metadata that is not an object",
        ),
    ] {
        assert_refused(request, &refused, what);
    }
}

// -------------------------------------- constants the code and document share

/// The error codes the API can answer with: its table of codes.
fn error_codes_in_code() -> BTreeSet<String> {
    set(ErrorCode::ALL.map(ErrorCode::as_str))
}

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

/// Asserts that what the document lists is what the code has, naming the
/// difference.
fn assert_same(documented: BTreeSet<String>, in_code: BTreeSet<String>, what: &str) {
    let missing: Vec<_> = in_code.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&in_code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "drift: {what}: in the code but not in openapi.yaml: {missing:?}; in openapi.yaml but not in the code: {extra:?}"
    );
}

#[test]
fn constants_in_the_document_match_the_code() {
    assert_same(
        enum_values(component_schema("ErrorCode")),
        error_codes_in_code(),
        "the ErrorCode enum differs from ErrorCode::ALL",
    );
    assert_same(
        enum_values(component_schema("RunStatus")),
        set(RunStatus::ALL.map(RunStatus::as_str)),
        "the RunStatus enum differs from RunStatus::ALL",
    );
    assert_same(
        enum_values(component_schema("TerminalRunStatus")),
        set(RunStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(RunStatus::as_str)),
        "the TerminalRunStatus enum differs from the terminal statuses",
    );
    assert_same(
        enum_values(&component_schema("ToolName")["anyOf"][0]),
        set(BUILTIN_TOOL_NAMES),
        "the ToolName enum of built-in tools differs from the built-in tools",
    );
    assert_same(
        enum_values(component_schema("ModelKind")),
        set([
            ProfileKind::OpenAi,
            ProfileKind::Anthropic,
            ProfileKind::Scripted,
        ]
        .map(ProfileKind::as_str)),
        "the ModelKind enum differs from the profile kinds",
    );

    let request = &component_schema("CreateRunRequest")["properties"];
    let defaults = [
        ("limits", "max_steps", u64::from(DEFAULT_LIMITS.max_steps)),
        (
            "limits",
            "max_tool_calls",
            u64::from(DEFAULT_LIMITS.max_tool_calls),
        ),
        ("limits", "timeout_ms", DEFAULT_LIMITS.timeout_ms),
        (
            "context",
            "max_context_chars",
            DEFAULT_CONTEXT.max_context_chars as u64,
        ),
        (
            "context",
            "max_tool_result_chars",
            DEFAULT_CONTEXT.max_tool_result_chars as u64,
        ),
    ];
    for (group, field, default) in defaults {
        assert_eq!(
            request[group]["properties"][field]["default"], default,
            "drift: the default of {group}.{field}"
        );
    }
    let files = &request["workspace"]["properties"]["files"];
    assert_eq!(
        files["maxProperties"], MAX_WORKSPACE_FILES,
        "drift: workspace.files maxProperties"
    );
    assert_eq!(
        files["propertyNames"]["maxLength"], MAX_REQUEST_PATH_BYTES,
        "drift: workspace path length"
    );

    let parameter = |method: &str, path: &str, name: &str| -> &'static Value {
        operation(method, path)["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(deref)
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("drift: {method} {path} documents no parameter {name}"))
    };
    let limit = &parameter("get", "/v1/runs", "limit")["schema"];
    assert_eq!(
        limit["default"], DEFAULT_PAGE,
        "drift: the default page size"
    );
    assert_eq!(limit["maximum"], MAX_PAGE, "drift: the largest page size");
    assert_eq!(
        parameter("post", "/v1/runs", "Idempotency-Key")["schema"]["maxLength"],
        MAX_IDEMPOTENCY_KEY,
        "drift: the longest Idempotency-Key"
    );
    for schema in ["Usage", "ModelUsage"] {
        for field in ["input_tokens", "output_tokens"] {
            assert_eq!(
                component_schema(schema)["properties"][field]["maximum"],
                MAX_TOKEN_COUNT,
                "drift: the largest {schema}.{field}"
            );
        }
    }
}
