//! [`ArrowBackend::adopt`]: another writer's segments checksummed and committed.

use stowage_core::{Adoption, Result};

use super::{ArrowBackend, Role};
use crate::error::ArrowCacheError;
use crate::row_sums;
use crate::segment::Segment;
use crate::writer::Checked;

impl ArrowBackend {
    /// Adopts every segment another writer (torchcachex) added that this handle reads
    /// ([`ArrowBackend::foreign_segments`]): writes its key sidecar and row checksums beside it
    /// (never touching the segment file), then commits it with an `adopted` record in the commit
    /// log (`crate::commit_log`). From then on it is a committed segment like stowage's own:
    /// every read checks its rows' checksums, `validate` no longer lists it as unchecked, and the
    /// next merge puts its keys in a key index run. It is never compacted away (its file is not
    /// stowage's to delete). Pending samples are flushed first. Adoption vouches for the bytes as
    /// they are now, not for how they were written.
    ///
    /// Every row of every segment is read (decoded and checked against the schema) before any
    /// file is written: a row that does not read fails the adoption and adopts nothing. Then, per
    /// segment, its sidecars are written under temporary names, fsynced and renamed into place,
    /// and only then the `adopted` record is appended and fsynced: a crash leaves each segment
    /// foreign (sidecars the log does not vouch for are ignored, and deleted by the next writer)
    /// or adopted.
    /// torchcachex's `index.pkl` is left alone: no segment changes.
    ///
    /// Errors: `Unsupported` on a read-only handle, on a rank other than the writer rank, or for
    /// a segment id beyond 32 bits; `Poisoned` after a failed write (and a failed write here
    /// poisons the handle); the error of the first row that does not read (`Corrupted`,
    /// `Unsupported` for a value stowage does not return, `Incompatible` for a row outside the
    /// schema), naming the segment and key; `Io`.
    ///
    /// ```
    /// use stowage_arrow::{ArrowBackend, ArrowOptions};
    /// use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
    /// let mut cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default())?;
    /// cache.put("a", &Sample::new().with("tensor", Tensor::from_slice(&[1], &[1f32])?))?;
    /// cache.flush()?;
    /// drop(cache);
    /// // Another writer's segment: here a copy under a new id, which nothing proves stowage's.
    /// let segments = dir.path().join("segments");
    /// std::fs::copy(segments.join("segment_000000.arrow"), segments.join("segment_000001.arrow"))?;
    /// let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, ArrowOptions::default())?;
    /// assert_eq!(cache.validate(ValidationLevel::Full)?.unchecked.len(), 1);
    /// let adoption = cache.adopt()?;
    /// assert_eq!(adoption.samples, 1);
    /// assert!(cache.validate(ValidationLevel::Full)?.is_clean());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt(&mut self) -> Result<Adoption> {
        use stowage_core::Backend;
        self.check_write("adopt")?;
        self.flush()?;
        let Role::Writer(writer) = &mut self.role else {
            unreachable!("check_write refuses every handle but the writer")
        };
        self.state.poison_on_error(writer.settle(&mut self.reader))?;
        // Every row is read before any file is written: a failure here leaves the handle as it
        // was.
        let foreign = self.foreign_segments();
        let mut checked = Vec::with_capacity(foreign.len());
        for segment in &foreign {
            if segment.id > u64::from(u32::MAX) {
                let segments = Some(segment.path.clone());
                return Err(
                    ArrowCacheError::SegmentIdBeyond32Bits { id: segment.id, segments }.into()
                );
            }
            let opened = Segment::open(segment.id, &segment.path)?;
            let keys = opened.keys()?;
            let mut sums = Vec::with_capacity(keys.len());
            for (row, key) in keys.iter().enumerate() {
                let sample = self.reader.read_row(key, segment.id, row)?;
                sums.push(row_sums::of_sample(key, &sample));
            }
            let keys = keys.into_iter().map(str::to_owned).collect();
            checked.push(Checked { id: segment.id, path: segment.path.clone(), keys, sums });
        }
        let mut adoption = Adoption::default();
        let Role::Writer(writer) = &mut self.role else { unreachable!("checked above") };
        for segment in &checked {
            self.state.poison_on_error(writer.adopt(segment, &mut self.reader))?;
            adoption.files.push(segment.path.clone());
            adoption.samples += segment.keys.len() as u64;
        }
        if !checked.is_empty() {
            self.reload_reader()?;
        }
        Ok(adoption)
    }
}
