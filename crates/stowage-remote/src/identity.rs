//! The cache's identity object, `stowage.json` under the cache's prefix: the format, the layout
//! and the schema, created once when the cache is created and never changed.
//!
//! It is the same marker local stowage caches carry (`"format"` names the backend), so that
//! recognizing a cache on a store, or on a local directory through `file://`, follows the same
//! rule: the marker decides.

use serde::{Deserialize, Serialize};
use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result, Schema};

use crate::manifest::LAYOUT;
use crate::store::{Created, RemoteStore};

/// The identity object's name under the cache's prefix.
pub const IDENTITY: &str = "stowage.json";

/// The format id this backend writes in the identity object (and in manifests and commits).
pub const FORMAT_ID: &str = "stowage-remote";

/// The largest identity object read: a schema, some KiB in practice.
const MAX_IDENTITY_BYTES: u64 = 16 << 20;

/// What `stowage.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Always [`FORMAT_ID`].
    pub format: String,
    /// Always [`LAYOUT`].
    pub layout: u32,
    /// The schema every sample follows.
    pub schema: Schema,
}

impl Identity {
    /// The identity of a new cache of `schema`.
    pub fn new(schema: &Schema) -> Identity {
        Identity { format: FORMAT_ID.to_owned(), layout: LAYOUT, schema: schema.clone() }
    }

    /// Its bytes: deterministic JSON, so that two writers creating the same cache write the
    /// same object.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("an identity serializes");
        bytes.push(b'\n');
        bytes
    }

    /// Creates the identity object in `store`. Creating the same identity again is not an
    /// error (two ranks may both create the cache they are about to write).
    ///
    /// Errors: [`Error::AlreadyExists`] naming the object when it holds another identity
    /// (another schema, or another format's marker); the store's errors.
    pub fn create(&self, store: &RemoteStore) -> Result<Created> {
        store.put_new(IDENTITY, Bytes::from(self.to_bytes()))
    }

    /// The identity of the cache in `store`, `None` when it has none.
    ///
    /// Errors: [`Error::Incompatible`] when the marker names another format or layout;
    /// [`Error::Corrupted`] when it does not parse; the store's errors.
    pub fn read(store: &RemoteStore) -> Result<Option<Identity>> {
        let source = store.url().object_url(IDENTITY);
        let bytes = match store.get_at_most(IDENTITY, MAX_IDENTITY_BYTES) {
            Ok(bytes) => bytes,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let format = marker_format(&source, &bytes)?;
        if format != FORMAT_ID {
            return Err(Error::Incompatible {
                path: source.into(),
                detail: format!("a {format:?} cache, not a {FORMAT_ID:?} one"),
            });
        }
        let identity: Identity = serde_json::from_slice(&bytes).map_err(|e| {
            Error::corrupted(&source, format!("not a layout {LAYOUT} identity: {e}"))
        })?;
        if identity.to_bytes() != bytes.as_ref() {
            return Err(Error::corrupted(
                &source,
                "the identity is not in the form this layout writes it (edited or damaged)",
            ));
        }
        if identity.layout != LAYOUT {
            return Err(Error::Incompatible {
                path: source.into(),
                detail: format!("layout {}, this version reads layout {LAYOUT}", identity.layout),
            });
        }
        Ok(Some(identity))
    }
}

/// The `"format"` a marker's bytes name.
///
/// Errors: [`Error::Corrupted`] naming `source` when they are not a JSON object with a string
/// `"format"`.
pub fn marker_format(source: &str, bytes: &[u8]) -> Result<String> {
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupted(source, format!("not JSON: {e}")))?;
    json.get("format")
        .and_then(|f| f.as_str())
        .map(str::to_owned)
        .ok_or_else(|| Error::corrupted(source, "no string \"format\" in the cache's marker"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{DType, ShapeRule};

    #[test]
    fn identity_round_trips_and_other_formats_are_named() {
        let store = RemoteStore::open("memory://identity-test/c").unwrap();
        assert_eq!(Identity::read(&store).unwrap(), None);
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
        let identity = Identity::new(&schema);
        assert_eq!(identity.create(&store).unwrap(), Created::New);
        assert_eq!(identity.create(&store).unwrap(), Created::AlreadyThere);
        assert_eq!(Identity::read(&store).unwrap(), Some(identity));
        let other = Identity::new(&Schema::new().bytes("b"));
        assert!(matches!(other.create(&store), Err(Error::AlreadyExists { .. })));

        let npy = RemoteStore::open("memory://identity-test/npy").unwrap();
        npy.put_new(IDENTITY, Bytes::from_static(br#"{"format": "stowage-npy"}"#)).unwrap();
        let err = Identity::read(&npy).unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }) && err.to_string().contains("npy"));
        let junk = RemoteStore::open("memory://identity-test/junk").unwrap();
        junk.put_new(IDENTITY, Bytes::from_static(b"{")).unwrap();
        assert!(matches!(Identity::read(&junk), Err(Error::Corrupted { .. })));
    }
}
