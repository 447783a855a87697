//! Structured output: a run whose final answer must be one JSON document
//! valid under a JSON Schema. What the model is told of the schema (in what
//! is sent, never in the transcript), how an answer is read as a document,
//! and what the model is told when it is not valid.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;
use serde_json::Value;

use super::registry::{describe_errors, schema_options};

/// How often an answer that is not valid output is sent back, when the
/// request names no number.
pub const DEFAULT_OUTPUT_RETRIES: u32 = 2;

/// How the `error` of a run whose answer never became valid output starts.
pub const OUTPUT_INVALID: &str = "output_invalid";

/// How the note sent after an answer that is not valid output starts: the
/// notes of a run are counted by it.
pub const OUTPUT_NOTE: &str = "[agent-runner] Your final answer must be one JSON document valid under the output schema, and nothing else.";

/// Most validator messages a note or an error lists.
const MAX_MESSAGES: usize = 20;

/// A run's output schema, compiled, with what the model is told of it.
pub struct OutputSchema {
    schema: Arc<Value>,
    validator: Arc<Validator>,
    /// How often an answer that is not valid is sent back before the run
    /// fails.
    retries: u32,
    /// What is added to the instructions sent with every step.
    told: String,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("schema", &self.schema)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// Compiles `schema` (see [`compile_output_schema`]).
    pub fn new(schema: Arc<Value>, retries: u32) -> Result<Self, String> {
        let validator = compile_output_schema(&schema)?;
        let told = told(&schema);
        Ok(Self {
            schema,
            validator,
            retries,
            told,
        })
    }

    pub fn schema(&self) -> &Arc<Value> {
        &self.schema
    }

    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// What the instructions sent to the model say of the schema.
    pub fn told(&self) -> &str {
        &self.told
    }

    /// The document `answer` is, if it is valid under the schema; the
    /// problems otherwise, each with its JSON path.
    pub fn check(&self, answer: &str) -> Result<Value, Vec<String>> {
        let document = document(answer).map_err(|why| vec![why])?;
        if self.validator.is_valid(&document) {
            return Ok(document);
        }
        let mut errors = describe_errors(self.validator.iter_errors(&document));
        errors.truncate(MAX_MESSAGES);
        Err(errors)
    }
}

/// What the instructions sent to the model say of `schema`.
pub fn told(schema: &Value) -> String {
    format!(
        "Your final answer must be one JSON document, valid under this JSON Schema, and \
         nothing else: no text before or after it, no code fence.\n{schema}"
    )
}

/// Compiles an output schema: JSON Schema, read as draft 2020-12 (a
/// `$schema` naming another draft is not followed), checked against its
/// meta-schema. Patterns use a linear-time engine, each bounded in size,
/// and no reference is ever fetched. The schemas compiled last are kept:
/// a run's is compiled when it is accepted and again when it starts, and
/// an agent's for each of its runs.
pub fn compile_output_schema(schema: &Value) -> Result<Arc<Validator>, String> {
    static COMPILED: std::sync::LazyLock<std::sync::Mutex<HashMap<String, Arc<Validator>>>> =
        std::sync::LazyLock::new(Default::default);
    if !schema.is_object() {
        return Err("the schema must be a JSON object".into());
    }
    let key = schema.to_string();
    if let Some(found) = crate::sync::lock(&COMPILED).get(&key) {
        return Ok(Arc::clone(found));
    }
    let compiled = Arc::new(
        schema_options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(schema)
            .map_err(|e| e.to_string())?,
    );
    let mut kept = crate::sync::lock(&COMPILED);
    if kept.len() >= COMPILED_KEPT {
        kept.clear();
    }
    kept.insert(key, Arc::clone(&compiled));
    Ok(compiled)
}

/// Output schemas kept compiled; past it, the cache starts over.
const COMPILED_KEPT: usize = 256;

/// The JSON document an answer is: its whole text, or a fenced block
/// (```` ```json ```` or a bare ```` ``` ````) that is its whole text.
pub fn document(answer: &str) -> Result<Value, String> {
    let text = unfenced(answer.trim());
    if text.is_empty() {
        return Err("$: the answer is empty, not a JSON document".into());
    }
    serde_json::from_str(text).map_err(|e| format!("$: the answer is not one JSON document ({e})"))
}

/// `text` without a fence around it, if it is one fenced block.
fn unfenced(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string: `json`, or nothing, up to the first line's end.
    let Some((info, body)) = body.split_once('\n') else {
        return text;
    };
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) || body.contains("```") {
        return text;
    }
    body.trim()
}

