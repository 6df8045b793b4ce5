//! Standard output that survives a closed pipe, notes on standard error, and the small text
//! helpers every command shares (key escaping, byte sizes).

use std::io::{self, BufWriter, Write};

/// The command's buffered output (standard output, or what a caller of [`crate::run`] captures)
/// that stops writing quietly when the reader goes away.
///
/// `stowage keys CACHE | head` closes the pipe early; writing then fails with `BrokenPipe`. That is
/// not an error of the command: the rest of the output is dropped and the command still finishes
/// and reports its exit status (`verify` still exits 1 when it found problems).
pub struct Output<'a> {
    inner: BufWriter<&'a mut dyn Write>,
    closed: bool,
}

impl<'a> Output<'a> {
    /// `inner`, buffered.
    pub fn new(inner: &'a mut dyn Write) -> Output<'a> {
        Output { inner: BufWriter::new(inner), closed: false }
    }

    fn absorb(&mut self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}

impl Write for Output<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let result = self.inner.write_all(buf);
        self.absorb(result).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let result = self.inner.flush();
        self.absorb(result)
    }
}

/// A progress bar on standard error when it is a terminal ([`indicatif`]); nothing otherwise, so
/// that logs and pipes get only results and one-line errors and notes.
pub struct Progress {
    bar: indicatif::ProgressBar,
}

impl Progress {
    /// A bar of `total` steps labelled `label`, hidden unless standard error is a terminal.
    pub fn new(total: u64, label: &str) -> Progress {
        use std::io::IsTerminal;
        let bar = if io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            let style = indicatif::ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} ({eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(label.to_owned());
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        Progress { bar }
    }

    /// Advances by `steps`.
    pub fn inc(&self, steps: u64) {
        self.bar.inc(steps);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Prints `stowage: note: <text>` to `notes`, the command's standard error (one line; a failure
/// to write it is ignored: a note is never worth failing the command).
pub fn note(notes: &mut dyn Write, text: &str) {
    let line = format!("stowage: note: {}\n", crate::error::escape_control(text));
    let _ = notes.write_all(line.as_bytes());
}

/// A key (or field name) as one printable line.
///
/// Printed as it is, unless it contains a character a terminal would act on ([`unsafe_char`]: a
/// newline, a tab, an escape, a bidirectional override...) or starts with `"`: then it is
/// printed Rust-`{:?}`-escaped, in double quotes (`"a\nb"`, `"x\u{202e}y"`). So every key is
/// exactly one line that shows its characters in their order, and a line that starts with `"`
/// is always an escaped key; the leading quote rule keeps a key that really starts with a quote
/// from being mistaken for one.
///
/// ```ignore
/// assert_eq!(display_key("sample-1"), "sample-1");
/// assert_eq!(display_key("a\nb"), "\"a\\nb\"");
/// assert_eq!(display_key("\"q\""), "\"\\\"q\\\"\"");
/// ```
pub fn display_key(key: &str) -> String {
    if key.starts_with('"') || key.chars().any(unsafe_char) {
        format!("{key:?}")
    } else {
        key.to_owned()
    }
}

/// Whether printing `c` to a terminal could do more than show a character: a control character
/// (a newline, an escape sequence's start) or a bidirectional formatting character (which
/// reorders the text after it, so a key could show as another one: "Trojan Source").
pub fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A byte count for people: `248 B`, `4128 B (4.0 KiB)`, `1073741824 B (1.0 GiB)`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{bytes} B ({value:.1} {})", UNITS[unit])
}

/// A byte count, short: `248 B`, `4.0 KiB`.
pub fn human(bytes: u64) -> String {
    match size(bytes).split_once(" (") {
        Some((_, short)) => short.trim_end_matches(')').to_owned(),
        None => format!("{bytes} B"),
    }
}

/// A file size with its on-disk allocation when the platform reports it:
/// `4128 B (4.0 KiB), 8.0 KiB on disk`.
pub fn size_on_disk(bytes: u64, allocated: Option<u64>) -> String {
    match allocated {
        Some(allocated) => format!("{}, {} on disk", size(bytes), human(allocated)),
        None => size(bytes),
    }
}

/// Lines of a table: every column but the last padded to its widest cell, columns separated by
/// two spaces, each line indented by two spaces.
pub fn table(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::from(" ");
            for (c, cell) in row.iter().enumerate() {
                line.push(' ');
                line.push_str(cell);
                if c + 1 < row.len() {
                    let pad = widths[c] - cell.chars().count() + 1;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

/// `1 problem`, `2 problems`: a count and a noun, plural when the count is not 1.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["a".to_owned(), "float32".to_owned(), "x".to_owned()],
            vec!["long".to_owned(), "u8".to_owned(), "y".to_owned()],
        ];
        assert_eq!(table(&rows), ["  a     float32  x", "  long  u8       y"]);
    }

    #[test]
    fn keys_are_escaped_only_when_needed() {
        assert_eq!(display_key("sample-1"), "sample-1");
        assert_eq!(display_key("with space/ünïcode\\"), "with space/ünïcode\\");
        assert_eq!(display_key("a\nb"), "\"a\\nb\"");
        assert_eq!(display_key("tab\there"), "\"tab\\there\"");
        assert_eq!(display_key("\u{1b}[31m"), "\"\\u{1b}[31m\"");
        assert_eq!(display_key("\"quoted\""), "\"\\\"quoted\\\"\"");
        assert_eq!(display_key(""), "");
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(4128), "4128 B (4.0 KiB)");
        assert_eq!(size(3 << 30), "3221225472 B (3.0 GiB)");
        assert_eq!(human(248), "248 B");
        assert_eq!(human(4128), "4.0 KiB");
        assert_eq!(size_on_disk(4128, Some(8192)), "4128 B (4.0 KiB), 8.0 KiB on disk");
        assert_eq!(count(1, "problem"), "1 problem");
        assert_eq!(count(0, "problem"), "0 problems");
    }
}
