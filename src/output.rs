//! What commands print as their result, on standard output.
//!
//! A reader that stops reading early (`research-ledger replay … | head -1`) closes the pipe.
//! Rust ignores SIGPIPE, so a write then fails with `BrokenPipe`, and `println!` would panic on
//! it. Output goes through [`line`] instead: a closed pipe ends the command quietly with status
//! 141, the status a shell reports for a process stopped by SIGPIPE, as other command-line
//! tools stop. Any other failure to write is an error, status 2. What a command tells its user
//! on standard error goes through [`to_stderr`], which a closed standard error cannot make panic.

use std::io::Write;

/// `println!` for a command's output, through [`line`].
macro_rules! say {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}

/// `eprintln!` for what a command tells the person running it, through [`to_stderr`].
macro_rules! tell {
    ($($arg:tt)*) => {
        $crate::output::to_stderr(format_args!($($arg)*))
    };
}

/// Writes one line to standard error. A closed standard error loses the line: there is nowhere
/// left to say anything, and `eprintln!` would panic instead, turning an exit status that
/// means something into 101.
pub(crate) fn to_stderr(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Writes one line to standard output; ends the process when it cannot ([`stop`]).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        stop(&e)
    }
}

/// Writes `text` to standard output as it is; ends the process when it cannot ([`stop`]).
pub(crate) fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        stop(&e)
    }
}

/// Ends the process after a failed write to standard output: quietly with 141 when the reader
/// went away, with a message and 2 otherwise.
pub(crate) fn stop(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(141)
    }
    tell!("error: cannot write to standard output: {e}");
    std::process::exit(2)
}
