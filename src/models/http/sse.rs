//! Server-Sent Events: an incremental parser and a stream over a response.

use std::collections::VecDeque;

use super::ProviderError;
use super::error::error_chain;

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id:` field of the event's own block, if it has one.
    pub id: Option<String>,
    /// The `event:` field, if the server named the event.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// An incremental Server-Sent Events parser: feed it bytes as they arrive,
/// in chunks of any size, and take the complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last byte seen was `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
    id: Option<String>,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// Comment lines seen (`: keep-alive`).
    comments: usize,
    ready: VecDeque<SseEvent>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; lines may end with `\n`, `\r\n` or `\r`.
    pub fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&String::from_utf8_lossy(&line));
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
    }

    /// Comment lines seen so far (keep-alives).
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// Feeds bytes and returns the events they completed.
    pub fn push_and_take(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.push(bytes);
        self.ready.drain(..).collect()
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    /// Ends the stream: a last event not followed by a blank line still
    /// counts.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&String::from_utf8_lossy(&line));
        }
        self.line_done("");
    }

    fn line_done(&mut self, line: &str) {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                self.ready.push_back(SseEvent {
                    id: self.id.take(),
                    event: self.event.take(),
                    data,
                });
            }
            self.id = None;
            self.event = None;
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" => self.id = Some(value.to_owned()),
            _ => {}
        }
    }
}

/// The events of a streamed response body, read as they come.
pub struct SseStream {
    response: reqwest::Response,
    parser: SseParser,
    ended: bool,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            parser: SseParser::new(),
            ended: false,
        }
    }

    /// The next event, or `None` once the body has ended. A broken stream is
    /// a transport error, retryable only if `retryable` (nothing was passed
    /// on yet).
    pub async fn next(&mut self, retryable: bool) -> Result<Option<SseEvent>, ProviderError> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.parser.push(&chunk),
                Ok(None) => {
                    self.ended = true;
                    self.parser.finish();
                }
                Err(error) => {
                    return Err(ProviderError::Transport {
                        detail: format!("the stream broke: {}", error_chain(&error)),
                        retryable,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk);
            out.extend(std::iter::from_fn(|| parser.next_event()));
        }
        parser.finish();
        out.extend(std::iter::from_fn(|| parser.next_event()));
        out
    }

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: None,
            event: name.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn sse_events_survive_any_chunking_and_line_ending() {
        let text = "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: x\ndata:y\n\nevent: ping\r\ndata: {}\r\n\r\ndata: last\rdata: line\r\rdata: é";
        let expected = vec![
            event(Some("message_start"), "{\"a\":1}"),
            event(None, "x\ny"),
            event(Some("ping"), "{}"),
            event(None, "last\nline"),
            event(None, "é"),
        ];
        assert_eq!(events(&[text.as_bytes()]), expected);
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(events(&[a, b]), expected, "split at {split}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(events(&singles), expected);
    }

    #[test]
    fn sse_ignores_events_without_data_and_unknown_fields() {
        // `retry` is not kept; `id` is, with its event.
        assert_eq!(
            events(&[b"event: lonely\n\nid: 3\nretry: 10\ndata\n\n"]),
            vec![SseEvent {
                id: Some("3".into()),
                ..event(None, "")
            }]
        );
    }

    #[test]
    fn ids_belong_to_their_event_and_comments_are_counted() {
        let mut parser = SseParser::new();
        let events = parser.push_and_take(
            b": keep-alive\n\nid: 7\nevent: run_end\ndata: {}\n\nevent: model_delta\ndata: x\n\n",
        );
        assert_eq!(
            events,
            [
                SseEvent {
                    id: Some("7".into()),
                    event: Some("run_end".into()),
                    data: "{}".into()
                },
                event(Some("model_delta"), "x"),
            ]
        );
        assert_eq!(parser.comments(), 1);
    }
}
