//! The Kubernetes manifests under `deploy/` agree with the server they
//! deploy: the ConfigMap's configuration, with the Secret's variables over
//! it, is one the server takes; the pod's grace outlasts the runs' grace;
//! the probes and the port are the server's; and the real binary, started
//! exactly as the Deployment starts it (its arguments, its environment, its
//! volumes at their paths, its user, a read-only root), answers `/readyz`.
//! (`tests/deploy/validate.sh` checks them against Kubernetes' own
//! schemas.)

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
    // The config file is the ConfigMap's key, where its volume is mounted.
    let config_mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|mount| mount["name"] == "config")
        .unwrap();
    assert_eq!(
        container["args"][1].as_str(),
        Some(
            format!(
                "{}/agent-runner.toml",
                config_mount["mountPath"].as_str().unwrap()
            )
            .as_str()
        )
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let service = the("service.yaml", "Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
}

/// The image's `ENV` (the Dockerfile's), as NAME=VALUE.
fn image_env() -> Vec<(String, String)> {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    let mut lines = dockerfile.lines();
    let mut instruction = String::new();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("ENV ") {
            instruction.push_str(rest);
            let mut last = line;
            while last.trim_end().ends_with('\\') {
                instruction.pop();
                last = lines.next().unwrap();
                instruction.push(' ');
                instruction.push_str(last);
            }
        }
    }
    instruction
        .split_whitespace()
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap();
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// A pod of the Deployment, started by `tests/deploy/pod.sh` as root in a
/// mount namespace of its own: the real binary at the image's path, the
/// ConfigMap, the workspaces volume and the emptyDir at the manifest's
/// paths, the image's, the Secret's and the container's environment (the
/// Secret's placeholders made values: the database the tests' PostgreSQL
/// when they have one, as the Deployment's is, else a SQLite file on the
/// volume; a token whose SHA-256 is the tokens' digest), and the variables
/// Kubernetes injects for the Service. Then `/readyz`, a run, and a stop
/// with SIGTERM within the pod's grace.
#[tokio::test]
async fn the_binary_started_as_the_deployment_starts_it_serves() {
    const TOKEN: &str = "deploy-test-token";
    assert!(
        rustix::process::geteuid().is_root(),
        "this test starts a pod's namespace and user: it needs root"
    );
    let deployment = the("deployment.yaml", "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let security = &pod["securityContext"];
    let port = container["ports"][0]["containerPort"].as_u64().unwrap();
    assert!(
        std::net::TcpListener::bind(("0.0.0.0", port as u16)).is_ok(),
        "port {port}, the Deployment's, is taken on this machine"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();

    // The volumes: the ConfigMap's keys as files, the claim as a directory
    // of the pod's group (fsGroup), the emptyDir as a tmpfs.
    let volumes = pod["volumes"].as_sequence().unwrap();
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_sequence().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let path = mount["mountPath"].as_str().unwrap();
        let volume = volumes.iter().find(|v| v["name"] == name).unwrap();
        if volume.get("configMap").is_some() {
            let data = dir.path().join(name);
            std::fs::create_dir(&data).unwrap();
            let map = the("configmap.yaml", "ConfigMap");
            for (key, text) in map["data"].as_mapping().unwrap() {
                std::fs::write(data.join(key.as_str().unwrap()), text.as_str().unwrap()).unwrap();
            }
            mounts.push(format!("bind:{}:{path}", data.display()));
        } else if volume.get("persistentVolumeClaim").is_some() {
            let data = dir.path().join(name);
            std::fs::create_dir(&data).unwrap();
            let group = security["fsGroup"].as_u64().unwrap() as u32;
            std::os::unix::fs::chown(&data, None, Some(group)).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o2775)).unwrap();
            mounts.push(format!("bind:{}:{path}", data.display()));
        } else {
            assert!(volume.get("emptyDir").is_some(), "{volume:?}");
            mounts.push(format!("tmpfs:{path}"));
        }
    }
    // The image's own: its binary, and the empty /workspace its
    // Dockerfile makes (where commands see their workspace).
    let binary = "/usr/local/bin/agent-runner";
    mounts.push(format!(
        "file:{}:{binary}",
        env!("CARGO_BIN_EXE_agent-runner")
    ));
    mounts.push("dir:/workspace".to_owned());

    // The environment: the image's, the Secret's, the Service's, then the
    // container's own.
    let database = match std::env::var(crate::helpers::POSTGRES_VARIABLE) {
        Ok(_) => crate::helpers::database_url(dir.path()),
        Err(_) => "sqlite:///data/agent-runner.db".to_owned(),
    };
    let digest = agent_runner::api::auth::token_sha256(TOKEN);
    let mut environment = image_env();
    environment.push(("HOME".into(), "/data".into()));
    for (name, value) in secret_env() {
        let value = match name.as_str() {
            "AGENT_RUNNER_STORAGE__DATABASE_URL" => database.clone(),
            "AGENT_RUNNER_AUTH__TOKENS" => value.replace(&"ab".repeat(32), &digest),
            _ => value,
        };
        environment.push((name, value));
    }
    for (name, value) in [
        ("AGENT_RUNNER_SERVICE_HOST", "10.0.0.7".to_owned()),
        ("AGENT_RUNNER_SERVICE_PORT", port.to_string()),
        ("AGENT_RUNNER_PORT", format!("tcp://10.0.0.7:{port}")),
        ("AGENT_RUNNER_PORT_8080_TCP_ADDR", "10.0.0.7".to_owned()),
    ] {
        environment.push((name.to_owned(), value));
    }
    for variable in container["env"].as_sequence().unwrap() {
        let name = variable["name"].as_str().unwrap().to_owned();
        environment.retain(|(set, _)| *set != name);
        environment.push((name, variable["value"].as_str().unwrap().to_owned()));
    }
    let env_file = dir.path().join("environment");
    let lines: String = environment
        .iter()
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect();
    std::fs::write(&env_file, lines).unwrap();

    let mut command = std::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "bash"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deploy/pod.sh"))
        .arg(&root)
        .arg(security["runAsUser"].as_u64().unwrap().to_string())
        .arg(security["runAsGroup"].as_u64().unwrap().to_string())
        .arg("/data")
        .arg(&env_file)
        .args(&mounts)
        .arg("--")
        .arg(binary)
        .arg("serve")
        .args(
            container["args"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|arg| arg.as_str().unwrap()),
        )
        .stdout(std::process::Stdio::piped());
    let stderr = dir.path().join("stderr");
    command.stderr(std::fs::File::create(&stderr).unwrap());
    let mut server = command.spawn().unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert_eq!(
        first.trim(),
        format!("listening on http://0.0.0.0:{port}"),
        "the pod did not start:\n{}",
        std::fs::read_to_string(&stderr).unwrap()
    );

    let client = crate::helpers::http_client();
    let local = format!("http://127.0.0.1:{port}");
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let path = container[probe]["httpGet"]["path"].as_str().unwrap();
        let answer = client.get(format!("{local}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{probe} {path}");
    }
    let run: serde_json::Value = client
        .post(format!("{local}/v1/runs?wait=true"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"prompt": "hi", "model": {"scripted": [{"content": "up"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "up");
    let status = crate::helpers::terminate(&mut server);
    assert!(
        status.success(),
        "{status:?}:\n{}",
        std::fs::read_to_string(&stderr).unwrap()
    );
}
