//! Quoting untrusted text for error messages.

/// `s` escaped as a Rust string literal and cut after `limit` characters, so that a hostile input
/// cannot flood an error message.
///
/// ```
/// assert_eq!(stowage_core::quote::quote("a\nb", 10), "\"a\\nb\"");
/// assert_eq!(stowage_core::quote::quote("abcdef", 3), "\"abc\"...");
/// ```
pub fn quote(s: &str, limit: usize) -> String {
    if s.chars().count() > limit {
        let head: String = s.chars().take(limit).collect();
        format!("{head:?}...")
    } else {
        format!("{s:?}")
    }
}
