//! Telling a URL from a local path.
//!
//! `s3://bucket/cache` is a valid relative path on Unix (a directory `s3:` holding `bucket`), so a
//! command or a backend that took it for one would create that directory and report success while
//! nothing reached the bucket. Every backend of this workspace reads and writes local files, so
//! wherever a cache's path is taken, a URL is refused by name instead.

use std::path::Path;

use crate::{Error, Result};

/// The scheme of `path` when it is written as a URL, `scheme://...` (a letter, then letters,
/// digits, `+`, `-` or `.`, as RFC 3986 spells a scheme), lowercased; `None` for a path.
///
/// ```
/// use std::path::Path;
/// use stowage_core::location::url_scheme;
/// assert_eq!(url_scheme(Path::new("s3://bucket/cache")).as_deref(), Some("s3"));
/// assert_eq!(url_scheme(Path::new("File:///tmp/cache")).as_deref(), Some("file"));
/// assert_eq!(url_scheme(Path::new("caches/s3:/x")), None);
/// assert_eq!(url_scheme(Path::new("./s3://x")), None);
/// ```
pub fn url_scheme(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then(|| scheme.to_ascii_lowercase())
}

/// `Ok` for a local path; [`Error::Unsupported`] naming `path` and its scheme when it is a URL.
///
/// ```
/// use std::path::Path;
/// use stowage_core::{Error, location::refuse_url};
/// assert!(refuse_url(Path::new("/data/cache")).is_ok());
/// let err = refuse_url(Path::new("s3://bucket/cache")).unwrap_err();
/// assert!(matches!(err, Error::Unsupported { .. }));
/// assert!(err.to_string().contains("s3://bucket/cache"));
/// ```
pub fn refuse_url(path: &Path) -> Result<()> {
    match url_scheme(path) {
        None => Ok(()),
        Some(scheme) => Err(Error::unsupported(
            "stowage",
            format!(
                "{} is a URL ({scheme}://): caches are local directories or files; give a path \
                 (for a local path that looks like a URL, write it as ./{})",
                path.display(),
                path.display()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_told_from_paths() {
        for url in ["s3://b/c", "gs://b", "az://c/d", "memory://", "file:///tmp/x", "x+y.z-1://a"] {
            assert!(url_scheme(Path::new(url)).is_some(), "{url}");
            assert!(refuse_url(Path::new(url)).is_err(), "{url}");
        }
        for path in ["cache", "/abs/s3://x", "1s3://x", "://x", "a b://x", "c:\\data", ""] {
            assert_eq!(url_scheme(Path::new(path)), None, "{path}");
        }
    }
}
