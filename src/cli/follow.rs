//! A run's event stream, printed as it comes: the model's text as it is
//! streamed (or whole, for a model that does not stream), each tool call on
//! a line of its own, a pause with what it waits for, and the end.

use serde_json::Value;

use super::client::{ApiClient, CliError};
use super::out::{out, outln};
use crate::models::http::SseParser;

/// How often a dropped stream is resumed before the client gives up.
const RESUMES: u32 = 5;

/// Prints the events of `response` until the run's end, and answers its
/// final status. A stream that breaks off before the end is resumed after
/// the last event printed (with `Last-Event-ID`), a few times, a second
/// apart. With `json`, each event is printed as its JSON, one per line.
pub async fn print_stream(
    client: &ApiClient,
    response: reqwest::Response,
    json: bool,
) -> Result<Option<String>, CliError> {
    let mut printer = Printer::default();
    let mut cursor = Cursor::default();
    let mut response = Some(response);
    let mut resumes = 0;
    loop {
        if let Some(current) = response.take() {
            match read(current, &mut cursor, &mut printer, json).await {
                Ok(Some(status)) => return Ok(Some(status)),
                // Nobody reads any more: nothing to resume for.
                Err(CliError::ClosedPipe) => return Err(CliError::ClosedPipe),
                Ok(None) | Err(_) if resumes < RESUMES && cursor.run_id.is_some() => {}
                Ok(None) => {
                    return Err(CliError::Refused(
                        "the event stream ended before the run did".into(),
                    ));
                }
                Err(error) => return Err(error),
            }
        }
        // Resumed where it broke off.
        resumes += 1;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let Some(run_id) = cursor.run_id.clone() else {
            return Ok(None);
        };
        match client.events_after(&run_id, cursor.last).await {
            Ok(Some(next)) => response = Some(next),
            // It ended meanwhile, its end already printed.
            Ok(None) => return Ok(cursor.status.take()),
            Err(error) if resumes >= RESUMES => return Err(error),
            Err(_) => {}
        }
    }
}

/// Where a followed stream stands.
#[derive(Default)]
struct Cursor {
    run_id: Option<String>,
    /// The last sequence printed.
    last: u64,
    /// The final status, once its `run_end` was printed.
    status: Option<String>,
}

/// Prints the events of one response: the run's final status once its end
/// came, `None` when the response ended before it.
async fn read(
    mut response: reqwest::Response,
    cursor: &mut Cursor,
    printer: &mut Printer,
    json: bool,
) -> Result<Option<String>, CliError> {
    let mut parser = SseParser::new();
    loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|e| CliError::Refused(format!("the event stream broke off: {e}")))?;
        let Some(chunk) = chunk else {
            return Ok(None);
        };
        for event in parser.push_and_take(&chunk) {
            let Ok(data) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            if let Some(sequence) = data["sequence"].as_u64() {
                // Already printed before a resumption.
                if sequence <= cursor.last {
                    continue;
                }
                cursor.last = sequence;
            }
            if cursor.run_id.is_none() {
                cursor.run_id = data["run_id"].as_str().map(str::to_owned);
            }
            if json {
                outln!("{data}")?;
            } else {
                printer.print(&data)?;
            }
            if data["type"] == "run_end" {
                cursor.status = data["status"].as_str().map(str::to_owned);
                return Ok(cursor.status.clone());
            }
        }
    }
}

/// What the human-readable output has printed of the current model call.
#[derive(Default)]
struct Printer {
    /// Text of this model call was printed as it streamed (so its message
    /// is not printed again); the line is still open.
    streamed: bool,
    /// That text, to print what of the message it lacks (deltas are live
    /// only: a resumed stream has none of those it missed).
    text: String,
}

impl Printer {
    fn print(&mut self, event: &Value) -> Result<(), CliError> {
        let text = |key: &str| event[key].as_str().unwrap_or_default();
        match text("type") {
            "run_start" => outln!("run {}", text("run_id"))?,
            "model_delta" => {
                out!("{}", text("text"))?;
                self.text.push_str(text("text"));
                self.streamed = true;
            }
            "model_start" => {
                self.end_line()?;
                self.text.clear();
            }
            "model_error" => {
                self.end_line()?;
                outln!("model error: {}", text("error"))?;
            }
            "message" => self.message(&event["message"])?,
            "tool_end" => {
                let outcome = if event["is_error"] == true {
                    "failed"
                } else {
                    "done"
                };
                outln!("  <- {} {outcome}", text("name"))?;
            }
            "actions_required" => {
                self.end_line()?;
                outln!("paused: waiting for a decision on")?;
                for action in event["actions"].as_array().into_iter().flatten() {
                    outln!(
                        "  {} {} {}({})",
                        action["call_id"].as_str().unwrap_or("-"),
                        action["kind"].as_str().unwrap_or("-"),
                        action["name"].as_str().unwrap_or("-"),
                        action["arguments"]
                    )?;
                }
                let actions = event["actions"].as_array().into_iter().flatten();
                let kinds: Vec<&str> = actions.filter_map(|a| a["kind"].as_str()).collect();
                if kinds.contains(&"approval") {
                    outln!(
                        "  approvals: agent-runner runs approve|deny {}",
                        text("run_id")
                    )?;
                }
                if kinds.contains(&"client_tool") {
                    outln!(
                        "  client tools: POST /v1/runs/{}/actions with their output",
                        text("run_id")
                    )?;
                }
            }
            "run_end" => {
                self.end_line()?;
                let count = |key: &str, one: &str, many: &str| {
                    let n = event[key].as_u64().unwrap_or(0);
                    format!("{n} {}", if n == 1 { one } else { many })
                };
                let mut line = format!(
                    "{} after {} and {}",
                    text("status"),
                    count("steps", "step", "steps"),
                    count("tool_calls", "tool call", "tool calls")
                );
                if let Some(error) = event["error"].as_str() {
                    line.push_str(&format!(": {error}"));
                }
                outln!("{line}")?;
            }
            _ => {}
        }
        Ok(())
    }

    /// An assistant's message: its text (unless it streamed), then a line
    /// per tool call it asks for.
    fn message(&mut self, message: &Value) -> Result<(), CliError> {
        if message["role"] != "assistant" {
            return Ok(());
        }
        let content = message["content"].as_str().unwrap_or_default();
        if self.streamed {
            // What the deltas printed, and whatever they missed.
            match content.strip_prefix(self.text.as_str()) {
                Some(rest) => out!("{rest}")?,
                None => out!("\n{content}")?,
            }
            self.end_line()?;
        } else if !content.is_empty() {
            outln!("{content}")?;
        }
        self.text.clear();
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            outln!(
                "  -> {}({})",
                call["name"].as_str().unwrap_or("-"),
                call["arguments"]
            )?;
        }
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), CliError> {
        if self.streamed {
            outln!()?;
            self.streamed = false;
        }
        Ok(())
    }
}
