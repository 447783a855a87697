//! Code in a model's answer taken as files (`[runs] write_code_blocks`),
//! with the text models really write around it: any character before a
//! block, and excerpts of a file rather than the whole of it.

use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_with};

const APP: &str = "import sys\n\n\ndef parse(x):\n    return int(x)\n\n\ndef main():\n    \
                   print(parse(sys.argv[1]))\n\n\nif __name__ == \"__main__\":\n    main()\n";

async fn spawn_writing_blocks() -> TestApp {
    spawn_with(|config| config.runs.write_code_blocks = true).await
}

/// A run of `app.py` whose model answers `answer`, then "Done.".
fn answering(answer: &str) -> Value {
    json!({
        "prompt": "make parse ignore spaces",
        "workspace": {"files": {"app.py": APP}},
        "model": {"scripted": [{"content": answer}, {"content": "Done."}]}
    })
}

/// A curly apostrophe in the line before a block (a character across the
/// byte where the line is compared with `file:`) is text like any other:
/// the run does not panic, and the block is written.
#[tokio::test]
async fn any_character_before_a_block_is_read_as_text() {
    let app = spawn_writing_blocks().await;
    let whole = APP.replace("int(x)", "int(x.strip())");
    let run = app
        .run_to_end(answering(&format!(
            "Here\u{2019}s the fix:\n```python\n{whole}```\n"
        )))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Done.");
    assert_eq!(app.workspace_file(&run, "app.py").await, whole);
}

/// `### app.py` and an excerpt of one function: the function is replaced in
/// place, and the rest of the file (`main`, its imports, the entry point)
/// is kept.
#[tokio::test]
async fn an_excerpt_of_a_file_changes_what_it_shows_and_keeps_the_rest() {
    let app = spawn_writing_blocks().await;
    let run = app
        .run_to_end(answering(
            "### app.py\n```python\ndef parse(x):\n    return int(x.strip())\n```\n",
        ))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        app.workspace_file(&run, "app.py").await,
        APP.replace("int(x)", "int(x.strip())")
    );
    // An excerpt that has no place in the file is not written at all.
    let run = app
        .run_to_end(answering("app.py\n```python\n    return int(x) + 1\n```\n"))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 1, "the answer stands as an answer: {run}");
    assert_eq!(app.workspace_file(&run, "app.py").await, APP);
}
