//! The built-in tools of SPEC section 15 through the real server: a scripted
//! model calls them, and the transcript shows what the model was answered.

use agent_runner::tools::CommandPreset;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{mock_openai_profile, mock_providers};

/// Room for every result whole, in the context and in the transcript.
fn roomy() -> Value {
    json!({"max_context_chars": 1_000_000, "max_tool_result_chars": 1_000_000})
}

/// The tool messages of a run, by call id: `(content, is_error)`.
async fn results(app: &TestApp, run: &Value) -> Vec<(String, String, bool)> {
    app.messages(run["id"].as_str().unwrap())
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
                m["is_error"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The result of a call that succeeded, as the JSON it was serialised from.
fn ok(results: &[(String, String, bool)], id: &str) -> Value {
    let (_, content, is_error) = results.iter().find(|r| r.0 == id).unwrap();
    assert!(!is_error, "{id}: {content}");
    serde_json::from_str(content).unwrap()
}

/// The message of a call that failed.
fn refused<'a>(results: &'a [(String, String, bool)], id: &str) -> &'a str {
    let (_, content, is_error) = results.iter().find(|r| r.0 == id).unwrap();
    assert!(is_error, "{id}: {content}");
    content
}

const CALC: &str = "\
def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def total(items):
    result = 0
    for item in items:
        result = add(result, item)
    return result
";

