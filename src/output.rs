//! What commands print as their result, on standard output.
//!
//! A reader that stops reading early (`research-ledger replay … | head -1`) closes the pipe.
//! Rust ignores SIGPIPE, so a write then fails with `BrokenPipe`, and `println!` would panic on
//! it. Output goes through [`line`] instead: a closed pipe ends the command quietly with status
//! 141, the status a shell reports for a process stopped by SIGPIPE, as other command-line
//! tools stop. Any other failure to write is an error, status 2.

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
    eprintln!("error: cannot write to standard output: {e}");
    std::process::exit(2)
}