/// The note sent after an answer that is not valid output: what is wrong
/// with it, and the ask to answer again.
pub fn note(errors: &[String]) -> String {
    let mut note = format!("{OUTPUT_NOTE} Yours is not:\n");
    for error in errors {
        note.push_str("- ");
        note.push_str(error);
        note.push('\n');
    }
    note.push_str("Answer again with the corrected JSON document only.");
    note
}

/// How many retries a run had, as its `error` says it.
pub fn after_retries(retries: u32) -> String {
    match retries {
        0 => "with no retry allowed".to_owned(),
        1 => "after 1 retry".to_owned(),
        n => format!("after {n} retries"),
    }
}

/// The `error` of a run whose last answer was not valid output, `when`
/// the run gave up (`after 2 retries`).
pub fn invalid_error(when: &str, errors: &[String]) -> String {
    format!(
        "{OUTPUT_INVALID}: the final answer is not valid under output_schema {when}: {}",
        errors.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> OutputSchema {
        OutputSchema::new(
            Arc::new(json!({
                "type": "object",
                "properties": {"severity": {"enum": ["low", "high"]}, "labels": {"type": "array", "items": {"type": "string"}}},
                "required": ["severity", "labels"],
                "additionalProperties": false
            })),
            2,
        )
        .unwrap()
    }

    #[test]
    fn a_valid_document_is_the_output_fenced_or_not() {
        let output = schema();
        let expected = json!({"severity": "low", "labels": ["a"]});
        for answer in [
            r#"{"severity": "low", "labels": ["a"]}"#,
            "  ```json\n{\"severity\": \"low\", \"labels\": [\"a\"]}\n```\n",
            "```\n{\"severity\": \"low\", \"labels\": [\"a\"]}\n```",
        ] {
            assert_eq!(output.check(answer).unwrap(), expected, "{answer}");
        }
    }

    #[test]
    fn what_is_wrong_is_told_with_its_path() {
        let output = schema();
        let mut errors = output
            .check(r#"{"severity": "urgent", "labels": [1], "extra": true}"#)
            .unwrap_err();
        errors.sort();
        assert_eq!(
            errors,
            vec![
                "$.extra: unexpected property",
                "$.labels[0]: expected string",
                "$.severity: not an allowed value (allowed: \"low\", \"high\")",
            ],
        );
        let errors = output.check(r#"{"labels": []}"#).unwrap_err();
        assert_eq!(errors, vec!["$.severity: required"]);
        let note = note(&errors);
        assert!(note.starts_with(OUTPUT_NOTE) && note.contains("- $.severity: required"));
    }

    #[test]
    fn prose_or_two_documents_are_not_output() {
        let output = schema();
        for answer in [
            "Here it is: {\"severity\": \"low\", \"labels\": []}",
            "{\"severity\": \"low\", \"labels\": []} {}",
            "```json\n{}\n```\nand ```json\n{}\n```",
            "",
        ] {
            let errors = output.check(answer).unwrap_err();
            assert!(
                errors[0].starts_with("$: the answer"),
                "{answer}: {errors:?}"
            );
        }
    }

    #[test]
    fn a_schema_that_is_not_valid_is_refused() {
        assert!(compile_output_schema(&json!({"type": "objekt"})).is_err());
        assert!(compile_output_schema(&json!({"minimum": "one"})).is_err());
        assert!(compile_output_schema(&json!(true)).is_err());
        assert!(compile_output_schema(&json!({"type": "array"})).is_ok());
    }

    #[test]
    fn a_pattern_too_large_to_compile_cheaply_is_refused() {
        // Within the regex crate's own limit (10 MiB), past ours.
        let huge = json!({"type": "string", "pattern": "^(\\w\\d){20000}$"});
        assert!(jsonschema::validator_for(&huge).is_ok());
        let error = compile_output_schema(&huge).unwrap_err();
        assert!(error.contains("is not a \"regex\""), "{error}");
        let fine = json!({"type": "string", "pattern": "^\\w{1,64}$"});
        assert!(compile_output_schema(&fine).is_ok());
    }

    #[test]
    fn a_schema_is_compiled_once_while_it_is_kept() {
        let schema = json!({"type": "object", "title": "compiled once"});
        let first = compile_output_schema(&schema).unwrap();
        let again = compile_output_schema(&schema).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
    }
}
