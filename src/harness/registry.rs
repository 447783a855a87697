//! The tool registry: which tools a run may call, and the argument check that
//! stands between a model's proposal and a tool's execution.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

use super::tool::{Tool, ToolDefinition, ToolRole};
use crate::sync::lock;

/// Why a set of tools could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("Invalid tool name: {0:?} (expected ^[a-zA-Z][a-zA-Z0-9_-]*$)")]
    InvalidName(String),
    #[error("Duplicate tool name: {0}")]
    Duplicate(String),
    #[error("Invalid parameters schema for tool {name}: {reason}")]
    InvalidSchema { name: String, reason: String },
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: Arc<Validator>,
}

/// Compiled argument validators, shared by every registry built with the
/// cache. A service builds a registry per run over the same few schemas:
/// compiling them once saves the time and, above all, the memory each live
/// run would otherwise hold in its own copies.
#[derive(Default)]
pub struct SchemaCache {
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

impl SchemaCache {
    /// Distinct schemas kept; past it the cache starts over (schemas come
    /// from the server's own tools and its MCP servers' tools, so this is
    /// reached only by servers whose tools keep changing).
    pub const CAPACITY: usize = 1024;

    fn validator(&self, schema: &Value) -> Result<Arc<Validator>, String> {
        let key = schema.to_string();
        if let Some(found) = lock(&self.validators).get(&key).cloned() {
            return Ok(found);
        }
        let compiled = Arc::new(compile_schema(schema)?);
        let mut validators = lock(&self.validators);
        if validators.len() >= Self::CAPACITY {
            validators.clear();
        }
        validators.insert(key, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// How many compiled schemas are kept.
    pub fn len(&self) -> usize {
        lock(&self.validators).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Compiles a tool's parameters schema (JSON Schema, draft 2020-12 unless it
/// names another with `$schema`). It must be an object schema
/// (`"type": "object"`), as every provider wants. Patterns use a linear-time
/// engine: a schema's regex can never make a check take long. No reference
/// is ever fetched (the crate is built without retrieval).
pub fn compile_schema(schema: &Value) -> Result<Validator, String> {
    if schema.get("type") != Some(&Value::String("object".into())) {
        return Err("the parameters schema must declare \"type\": \"object\"".into());
    }
    schema_options().build(schema).map_err(|e| e.to_string())
}

/// Most bytes one pattern of a schema compiles to (its program, and its
/// lazy DFA's cache): a schema is untrusted, and each of its patterns is
/// compiled; `\w{1000}` alone would take megabytes.
const PATTERN_SIZE_LIMIT: usize = 1024 * 1024;

/// How every schema of a client or a model's server is compiled: patterns
/// in a linear-time engine, each bounded in size.
pub(crate) fn schema_options() -> jsonschema::ValidationOptions<'static> {
    jsonschema::options().with_pattern_options(
        jsonschema::PatternOptions::regex()
            .size_limit(PATTERN_SIZE_LIMIT)
            .dfa_size_limit(PATTERN_SIZE_LIMIT),
    )
}

/// The tools of one run, with each one's compiled argument validator.
/// Cheap to share: build it once per tool set and hand out `Arc`s.
pub struct ToolRegistry {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    definitions: Vec<Arc<ToolDefinition>>,
}

impl ToolRegistry {
    /// Registers `tools`, refusing names outside `^[a-zA-Z][a-zA-Z0-9_-]*$`,
    /// duplicate names, and parameter schemas that are not valid JSON Schema
    /// objects (a tool's schema is checked here, once, not at each call).
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<Self, RegistryError> {
        Self::with_cache(tools, &SchemaCache::default())
    }

    /// As [`ToolRegistry::new`], taking compiled validators from `cache` (and
    /// adding the ones it lacks).
    pub fn with_cache(
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
        cache: &SchemaCache,
    ) -> Result<Self, RegistryError> {
        let mut registry = Self {
            entries: Vec::new(),
            by_name: HashMap::new(),
            definitions: Vec::new(),
        };
        for tool in tools {
            let definition = tool.definition();
            let name = definition.name.clone();
            if !is_valid_tool_name(&name) {
                return Err(RegistryError::InvalidName(name));
            }
            if registry.by_name.contains_key(&name) {
                return Err(RegistryError::Duplicate(name));
            }
            let invalid_schema = |reason: String| RegistryError::InvalidSchema {
                name: name.clone(),
                reason,
            };
            // A client's tools are the run's own: kept out of the shared
            // cache, which they would only churn.
            let schema = tool.schema().unwrap_or(&definition.parameters);
            let validator = if tool.is_client() {
                compile_schema(schema).map(Arc::new)
            } else {
                cache.validator(schema)
            }
            .map_err(invalid_schema)?;
            registry.by_name.insert(name, registry.entries.len());
            registry.entries.push(Entry { tool, validator });
            registry.definitions.push(definition);
        }
        Ok(registry)
    }

    /// The definitions shown to the model, in registration order.
    pub fn definitions(&self) -> &[Arc<ToolDefinition>] {
        &self.definitions
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.entry(name).map(|entry| &entry.tool)
    }

    /// The schema the arguments of the tool `name` are checked against
    /// (an MCP server's as it declared it, dialect and all).
    pub fn schema(&self, name: &str) -> Option<&Value> {
        let index = *self.by_name.get(name)?;
        let tool = &self.entries[index].tool;
        Some(tool.schema().unwrap_or(&self.definitions[index].parameters))
    }

    /// What the tool `name` does to the work ([`ToolRole::Other`] for a
    /// tool the registry lacks).
    pub fn role(&self, name: &str) -> ToolRole {
        self.get(name).map_or(ToolRole::Other, |tool| tool.role())
    }

    /// The files a successful call of the tool `name` with `arguments`
    /// changes ([`Tool::changed_paths`]): none for a tool that changes no
    /// file, or that the registry lacks.
    pub fn changed_paths(&self, name: &str, arguments: &Value) -> Vec<String> {
        match self.get(name) {
            Some(tool) if tool.role().changes_files() => tool.changed_paths(arguments),
            _ => Vec::new(),
        }
    }

    /// The tool that writes whole files ([`ToolRole::Writes`]), if the run
    /// has one.
    pub fn whole_file_writer(&self) -> Option<&Arc<dyn Tool>> {
        self.entries
            .iter()
            .map(|entry| &entry.tool)
            .find(|tool| tool.role() == ToolRole::Writes)
    }

    /// The tool that reads a file whole ([`ToolRole::Reads`]), if the run
    /// has one.
    pub fn file_reader(&self) -> Option<&Arc<dyn Tool>> {
        self.entries
            .iter()
            .map(|entry| &entry.tool)
            .find(|tool| tool.role() == ToolRole::Reads)
    }

    /// The calls (tool name, arguments) the harness makes after a response
    /// that changed files ([`Tool::checks_after_change`]), in registration
    /// order.
    pub fn checks_after_change(&self) -> Vec<(String, Value)> {
        self.entries
            .iter()
            .filter(|entry| entry.tool.role() == ToolRole::Checks)
            .flat_map(|entry| {
                let name = &entry.tool.definition().name;
                entry
                    .tool
                    .checks_after_change()
                    .into_iter()
                    .map(|arguments| (name.clone(), arguments))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The names of the tools that change files, in registration order.
    pub fn file_changers(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|entry| entry.tool.role().changes_files())
            .map(|entry| entry.tool.definition().name.clone())
            .collect()
    }

    /// Whether one of the tools changes files.
    pub fn changes_files(&self) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.tool.role().changes_files())
    }

    /// Whether one of the tools checks work.
    pub fn has_check(&self) -> bool {
        self.entries
            .iter()
            .any(|entry| entry.tool.role() == ToolRole::Checks)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Validates `arguments` for the tool `name`. `Ok(None)` means no such
    /// tool; `Ok(Some(tool))` means the arguments may be executed; `Err` lists
    /// every problem in path style (`$.flags[0]: expected string`).
    pub fn check(
        &self,
        name: &str,
        arguments: &Value,
    ) -> Result<Option<&Arc<dyn Tool>>, Vec<String>> {
        let Some(entry) = self.entry(name) else {
            return Ok(None);
        };
        if entry.validator.is_valid(arguments) {
            return Ok(Some(&entry.tool));
        }
        Err(describe_errors(entry.validator.iter_errors(arguments)))
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&index| &self.entries[index])
    }
}

/// Most schema violations read of one value.
const MAX_ERRORS: usize = 100;

/// `^[a-zA-Z][a-zA-Z0-9_-]*$`
pub fn is_valid_tool_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Turns schema violations into the path-style messages the model sees. A value
/// of the wrong type reports only that (as a hand-written validator stops
/// there); each missing and each unexpected property is its own message, and
/// missing properties come first, so the model reads the most basic problem
/// first and the order never depends on keyword order in the schema.
pub(crate) fn describe_errors<'a>(
    errors: impl Iterator<Item = ValidationError<'a>>,
) -> Vec<String> {
    // A value of the model's (or a client's) can be wrong in as many places
    // as it is long: what is read of it is bounded, and so is the work.
    let errors: Vec<_> = errors.take(MAX_ERRORS).collect();
    let type_error_paths: std::collections::HashSet<String> = errors
        .iter()
        .filter(|e| matches!(e.kind(), ValidationErrorKind::Type { .. }))
        .map(|e| json_path(e.instance_path().segments()))
        .collect();
    let mut required = Vec::new();
    let mut messages = Vec::new();
    for error in &errors {
        let path = json_path(error.instance_path().segments());
        match error.kind() {
            ValidationErrorKind::Type { kind } => {
                let expected = match kind {
                    TypeKind::Single(single) => single.to_string(),
                    TypeKind::Multiple(set) => set
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                };
                messages.push(format!("{path}: expected {expected}"));
            }
            _ if type_error_paths.contains(&path) => {}
            ValidationErrorKind::Required { property } => {
                let key = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_owned);
                required.push(format!("{}: required", child_path(&path, &key)));
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                for key in unexpected {
                    messages.push(format!("{}: unexpected property", child_path(&path, key)));
                }
            }
            ValidationErrorKind::Enum { options } => {
                messages.push(format!("{path}: not an allowed value {}", allowed(options)));
            }
            ValidationErrorKind::Constant { expected_value } => {
                let only = Value::Array(vec![Value::clone(expected_value)]);
                messages.push(format!("{path}: not an allowed value {}", allowed(&only)));
            }
            _ => messages.push(format!("{path}: {}", error.masked())),
        }
    }
    required.append(&mut messages);
    required
}

/// `(allowed: "low", "high")`: the values of the schema (never the
/// instance's), as many as fit a line, so that a model can pick one.
fn allowed(options: &Value) -> String {
    const MAX_CHARS: usize = 300;
    let values = options.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut listed = String::new();
    for (i, value) in values.iter().enumerate() {
        let text = value.to_string();
        if listed.len() + text.len() > MAX_CHARS {
            let _ = write!(listed, ", and {} more", values.len() - i);
            break;
        }
        if i > 0 {
            listed.push_str(", ");
        }
        listed.push_str(&text);
    }
    format!("(allowed: {listed})")
}

fn json_path<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut path = String::from("$");
    for segment in segments {
        match segment {
            LocationSegment::Property(key) => path = child_path(&path, &key),
            LocationSegment::Index(index) => {
                let _ = write!(path, "[{index}]");
            }
        }
    }
    path
}

/// `$.key` for identifier-like keys, `$["odd key"]` for the rest, so a path
/// is never ambiguous.
fn child_path(parent: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        format!("{parent}.{key}")
    } else {
        format!("{parent}[{}]", Value::String(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::tool::ToolError;
    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    struct Fixed(Arc<ToolDefinition>);

    #[async_trait]
    impl Tool for Fixed {
        fn definition(&self) -> Arc<ToolDefinition> {
            Arc::clone(&self.0)
        }
        async fn execute(&self, _: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
            Ok(Value::Null)
        }
    }

    fn tool(name: &str, parameters: Value) -> Arc<dyn Tool> {
        Arc::new(Fixed(Arc::new(ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters,
        })))
    }

    fn errors(schema: Value, arguments: Value) -> Vec<String> {
        let registry = ToolRegistry::new([tool("t", schema)]).unwrap();
        match registry.check("t", &arguments) {
            Ok(_) => vec![],
            Err(errors) => errors,
        }
    }

    #[test]
    fn refuses_bad_and_duplicate_names() {
        for bad in ["", "1abc", "a b", "a.b", "ä", "_x"] {
            assert_eq!(
                ToolRegistry::new([tool(bad, json!({"type": "object"}))]).err(),
                Some(RegistryError::InvalidName(bad.into()))
            );
        }
        for good in ["a", "read_file", "x-1", "Z9"] {
            assert!(ToolRegistry::new([tool(good, json!({"type": "object"}))]).is_ok());
        }
        assert_eq!(
            ToolRegistry::new([
                tool("a", json!({"type": "object"})),
                tool("a", json!({"type": "object"}))
            ])
            .err(),
            Some(RegistryError::Duplicate("a".into()))
        );
    }

    #[test]
    fn checks_schemas_at_registration() {
        for schema in [
            json!({"type": "string"}),
            json!({}),
            json!({"type": "object", "properties": {"a": {"type": "strin"}}}),
            json!({"type": "object", "required": "a"}),
        ] {
            assert!(
                matches!(
                    ToolRegistry::new([tool("t", schema.clone())]),
                    Err(RegistryError::InvalidSchema { .. })
                ),
                "{schema}"
            );
        }
    }

    #[test]
    fn a_long_list_of_allowed_values_is_cut_with_what_is_left_counted() {
        let values: Vec<String> = (0..100).map(|n| format!("value-{n}")).collect();
        let listed = allowed(&json!(values));
        assert!(
            listed.starts_with("(allowed: \"value-0\", \"value-1\""),
            "{listed}"
        );
        assert!(listed.ends_with(" more)") && listed.len() < 360, "{listed}");
    }

    #[test]
    fn reports_errors_with_paths() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "flags": {"type": "array", "items": {"type": "string"}},
                "mode": {"type": "string", "enum": ["r", "w"]},
                "nested": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                "odd key": {"type": "boolean"}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert_eq!(
            errors(schema.clone(), json!({"path": "a"})),
            Vec::<String>::new()
        );
        assert_eq!(errors(schema.clone(), json!({})), ["$.path: required"]);
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "flags": ["x", 1]})),
            ["$.flags[1]: expected string"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "x": 1, "y": 2})),
            ["$.x: unexpected property", "$.y: unexpected property"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "mode": "x"})),
            ["$.mode: not an allowed value (allowed: \"r\", \"w\")"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "mode": 3})),
            ["$.mode: expected string"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "nested": {"n": 1.5}})),
            ["$.nested.n: expected integer"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "nested": {}})),
            ["$.nested.n: required"]
        );
        assert_eq!(
            errors(schema.clone(), json!({"path": "a", "odd key": 1})),
            ["$[\"odd key\"]: expected boolean"]
        );
        assert_eq!(errors(schema.clone(), json!([])), ["$: expected object"]);
        assert_eq!(errors(schema, json!(null)), ["$: expected object"]);
    }

    #[test]
    fn supports_the_whole_of_json_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string", "maxLength": 2}}
        });
        assert_eq!(
            errors(schema, json!({"n": 0, "s": "abc"})).len(),
            2,
            "keywords beyond the design's subset are enforced too"
        );
    }

    #[test]
    fn a_cache_compiles_each_schema_once_and_still_validates() {
        let cache = SchemaCache::default();
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let first = ToolRegistry::with_cache([tool("a", schema.clone())], &cache).unwrap();
        let second = ToolRegistry::with_cache(
            [tool("a", schema), tool("b", json!({"type": "object"}))],
            &cache,
        )
        .unwrap();
        assert_eq!(cache.len(), 2);
        assert!(Arc::ptr_eq(
            &first.entry("a").unwrap().validator,
            &second.entry("a").unwrap().validator
        ));
        assert_eq!(
            second.check("a", &json!({"n": "x"})).err(),
            Some(vec!["$.n: expected integer".to_owned()])
        );
        assert!(matches!(
            ToolRegistry::with_cache(
                [tool("c", json!({"type": "object", "required": 5}))],
                &cache
            ),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert_eq!(cache.len(), 2, "an invalid schema is not kept");
    }

    #[test]
    fn unknown_tools_are_not_errors_of_the_check() {
        let registry = ToolRegistry::new([tool("t", json!({"type": "object"}))]).unwrap();
        assert!(matches!(registry.check("nope", &json!({})), Ok(None)));
        assert!(matches!(registry.check("t", &json!({})), Ok(Some(_))));
    }
}
