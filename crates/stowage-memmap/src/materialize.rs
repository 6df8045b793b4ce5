//! In-memory realization (DNANet's `load_in_memory=True`): every tensor field copied into RAM,
//! guarded by [`crate::ram_guard`].

use std::borrow::Borrow;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use stowage_core::{
    Capabilities, Error, Format, Reader, Result, Sample, Schema, Tensor, ValidationLevel,
    ValidationReport, Value,
};

use crate::backend::{Recorded, resolve_row};
use crate::error::MemmapError;
use crate::index::JsonRef;
use crate::ram_guard::{MemoryBudget, check_realization};
use crate::row_format::FieldSlot;
use crate::{BACKEND_NAME, MemmapBackend};

impl MemmapBackend {
    /// The approximate RAM an in-memory realization of this cache uses, in bytes: every tensor
    /// field's `n * row_bytes`, plus the text bytes of the index's strings (keys, plain JSON texts,
    /// inline texts of an unfinished cache, each shared text once) and of the sidecar entries of a
    /// finalized cache. Allocator and hash-table overheads are not counted; the checksum file is
    /// not realized. Saturates at `u64::MAX`.
    ///
    /// Loads the index and the sidecars when not loaded yet. Errors: [`Error::Corrupted`] naming
    /// `index.parquet` or a sidecar that is missing or damaged.
    ///
    /// ```
    /// use stowage_core::{Backend, Sample, Tensor, Value};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};
    /// let dir = tempfile::tempdir()?;
    /// let mut cache = MemmapBackend::create(dir.path(), &dnanet(2, 3), MemmapOptions::default())?;
    /// let row = Sample::new()
    ///     .with("data", Tensor::from_slice(&[2, 3], &[1i16; 6])?)
    ///     .with("scaler", Tensor::from_slice(&[3], &[1f32; 3])?)
    ///     .with("meta_json", Value::Json("{}".into()));
    /// cache.put("k", &row)?;
    /// // data 12 + annotation 6 + scaler 12 bytes, the key "k", meta_json "{}" (DNANet's default)
    /// assert!(cache.projected_realization_bytes()? >= 12 + 6 + 12 + 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn projected_realization_bytes(&self) -> Result<u64> {
        // Loads the index of a finalized reader opened lazily; a damaged one is refused here, so
        // that `index()` below (and in MaterializedMemmap) is never the empty stand-in. An
        // unfinished cache's rows are streamed from its manifest, not loaded.
        if matches!(self.recorded(), Recorded::ByFinalize) {
            self.try_index()?;
        }
        let rows = self.len() as u64;
        let mut total: u64 = 0;
        for tensor in &self.row_format().tensors {
            total = total.saturating_add(rows.saturating_mul(tensor.layout.row_bytes as u64));
        }
        // A deduplicated field's text is held once however many rows share it (bounded by the
        // distinct texts); a plain field's text once per row.
        let deduplicated: Vec<bool> = self
            .row_format()
            .json
            .iter()
            .map(|f| matches!(f.storage, crate::row_format::JsonStorage::Deduplicated { .. }))
            .collect();
        let mut distinct: Vec<HashSet<std::sync::Arc<str>>> =
            deduplicated.iter().map(|_| HashSet::new()).collect();
        self.each_row(&mut |_, entry| {
            total = total.saturating_add(entry.path.len() as u64);
            for (j, json) in entry.json.iter().enumerate() {
                if let JsonRef::Inline(text) = json
                    && (!deduplicated[j] || distinct[j].insert(text.clone()))
                {
                    total = total.saturating_add(text.len() as u64);
                }
            }
            Ok(())
        })?;
        if matches!(self.recorded(), Recorded::ByFinalize) {
            for (_, sidecar) in self.sidecars() {
                for text in sidecar.entries()?.values() {
                    total = total.saturating_add(text.len() as u64);
                }
            }
        }
        Ok(total)
    }

    /// Copies every tensor field of this cache into RAM, after checking
    /// [`MemmapBackend::projected_realization_bytes`] against `budget`
    /// (`ram_guard::check_realization`: refused with its exact message when above 50%).
    ///
    /// The result borrows this reader for index and sidecar lookups; see
    /// [`MemmapBackend::into_materialized`] for one that owns it (`'static`, boxable as
    /// `Box<dyn Reader>`), and [`MaterializedMemmap::new`] for the details.
    ///
    /// ```
    /// use stowage_core::{Backend, Reader, Sample, Tensor, Value};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet, MemoryBudget};
    /// let dir = tempfile::tempdir()?;
    /// let mut cache = MemmapBackend::create(dir.path(), &dnanet(2, 3), MemmapOptions::default())?;
    /// let row = Sample::new()
    ///     .with("data", Tensor::from_slice(&[2, 3], &[7i16; 6])?)
    ///     .with("scaler", Tensor::from_slice(&[3], &[1f32; 3])?)
    ///     .with("meta_json", Value::Json("{}".into()));
    /// cache.put("k", &row)?;
    /// cache.finalize()?;
    /// let reader = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default())?;
    /// let in_ram = reader.materialize(&MemoryBudget::total_ram(1 << 30))?;
    /// assert_eq!(in_ram.get("k")?, reader.get("k")?);
    /// assert!(!in_ram.get_row(-1)?.tensor("data").unwrap().is_zero_copy());
    /// assert!(reader.materialize(&MemoryBudget::total_ram(10)).is_err()); // over 50% of 10 bytes
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn materialize(&self, budget: &MemoryBudget) -> Result<MaterializedMemmap<&MemmapBackend>> {
        MaterializedMemmap::new(self, budget)
    }

    /// Like [`MemmapBackend::materialize`], taking ownership of the reader (dropped when refused).
    pub fn into_materialized(self, budget: &MemoryBudget) -> Result<MaterializedMemmap> {
        MaterializedMemmap::new(self, budget)
    }
}

