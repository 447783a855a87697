//! Model profiles from a configuration's `[models]` table: parsing,
//! validation with clear errors, listing, and a model for each run.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_runner::harness::{
    Harness, Message, Outcome, RunConfig, Stop, Tool, ToolDefinition, ToolError, ToolRegistry,
    UsageTotals,
};
use agent_runner::models::{ModelProfile, ModelProfiles, ProfileError, ProfileInfo, ProfileKind};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::fixtures::*;
use super::support::*;

/// The part of a server configuration this module reads.
#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    models: BTreeMap<String, ModelProfile>,
}

fn parse(text: &str) -> Result<BTreeMap<String, ModelProfile>, String> {
    toml::from_str::<Config>(text)
        .map(|config| config.models)
        .map_err(|error| error.to_string())
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn load(text: &str, pairs: &[(&str, &str)]) -> Result<ModelProfiles, ProfileError> {
    ModelProfiles::new(parse(text).unwrap(), &env(pairs))
}

fn error_of(text: &str, pairs: &[(&str, &str)]) -> String {
    load(text, pairs).unwrap_err().to_string()
}

const EXAMPLE: &str = r#"
[models.local]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5-coder"

[models.gpt]
kind = "openai"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
max_tokens = 2048
temperature = 0.2
timeout_ms = 60000
max_attempts = 3
stream = true
headers = { "OpenAI-Organization" = "org-123" }

[models.claude]
kind = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "ANTHROPIC_API_KEY"

[models.canned]
kind = "scripted"
script = [
  { content = "", tool_calls = [{ id = "1", name = "list_dir", arguments = {} }] },
  '{"content": "Done", "usage": {"input_tokens": 12, "output_tokens": 3}}',
]
"#;

#[test]
fn the_example_configuration_loads_and_lists_names_and_kinds() {
    let profiles = load(
        EXAMPLE,
        &[
            ("OPENAI_API_KEY", "sk-1"),
            ("ANTHROPIC_API_KEY", "sk-ant-1"),
        ],
    )
    .unwrap();
    let info = |name: &str, kind| ProfileInfo {
        name: name.into(),
        kind,
    };
    assert_eq!(
        profiles.list(),
        vec![
            info("canned", ProfileKind::Scripted),
            info("claude", ProfileKind::Anthropic),
            info("demo", ProfileKind::Scripted),
            info("gpt", ProfileKind::OpenAi),
            info("local", ProfileKind::OpenAi),
        ]
    );
    assert_eq!(
        serde_json::to_value(profiles.list()).unwrap()[1],
        json!({"name": "claude", "kind": "anthropic"})
    );
    assert_eq!(
        profiles.get("local").unwrap().model(),
        Some("qwen2.5-coder")
    );
    assert!(profiles.contains("demo"));
    assert!(profiles.instantiate("missing").is_none());
}

#[test]
fn an_unknown_kind_or_field_is_refused_by_name() {
    let cases = [
        (
            "[models.x]\nkind = \"gemini\"\nmodel = \"m\"\n",
            "unknown variant `gemini`, expected one of `openai`, `anthropic`, `scripted`",
        ),
        ("[models.x]\nmodel = \"m\"\n", "missing field `kind`"),
        (
            "[models.x]\nkind = \"openai\"\nmodle = \"m\"\n",
            "unknown field `modle`",
        ),
        (
            "[models.x]\nkind = \"scripted\"\nscript = []\nmodel = \"m\"\n",
            "`model` is not a setting of kind scripted",
        ),
        (
            "[models.x]\nkind = \"scripted\"\n",
            "`script` is required for kind scripted",
        ),
        (
            "[models.x]\nkind = \"anthropic\"\nmodel = \"m\"\nscript = []\n",
            "`script` is only for kind scripted, not anthropic",
        ),
        (
            "[models.x]\nkind = \"openai\"\nmodel = \"m\"\nmax_tokens = -5\n",
            "max_tokens = -5",
        ),
        ("[models.x]\nkind = \"openai\"\nmodel = 5\n", "model = 5"),
    ];
    for (text, expected) in cases {
        let error = parse(text).unwrap_err();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

#[test]
fn validation_errors_name_the_profile_and_the_field() {
    let cases: &[(&str, &str)] = &[
        (
            "[models.local]\nkind = \"openai\"\n",
            "model profile `local`: `model` is required for kind openai (the provider's model id)",
        ),
        (
            "[models.local]\nkind = \"openai\"\nmodel = \"  \"\n",
            "model profile `local`: `model` is required for kind openai (the provider's model id)",
        ),
        (
            "[models.claude]\nkind = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n",
            "model profile `claude`: `api_key_env` is required for kind anthropic: name the environment variable that holds the key",
        ),
        (
            "[models.claude]\nkind = \"anthropic\"\nmodel = \"c\"\napi_key_env = \"ANTHROPIC_API_KEY\"\n",
            "model profile `claude`: `api_key_env`: the environment variable ANTHROPIC_API_KEY is not set or is empty",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\napi_key_env = \"EMPTY_KEY\"\n",
            "model profile `gpt`: `api_key_env`: the environment variable EMPTY_KEY is not set or is empty",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\napi_key_env = \"sk-abc\"\n",
            "model profile `gpt`: `api_key_env` must be an environment variable name, not `sk-abc`",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"localhost:8080\"\n",
            "model profile `gpt`: `base_url` must be an http or https URL, not `localhost:8080`",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\nheaders = { Authorization = \"Bearer sk-abc\" }\n",
            "model profile `gpt`: `headers.Authorization`: credentials come from the variable named by `api_key_env`, not from the configuration",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\nheaders = { \"bad header\" = \"x\" }\n",
            "model profile `gpt`: `headers.bad header` is not a valid header name",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\ntemperature = 3.5\n",
            "model profile `gpt`: `temperature` must be between 0 and 2, not 3.5",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\nmax_attempts = 0\n",
            "model profile `gpt`: `max_attempts` must be between 1 and 10, not 0",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\ntimeout_ms = 0\n",
            "model profile `gpt`: `timeout_ms` must be at least 1",
        ),
        (
            "[models.gpt]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"K\"\nmax_tokens = 0\n",
            "model profile `gpt`: `max_tokens` must be at least 1",
        ),
        (
            "[models.gpt]\nkind = \"openai\"\nmodel = \"m\"\nretry_base_ms = 1000\nretry_max_ms = 10\n",
            "model profile `gpt`: `retry_max_ms` must not be smaller than `retry_base_ms`",
        ),
        (
            "[models.\"bad name\"]\nkind = \"scripted\"\nscript = [{ content = \"hi\" }]\n",
            "model profile `bad name`: the name must start with a letter or digit and use only letters, digits, `_`, `-` and `.` (at most 64)",
        ),
        (
            "[models.s]\nkind = \"scripted\"\nscript = [{ content = \"\", tool_calls = [{ id = \"1\", name = \"x\" }] }]\n",
            "model profile `s`: `script[0]`: Invalid model response: tool call arguments are missing",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(
            error_of(text, &[("EMPTY_KEY", " "), ("K", "k")]),
            *expected,
            "{text}"
        );
    }
}

#[test]
fn a_profile_validates_alone_too() {
    let profiles = parse(EXAMPLE).unwrap();
    let lookup = env(&[("ANTHROPIC_API_KEY", "sk-ant-1")]);
    profiles["claude"].validate("claude", &lookup).unwrap();
    profiles["local"].validate("local", &lookup).unwrap();
    assert_eq!(
        profiles["gpt"]
            .validate("gpt", &lookup)
            .unwrap_err()
            .to_string(),
        "model profile `gpt`: `api_key_env`: the environment variable OPENAI_API_KEY is not set or is empty"
    );
    assert_eq!(profiles["gpt"].kind(), ProfileKind::OpenAi);
}

#[test]
fn http_profiles_share_one_model_and_scripted_ones_start_fresh() {
    let profiles = load(
        EXAMPLE,
        &[
            ("OPENAI_API_KEY", "sk-1"),
            ("ANTHROPIC_API_KEY", "sk-ant-1"),
        ],
    )
    .unwrap();
    let first = profiles.instantiate("gpt").unwrap();
    let second = profiles.instantiate("gpt").unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    let first = profiles.instantiate("canned").unwrap();
    let second = profiles.instantiate("canned").unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
}

/// A stand-in for the workspace tool the demo calls.
struct ListDir(ToolDefinition);

#[async_trait]
impl Tool for ListDir {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::new(self.0.clone())
    }

    async fn execute(&self, _: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        Ok(json!([{"kind": "file", "name": "README.md"}]))
    }
}

async fn run_profile(profiles: &ModelProfiles, name: &str) -> agent_runner::harness::RunResult {
    let tools = ToolRegistry::new(vec![Arc::new(ListDir(ToolDefinition {
        name: "list_dir".into(),
        description: "List a directory".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
    })) as Arc<dyn Tool>])
    .unwrap();
    let model = profiles.instantiate(name).unwrap();
    Harness {
        model: &*model,
        tools: &tools,
        observer: None,
    }
    .run(RunConfig::new("Inspect the project"), &Stop::new())
    .await
}

#[tokio::test]
async fn the_demo_profile_runs_a_prompt_end_to_end() {
    let profiles = ModelProfiles::new(BTreeMap::new(), &env(&[])).unwrap();
    for _ in 0..2 {
        let result = run_profile(&profiles, "demo").await;
        assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
        assert_eq!((result.steps, result.tool_calls), (2, 1));
        assert!(result.answer.unwrap().starts_with("Hello!"));
        assert_eq!(
            result.usage,
            UsageTotals {
                input_tokens: 84,
                output_tokens: 40,
                model_calls_with_usage: 2,
                ..UsageTotals::default()
            }
        );
        assert_eq!(
            *result.messages[2],
            Message::tool(
                "demo_call_1",
                "[{\"kind\":\"file\",\"name\":\"README.md\"}]",
                false
            )
        );
    }
}

#[tokio::test]
async fn a_configured_scripted_profile_replays_its_script_for_every_run() {
    let profiles = load(
        EXAMPLE,
        &[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")],
    )
    .unwrap();
    for _ in 0..2 {
        let result = run_profile(&profiles, "canned").await;
        assert_eq!(result.status, Outcome::Completed, "{:?}", result.error);
        assert_eq!(result.answer.as_deref(), Some("Done"));
    }
}

#[test]
fn a_configuration_may_replace_the_demo() {
    let profiles = load(
        "[models.demo]\nkind = \"scripted\"\nscript = [{ content = \"mine\" }]\n",
        &[],
    )
    .unwrap();
    assert_eq!(profiles.list().len(), 1);
}

#[tokio::test]
async fn profiles_reach_their_providers_with_their_settings() {
    let openai = MockServer::start(vec![Reply::ok(openai_answer("from openai", "stop"))]).await;
    let anthropic = MockServer::start(vec![Reply::ok(anthropic_message(
        Some("from anthropic"),
        vec![],
        "end_turn",
    ))])
    .await;
    let text = format!(
        r#"
        [models.compatible]
        kind = "openai"
        base_url = "{}/v1/"
        model = "qwen2.5-coder"
        max_tokens = 100
        headers = {{ "HTTP-Referer" = "https://example.com/agent-runner" }}

        [models.claude]
        kind = "anthropic"
        base_url = "{}"
        model = "claude-sonnet-4-5"
        api_key_env = "ANTHROPIC_API_KEY"
        headers = {{ "anthropic-beta" = "token-efficient-tools-2025-02-19" }}
        "#,
        openai.base, anthropic.base
    );
    let profiles = load(&text, &[("ANTHROPIC_API_KEY", KEY)]).unwrap();

    let model = profiles.instantiate("compatible").unwrap();
    let answer = generate_simple(&*model, &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(answer.content, "from openai");
    let request = &openai.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.body["model"], "qwen2.5-coder");
    assert_eq!(request.body["max_tokens"], 100);
    assert_eq!(
        request.headers["http-referer"],
        "https://example.com/agent-runner"
    );
    assert!(!request.headers.contains_key("authorization"));

    let model = profiles.instantiate("claude").unwrap();
    let answer = generate_simple(&*model, &[Message::user("Hi")])
        .await
        .unwrap();
    assert_eq!(answer.content, "from anthropic");
    let request = &anthropic.requests()[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.body["max_tokens"], 4096);
    assert_eq!(request.headers["x-api-key"], KEY);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        request.headers["anthropic-beta"],
        "token-efficient-tools-2025-02-19"
    );
}