#[tokio::test]
async fn files_are_read_in_windows_and_edited_with_answers_a_model_can_act_on() {
    let app = spawn_app().await;
    let edit = |id: &str, old: &str, new: &str| {
        call(
            id,
            "edit_file",
            json!({"path": "calc.py", "old_text": old, "new_text": new}),
        )
    };
    let run = app
        .run_to_end(json!({
            "prompt": "fix it",
            "context": roomy(),
            "workspace": {"files": {"calc.py": CALC, "lib/util.py": "x = 1\n"}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("window", "read_file", json!({"path": "calc.py", "offset": 5, "limit": 2})),
                    call("past", "read_file", json!({"path": "calc.py", "offset": 40})),
                    edit("missing", "def sub(a, b):\n    return a-b", "x"),
                    edit("edit", "    return a - b\n", "    return a - b  # checked\n"),
                    edit("twice", "result", "acc"),
                    call("all", "edit_file", json!({"path": "calc.py", "old_text": "result",
                                                    "new_text": "acc", "replace_all": true})),
                    call("guess", "read_file", json!({"path": "lib/utils.py"})),
                    call("zero", "read_file", json!({"path": "calc.py", "offset": 0})),
                ]},
                {"content": "fixed"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let results = results(&app, &run).await;

    assert_eq!(
        ok(&results, "window"),
        json!({"path": "calc.py", "start_line": 5, "end_line": 6, "total_lines": 13,
               "text": "def sub(a, b):\n    return a - b\n"})
    );
    assert_eq!(
        refused(&results, "past"),
        "offset 40 is past the end of calc.py: it has 13 lines"
    );
    let snippet = [
        "3 | ",
        "4 | ",
        "5 | def sub(a, b):",
        "6 |     return a - b  # checked",
        "7 | ",
        "8 | ",
        "9 | def total(items):",
    ]
    .join("\n");
    assert_eq!(
        ok(&results, "edit"),
        json!({"path": "calc.py", "replacements": 1, "snippet": snippet})
    );
    let missing = refused(&results, "missing");
    assert!(
        missing.starts_with(
            "old_text was not found in calc.py. The closest text is at lines 5-6:\n\
             5 | def sub(a, b):\n\
             6 |     return a - b\n"
        ),
        "{missing}"
    );
    let twice = refused(&results, "twice");
    assert!(
        twice.starts_with("old_text occurs 4 times in calc.py, at lines 10, 12, 13."),
        "{twice}"
    );
    assert!(twice.contains("Add surrounding lines"), "{twice}");
    assert!(twice.contains("set replace_all"), "{twice}");
    let all = ok(&results, "all");
    assert_eq!(all["replacements"], 4);
    assert_eq!(
        all["snippet"],
        [
            " 7 | ",
            " 8 | ",
            " 9 | def total(items):",
            "10 |     acc = 0",
            "11 |     for item in items:",
            "12 |         acc = add(acc, item)",
            "13 |     return acc",
        ]
        .join("\n")
    );
    assert_eq!(
        refused(&results, "guess"),
        "No such file or directory: lib/utils.py\nDid you mean: lib/util.py?"
    );
    assert!(
        refused(&results, "zero").contains("$.offset"),
        "{results:?}"
    );

    // What is on disk is the two edits that were made, and nothing of the
    // refused ones.
    assert_eq!(
        app.workspace_file(&run, "calc.py").await,
        CALC.replace("return a - b", "return a - b  # checked")
            .replace("result", "acc")
    );
}

#[tokio::test]
async fn a_search_is_narrowed_by_folder_and_glob_and_capped_at_a_hundred() {
    let app = spawn_app().await;
    let many: String = (1..=150).map(|i| format!("TODO item {i}\n")).collect();
    let search = |id: &str, arguments: Value| call(id, "search", arguments);
    let run = app
        .run_to_end(json!({
            "prompt": "look",
            "context": roomy(),
            "workspace": {"files": {
                "src/app.py": "import os\n# TODO: tidy\n",
                "src/app.js": "// TODO: port\n",
                "src/deep/mod.py": "def f():\n    pass  # TODO\n",
                "docs/notes.md": "TODO write docs\n",
                "many.txt": many,
            }},
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    search("python", json!({"pattern": "TODO", "path": "src", "glob": "*.py"})),
                    search("rooted", json!({"pattern": r"TODO\b", "glob": "src/*.js"})),
                    search("capped", json!({"pattern": "^TODO item \\d+$"})),
                    search("invalid", json!({"pattern": "def (f"})),
                    search("badglob", json!({"pattern": "x", "glob": "[a-"})),
                    search("gone", json!({"pattern": "x", "path": "srcs"})),
                ]},
                {"content": "found"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let results = results(&app, &run).await;

    assert_eq!(
        ok(&results, "python"),
        json!({"matches": [
            {"path": "src/app.py", "line": 2, "text": "# TODO: tidy"},
            {"path": "src/deep/mod.py", "line": 2, "text": "    pass  # TODO"},
        ], "total": 2, "truncated": false})
    );
    assert_eq!(
        ok(&results, "rooted"),
        json!({"matches": [{"path": "src/app.js", "line": 1, "text": "// TODO: port"}],
               "total": 1, "truncated": false})
    );
    let capped = ok(&results, "capped");
    let matches = capped["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 100);
    assert_eq!(
        (capped["total"].clone(), capped["truncated"].clone()),
        (json!(150), json!(true))
    );
    let lines: Vec<u64> = matches
        .iter()
        .map(|m| m["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, (1..=100).collect::<Vec<u64>>());
    assert!(matches.iter().all(|m| m["path"] == "many.txt"));

    let invalid = refused(&results, "invalid");
    assert!(invalid.starts_with("Invalid pattern: "), "{invalid}");
    assert!(invalid.contains("unclosed group"), "{invalid}");
    let glob = refused(&results, "badglob");
    assert!(glob.starts_with("Invalid glob \"[a-\": "), "{glob}");
    assert_eq!(
        refused(&results, "gone"),
        "No such file or directory: srcs\nDid you mean: src?"
    );
}

#[tokio::test]
async fn edit_file_and_search_are_built_in_and_named_in_refusals() {
    let app = spawn_app().await;
    let run = app
        .create_run(json!({"prompt": "x", "tools": ["edit_file", "search"],
                           "model": {"scripted": [{"content": "ok"}]}}))
        .await;
    assert_eq!(run["tools"], json!(["edit_file", "search"]));
    let everything = app
        .create_run(json!({"prompt": "x", "model": {"scripted": [{"content": "ok"}]}}))
        .await;
    assert_eq!(
        everything["tools"],
        json!([
            "read_file",
            "write_file",
            "edit_file",
            "apply_patch",
            "list_dir",
            "search"
        ])
    );
    let unknown = app
        .post_run(json!({"prompt": "x", "tools": ["grep"]}))
        .await;
    assert_eq!(unknown.status, 422, "{}", unknown.text);
    let message = unknown.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("edit_file") && message.contains("search"),
        "{message}"
    );
}

/// What reaches a real provider: every built-in's definition, `run_command`
/// listing each preset with its configured description, and no description
/// naming an example path the workspace may not have.
#[tokio::test]
async fn the_model_is_told_what_each_preset_runs() {
    let (address, seen) = mock_providers().await;
    let app = spawn_with(move |config| {
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
        let preset = |text: &str| toml::from_str::<CommandPreset>(text).unwrap();
        config.commands.insert(
            "test".into(),
            preset(
                "description = \"Runs the examples against main.py\"\n\
                 program = \"python3\"\nargs = [\"check.py\"]\ntimeout_ms = 20000",
            ),
        );
        config
            .commands
            .insert("lint".into(), preset("program = \"true\""));
    })
    .await;
    let run = app
        .run_to_end(json!({"prompt": "hello", "model": {"profile": "oa"}}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    let tools = requests[0]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "apply_patch",
            "list_dir",
            "search",
            "run_command"
        ]
    );
    let run_command = &tools[6]["function"]["description"];
    let text = run_command.as_str().unwrap();
    assert!(
        text.ends_with(
            "The presets:\n- lint (runs `true`, timeout 10000 ms)\n\
             - test: Runs the examples against main.py (runs `python3 check.py`, timeout 20000 ms)"
        ),
        "{text}"
    );
    for tool in tools {
        let definition = tool.to_string();
        assert!(
            !definition.contains("src/main.rs") && !definition.contains("e.g."),
            "{definition}"
        );
    }
}

/// A server with a `test` preset that passes once `main.py` says `ok`,
/// questioning unchecked answers or not, taking code in answers as files or
/// not.
async fn spawn_checking(check_answers: bool, write_code_blocks: bool) -> TestApp {
    spawn_with(move |config| {
        let preset =
            "program = \"sh\"\nargs = [\"-c\", \"grep -q ok main.py\"]\ntimeout_ms = 20000";
        let preset = toml::from_str::<CommandPreset>(preset).unwrap();
        config.commands.insert("test".into(), preset);
        config.runs.check_answers = check_answers;
        config.runs.write_code_blocks = write_code_blocks;
    })
    .await
}

/// A run of [`unchecked_script`] within `limits`.
fn unchecked_run(limits: Value) -> Value {
    json!({"prompt": "make main.py print ok", "commands": ["test"], "limits": limits,
           "model": {"scripted": unchecked_script()}})
}

/// A scripted model that writes a file and answers at once, then (asked)
/// runs the test, which fails, fixes the file, and runs it again.
fn unchecked_script() -> Value {
    let write = |id: &str, text: &str| {
        call(
            id,
            "write_file",
            json!({"path": "main.py", "content": text}),
        )
    };
    let test = |id: &str| call(id, "run_command", json!({"command": "test"}));
    json!([
        {"content": "", "tool_calls": [write("w1", "print('no')\n")]},
        {"content": "Done: the tests pass."},
        {"content": "", "tool_calls": [test("t1")]},
        {"content": "It is fixed."},
        {"content": "", "tool_calls": [write("w2", "print('ok')\n")]},
        {"content": "", "tool_calls": [test("t2")]},
        {"content": "Fixed, and the test passes."}
    ])
}

/// An answer that leaves a changed file unchecked, or a failed command
/// unfixed, is questioned by a note of the server, and the run goes on; an
/// answer after a passing check ends it.
#[tokio::test]
async fn an_unchecked_answer_is_questioned_before_it_ends_the_run() {
    let app = spawn_checking(true, false).await;
    let run = app.run_to_end(unchecked_run(json!({}))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Fixed, and the test passes.", "{run}");
    assert_eq!(run["steps"], 7, "{run}");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    let notes: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .skip(1)
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(
        notes[0].starts_with("[agent-runner] You changed `main.py` and ran no command since"),
        "{}",
        notes[0]
    );
    assert!(
        notes[1].starts_with("[agent-runner] The last command you ran failed"),
        "{}",
        notes[1]
    );
    // The check that passes on the fix is followed by a note saying so.
    assert!(
        notes[2].starts_with("[agent-runner] That check passed on your change"),
        "{}",
        notes[2]
    );
    let last_result = messages.iter().rposition(|m| m["role"] == "tool").unwrap();
    assert_eq!(messages[last_result + 1]["content"], notes[2]);
    // Each note follows the answer it questions, in order.
    let answers: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_none())
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        answers,
        [
            "Done: the tests pass.",
            "It is fixed.",
            "Fixed, and the test passes."
        ]
    );
    let id = run["id"].as_str().unwrap();
    let file = app.get(&format!("/v1/runs/{id}/workspace/main.py")).await;
    assert_eq!(file.text, "print('ok')\n");
}

/// Without `runs.check_answers` (the default) the first answer ends the
/// run, and with it a run on its last step is not questioned.
#[tokio::test]
async fn answers_stand_when_checking_is_off_or_no_step_is_left() {
    let app = spawn_checking(false, false).await;
    let run = app.run_to_end(unchecked_run(json!({}))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Done: the tests pass.", "{run}");

    let app = spawn_checking(true, false).await;
    let run = app.run_to_end(unchecked_run(json!({"max_steps": 2}))).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Done: the tests pass.", "{run}");
}

const STUB_MAIN: &str = "import sys\n\n\ndef main():\n    \"\"\"Print ok.\"\"\"\n    pass\n";
const FIXED_MAIN: &str =
    "import sys\n\n\ndef main():\n    \"\"\"Print ok.\"\"\"\n    print('ok')\n";

/// A run whose model answers with code instead of calling write_file: the
/// function without the file's import (unnamed), a new file (named), and a
/// file outside the workspace; then it runs the test and answers with the
/// file as it now is.
fn block_run() -> Value {
    let answer = "Here is the fix:\n\n```python\ndef main():\n    \"\"\"Print ok.\"\"\"\n    \
                  print('ok')\n```\n\nnotes.md\n```\nhello\n```\n\n`../escape.py`:\n\
                  ```python\nx = 1\n```\n";
    let done = format!("The test passes:\n```python\n{FIXED_MAIN}```");
    json!({
        "prompt": "make main.py print ok",
        "commands": ["test"],
        "workspace": {"files": {"main.py": STUB_MAIN}},
        "model": {"scripted": [
            {"content": answer},
            {"content": "", "tool_calls": [call("t1", "run_command", json!({"command": "test"}))]},
            {"content": done}
        ]}
    })
}

/// Code blocks of an answer become write_file calls of the model's message,
/// confined and recorded like any; a block that changes nothing leaves the
/// answer an answer.
#[tokio::test]
async fn code_in_an_answer_is_written_as_the_file_it_rewrites() {
    let app = spawn_checking(true, true).await;
    let run = app.run_to_end(block_run()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 3, "{run}");
    assert!(
        run["answer"]
            .as_str()
            .unwrap()
            .starts_with("The test passes")
    );
    let id = run["id"].as_str().unwrap();
    let main = app.get(&format!("/v1/runs/{id}/workspace/main.py")).await;
    assert_eq!(main.text, FIXED_MAIN);
    let notes = app.get(&format!("/v1/runs/{id}/workspace/notes.md")).await;
    assert_eq!(notes.text, "hello\n");

    let messages = app.messages(id).await;
    let calls = messages[1]["tool_calls"].as_array().unwrap();
    let paths: Vec<&str> = calls
        .iter()
        .map(|c| {
            assert_eq!(c["name"], "write_file");
            assert!(c["id"].as_str().unwrap().starts_with("code_block_"), "{c}");
            c["arguments"]["path"].as_str().unwrap()
        })
        .collect();
    assert_eq!(paths, ["main.py", "notes.md", "../escape.py"]);
    let results = results(&app, &run).await;
    let escape = calls[2]["id"].as_str().unwrap();
    assert!(
        refused(&results, escape).contains("../escape.py"),
        "{results:?}"
    );
    let written = ok(&results, calls[0]["id"].as_str().unwrap());
    assert_eq!(written["bytes_written"], FIXED_MAIN.len());
    // No note questions the answer: the test ran after the writes, and
    // passed; the one note says so.
    let notes: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .skip(1)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("[agent-runner] That check passed"),
        "{notes:?}"
    );
}

/// Off (the default), an answer with code is an answer.
#[tokio::test]
async fn code_in_an_answer_is_only_an_answer_by_default() {
    let app = spawn_checking(false, false).await;
    let run = app.run_to_end(block_run()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 1, "{run}");
    let id = run["id"].as_str().unwrap();
    let main = app.get(&format!("/v1/runs/{id}/workspace/main.py")).await;
    assert_eq!(main.text, STUB_MAIN);
}

/// A block for a file that a call of the same response writes is left to
/// that call: the model's own call says what it meant.
#[tokio::test]
async fn a_block_for_a_file_the_response_writes_is_left_to_that_call() {
    let app = spawn_checking(false, true).await;
    let write = call(
        "w1",
        "write_file",
        json!({"path": "notes.md", "content": "from the call\n"}),
    );
    let run = app
        .run_to_end(json!({
            "prompt": "write notes.md",
            "model": {"scripted": [
                {"content": "notes.md\n```\nfrom the block\n```", "tool_calls": [write]},
                {"content": "Done."}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap();
    let notes = app.get(&format!("/v1/runs/{id}/workspace/notes.md")).await;
    assert_eq!(notes.text, "from the call\n");
    let messages = app.messages(id).await;
    assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 1);
}