/// A memmap row cache realized in RAM: every tensor field's rows copied out of the `.bin` files,
/// so reads come from memory. A [`Reader`] returning exactly the samples of the reader it was made
/// from, as owned tensors ([`Tensor::is_zero_copy`] is false).
///
/// `R` is how the reader is held: `&MemmapBackend` ([`MemmapBackend::materialize`]),
/// `MemmapBackend` ([`MemmapBackend::into_materialized`]), `Arc<MemmapBackend>`, ... Keys, presence
/// flags and JSON texts are looked up in the reader's index and sidecars (already in RAM; the
/// sidecars are loaded while materializing). It never writes, so it is no `Backend`; `validate`
/// checks the reader's files.
///
/// The rows are a snapshot: when the reader is an unfinished cache, rows committed later by
/// another writer are not seen.
#[derive(Debug)]
pub struct MaterializedMemmap<R = MemmapBackend> {
    reader: R,
    /// Per tensor field of the reader's format: `n` rows of `row_bytes`, little-endian; a null
    /// row is zeros (never served).
    fields: Vec<Vec<u8>>,
    names: Vec<Arc<str>>,
    capabilities: Capabilities,
    projected_bytes: u64,
}

impl<R: Borrow<MemmapBackend>> MaterializedMemmap<R> {
    /// Realizes `reader` in RAM.
    ///
    /// First [`MemmapBackend::projected_realization_bytes`] is checked against `budget`
    /// ([`Error::InvalidArgument`] with the spec's refusal message when above 50% of its total).
    /// Then every row is read through the reader (checking its stored checksums when
    /// [`crate::MemmapOptions::verify_checksums`] is set and the cache has them, converting
    /// big-endian fields) and its tensor bytes copied; reads from RAM are not checked again.
    ///
    /// Errors: the refusal; [`Error::Corrupted`] naming the file, row and key of a damaged row;
    /// [`Error::InvalidArgument`] when a field's buffer cannot be allocated.
    pub fn new(reader: R, budget: &MemoryBudget) -> Result<MaterializedMemmap<R>> {
        let backend: &MemmapBackend = reader.borrow();
        let projected_bytes = backend.projected_realization_bytes()?;
        check_realization(projected_bytes, budget)?;
        let format = backend.row_format();
        let rows = backend.index().len();
        let mut fields = Vec::with_capacity(format.tensors.len());
        for tensor in &format.tensors {
            let (row_bytes, field) = (tensor.layout.row_bytes, tensor.layout.name.clone());
            let Some(len) = rows.checked_mul(row_bytes) else {
                return Err(MemmapError::RealizationOverflow { rows, row_bytes, field }.into());
            };
            let mut buffer = Vec::new();
            if let Err(cause) = buffer.try_reserve_exact(len) {
                let cache = backend.layout().root().to_path_buf();
                let error = MemmapError::RealizationAllocation { cache, field, bytes: len, cause };
                return Err(error.into());
            }
            fields.push(buffer);
        }
        let names: Vec<Arc<str>> =
            format.schema.fields.iter().map(|f| Arc::from(f.name.as_str())).collect();
        let verify = backend.options().verify_checksums;
        for row in 0..rows {
            let sample = backend
                .read_row(row, verify)
                .map_err(|e| e.for_key(&backend.index().rows()[row].path))?;
            for (position, slot) in format.slots.iter().enumerate() {
                let FieldSlot::Tensor(t) = *slot else { continue };
                match sample.get(&names[position]) {
                    Some(Value::Tensor(tensor)) => fields[t].extend_from_slice(tensor.bytes()),
                    _ => {
                        let row_bytes = format.tensors[t].layout.row_bytes;
                        let buffer = &mut fields[t];
                        buffer.resize(buffer.len() + row_bytes, 0);
                    }
                }
            }
        }
        let mut capabilities = backend.capabilities().clone();
        capabilities.zero_copy_get = false;
        Ok(MaterializedMemmap { reader, fields, names, capabilities, projected_bytes })
    }

