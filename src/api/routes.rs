//! The route table: every path the API serves, the methods it answers, the
//! query parameters each takes, and whether it needs a token. The router and
//! the query check are built from it, and the document's check compares its
//! operations against it, so none of them can drift from the others.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, patch, post, put};

use super::state::AppState;
use super::{
    a2a, actions, agents, console, events, runs, schedules, statuses, stream_tokens, system,
    transcript, uploads, workspace,
};

/// One path and what it answers.
pub struct Route {
    /// In axum's syntax: `{id}` for a segment, `{*path}` for the rest.
    pub path: &'static str,
    /// Each method served, with the query parameters it takes.
    pub methods: Vec<(Method, &'static [&'static str])>,
    /// Served without a token (probes, metrics, the document).
    pub public: bool,
    pub(super) handler: MethodRouter<AppState>,
}

impl Route {
    /// The path as OpenAPI writes it (`{*path}` becomes `{path}`).
    pub fn openapi_path(&self) -> String {
        self.path.replace("{*", "{")
    }
}

fn route(
    path: &'static str,
    public: bool,
    handlers: impl IntoIterator<Item = (Method, &'static [&'static str], MethodRouter<AppState>)>,
) -> Route {
    let mut methods = Vec::new();
    let mut handler = MethodRouter::new();
    for (method, query, one) in handlers {
        methods.push((method, query));
        handler = handler.merge(one);
    }
    Route {
        path,
        methods,
        public,
        handler,
    }
}

/// Every route of the API.
pub fn table() -> Vec<Route> {
    use Method as M;
    const NONE: &[&str] = &[];
    vec![
        route(
            "/v1/runs",
            false,
            [
                (
                    M::GET,
                    &[
                        "status",
                        "thread_id",
                        "agent",
                        "parent_run_id",
                        "schedule_id",
                        "limit",
                        "cursor",
                    ][..],
                    get(runs::list),
                ),
                (M::POST, &["wait", "stream"][..], post(runs::create)),
            ],
        ),
        route(
            "/v1/runs/events",
            false,
            [(M::GET, NONE, get(statuses::stream))],
        ),
        route(
            "/v1/runs/{id}",
            false,
            [
                (M::GET, NONE, get(runs::get)),
                (M::DELETE, NONE, delete(runs::cancel)),
            ],
        ),
        route(
            "/v1/runs/{id}/cancel",
            false,
            [(M::POST, NONE, post(runs::cancel_idempotent))],
        ),
        route(
            "/v1/runs/{id}/purge",
            false,
            [(M::POST, NONE, post(runs::purge))],
        ),
        route(
            "/v1/runs/{id}/actions",
            false,
            [(M::POST, NONE, post(actions::answer))],
        ),
        route(
            "/v1/runs/{id}/messages",
            false,
            [(M::GET, NONE, get(transcript::messages))],
        ),
        route(
            "/v1/runs/{id}/events",
            false,
            [(M::GET, &["after", "stream_token"][..], get(events::stream))],
        ),
        route(
            "/v1/runs/{id}/stream_tokens",
            false,
            [(M::POST, NONE, post(stream_tokens::create))],
        ),
        route(
            "/v1/runs/{id}/workspace",
            false,
            [(M::GET, NONE, get(workspace::list))],
        ),
        route(
            "/v1/runs/{id}/workspace/{*path}",
            false,
            [(M::GET, NONE, get(workspace::file))],
        ),
        route(
            "/v1/runs/{id}/diff",
            false,
            [(M::GET, NONE, get(workspace::diff))],
        ),
        route(
            "/v1/runs/{id}/archive",
            false,
            [(M::GET, &["include_git"][..], get(workspace::archive))],
        ),
        route(
            "/v1/uploads",
            false,
            [(M::POST, NONE, post(uploads::create))],
        ),
        route(
            "/v1/uploads/{id}",
            false,
            [
                (M::GET, NONE, get(uploads::get)),
                (M::DELETE, NONE, delete(uploads::delete)),
            ],
        ),
        route(
            "/v1/schedules",
            false,
            [
                (M::GET, &["limit", "cursor"][..], get(schedules::list)),
                (M::POST, NONE, post(schedules::create)),
            ],
        ),
        route(
            "/v1/schedules/{id}",
            false,
            [
                (M::GET, NONE, get(schedules::get)),
                (M::PATCH, NONE, patch(schedules::update)),
                (M::DELETE, NONE, delete(schedules::delete)),
            ],
        ),
        route(
            "/v1/schedules/{id}/trigger",
            false,
            [(M::POST, NONE, post(schedules::trigger))],
        ),
        route(
            "/v1/agents",
            false,
            [
                (
                    M::GET,
                    &["archived", "limit", "cursor"][..],
                    get(agents::list),
                ),
                (M::POST, NONE, post(agents::create)),
            ],
        ),
        route(
            "/v1/agents/{name}",
            false,
            [
                (M::GET, NONE, get(agents::get)),
                (M::PUT, NONE, put(agents::update)),
                (M::DELETE, NONE, delete(agents::archive)),
            ],
        ),
        route(
            "/v1/agents/{name}/versions",
            false,
            [(M::GET, &["limit", "cursor"][..], get(agents::versions))],
        ),
        route(
            "/v1/agents/{name}/versions/{version}",
            false,
            [(M::GET, NONE, get(agents::version))],
        ),
        route(
            "/a2a/{agent}/.well-known/agent-card.json",
            false,
            [(M::GET, NONE, get(a2a::card))],
        ),
        route(
            "/a2a/{agent}",
            false,
            [(M::POST, NONE, post(a2a::endpoint))],
        ),
        route("/v1/models", false, [(M::GET, NONE, get(system::models))]),
        route("/v1/mcp", false, [(M::GET, NONE, get(system::mcp))]),
        route("/v1/tenant", false, [(M::GET, NONE, get(system::tenant))]),
        route("/", true, [(M::GET, NONE, get(console::index))]),
        route(
            "/console/{file}",
            true,
            [(M::GET, NONE, get(console::asset))],
        ),
        route("/healthz", true, [(M::GET, NONE, get(system::healthz))]),
        route("/readyz", true, [(M::GET, NONE, get(system::readyz))]),
        route("/metrics", true, [(M::GET, NONE, get(system::metrics))]),
        route(
            "/openapi.json",
            true,
            [(M::GET, NONE, get(system::openapi))],
        ),
    ]
}

/// The query parameters the operation `method` on `route` (axum's matched
/// path) takes; `None` for a method the route does not serve (its 405 is the
/// router's). HEAD is served as GET.
pub fn query_parameters(method: &Method, route: &str) -> Option<&'static [&'static str]> {
    static TABLE: LazyLock<HashMap<(Method, &'static str), &'static [&'static str]>> =
        LazyLock::new(|| {
            table()
                .into_iter()
                .flat_map(|route| {
                    route
                        .methods
                        .into_iter()
                        .map(move |(method, query)| ((method, route.path), query))
                })
                .collect()
        });
    let method = if method == Method::HEAD {
        Method::GET
    } else {
        method.clone()
    };
    TABLE.get(&(method, route)).copied()
}

/// The route table's own copy of `route` (axum's matched path), for labels
/// that must not be allocated per request.
pub fn static_path(route: &str) -> Option<&'static str> {
    static PATHS: LazyLock<std::collections::HashSet<&'static str>> =
        LazyLock::new(|| table().into_iter().map(|route| route.path).collect());
    PATHS.get(route).copied()
}
