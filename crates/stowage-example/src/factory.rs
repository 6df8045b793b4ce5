//! `JournalFactory`: creates, opens and recognizes journal caches; what the conformance suite,
//! a [`stowage_core::Registry`] and the `stowage` command hold.

use std::io::ErrorKind;
use std::path::Path;

use stowage_core::recognize::marker;
use stowage_core::{
    BackendFactory, Capabilities, DynBackend, Error, Format, OpenMode, Result, Schema,
};

use crate::JournalBackend;
use crate::backend::JOURNAL_FILE;

/// The journal format: what [`JournalFactory::recognize`] finds and `stowage inspect` names.
pub const JOURNAL: Format = Format {
    id: crate::record::FORMAT,
    description: "stowage example journal cache",
    signature: "journal.log",
};

/// A [`BackendFactory`] for [`JournalBackend`].
///
/// ```
/// use stowage_core::{BackendFactory, Registry};
/// assert_eq!(stowage_example::JournalFactory.name(), "example-journal");
/// let registry = Registry::new().with(stowage_example::JournalFactory);
/// assert!(registry.factory("example-journal").is_some());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalFactory;

impl BackendFactory for JournalFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        std::slice::from_ref(&JOURNAL)
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        // A stowage marker decides first; only a directory without one may hold a journal.
        if let Some(format) = marker(path)?.format() {
            return Ok((format == JOURNAL.id).then_some(&JOURNAL));
        }
        let journal = path.join(JOURNAL_FILE);
        match std::fs::metadata(&journal) {
            Ok(meta) => Ok(meta.is_file().then_some(&JOURNAL)),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                Ok(None)
            }
            Err(e) => Err(Error::io(journal, e)),
        }
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(JournalBackend::create(dir, schema)?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(JournalBackend::open(dir, mode)?))
    }
}
