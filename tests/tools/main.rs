//! The built-in tools, tested on their own against real directories and real
//! child processes.

// Helpers outside `#[test]` functions unwrap too: a panic is the report.
#![allow(clippy::unwrap_used)]

mod commands;
mod edits;
mod files;
mod race;
