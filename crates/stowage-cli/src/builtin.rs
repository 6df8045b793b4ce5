//! The formats of the four backends this crate is built with, for the commands that are about
//! one original tool's format by nature: `adopt` (checksums what DNANet or aenet added), `explain`
//! (DNANet fingerprints, aenet signatures), `convert`'s carried options (DNANet's fingerprint,
//! torchcachex's output structure) and `get --record` on a bare hangar directory. `inspect` and
//! `verify` know no format: every backend describes and plans the checks of its own caches
//! ([`stowage_core::Reader::describe`], [`stowage_core::Reader::check_plan`]).
//!
//! Keyed by [`Format::id`], never by which factory recognized the cache.

use stowage_core::Format;

/// A format this crate has a format-specific report or plan for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// [`stowage_npy::STOWAGE_NPY`].
    StowageNpy,
    /// [`stowage_npy::HANGAR_NUMPY10`]: a bare hangar data directory (no keys).
    HangarNumpy10,
    /// [`stowage_memmap::STOWAGE_MEMMAP`].
    StowageMemmap,
    /// [`stowage_memmap::DNANET_MEMMAP`].
    DnanetMemmap,
    /// [`stowage_arrow::STOWAGE_ARROW`].
    StowageArrow,
    /// [`stowage_arrow::TORCHCACHEX`].
    Torchcachex,
    /// [`stowage_hdf5::STOWAGE_HDF5`].
    StowageHdf5,
    /// [`stowage_hdf5::AENET_HDF5`]: an HDF5 dataset file (keys are entry indices).
    AenetHdf5,
}

impl Builtin {
    /// The built-in format with `format`'s id, `None` for any other format.
    pub fn of(format: &Format) -> Option<Builtin> {
        let table: [(&Format, Builtin); 8] = [
            (&stowage_npy::STOWAGE_NPY, Builtin::StowageNpy),
            (&stowage_npy::HANGAR_NUMPY10, Builtin::HangarNumpy10),
            (&stowage_memmap::STOWAGE_MEMMAP, Builtin::StowageMemmap),
            (&stowage_memmap::DNANET_MEMMAP, Builtin::DnanetMemmap),
            (&stowage_arrow::STOWAGE_ARROW, Builtin::StowageArrow),
            (&stowage_arrow::TORCHCACHEX, Builtin::Torchcachex),
            (&stowage_hdf5::STOWAGE_HDF5, Builtin::StowageHdf5),
            (&stowage_hdf5::AENET_HDF5, Builtin::AenetHdf5),
        ];
        table.into_iter().find(|(known, _)| known.id == format.id).map(|(_, builtin)| builtin)
    }

    /// Whether `format` is this built-in one.
    pub fn is(self, format: &Format) -> bool {
        Builtin::of(format) == Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_format_is_built_in_and_others_are_not() {
        let registry = crate::default_registry();
        let ids: Vec<&str> = registry.formats().map(|f| f.id).collect();
        assert_eq!(
            ids.len(),
            9,
            "the four local backends read their own format and one original tool's each, and \
             the remote backend its own: {ids:?}"
        );
        // The remote backend's caches have no report or plan of this crate's: they describe
        // and check themselves.
        for format in registry.formats().filter(|f| f.id != stowage_remote::cache::FORMAT.id) {
            assert!(Builtin::of(format).is_some(), "{format:?}");
        }
        let other = Format { id: "example-journal", description: "x", signature: "y" };
        assert_eq!(Builtin::of(&other), None);
        assert!(Builtin::HangarNumpy10.is(&stowage_npy::HANGAR_NUMPY10));
    }
}