    /// The reader this was made from (index, sidecars, files).
    pub fn reader(&self) -> &MemmapBackend {
        self.reader.borrow()
    }

    /// Gives the reader back, dropping the RAM copy.
    pub fn into_reader(self) -> R {
        self.reader
    }

    /// The projected size that was checked against the budget
    /// ([`MemmapBackend::projected_realization_bytes`] at realization).
    pub fn projected_bytes(&self) -> u64 {
        self.projected_bytes
    }

    /// Bytes of tensor rows held in RAM (every field's `n * row_bytes`).
    pub fn resident_tensor_bytes(&self) -> u64 {
        self.fields.iter().map(|f| f.len() as u64).sum()
    }

    /// Row `i` from RAM; negative `i` counts from the end (`-1` is the last row). Out of range is
    /// [`Error::InvalidArgument`] naming `i` and the row count, as [`MemmapBackend::get_row`].
    pub fn get_row(&self, i: i64) -> Result<Sample> {
        let reader = self.reader();
        let rows = reader.index().len();
        let row = resolve_row(i, rows).ok_or_else(|| MemmapError::RowOutOfRange {
            cache: reader.layout().root().to_path_buf(),
            row: i,
            rows,
            in_memory: true,
        })?;
        self.read_row(row)
    }

    fn read_row(&self, row: usize) -> Result<Sample> {
        let reader = self.reader();
        let format = reader.row_format();
        let entry = reader.index().row(row).expect("the caller checked the range");
        let mut sample = Sample::new();
        for (position, slot) in format.slots.iter().enumerate() {
            let value = match *slot {
                FieldSlot::Tensor(t) if !entry.present[t] => Value::Null,
                FieldSlot::Tensor(t) => {
                    let layout = &format.tensors[t].layout;
                    let start = row * layout.row_bytes;
                    let bytes = self.fields[t][start..start + layout.row_bytes].to_vec();
                    let tensor =
                        Tensor::new(layout.dtype, layout.shape.clone(), bytes).map_err(|e| {
                            Error::corrupted(
                                reader.layout().field_file(&layout.name),
                                format!("row {row} of field {:?} (in memory): {e}", layout.name),
                            )
                        })?;
                    Value::Tensor(tensor)
                }
                FieldSlot::Json(j) => match &entry.json[j] {
                    JsonRef::Null => Value::Null,
                    JsonRef::Inline(text) => Value::Json(text.to_string()),
                    JsonRef::Key(key) => {
                        let (_, sidecar) = reader
                            .sidecars()
                            .find(|(k, _)| *k == j)
                            .expect("keys are only read for deduplicated fields");
                        Value::Json(sidecar.lookup(*key)?.to_string())
                    }
                },
            };
            sample.insert(self.names[position].clone(), value);
        }
        Ok(sample)
    }
}

impl<R: Borrow<MemmapBackend> + Send + Sync> Reader for MaterializedMemmap<R> {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        self.reader().format()
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        self.reader().schema()
    }

    fn path(&self) -> &Path {
        self.reader().path()
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        match self.reader().index().find(key) {
            Some(row) => self.read_row(row).map(Some).map_err(|e| e.for_key(key)),
            None => Ok(None),
        }
    }

    fn contains(&self, key: &str) -> Result<bool> {
        self.reader().contains(key)
    }

    fn len(&self) -> usize {
        self.reader().len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        self.reader().keys()
    }

    fn is_finalized(&self) -> bool {
        self.reader().is_finalized()
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        self.reader().validate(level)
    }
}
