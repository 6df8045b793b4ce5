//! Quoting untrusted text for error messages.

/// `s` escaped as a Rust string literal and cut after `limit` characters, so that a hostile input
/// cannot flood an error message.
pub(crate) fn quote(s: &str, limit: usize) -> String {
    if s.chars().count() > limit {
        let head: String = s.chars().take(limit).collect();
        format!("{head:?}...")
    } else {
        format!("{s:?}")
    }
}
