//! Webhooks that cannot be sent astray (SPEC section 26): an allowed host
//! may pin a port, hosts are compared as a URL's parsing writes them, the
//! body names the run's tenant, and a tenant's deliveries are signed with a
//! key of its own.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::webhooks::{Received, receiver, signed_with, taken};

const SERVER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const TENANT_A_SECRET: &str = "whsec_c2VjcmV0LW9mLXRlbmFudC1hLTAxMjM0NTY3";

fn hooked(url: &str) -> Value {
    json!({"prompt": "hi", "tools": [], "webhook": {"url": url},
           "model": {"scripted": [{"content": "done"}]}})
}

/// An entry with a port allows that port alone; `0x7f.1` is 127.0.0.1 to
/// the check as to the connection.
#[tokio::test]
async fn an_allowed_host_may_pin_its_port_and_hosts_are_compared_as_parsed() {
    let (hooks, _received) = receiver().await;
    let port = hooks.rsplit_once(':').unwrap().1.to_owned();
    let pinned = format!("[\"127.0.0.1:{port}\"]");
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_WEBHOOKS__ALLOWED_HOSTS", pinned.as_str()),
            ("AGENT_RUNNER_WEBHOOKS__SECRET_ENV", "\"HOOK_SECRET\""),
            ("HOOK_SECRET", SERVER_SECRET),
        ],
    );
    let client = http_client();
    for (url, status) in [
        ("http://0x7f.1:22/hook".to_owned(), 422),
        ("http://127.0.0.1/hook".to_owned(), 422),
        (format!("http://0x7f.1:{port}/hook"), 201),
        (format!("http://127.0.0.1:{port}/hook"), 201),
    ] {
        let answer = client
            .post(format!("{address}/v1/runs"))
            .json(&hooked(&url))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{url}");
    }
}

/// The delivery of a run of tenant `a` names `a` and is signed with `a`'s
/// own key, not the server's: a receiver of tenant `b` cannot be fed
/// `a`'s runs as its own. A tenant without a key of its own gets the
/// server's.
#[tokio::test]
async fn a_tenants_deliveries_name_it_and_are_signed_with_its_own_key() {
    let (hooks, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = "[{tenant = \"a\", token = \"token-a\"}, {tenant = \"b\", token = \"token-b\"}]";
    let (_server, address) = start_binary_with(
        &dir,
        &[
            ("AGENT_RUNNER_WEBHOOKS__ALLOWED_HOSTS", "[\"127.0.0.1\"]"),
            ("AGENT_RUNNER_WEBHOOKS__SECRET_ENV", "\"HOOK_SECRET\""),
            (
                "AGENT_RUNNER_TENANTS__A__WEBHOOK_SECRET_ENV",
                "\"HOOK_SECRET_A\"",
            ),
            ("AGENT_RUNNER_AUTH__TOKENS", tokens),
            ("HOOK_SECRET", SERVER_SECRET),
            ("HOOK_SECRET_A", TENANT_A_SECRET),
        ],
    );
    let client = http_client();
    let mut ids = Vec::new();
    for tenant in ["a", "b"] {
        let run: Value = client
            .post(format!("{address}/v1/runs"))
            .bearer_auth(format!("token-{tenant}"))
            .json(&hooked(&format!("{hooks}/hook")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        ids.push((tenant, run["id"].as_str().unwrap().to_owned()));
    }
    for (tenant, id) in ids {
        let posted = taken(&received, &id, "completed").await;
        assert_eq!(posted["tenant"], tenant, "{posted}");
        let (headers, body) = delivery(&received, &id);
        let (own, other) = if tenant == "a" {
            (TENANT_A_SECRET, SERVER_SECRET)
        } else {
            (SERVER_SECRET, TENANT_A_SECRET)
        };
        assert!(signed_with(&headers, &body, own), "{tenant}'s key signs it");
        assert!(!signed_with(&headers, &body, other), "no other key does");
    }
}

/// The headers and body of the delivery of run `id` that was taken.
fn delivery(received: &Received, id: &str) -> (axum::http::HeaderMap, String) {
    received
        .0
        .lock()
        .unwrap()
        .iter()
        .find(|(_, body, answered)| {
            *answered == StatusCode::OK && serde_json::from_str::<Value>(body).unwrap()["id"] == id
        })
        .map(|(headers, body, _)| (headers.clone(), body.clone()))
        .unwrap()
}
