//! The command's error type and its exit status.

use std::fmt;

/// How a command that ran to the end went. Errors are [`CliError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Everything worked; exit status 0.
    Success,
    /// `verify` found problems, `convert --verify` mismatches, `explain` a stale cache; exit
    /// status 1.
    ProblemsFound,
    /// `explain` cannot tell: the format records no fingerprint; `verify` cannot tell: it found
    /// no problem, but the cache holds data another writer added that stowage's checksums do not
    /// cover. Exit status 3.
    CannotTell,
}

impl Status {
    /// The process exit status of this outcome.
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::ProblemsFound => EXIT_PROBLEMS,
            Status::CannotTell => EXIT_CANNOT_TELL,
        }
    }
}

/// Exit status when `verify` found problems.
pub const EXIT_PROBLEMS: u8 = 1;
/// Exit status of `explain` when the cache records no fingerprint to compare, and of `verify`
/// when it found no problem but data it could not check.
pub const EXIT_CANNOT_TELL: u8 = 3;
/// Exit status of every error: bad arguments, an unreadable path, a path that is not a cache, a
/// missing key, corrupted data that `get` refuses to return.
pub const EXIT_ERROR: u8 = 2;

/// Why a command could not do its job. Printed as one line, `stowage: error: <message>`, and the
/// process exits with [`EXIT_ERROR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    message: String,
}

impl CliError {
    /// An error with this message (which should name the path, key or field involved).
    pub fn new(message: impl Into<String>) -> CliError {
        CliError { message: message.into() }
    }

    /// An error writing to standard output.
    pub fn stdout(e: std::io::Error) -> CliError {
        CliError::new(format!("writing to standard output: {e}"))
    }

    /// The message, guaranteed to be one line: control characters (newlines in a key or a path)
    /// are escaped as in Rust's `{:?}`.
    pub fn one_line(&self) -> String {
        escape_control(&self.message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// An I/O error on `path` as one message: `<path>: no such file or directory`, `<path>: <error>`.
pub fn io_error(path: &std::path::Path, e: &std::io::Error) -> CliError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            CliError::new(format!("{}: no such file or directory", path.display()))
        }
        _ => CliError::new(format!("{}: {e}", path.display())),
    }
}

impl From<stowage_core::Error> for CliError {
    fn from(e: stowage_core::Error) -> CliError {
        CliError::new(e.to_string())
    }
}

/// `text` with every control and bidirectional formatting character
/// ([`unsafe_char`](crate::out::unsafe_char)) replaced by its Rust escape (`\n`, `\u{1b}`,
/// `\u{202e}`); other characters, quotes and backslashes included, are kept as they are.
///
/// ```ignore
/// assert_eq!(escape_control("a\nb\"c"), "a\\nb\"c");
/// ```
pub fn escape_control(text: &str) -> String {
    use crate::out::unsafe_char;
    if !text.chars().any(unsafe_char) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| if unsafe_char(c) { c.escape_debug().to_string() } else { c.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_overrides_are_escaped_in_keys_and_messages() {
        let key = "cat\u{202e}gpj.exe";
        assert_eq!(crate::out::display_key(key), "\"cat\\u{202e}gpj.exe\"");
        assert_eq!(crate::out::display_key("x\u{2066}y"), "\"x\\u{2066}y\"");
        assert_eq!(escape_control(key), "cat\\u{202e}gpj.exe");
        assert_eq!(crate::out::display_key("caf\u{e9}"), "caf\u{e9}");
    }

    #[test]
    fn messages_become_one_line() {
        let e = CliError::new("key \"a\nb\" not found in /x\ty");
        assert_eq!(e.one_line(), "key \"a\\nb\" not found in /x\\ty");
        assert_eq!(
            CliError::new("plain \"quoted\" \\ text").one_line(),
            "plain \"quoted\" \\ text"
        );
    }
}
