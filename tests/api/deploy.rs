//! The Kubernetes manifests under `deploy/` agree with the server they
//! deploy: the ConfigMap's configuration, with the Secret's variables over
//! it, is one the server takes; the pod's grace outlasts the runs' grace;
//! the probes and the port are the server's. (`tests/deploy/validate.sh`
//! checks them against Kubernetes' own schemas.)

use std::path::Path;

use agent_runner::app::Application;
use agent_runner::config::Config;
use serde_yaml::Value;

fn manifests(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubernetes")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .collect()
}

fn the(file: &str, kind: &str) -> Value {
    manifests(file)
        .into_iter()
        .find(|m| m["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {file}"))
}

/// The Secret's variables, with its placeholders made into values the
/// server takes (a database URL stays one, a token hash is 64 hex digits).
fn secret_env() -> Vec<(String, String)> {
    let secret = the("secret.yaml", "Secret");
    secret["stringData"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(name, value)| {
            let value = value
                .as_str()
                .unwrap()
                .replace("CHANGE-ME-64-HEX-DIGITS", &"ab".repeat(32))
                .replace("CHANGE-ME", "placeholder");
            (name.as_str().unwrap().to_owned(), value)
        })
        .collect()
}

fn configuration() -> Config {
    let map = the("configmap.yaml", "ConfigMap");
    let text = map["data"]["agent-runner.toml"].as_str().unwrap();
    Config::from_toml(text, secret_env()).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn the_configmap_with_the_secret_is_a_configuration_the_server_takes() {
    let config = configuration();
    assert!(
        config.storage.database_url.starts_with("postgres://"),
        "replicas need PostgreSQL"
    );
    assert_eq!(config.storage.workspaces_dir, Path::new("/data/workspaces"));
    assert_eq!(config.auth.tokens.len(), 1);
    assert_eq!(config.server.bind.port(), 8080);
}

#[tokio::test]
async fn the_configmaps_model_profile_and_presets_build() {
    // Everything but the database: the profile reads its key from the
    // Secret's variable, and the presets pass the sandbox's checks.
    let mut config = configuration();
    let dir = tempfile::tempdir().unwrap();
    config.server.bind = "127.0.0.1:0".parse().unwrap();
    config.storage.database_url = format!("sqlite://{}/runs.db", dir.path().display());
    config.storage.workspaces_dir = dir.path().join("workspaces");
    let key = secret_env()
        .into_iter()
        .find(|(name, _)| name == "OPENAI_API_KEY")
        .expect("the Secret holds the profile's key");
    // SAFETY: only Rust code runs in this test binary, and std serialises
    // its own environment reads and writes; the variable is this test's.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var(&key.0, &key.1)
    };
    let app = Application::build(config).await;
    assert!(app.is_ok(), "{:?}", app.err().map(|e| e.to_string()));
}

#[test]
fn the_deployment_stops_after_the_runs_grace_and_probes_the_servers_routes() {
    let config = configuration();
    let deployment = the("deployment.yaml", "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let grace_ms = pod["terminationGracePeriodSeconds"].as_u64().unwrap() * 1000;
    // The runs' grace, then the hand-over and the webhooks' few seconds.
    assert!(
        grace_ms >= config.runs.shutdown_grace_ms + 10_000,
        "{grace_ms} ms against shutdown_grace_ms {}",
        config.runs.shutdown_grace_ms
    );
    let container = &pod["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        container["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(config.server.bind.port()))
    );
    assert_eq!(
        container["args"][1].as_str(),
        Some("/etc/agent-runner/agent-runner.toml")
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let service = the("service.yaml", "Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
}
