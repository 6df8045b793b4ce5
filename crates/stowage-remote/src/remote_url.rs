//! Cache URLs: which object store a URL names, and the prefix the cache lives under in it.
//!
//! `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`, `file:///absolute/dir`
//! and `memory://name/prefix` (a store held in this process, shared by every handle that names
//! it). Anything else is refused by name: a URL is never taken for a path, and a path never for a
//! URL.

use std::fmt;

use object_store::path::{Path, PathPart};
use stowage_core::{Error, Result};
use url::Url;

/// The kinds of object store a cache URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Amazon S3 or an S3-compatible server (`s3://bucket/prefix`), configured by the usual
    /// `AWS_*` environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...).
    S3,
    /// Google Cloud Storage (`gs://bucket/prefix`), configured by `GOOGLE_*` variables.
    Gcs,
    /// Azure Blob Storage (`az://container/prefix`), configured by `AZURE_*` variables.
    Azure,
    /// A local directory (`file:///absolute/dir`), through object_store's local store.
    File,
    /// A store in this process's memory (`memory://name/prefix`), shared by every handle that
    /// names it; for tests and examples.
    Memory,
}

impl Scheme {
    /// Every scheme, in the order the docs list them.
    pub const ALL: [Scheme; 5] =
        [Scheme::S3, Scheme::Gcs, Scheme::Azure, Scheme::File, Scheme::Memory];

    /// The scheme as written in a URL, e.g. `"s3"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
            Scheme::File => "file",
            Scheme::Memory => "memory",
        }
    }

    fn from_url_scheme(scheme: &str) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|s| s.as_str() == scheme)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed cache URL: the store it names and the prefix of the cache's objects in it.
///
/// ```
/// use stowage_remote::{RemoteUrl, Scheme};
/// let url = RemoteUrl::parse("s3://training-data/caches/imagenet").unwrap();
/// assert_eq!(url.scheme(), Scheme::S3);
/// assert_eq!(url.store_name(), "s3://training-data");
/// assert_eq!(url.prefix().as_ref(), "caches/imagenet");
/// assert_eq!(url.object_url("versions/1"), "s3://training-data/caches/imagenet/versions/1");
///
/// let err = RemoteUrl::parse("ftp://host/cache").unwrap_err();
/// assert!(err.to_string().contains("ftp://host/cache"), "{err}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteUrl {
    url: Url,
    scheme: Scheme,
    /// The bucket, container or memory store name (empty for `file://`).
    store: String,
    prefix: Path,
}

