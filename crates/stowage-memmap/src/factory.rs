//! `MemmapFactory`: creates, opens and recognizes memmap row caches behind `Box<dyn Backend>`.

use std::path::Path;

use stowage_core::{
    BackendFactory, Capabilities, DynBackend, DynReader, Format, OpenMode, Result, Schema,
};

use crate::{MemmapBackend, MemmapOptions, formats};

/// A [`BackendFactory`] for [`MemmapBackend`] with fixed [`MemmapOptions`].
///
/// It recognizes and reads both [`crate::STOWAGE_MEMMAP`] caches and [`crate::DNANET_MEMMAP`]
/// caches (DNANet's own, without `stowage.json`).
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_memmap::MemmapFactory::default();
/// assert_eq!(factory.name(), "memmap");
/// assert!(factory.capabilities().resume);
/// assert_eq!(factory.formats()[0], stowage_memmap::STOWAGE_MEMMAP);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemmapFactory {
    /// Options for every cache this factory creates or opens.
    pub options: MemmapOptions,
}

impl BackendFactory for MemmapFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        formats::FORMATS
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        formats::recognize(path)
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(MemmapBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(MemmapBackend::open(dir, mode, self.options.clone())?))
    }

    /// Both formats open as a read-only [`MemmapBackend`]: it reads DNANet's caches as they are.
    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        Ok(Box::new(MemmapBackend::open_read_only(path, self.options.clone())?))
    }

    /// DNANet's report of whatever files can be read, with the open's error as the failure.
    fn describe_unopened(
        &self,
        path: &Path,
        _format: &'static Format,
        error: stowage_core::Error,
    ) -> Result<stowage_core::describe::Description> {
        Ok(crate::describe::describe_unopened(path, error))
    }

    /// A memmap cache that does not open has no index to check rows by: the open's error is
    /// returned as it is.
    fn check_plan_unopened(
        &self,
        _path: &Path,
        error: stowage_core::Error,
        _selection: &stowage_core::check_plan::Selection,
    ) -> std::result::Result<
        stowage_core::check_plan::CheckPlan<'static>,
        stowage_core::check_plan::Unplanned,
    > {
        Err(error.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_fixtures::write_dnanet_cache;
    use crate::{DNANET_MEMMAP, STOWAGE_MEMMAP};
    use stowage_core::{DType, Reader, ShapeRule};

    fn recognize(dir: &Path) -> Option<&'static Format> {
        MemmapFactory::default().recognize(dir).unwrap()
    }

    #[test]
    fn formats_are_stowage_then_dnanet() {
        let ids: Vec<&str> = MemmapFactory::default().formats().iter().map(|f| f.id).collect();
        assert_eq!(ids, ["stowage-memmap", "dnanet-memmap"]);
    }

    #[test]
    fn recognizes_a_stowage_memmap_cache_and_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
        let factory = MemmapFactory::default();
        drop(factory.create(dir.path(), &schema).unwrap());
        assert_eq!(recognize(dir.path()), Some(&STOWAGE_MEMMAP));
        let reader = factory.open_reader(dir.path()).unwrap();
        assert_eq!(reader.format(), &STOWAGE_MEMMAP);
        assert_eq!(reader.schema(), &schema);
    }

    #[test]
    fn recognizes_a_dnanet_cache_and_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        assert_eq!(recognize(dir.path()), Some(&DNANET_MEMMAP));
        let reader = MemmapFactory::default().open_reader(dir.path()).unwrap();
        assert_eq!(reader.format(), &DNANET_MEMMAP);
        assert_eq!(reader.keys().unwrap(), ["/r/a.hid", "/r/b.hid", "/r/c.hid"]);
    }

    #[test]
    fn any_one_of_dnanet_files_is_recognized() {
        for name in crate::layout::DNANET_FILES {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(name), b"").unwrap();
            assert_eq!(recognize(dir.path()), Some(&DNANET_MEMMAP), "{name}");
        }
    }

    #[test]
    fn another_backends_marker_is_not_probed_for_dnanet_files() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::write(dir.path().join("stowage.json"), br#"{"format": "stowage-npy"}"#).unwrap();
        assert_eq!(recognize(dir.path()), None);
    }

    #[test]
    fn an_empty_directory_and_a_missing_path_are_not_recognized() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(recognize(dir.path()), None);
        assert_eq!(recognize(&dir.path().join("absent")), None);
    }

    #[test]
    fn a_stowage_json_that_does_not_parse_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stowage.json"), b"{not json").unwrap();
        let err = MemmapFactory::default().recognize(dir.path()).unwrap_err();
        assert!(err.to_string().contains("stowage.json"), "{err}");
    }
}
