//! Adopting rows another writer (DNANet) added: checksumming them into `stowage_checksums.bin`,
//! so that from then on they are checked like stowage's own.

use std::io::Write;
use std::path::PathBuf;

use stowage_core::file_safety::atomic_write_with;
use stowage_core::{Adoption, Error, Result, Sample, Value};

use crate::backend::Recorded;
use crate::coverage::{self, Verdict};
use crate::error::MemmapError;
use crate::field_file::FieldFile;
use crate::{MemmapBackend, checksum};

/// Refusals an adoption lists; the others are counted.
const REFUSALS_SHOWN: usize = 5;

impl MemmapBackend {
    /// Checksums every row that no stowage checksum covers (rows DNANet committed: beyond the end
    /// of `stowage_checksums.bin`, or with a placeholder row), as the rows are now, and returns
    /// what was adopted. Afterwards `validate` reports them like stowage's own rows, and `get`
    /// verifies them. Adoption vouches for the bytes it reads, not for how they were written: run
    /// [`Reader::validate`](stowage_core::Reader::validate) with DNANet's own tools first if in
    /// doubt.
    ///
    /// Needs a writer handle ([`MemmapBackend::open_append`]; a finalized cache opens for writing
    /// too, taking only the lock). Unflushed rows are flushed first. The whole checksum file is
    /// written anew, atomically (temporary file, fsync, rename, directory fsync): a crash leaves
    /// the old file or the new one. Stowage's existing checksum rows are copied, never recomputed,
    /// so damage to stowage's own rows stays detected. DNANet's files are not touched. A cache
    /// without `stowage.json` (one DNANet wrote alone) first gets `stowage.json` with the schema
    /// its rows have; a crash right after leaves every row unchecked, and adopting again
    /// completes it.
    ///
    /// DNANet takes no lock: do not adopt while DNANet writes to the cache.
    ///
    /// Errors: `Unsupported` on a read-only handle, or for a DNANet cache whose fields are stored
    /// big-endian; `Corrupted` when `validate` would report a problem in the checksum file (a row
    /// stowage committed without its checksum row, a file longer than the rows or ending in a
    /// partial row, or shorter than stowage's finalize recorded): adopting never covers damage.
    /// Errors reading a row (a short `.bin` file, a missing sidecar key) are returned as they are.
    ///
    /// ```
    /// use stowage_core::{Backend, Reader, Sample, Tensor, ValidationLevel, Value};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mut cache = MemmapBackend::create(dir.path(), &dnanet(1, 2), MemmapOptions::default())?;
    /// let row = Sample::new()
    ///     .with("data", Tensor::from_slice(&[1, 2], &[1i16, 2])?)
    ///     .with("scaler", Tensor::from_slice(&[2], &[1f32, 2.0])?)
    ///     .with("meta_json", Value::Json("{}".into()));
    /// cache.put("/a.hid", &row)?;
    /// cache.finalize()?;
    /// // Nothing another writer added: nothing to adopt.
    /// assert!(cache.adopt()?.is_empty());
    /// assert!(cache.validate(ValidationLevel::Full)?.is_clean());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt(&mut self) -> Result<Adoption> {
        self.writer("adopt")?;
        if !self.row_format().checksums {
            self.start_checksums()?;
        }
        stowage_core::Backend::flush(self)?;
        let mut refusals: Vec<String> =
            self.checksum_file_problems().into_iter().map(|e| e.to_string()).collect();
        // The rows stream by once (an unfinished cache's manifest is read, not loaded): what is
        // kept is the ranges of rows to adopt.
        let mut adopted = Vec::new();
        let mut unshown = 0usize;
        self.each_row(&mut |row, entry| {
            match self.verdict(row, &entry.path)? {
                Verdict::Verify(_) => {}
                Verdict::Unchecked => coverage::push_row(&mut adopted, row),
                Verdict::Missing => {
                    // Only the first few are shown: the others are counted, not kept.
                    match refusals.len() < REFUSALS_SHOWN {
                        true => refusals.push(self.missing_checksum(row, &entry.path).to_string()),
                        false => unshown += 1,
                    }
                }
            }
            Ok(())
        })?;
        if !refusals.is_empty() {
            let more = refusals.len().saturating_sub(REFUSALS_SHOWN) + unshown;
            refusals.truncate(REFUSALS_SHOWN);
            if more > 0 {
                refusals.push(format!("and {more} more"));
            }
            let checksums = self.layout().checksums();
            return Err(MemmapError::AdoptRefused { checksums, refusals }.into());
        }
        let samples: u64 = adopted.iter().map(|r| r.len() as u64).sum();
        if samples == 0 {
            return Ok(Adoption::default());
        }
        self.write_adopted(&adopted)?;
        Ok(Adoption { files: self.adopted_files(), samples })
    }

    /// Writes the checksum file atomically, a row computed from the row as it is now for each of
    /// `adopted` (sorted ranges of rows), the stored row kept for the others, and reopens it. A row
    /// that cannot be read leaves the old file in place and the handle usable; a failure to write,
    /// rename or reopen the file poisons the handle (what reached the disk is unknown).
    fn write_adopted(&mut self, adopted: &[std::ops::Range<usize>]) -> Result<()> {
        let path = self.layout().checksums();
        let width = self.row_format().checksum_layout().row_bytes;
        let rows = stowage_core::Reader::len(self);
        // The first error reading a row, kept whole (the writer's io::Error only carries text).
        let mut failure: Option<Error> = None;
        let written = atomic_write_with(&path, |out| {
            for row in 0..rows {
                let bytes = match coverage::contains(adopted, row) {
                    false => self.stored_checksum_row(row),
                    true => self.computed_checksum_row(row),
                };
                match bytes {
                    Ok(bytes) => {
                        debug_assert_eq!(bytes.len(), width);
                        out.write_all(&bytes)?;
                    }
                    Err(e) => {
                        let message = e.to_string();
                        failure = Some(e);
                        return Err(std::io::Error::other(message));
                    }
                }
            }
            Ok(())
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let layout = self.layout().clone();
        let format = self.row_format().clone();
        let reopened = written.and_then(|()| match self.session_mut() {
            Some(session) => session.reopen_checksums(&layout, &format, rows),
            None => Ok(()),
        });
        self.poison(reopened)?;
        if self.session_mut().is_none() {
            let map = FieldFile::new(layout.checksums(), format.checksum_layout(), rows);
            self.replace_checksum_map(map);
        }
        Ok(())
    }

    /// The stored checksum row of `row`, copied.
    fn stored_checksum_row(&self, row: usize) -> Result<Vec<u8>> {
        self.stored_checksums(row).map(|bytes| bytes.into_owned())
    }

    /// The checksum row of `row` as it reads now: its key, then every field in schema order.
    fn computed_checksum_row(&self, row: usize) -> Result<Vec<u8>> {
        let sample: Sample = self.read_row(row, false)?;
        let entry = self.entry(row)?;
        let key = &entry.path;
        let mut sums = Vec::with_capacity(8 * self.row_format().checksums_per_row());
        sums.extend_from_slice(&checksum::of_key(key).to_le_bytes());
        for field in &self.row_format().schema.fields {
            let sum = checksum::of_value(match sample.get(&field.name) {
                Some(Value::Tensor(tensor)) => Some(tensor.bytes()),
                Some(Value::Json(text)) => Some(text.as_bytes()),
                _ => None,
            });
            sums.extend_from_slice(&sum.to_le_bytes());
        }
        Ok(sums)
    }

    /// The files whose rows an adoption covers: every tensor field's, and the file listing the
    /// rows with their JSON texts (the manifest, or the index and its sidecars).
    fn adopted_files(&self) -> Vec<PathBuf> {
        let layout = self.layout();
        let mut files: Vec<PathBuf> =
            self.row_format().tensors.iter().map(|t| layout.field_file(&t.layout.name)).collect();
        match self.recorded() {
            Recorded::ByManifest { .. } => files.push(layout.manifest()),
            Recorded::ByFinalize => {
                files.push(layout.index());
                files.extend(self.sidecars().map(|(_, sidecar)| sidecar.path().to_path_buf()));
            }
        }
        files
    }
}