impl RemoteUrl {
    /// Parses `text`. A bucket (container) is required for `s3`, `gs` and `az`; `file://` takes
    /// an absolute path; a query or fragment is refused, since object stores have no use for one
    /// and a typo there would otherwise be silently dropped.
    ///
    /// Errors: [`Error::Unsupported`] for a scheme this crate does not serve (naming the URL and
    /// the schemes it does serve), [`Error::InvalidArgument`] for a malformed URL.
    pub fn parse(text: &str) -> Result<RemoteUrl> {
        let url = Url::parse(text)
            .map_err(|e| Error::invalid(format!("{text} is not a valid cache URL: {e}")))?;
        let scheme = Scheme::from_url_scheme(url.scheme()).ok_or_else(|| {
            let served: Vec<String> = Scheme::ALL.iter().map(|s| format!("{s}://")).collect();
            Error::unsupported(
                "remote",
                format!(
                    "{text}: the scheme {}:// is not served; caches on object storage are \
                     addressed as {}",
                    url.scheme(),
                    served.join(", ")
                ),
            )
        })?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::invalid(format!(
                "{text}: a cache URL takes no query (?...) or fragment (#...)"
            )));
        }
        let store = url.host_str().unwrap_or_default().to_owned();
        if matches!(scheme, Scheme::S3 | Scheme::Gcs | Scheme::Azure) && store.is_empty() {
            return Err(Error::invalid(format!(
                "{text}: a {scheme}:// URL names its bucket first, e.g. {scheme}://bucket/prefix"
            )));
        }
        if scheme == Scheme::File && !store.is_empty() && store != "localhost" {
            return Err(Error::invalid(format!(
                "{text}: a file:// URL names a local absolute path, file:///dir (host {store:?} \
                 given)"
            )));
        }
        let prefix = Path::from_url_path(url.path()).map_err(|e| {
            Error::invalid(format!("{text}: its path is not a valid object path: {e}"))
        })?;
        let store = if scheme == Scheme::File { String::new() } else { store };
        Ok(RemoteUrl { url, scheme, store, prefix })
    }

    /// The kind of store.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The URL as given (normalized by the URL parser).
    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// The parsed URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The bucket, container or memory store name; empty for `file://`.
    pub fn bucket(&self) -> &str {
        &self.store
    }

    /// The store without the prefix, as messages name it: `s3://bucket`, `file://`.
    pub fn store_name(&self) -> String {
        format!("{}://{}", self.scheme, self.store)
    }

    /// The prefix the cache's objects live under (no leading or trailing `/`).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The location of object `name` (a relative name such as `versions/1`) under the prefix.
    ///
    /// Errors: [`Error::InvalidArgument`] for an empty name or one with an empty, `.` or `..`
    /// part, which could leave the prefix or name two different objects alike.
    pub fn object(&self, name: &str) -> Result<Path> {
        let parts: Vec<&str> = name.split('/').collect();
        if name.is_empty() || parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
            return Err(Error::invalid(format!(
                "object name {name:?} under {}: names are relative, with no empty, `.` or `..` \
                 parts",
                self.as_str()
            )));
        }
        let mut path_parts: Vec<PathPart<'static>> =
            self.prefix.parts().map(|p| PathPart::from(p.as_ref().to_owned())).collect();
        path_parts.extend(parts.iter().map(|p| PathPart::from((*p).to_owned())));
        Ok(Path::from_iter(path_parts))
    }

    /// The URL of object `name`, for messages: `s3://bucket/prefix/name`.
    pub fn object_url(&self, name: &str) -> String {
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            format!("{}/{name}", self.store_name())
        } else {
            format!("{}/{prefix}/{name}", self.store_name())
        }
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_scheme_parses_with_its_store_and_prefix() {
        let cases = [
            ("s3://b/a/c", Scheme::S3, "b", "a/c", "s3://b/a/c/x"),
            ("gs://b/c/", Scheme::Gcs, "b", "c", "gs://b/c/x"),
            ("az://container/p", Scheme::Azure, "container", "p", "az://container/p/x"),
            ("file:///tmp/cache", Scheme::File, "", "tmp/cache", "file:///tmp/cache/x"),
            ("memory://m/p", Scheme::Memory, "m", "p", "memory://m/p/x"),
            ("memory://m", Scheme::Memory, "m", "", "memory://m/x"),
            ("s3://b", Scheme::S3, "b", "", "s3://b/x"),
            ("s3://b/with%20space", Scheme::S3, "b", "with space", "s3://b/with space/x"),
        ];
        for (text, scheme, bucket, prefix, object_url) in cases {
            let url = RemoteUrl::parse(text).unwrap();
            assert_eq!(url.scheme(), scheme, "{text}");
            assert_eq!(url.bucket(), bucket, "{text}");
            assert_eq!(url.prefix().as_ref(), prefix, "{text}");
            assert_eq!(url.object_url("x"), object_url, "{text}");
        }
    }

    #[test]
    fn unserved_or_malformed_urls_are_refused_by_name() {
        for (text, unsupported) in [
            ("ftp://h/c", true),
            ("http://h/c", true),
            ("s3:///nobucket", false),
            ("s3://b/c?versionId=1", false),
            ("s3://b/c#frag", false),
            ("file://otherhost/c", false),
            ("not a url", false),
        ] {
            let err = RemoteUrl::parse(text).unwrap_err();
            assert_eq!(matches!(err, Error::Unsupported { .. }), unsupported, "{text}: {err}");
            assert!(matches!(err, Error::Unsupported { .. } | Error::InvalidArgument { .. }));
            assert!(err.to_string().contains(text), "{text}: {err}");
        }
    }

    #[test]
    fn object_names_stay_under_the_prefix() {
        let url = RemoteUrl::parse("s3://b/cache").unwrap();
        assert_eq!(url.object("versions/7").unwrap().as_ref(), "cache/versions/7");
        for bad in ["", "/abs", "a//b", "../up", "a/./b", "a/.."] {
            let err = url.object(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad:?}: {err}");
        }
        // A part that object_store would encode stays one part, inside the prefix.
        let odd = url.object("a b/c").unwrap();
        assert_eq!(odd.parts().count(), 3);
        assert!(odd.prefix_matches(url.prefix()));
    }
}
