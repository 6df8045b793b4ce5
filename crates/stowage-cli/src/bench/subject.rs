//! The backends `stowage bench` measures, each created and opened with its own options (what the
//! registry's factories do not take: checksum checks switched off, for one), behind one type.

use std::path::Path;

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, Capabilities, OpenMode, Reader, Result, Sample, Schema};
use stowage_hdf5::Hdf5Backend;
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_npy::{NpyBackend, NpyOptions};

/// A backend `stowage bench` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// hangar's NUMPY_10 layout (stowage-npy).
    Npy,
    /// DNANet's memmap rows (stowage-memmap).
    Memmap,
    /// torchcachex's Arrow IPC segments (stowage-arrow).
    Arrow,
    /// aenet's HDF5 container, generic mode (stowage-hdf5).
    Hdf5,
}

impl Kind {
    /// Every backend, in report order.
    pub const ALL: [Kind; 4] = [Kind::Npy, Kind::Memmap, Kind::Arrow, Kind::Hdf5];

    /// The name `--backends` takes and the report shows.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Npy => "npy",
            Kind::Memmap => "memmap",
            Kind::Arrow => "arrow",
            Kind::Hdf5 => "hdf5",
        }
    }

    /// The backend called `name`.
    pub fn from_name(name: &str) -> std::result::Result<Kind, String> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Kind::ALL.iter().map(|kind| kind.name()).collect();
            format!("unknown backend {name:?}; the backends are {}", names.join(", "))
        })
    }

    /// What the backend can hold.
    pub fn capabilities(self) -> Capabilities {
        match self {
            Kind::Npy => stowage_npy::capabilities(),
            Kind::Memmap => stowage_memmap::capabilities(),
            Kind::Arrow => stowage_arrow::capabilities(),
            Kind::Hdf5 => stowage_hdf5::capabilities(),
        }
    }

    /// Why the backend cannot hold `schema`, naming the field; `None` when it can.
    pub fn refusal(self, schema: &Schema) -> Option<String> {
        self.capabilities().check_schema(schema, self.name()).err().map(|e| e.to_string())
    }
}

/// One open cache of one backend.
// Not every backend handle is Debug; a bench holds one or two at a time, never a collection,
// so boxing the largest variant would only add a pointer.
#[allow(missing_debug_implementations, clippy::large_enum_variant)]
pub enum Subject {
    /// See [`Kind::Npy`].
    Npy(NpyBackend),
    /// See [`Kind::Memmap`].
    Memmap(MemmapBackend),
    /// See [`Kind::Arrow`].
    Arrow(ArrowBackend),
    /// See [`Kind::Hdf5`].
    Hdf5(Hdf5Backend),
}

impl Subject {
    /// Creates a cache of `schema` in `dir` with the backend's default (durable) options.
    pub fn create(kind: Kind, dir: &Path, schema: &Schema) -> Result<Subject> {
        Ok(match kind {
            Kind::Npy => Subject::Npy(NpyBackend::create(dir, schema, NpyOptions::default())?),
            Kind::Memmap => {
                Subject::Memmap(MemmapBackend::create(dir, schema, MemmapOptions::default())?)
            }
            Kind::Arrow => {
                Subject::Arrow(ArrowBackend::create(dir, schema, ArrowOptions::default())?)
            }
            Kind::Hdf5 => Subject::Hdf5(Hdf5Backend::create(dir, schema)?),
        })
    }

    /// Opens the cache in `dir` read-only, checking every read against its checksum or not.
    /// `Ok(None)` when the backend cannot switch its checks off (HDF5 always checks).
    pub fn open(kind: Kind, dir: &Path, verify_checksums: bool) -> Result<Option<Subject>> {
        let mode = OpenMode::ReadOnly;
        Ok(Some(match kind {
            Kind::Npy => {
                let options = NpyOptions { verify_checksums, ..NpyOptions::default() };
                Subject::Npy(NpyBackend::open(dir, mode, options)?)
            }
            Kind::Memmap => {
                let options = MemmapOptions { verify_checksums, ..MemmapOptions::default() };
                Subject::Memmap(MemmapBackend::open(dir, mode, options)?)
            }
            Kind::Arrow => {
                let options = ArrowOptions { verify_checksums, ..ArrowOptions::default() };
                Subject::Arrow(ArrowBackend::open(dir, mode, options)?)
            }
            Kind::Hdf5 if verify_checksums => Subject::Hdf5(Hdf5Backend::open(dir, mode)?),
            Kind::Hdf5 => return Ok(None),
        }))
    }

    /// Opens the cache in `dir` for appending with the backend's default options: resumes an
    /// unfinished cache (or appends to a finished one where the backend can).
    pub fn resume(kind: Kind, dir: &Path) -> Result<Subject> {
        let mode = OpenMode::Append;
        Ok(match kind {
            Kind::Npy => Subject::Npy(NpyBackend::open(dir, mode, NpyOptions::default())?),
            Kind::Memmap => {
                Subject::Memmap(MemmapBackend::open(dir, mode, MemmapOptions::default())?)
            }
            Kind::Arrow => Subject::Arrow(ArrowBackend::open(dir, mode, ArrowOptions::default())?),
            Kind::Hdf5 => Subject::Hdf5(Hdf5Backend::open(dir, mode)?),
        })
    }

    /// The cache as a [`Backend`].
    pub fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Subject::Npy(b) => b,
            Subject::Memmap(b) => b,
            Subject::Arrow(b) => b,
            Subject::Hdf5(b) => b,
        }
    }

    /// The cache as a [`Reader`].
    pub fn reader(&self) -> &dyn Reader {
        match self {
            Subject::Npy(b) => b,
            Subject::Memmap(b) => b,
            Subject::Arrow(b) => b,
            Subject::Hdf5(b) => b,
        }
    }

    /// The samples of `keys`, in order, through [`Reader::get_batch`]: the backend's batched
    /// read where it has one (Arrow groups by segment and pipelines its reads), else one `get`
    /// each.
    pub fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        self.reader().get_batch(keys)
    }
}
