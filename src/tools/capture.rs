//! Reading a command's output stream while keeping at most so many characters.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes read per call.
const CHUNK: usize = 8192;

/// One output stream of a command, read to its end (so the command never
/// blocks on a full pipe) while at most `max_chars` characters of its lossily
/// decoded UTF-8 are kept. One character more marks it truncated and stops
/// the reading; the caller then ends the command.
pub(crate) struct Capture<R> {
    reader: Option<R>,
    /// The pipe of a stream that overflowed: no longer read, but kept open
    /// until the capture is dropped, after the command is killed. Closing it
    /// at once would let the command die of SIGPIPE first, and report that
    /// instead of the kill.
    held: Option<R>,
    chunk: Box<[u8]>,
    bytes: Vec<u8>,
    /// How much of `bytes` has been counted; the rest is the start of a
    /// UTF-8 sequence that the next read may complete.
    counted: usize,
    chars: usize,
    max_chars: usize,
    truncated: bool,
}

impl<R: AsyncRead + Unpin> Capture<R> {
    /// `None` captures nothing (a stream that was not piped).
    pub(crate) fn new(reader: Option<R>, max_chars: usize) -> Self {
        Self {
            reader,
            held: None,
            chunk: vec![0; CHUNK].into_boxed_slice(),
            bytes: Vec::new(),
            counted: 0,
            chars: 0,
            max_chars,
            truncated: false,
        }
    }

    /// Whether there may be more to read.
    pub(crate) fn is_open(&self) -> bool {
        self.reader.is_some()
    }

    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// Reads once. At the end of the stream, on a read error, or when the
    /// limit is passed, the stream is closed. Cancel-safe: a read that is
    /// dropped has taken nothing from the pipe. Pending forever once closed,
    /// so it can sit in a `select!` guarded by [`Capture::is_open`].
    pub(crate) async fn read_some(&mut self) {
        let Some(reader) = self.reader.as_mut() else {
            return std::future::pending().await;
        };
        // Into a buffer of its own, so that a read dropped mid-way leaves
        // `bytes` as it was.
        let n = reader.read(&mut self.chunk[..]).await.unwrap_or(0);
        self.bytes.extend_from_slice(&self.chunk[..n]);
        if n == 0 {
            self.reader = None;
            // An incomplete sequence at the very end decodes as one
            // replacement character.
            if self.counted < self.bytes.len() {
                self.chars += 1;
                self.truncated = self.chars > self.max_chars;
            }
            return;
        }
        self.count();
        if self.chars > self.max_chars {
            self.truncated = true;
            self.held = self.reader.take();
        }
    }

    /// Counts the characters `String::from_utf8_lossy` would make of the
    /// bytes not yet counted: one per valid character and one per invalid
    /// sequence. An incomplete sequence at the end waits for more bytes.
    fn count(&mut self) {
        loop {
            match std::str::from_utf8(&self.bytes[self.counted..]) {
                Ok(valid) => {
                    self.chars += valid.chars().count();
                    self.counted = self.bytes.len();
                    return;
                }
                Err(error) => {
                    let valid_end = self.counted + error.valid_up_to();
                    self.chars += count_chars(&self.bytes[self.counted..valid_end]);
                    self.counted = valid_end;
                    match error.error_len() {
                        Some(invalid) => {
                            self.chars += 1;
                            self.counted += invalid;
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// The text kept: the lossily decoded output, cut to the limit.
    pub(crate) fn into_text(self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        match text.char_indices().nth(self.max_chars) {
            Some((cut, _)) => text[..cut].to_owned(),
            None => text.into_owned(),
        }
    }
}

fn count_chars(valid_utf8: &[u8]) -> usize {
    // Counting non-continuation bytes counts the characters of valid UTF-8.
    valid_utf8.iter().filter(|&&b| (b & 0xC0) != 0x80).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn capture(chunks: &[&[u8]], max_chars: usize) -> (String, bool) {
        let mut builder = tokio_test_reader(chunks);
        let mut capture = Capture::new(Some(&mut builder), max_chars);
        while capture.is_open() {
            capture.read_some().await;
        }
        let truncated = capture.truncated();
        (capture.into_text(), truncated)
    }

    /// A reader that returns the given chunks one read at a time.
    fn tokio_test_reader(chunks: &[&[u8]]) -> impl AsyncRead + Unpin {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for chunk in chunks {
                client.write_all(&chunk).await.unwrap();
                client.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        server
    }

    #[tokio::test]
    async fn a_read_dropped_while_waiting_loses_and_adds_nothing() {
        use tokio::io::AsyncWriteExt;
        let (mut writer, reader) = tokio::io::duplex(64);
        let mut capture = Capture::new(Some(reader), 10);
        for _ in 0..3 {
            tokio::select! {
                biased;
                () = capture.read_some() => panic!("nothing was written yet"),
                () = tokio::task::yield_now() => {}
            }
        }
        writer.write_all(b"abc").await.unwrap();
        drop(writer);
        while capture.is_open() {
            capture.read_some().await;
        }
        assert_eq!(capture.into_text(), "abc");
    }

    #[tokio::test]
    async fn keeps_everything_up_to_the_limit() {
        assert_eq!(capture(&[b"hello"], 5).await, ("hello".into(), false));
        assert_eq!(capture(&[], 5).await, (String::new(), false));
    }

    #[tokio::test]
    async fn one_character_more_truncates() {
        assert_eq!(capture(&[b"hello!"], 5).await, ("hello".into(), true));
    }

    #[tokio::test]
    async fn counts_characters_not_bytes_even_split_across_reads() {
        // "é" is two bytes, split across two reads.
        let (text, truncated) = capture(&[b"\xc3", b"\xa9\xc3", b"\xa9"], 2).await;
        assert_eq!((text.as_str(), truncated), ("éé", false));
        let (text, truncated) = capture(&["ééé".as_bytes()], 2).await;
        assert_eq!((text.as_str(), truncated), ("éé", true));
    }

    #[tokio::test]
    async fn invalid_bytes_count_as_one_replacement_each() {
        let (text, truncated) = capture(&[b"a\xffb"], 3).await;
        assert_eq!((text.as_str(), truncated), ("a\u{fffd}b", false));
        // An incomplete sequence at the very end is one replacement.
        let (text, truncated) = capture(&[b"ab\xe2\x82"], 3).await;
        assert_eq!((text.as_str(), truncated), ("ab\u{fffd}", false));
        let (text, truncated) = capture(&[b"ab\xe2\x82"], 2).await;
        assert_eq!((text.as_str(), truncated), ("ab", true));
    }
}
