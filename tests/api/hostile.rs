//! Clients that try to fool or exhaust the server (SPEC section 26): a page
//! that rebinds its name to the server's address, and what a request may
//! not do to the rest.

use serde_json::json;

use crate::helpers::*;

/// A web page whose name rebinds to 127.0.0.1 reaches a server on loopback
/// with its own name as `Host`: the server does not answer for it (421),
/// and nothing is done.
#[tokio::test]
async fn a_request_for_another_host_is_refused_and_does_nothing() {
    let app = spawn_app().await;
    let rebinding = app
        .send(
            app.request(reqwest::Method::POST, "/v1/runs?wait=true")
                .header("host", "attacker.example:18081")
                .json(&json!({"prompt": "exfiltrate"})),
        )
        .await;
    assert_eq!(rebinding.status, 421, "{}", rebinding.text);
    assert_eq!(rebinding.error_code(), "misdirected_request");
    assert!(
        rebinding.text.contains("attacker.example"),
        "{}",
        rebinding.text
    );
    for host in ["attacker.example", "localhost.attacker.example"] {
        let read = app
            .send(
                app.request(reqwest::Method::GET, "/v1/runs")
                    .header("host", host),
            )
            .await;
        assert_eq!(read.status, 421, "{host}: {}", read.text);
    }
    // The loopback names are the server's own: nothing was created.
    let port = app.address.rsplit_once(':').unwrap().1.to_owned();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let listed = app
            .send(
                app.request(reqwest::Method::GET, "/v1/runs")
                    .header("host", &host),
            )
            .await;
        assert_eq!(listed.status, 200, "{host}: {}", listed.text);
        assert_eq!(listed.body["runs"], json!([]), "{host}");
    }
}

/// `[server] allowed_hosts` names the hosts a server answers for, a port
/// pinned where an entry gives one.
#[tokio::test]
async fn allowed_hosts_names_the_hosts_and_ports_answered_for() {
    let app = spawn_with(|config| {
        config.server.allowed_hosts = Some(vec!["runs.example.com:443".into(), "internal".into()]);
    })
    .await;
    for (host, status) in [
        ("runs.example.com:443", 200),
        ("runs.example.com:8443", 421),
        ("internal:1234", 200),
        ("localhost", 421),
    ] {
        let reply = app
            .send(
                app.request(reqwest::Method::GET, "/v1/models")
                    .header("host", host),
            )
            .await;
        assert_eq!(reply.status, status, "{host}: {}", reply.text);
    }
    // The probes answer any host: a prober sends a pod's address.
    let probe = app
        .send(
            app.request(reqwest::Method::GET, "/healthz")
                .header("host", "10.0.0.7:8080"),
        )
        .await;
    assert_eq!(probe.status, 200, "{}", probe.text);
}

/// `/metrics` names tenants and what they use: with `[server]
/// metrics_token` it answers only that bearer.
#[tokio::test]
async fn metrics_can_require_a_token_of_their_own() {
    let app = spawn_with(|config| {
        config.server.metrics_token =
            Some(agent_runner::config::SecretText("scrape-secret".into()));
    })
    .await;
    for authorization in [None, Some("Bearer wrong"), Some("scrape-secret")] {
        let mut request = app.request(reqwest::Method::GET, "/metrics");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let refused = app.send(request).await;
        assert_eq!(refused.status, 401, "{authorization:?}: {}", refused.text);
        assert_eq!(refused.error_code(), "unauthorized");
    }
    let scraped = app
        .send(
            app.request(reqwest::Method::GET, "/metrics")
                .header("authorization", "Bearer scrape-secret"),
        )
        .await;
    assert_eq!(scraped.status, 200);
    assert!(
        scraped.text.contains("agent_runner_build_info"),
        "{}",
        scraped.text
    );
}
