//! The four format pairs of the mixed campaign: a stowage backend and the original tool whose
//! caches it shares, and what each pair allows.

use crate::mixed::formats::{self, Format};

/// A stowage backend and the original tool that writes the same cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pair {
    /// stowage-npy and hangar 0.5.2 (driven for real).
    Npy,
    /// stowage-memmap and DNANet's memmap writer (its peer).
    Memmap,
    /// stowage-arrow and torchcachex 0.2 (its peer).
    Arrow,
    /// stowage-hdf5's aenet writer and aenet-python's torch-cache paths (its peer).
    Hdf5,
}

impl Pair {
    /// Every pair, in report order (the order of [`crate::backends::all`]).
    pub const ALL: [Pair; 4] = [Pair::Npy, Pair::Memmap, Pair::Arrow, Pair::Hdf5];

    /// The backend's name, as in [`crate::backends::all`].
    pub fn backend(self) -> &'static str {
        match self {
            Pair::Npy => "npy",
            Pair::Memmap => "memmap",
            Pair::Arrow => "arrow",
            Pair::Hdf5 => "hdf5",
        }
    }

    /// The original tool's name, as `validate` names it as a writer.
    pub fn tool(self) -> &'static str {
        match self {
            Pair::Npy => "hangar",
            Pair::Memmap => "DNANet",
            Pair::Arrow => "torchcachex",
            Pair::Hdf5 => "aenet",
        }
    }

    /// `backend+tool`, the pair's name in reports.
    ///
    /// ```
    /// assert_eq!(stowage_reliability::mixed::pair::Pair::Arrow.label(), "arrow+torchcachex");
    /// ```
    pub fn label(self) -> String {
        format!("{}+{}", self.backend(), self.tool())
    }

    /// The pair named by its backend or its label.
    ///
    /// ```
    /// use stowage_reliability::mixed::pair::Pair;
    /// assert_eq!(Pair::named("memmap"), Some(Pair::Memmap));
    /// assert_eq!(Pair::named("npy+hangar"), Some(Pair::Npy));
    /// assert_eq!(Pair::named("example-journal"), None);
    /// ```
    pub fn named(name: &str) -> Option<Pair> {
        Pair::ALL.into_iter().find(|p| p.backend() == name || p.label() == name)
    }

    /// The pairs named in `names` (all when empty), in report order.
    ///
    /// Errors: a name no pair has, listing the pairs.
    pub fn select(names: &[String]) -> Result<Vec<Pair>, String> {
        if let Some(unknown) = names.iter().find(|n| Pair::named(n).is_none()) {
            let known: Vec<String> = Pair::ALL.iter().map(|p| p.label()).collect();
            return Err(format!(
                "no mixed pair is named {unknown:?}; the pairs are {} (or their backend's name)",
                known.join(", ")
            ));
        }
        Ok(Pair::ALL
            .into_iter()
            .filter(|p| names.is_empty() || names.iter().any(|n| Pair::named(n) == Some(*p)))
            .collect())
    }

    /// Whether the tool can start a cache itself (hangar cannot start a stowage cache: it has no
    /// schema of its own in the directory, so stowage always creates it first).
    pub fn tool_can_start(self) -> bool {
        self != Pair::Npy
    }

    /// Whether stowage can adopt the tool's data (hangar's collection files cannot be: which
    /// slots hold samples is only in hangar's own database).
    pub fn adopts(self) -> bool {
        self != Pair::Npy
    }

    /// Whether the killed session may finalize. Not on memmap: DNANet's writer must not open a
    /// finished cache (its own rule), and the tool appends after the kill. aenet files have no
    /// finalize (`finish` commits each write).
    pub fn finalizes_in_session(self) -> bool {
        matches!(self, Pair::Npy | Pair::Arrow)
    }

    /// Whether stowage's backend has a finalized state (aenet files have none: `finish` commits
    /// each write).
    pub fn finalizes(self) -> bool {
        self != Pair::Hdf5
    }

    /// Whether stowage appends to the cache after finalizing it (Arrow's segments are
    /// append-only; memmap and NUMPY_10 refuse with `Error::Finalized`).
    pub fn appends_after_finalize(self) -> bool {
        self == Pair::Arrow
    }

    /// Whether a flush closes the writer (aenet files: `TorchCacheWriter::finish`).
    pub fn flush_closes(self) -> bool {
        self == Pair::Hdf5
    }

    /// The pair's two sides.
    pub fn format(self) -> &'static dyn Format {
        match self {
            Pair::Npy => &formats::npy::NpyHangar,
            Pair::Memmap => &formats::memmap::MemmapDnanet,
            Pair::Arrow => &formats::arrow::ArrowTorchcachex,
            Pair::Hdf5 => &formats::hdf5::Hdf5Aenet,
        }
    }
}
