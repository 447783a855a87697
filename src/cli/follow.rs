//! A run's event stream, printed as it comes: the model's text as it is
//! streamed (or whole, for a model that does not stream), each tool call on
//! a line of its own, a pause with what it waits for, and the end.

use std::io::Write;

use serde_json::Value;

use super::client::CliError;
use crate::models::http::SseParser;

/// Prints the events of `response` until the run's end, and answers its
/// final status (`None` if the stream ended before it did). With `json`,
/// each event is printed as its JSON, one per line.
pub async fn print_stream(
    mut response: reqwest::Response,
    json: bool,
) -> Result<Option<String>, CliError> {
    let mut parser = SseParser::new();
    let mut printer = Printer::default();
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
            if json {
                println!("{data}");
            } else {
                printer.print(&data);
            }
            if data["type"] == "run_end" {
                return Ok(data["status"].as_str().map(str::to_owned));
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
}

impl Printer {
    fn print(&mut self, event: &Value) {
        let text = |key: &str| event[key].as_str().unwrap_or_default();
        match text("type") {
            "run_start" => println!("run {}", text("run_id")),
            "model_delta" => {
                print!("{}", text("text"));
                let _ = std::io::stdout().flush();
                self.streamed = true;
            }
            "model_start" => self.streamed = false,
            "model_error" => {
                self.end_line();
                println!("model error: {}", text("error"));
            }
            "message" => self.message(&event["message"]),
            "tool_end" => {
                let outcome = if event["is_error"] == true {
                    "failed"
                } else {
                    "done"
                };
                println!("  <- {} {outcome}", text("name"));
            }
            "actions_required" => {
                self.end_line();
                println!("paused: waiting for a decision on");
                for action in event["actions"].as_array().into_iter().flatten() {
                    println!(
                        "  {} {} {}({})",
                        action["call_id"].as_str().unwrap_or("-"),
                        action["kind"].as_str().unwrap_or("-"),
                        action["name"].as_str().unwrap_or("-"),
                        action["arguments"]
                    );
                }
                println!(
                    "  answer with: agent-runner runs approve|deny {}",
                    text("run_id")
                );
            }
            "run_end" => {
                self.end_line();
                let mut line = format!(
                    "{} after {} steps and {} tool calls",
                    text("status"),
                    event["steps"],
                    event["tool_calls"]
                );
                if let Some(error) = event["error"].as_str() {
                    line.push_str(&format!(": {error}"));
                }
                println!("{line}");
            }
            _ => {}
        }
    }

    /// An assistant's message: its text (unless it streamed), then a line
    /// per tool call it asks for.
    fn message(&mut self, message: &Value) {
        if message["role"] != "assistant" {
            return;
        }
        let content = message["content"].as_str().unwrap_or_default();
        if self.streamed {
            self.end_line();
        } else if !content.is_empty() {
            println!("{content}");
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            println!(
                "  -> {}({})",
                call["name"].as_str().unwrap_or("-"),
                call["arguments"]
            );
        }
    }

    fn end_line(&mut self) {
        if self.streamed {
            println!();
            self.streamed = false;
        }
    }
}
