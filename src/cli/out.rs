//! What the client prints on its standard output. A reader that stops
//! reading (`agent-runner runs list | head -1`) closes the pipe: the next
//! write fails, and the client stops quietly, with exit code 0, rather
//! than panicking as `println!` does.

use std::fmt;
use std::io::Write;

use super::client::CliError;

/// Writes `args` to standard output, flushed (text streamed as it comes
/// must show at once); a closed pipe is [`CliError::ClosedPipe`].
pub(super) fn write(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_fmt(args)
        .and_then(|()| stdout.flush())
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::BrokenPipe => CliError::ClosedPipe,
            _ => CliError::Refused(format!("cannot write to standard output: {error}")),
        })
}

/// `print!` to [`write`]: evaluates to its `Result`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!($($arg)*))
    };
}

/// `println!` to [`write`]: evaluates to its `Result`.
macro_rules! outln {
    () => {
        $crate::cli::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(super) use {out, outln};
