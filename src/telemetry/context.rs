//! W3C Trace Context: a run's trace, from the `traceparent` its creator
//! sent (or a trace of its own), and the `traceparent` of a span.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

/// The trace a run's spans belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTrace {
    pub trace_id: TraceId,
    /// The caller's span, when a `traceparent` named one.
    pub parent_span_id: Option<SpanId>,
    /// The caller's sampled flag (whether it records the trace): the
    /// run's spans follow it. Without a caller, the server's sample ratio
    /// decides, from the trace id (so each execution decides alike).
    pub sampled: bool,
}

impl RunTrace {
    /// A trace of the run's own.
    pub fn new() -> Self {
        Self {
            trace_id: RandomIdGenerator::default().new_trace_id(),
            parent_span_id: None,
            sampled: true,
        }
    }

    /// The trace a `traceparent` header names
    /// (`00-TRACE_ID-PARENT_ID-FLAGS`), if it is valid.
    pub fn from_traceparent(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let valid_hex = |text: &str, len: usize| {
            text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !valid_hex(version, 2) || version == "ff" || !valid_hex(flags, 2) {
            return None;
        }
        // Version 00 has exactly four parts; a later one may have more.
        if version == "00" && parts.next().is_some() {
            return None;
        }
        if !valid_hex(trace, 32) || !valid_hex(parent, 16) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let parent_span_id = SpanId::from_hex(parent).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == TraceId::INVALID || parent_span_id == SpanId::INVALID {
            return None;
        }
        Some(Self {
            trace_id,
            parent_span_id: Some(parent_span_id),
            sampled: flags & 1 == 1,
        })
    }

    /// Rebuilt from what storage keeps (`trace_id`, `parent_span_id`, as
    /// hex, and the caller's sampled flag); a run stored before traces
    /// gets a trace of its own.
    pub fn stored(trace_id: &str, parent_span_id: Option<&str>, sampled: bool) -> Self {
        match TraceId::from_hex(trace_id) {
            Ok(trace_id) if trace_id != TraceId::INVALID => Self {
                trace_id,
                parent_span_id: parent_span_id.and_then(|id| SpanId::from_hex(id).ok()),
                sampled,
            },
            _ => Self::new(),
        }
    }

    /// The context a run's span starts in: the caller's remote span, or
    /// none (a root span, given the run's trace id).
    pub(super) fn parent_context(&self) -> Context {
        match self.parent_span_id {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                self.trace_id,
                parent,
                if self.sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                },
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        }
    }
}

impl Default for RunTrace {
    fn default() -> Self {
        Self::new()
    }
}

/// The `traceparent` header of `span`.
pub fn traceparent_of(span: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_strictly() {
        let trace =
            RunTrace::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .unwrap();
        assert_eq!(
            trace.trace_id.to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            trace.parent_span_id.unwrap().to_string(),
            "00f067aa0ba902b7"
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(RunTrace::from_traceparent(bad), None, "{bad}");
        }
        let own = RunTrace::new();
        assert_ne!(own.trace_id, TraceId::INVALID);
        assert_eq!(RunTrace::stored(&own.trace_id.to_string(), None, true), own);
        let unsampled =
            RunTrace::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap();
        assert!(trace.sampled && !unsampled.sampled);
    }
}

std::thread_local! {
    /// The trace id the next root span made on this thread takes (see
    /// [`RunIds`]).
    static NEXT_TRACE_ID: std::cell::Cell<Option<TraceId>> = const { std::cell::Cell::new(None) };
}

/// The tracer's ids: random, but a root span made by [`with_trace_id`]
/// takes the run's own trace id (the API has no way to give a root span
/// its trace id, and a run's trace id is chosen when it is created, to be
/// shown in the run object before any span exists).
#[derive(Debug, Default)]
pub(super) struct RunIds(RandomIdGenerator);

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .with(std::cell::Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// Runs `make` (which starts a root span on this thread) with its trace id
/// `trace_id`.
pub(super) fn with_trace_id<T>(trace_id: TraceId, make: impl FnOnce() -> T) -> T {
    NEXT_TRACE_ID.with(|next| next.set(Some(trace_id)));
    let made = make();
    NEXT_TRACE_ID.with(|next| next.set(None));
    made
}
