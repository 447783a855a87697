//! Server-Sent Events: an incremental parser and a stream over a response.

use std::collections::VecDeque;

use super::error::error_chain;
use super::{MAX_BODY_BYTES, ProviderError};

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
    /// Most bytes the event being read may hold (its lines so far), if
    /// limited: a server must not make the parser buffer without end.
    limit: Option<usize>,
    /// The event being read went past `limit`; nothing more is taken.
    too_large: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; lines may end with `\n`, `\r\n` or `\r`. Once the event
    /// being read has gone past the limit, the rest is dropped (see
    /// [`Self::too_large`]).
    pub fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.too_large {
                return;
            }
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&String::from_utf8_lossy(&line));
                }
                _ => {
                    self.after_cr = false;
                    // A line's bytes are all an event grows by: a finished
                    // line moves into `data` shorter than it was.
                    if self
                        .limit
                        .is_some_and(|limit| self.line.len() + self.data.len() >= limit)
                    {
                        self.too_large = true;
                        return;
                    }
                    self.line.push(byte);
                }
            }
        }
    }

    /// Limits the bytes the event being read may hold (`None`: no limit).
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// Whether an event went past the limit, so that the parser stopped.
    pub fn too_large(&self) -> bool {
        self.too_large
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

/// The events of a streamed response body, read as they come. Like a whole
/// body, a stream holds at most [`MAX_BODY_BYTES`]: the event being read and
/// what its reader kept of the answer so far (see [`Self::keep`]) together.
pub struct SseStream {
    response: reqwest::Response,
    parser: SseParser,
    ended: bool,
    /// Bytes the reader kept of the answer so far.
    kept: usize,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            parser: SseParser::new(),
            ended: false,
            kept: 0,
        }
    }

    /// Counts `bytes` the reader keeps of the answer (its text, its tool
    /// calls), refusing the response once that goes past the limit. The
    /// reader calls it before it keeps them.
    pub fn keep(&mut self, bytes: usize) -> Result<(), ProviderError> {
        self.kept = self.kept.saturating_add(bytes);
        if self.kept > MAX_BODY_BYTES {
            return Err(too_large());
        }
        Ok(())
    }

    /// The next event, or `None` once the body has ended. A broken stream is
    /// a transport error, retryable only if `retryable` (nothing was passed
    /// on yet); a stream past the limit is an invalid response, not retried.
    pub async fn next(&mut self, retryable: bool) -> Result<Option<SseEvent>, ProviderError> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => {
                    // Events already taken were all handed over, so `kept`
                    // counts what the reader kept of them.
                    let left = MAX_BODY_BYTES.saturating_sub(self.kept);
                    self.parser.set_limit(Some(left));
                    self.parser.push(&chunk);
                    if self.parser.too_large() {
                        return Err(too_large());
                    }
                }
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

/// The error of a stream that went past [`MAX_BODY_BYTES`].
fn too_large() -> ProviderError {
    ProviderError::InvalidResponse(format!(
        "streamed response larger than {MAX_BODY_BYTES} bytes (the event being read and the answer so far)"
    ))
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

    #[test]
    fn a_limited_parser_stops_at_an_event_past_its_limit() {
        let mut parser = SseParser::new();
        parser.set_limit(Some(16));
        // Events within the limit pass, however many there are.
        for _ in 0..100 {
            assert_eq!(
                parser.push_and_take(b"data: 0123456789\n\n"),
                [event(None, "0123456789")]
            );
        }
        assert!(!parser.too_large());
        // One event's lines count together, not one line at a time.
        parser.push(b"data: 0123\ndata: 5678\n");
        assert!(!parser.too_large());
        parser.push(b"data: x");
        assert!(parser.too_large());
        // Nothing more is taken, not even the end of the event.
        assert_eq!(parser.push_and_take(b"\n\ndata: y\n\n"), []);

        // A line without end stops at the limit too.
        let mut parser = SseParser::new();
        parser.set_limit(Some(1000));
        parser.push(&[b'x'; 999]);
        assert!(!parser.too_large());
        parser.push(b"xx");
        assert!(parser.too_large());
        assert!(parser.line.len() <= 1000);
    }
}
