//! Telling a URL from a local path, and refusing a URL no backend serves.
//!
//! `s3://bucket/cache` is a valid relative path on Unix (a directory `s3:` holding `bucket`), so a
//! command or a backend that took it for one would create that directory and report success while
//! nothing reached the bucket. A factory that opens caches at URLs lists its schemes
//! ([`BackendFactory::url_schemes`]); wherever a cache's path is taken, a URL whose scheme no
//! factory at hand serves is refused by name instead of being taken for a path.

use std::path::Path;

use crate::{BackendFactory, Error, Result};

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

/// `Ok` for a local path; [`Error::Unsupported`] naming `path` and its scheme when it is a URL:
/// for code that reads local files only. [`refuse_unserved`] with no scheme served.
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
    refuse_unserved(path, &[])
}

/// `Ok` for a local path and for a URL whose scheme is one of `served` (lowercase, as
/// [`BackendFactory::url_schemes`] lists them); otherwise [`Error::Unsupported`] naming `path`,
/// its scheme and the schemes that are served (or that none is).
///
/// ```
/// use std::path::Path;
/// use stowage_core::location::refuse_unserved;
/// assert!(refuse_unserved(Path::new("S3://bucket/cache"), &["s3"]).is_ok());
/// let err = refuse_unserved(Path::new("gs://bucket/cache"), &["s3", "memory"]).unwrap_err();
/// assert!(err.to_string().contains("gs://bucket/cache"));
/// assert!(err.to_string().contains("s3://, memory://"));
/// ```
pub fn refuse_unserved(path: &Path, served: &[&str]) -> Result<()> {
    let Some(scheme) = url_scheme(path) else { return Ok(()) };
    if served.contains(&scheme.as_str()) {
        return Ok(());
    }
    let url = path.display();
    let what = if served.is_empty() {
        "no registered backend serves URLs: caches are local directories or files; give a path"
            .to_owned()
    } else {
        format!(
            "a scheme no registered backend serves (they serve {}); give a URL of one of those \
             or a path",
            schemes(served)
        )
    };
    Err(Error::unsupported(
        "stowage",
        format!(
            "{url} is a URL ({scheme}://) and {what} (for a local path that looks like a URL, \
             write it as ./{url})"
        ),
    ))
}

/// `Ok` for a local path and for a URL whose scheme `factory` serves
/// ([`BackendFactory::url_schemes`]); otherwise [`Error::Unsupported`] naming the factory, the
/// URL and the schemes the factory does serve. Called before a factory creates or opens a cache
/// by name (not through a [`crate::Registry`], which asks only the factories that serve a URL's
/// scheme), so a URL never reaches a factory that would take it for a relative path.
///
/// ```
/// use std::path::Path;
/// use stowage_core::{BackendFactory, location::check_served};
/// # fn demo(local_only: &dyn BackendFactory) {
/// assert!(check_served(local_only, Path::new("/data/cache")).is_ok());
/// assert!(check_served(local_only, Path::new("s3://bucket/cache")).is_err());
/// # }
/// ```
pub fn check_served(factory: &dyn BackendFactory, path: &Path) -> Result<()> {
    let Some(scheme) = url_scheme(path) else { return Ok(()) };
    let served = factory.url_schemes();
    if served.contains(&scheme.as_str()) {
        return Ok(());
    }
    let name = factory.name();
    let serves = if served.is_empty() {
        "no URLs: its caches are local directories or files".to_owned()
    } else {
        format!("only {} URLs", schemes(served))
    };
    Err(Error::unsupported(
        name,
        format!("a cache at {} ({scheme}://): the {name} backend serves {serves}", path.display()),
    ))
}

/// `s3://, gs://`: schemes as they are written in URLs, for messages.
fn schemes(served: &[&str]) -> String {
    let written: Vec<String> = served.iter().map(|scheme| format!("{scheme}://")).collect();
    written.join(", ")
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

    #[test]
    fn an_unserved_url_names_the_schemes_that_are_served() {
        let none = refuse_unserved(Path::new("s3://b/c"), &[]).unwrap_err().to_string();
        assert!(none.contains("s3://b/c is a URL (s3://)"), "{none}");
        assert!(none.contains("no registered backend serves URLs"), "{none}");
        assert!(none.contains("./s3://b/c"), "{none}");
        let some = refuse_unserved(Path::new("Gs://b/c"), &["s3", "az"]).unwrap_err().to_string();
        assert!(some.contains("Gs://b/c is a URL (gs://)"), "{some}");
        assert!(some.contains("they serve s3://, az://"), "{some}");
        assert!(refuse_unserved(Path::new("AZ://c/d"), &["s3", "az"]).is_ok());
        assert!(refuse_unserved(Path::new("relative/cache"), &[]).is_ok());
    }

    /// A factory serving `only` (or no) URL schemes; nothing but its name and schemes is used.
    struct Serving(&'static [&'static str]);

    impl BackendFactory for Serving {
        fn name(&self) -> &'static str {
            "serving"
        }
        fn capabilities(&self) -> crate::Capabilities {
            unreachable!("check_served asks only for the name and schemes")
        }
        fn formats(&self) -> &'static [crate::Format] {
            &[]
        }
        fn url_schemes(&self) -> &'static [&'static str] {
            self.0
        }
        fn recognize(&self, _: &Path) -> Result<Option<&'static crate::Format>> {
            unreachable!("check_served asks only for the name and schemes")
        }
        fn create(&self, _: &Path, _: &crate::Schema) -> Result<Box<crate::DynBackend>> {
            unreachable!("check_served asks only for the name and schemes")
        }
        fn open(&self, _: &Path, _: crate::OpenMode) -> Result<Box<crate::DynBackend>> {
            unreachable!("check_served asks only for the name and schemes")
        }
    }

    #[test]
    fn a_factory_is_given_only_the_urls_it_serves() {
        let local = Serving(&[]);
        assert!(check_served(&local, Path::new("/data/cache")).is_ok());
        let err = check_served(&local, Path::new("s3://b/c")).unwrap_err();
        assert!(matches!(err, Error::Unsupported { backend: "serving", .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("a cache at s3://b/c (s3://)"), "{text}");
        assert!(text.contains("the serving backend serves no URLs"), "{text}");

        let remote = Serving(&["s3", "memory"]);
        assert!(check_served(&remote, Path::new("S3://b/c")).is_ok());
        let text = check_served(&remote, Path::new("gs://b/c")).unwrap_err().to_string();
        assert!(text.contains("gs://b/c (gs://)"), "{text}");
        assert!(text.contains("serves only s3://, memory:// URLs"), "{text}");
    }
}
