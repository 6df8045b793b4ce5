//! `validate` of an aenet torch cache: what stowage can vouch for, what it found damaged, and what
//! another writer added that stowage's checksums do not cover.

use std::path::Path;

use stowage_core::{Error, Result, Unchecked, ValidationLevel, ValidationReport};

use crate::derivatives::LocalDerivatives;
use crate::reader::{CacheVersion, TorchCache};

/// The writer of rows stowage's checksums do not cover, as far as the layout tells.
const FOREIGN_WRITER: &str = "aenet";

impl TorchCache {
    /// Checks the torch cache in the HDF5 file at `path`, from disk.
    ///
    /// - `Structure`: the file opens, the attributes and index tables are consistent (every index
    ///   row points into its payload, no entry twice), stowage's checksum tables are intact.
    /// - `Full`: also every entry's rows read with their index counts, every row stowage wrote
    ///   against its checksum, and every derivative array's shape against the section's feature
    ///   counts. Each damaged entry is a problem naming the file and the
    ///   entry (its key is the entry index).
    ///
    /// Rows stowage's checksums do not cover (aenet's per-entry appends, a cache aenet built, one
    /// stowage wrote before it kept checksums) are listed in
    /// [`ValidationReport::unchecked`] (writer `aenet`, counted in entries): such a file is
    /// never clean, though not damaged either. [`crate::TorchCacheWriter::adopt`] checksums
    /// them.
    ///
    /// Errors: `Error::NotFound` when the file does not exist or holds no torch cache. A file
    /// that does not open as a cache is a problem in the report, not an error.
    ///
    /// ```
    /// use stowage_core::{Tensor, ValidationLevel};
    /// use stowage_hdf5::{CacheSections, DescriptorCompat, StorageDtype, TorchCache, TorchCacheWriter};
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("dataset.h5");
    /// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
    /// let mut writer =
    ///     TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, CacheSections::default())?;
    /// writer.add_features(0, &Tensor::from_slice(&[2, 6], &[0.5f64; 12])?)?;
    /// writer.finish()?;
    /// let report = TorchCache::validate(&path, ValidationLevel::Full)?;
    /// assert!(report.is_clean() && report.samples_checked == 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn validate(path: impl AsRef<Path>, level: ValidationLevel) -> Result<ValidationReport> {
        let path = path.as_ref();
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        let cache = match TorchCache::open(path) {
            Ok(Some(cache)) => cache,
            Ok(None) => {
                return Err(Error::NotFound {
                    what: format!(
                        "torch cache in {} (neither /torch_cache nor /force_derivatives)",
                        path.display()
                    ),
                });
            }
            Err(e @ Error::NotFound { .. }) => return Err(e),
            Err(e) => {
                report.problem(Some(path), None, e.to_string());
                return Ok(report);
            }
        };
        Ok(cache.check(level))
    }

    /// [`TorchCache::validate`] of this cache, already open (opening it checked what the
    /// `Structure` level checks of the file): at `Full`, every entry read; at both levels, what
    /// stowage's checksums do not cover.
    ///
    /// ```no_run
    /// use stowage_core::ValidationLevel;
    /// let cache = stowage_hdf5::TorchCache::open("dataset.h5")?.expect("a cache");
    /// let report = cache.check(ValidationLevel::Structure);
    /// println!("{} files hold rows stowage did not checksum", report.unchecked.len());
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn check(&self, level: ValidationLevel) -> ValidationReport {
        let path = self.path();
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        if level == ValidationLevel::Full {
            for entry in self.entries() {
                report.samples_checked += 1;
                let key = entry.to_string();
                if let Err(e) = self.features(entry) {
                    report.problem(Some(path), Some(&key), e.to_string());
                }
                match self.derivatives(entry) {
                    Ok(Some(derivatives)) => {
                        if let Some(problem) = self.derivative_shape_problem(&derivatives) {
                            report.problem(Some(path), Some(&key), problem);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => report.problem(Some(path), Some(&key), e.to_string()),
                }
            }
        }
        if let Some(unchecked) = self.unchecked() {
            report.unchecked.push(unchecked);
        }
        report
    }

    /// What is wrong with the shapes of an entry's derivative arrays, measured against the
    /// section's feature counts and `multi`: `None` when they fit.
    fn derivative_shape_problem(&self, derivatives: &LocalDerivatives) -> Option<String> {
        let layout = self.derivative_layout()?;
        let (nr, na, multi) = (layout.n_radial_features, layout.n_angular_features, layout.multi);
        derivatives.check(nr, na, multi).err().map(|e| format!("derivatives: {e}"))
    }

    /// What of this cache stowage's checksums do not cover, for [`ValidationReport::unchecked`]:
    /// `None` when every row is covered.
    pub fn unchecked(&self) -> Option<Unchecked> {
        let entries = self.unchecked_entries();
        if entries.is_empty() {
            return None;
        }
        let (features, derivatives) = self.unchecked_rows();
        let rows = format!(
            "{features} feature row{} and {derivatives} force-derivative row{}",
            plural(features),
            plural(derivatives)
        );
        let why = if self.version() == CacheVersion::V1Legacy {
            format!(
                "a legacy v1 cache carries no stowage checksums ({rows}); adopting rewrites it \
                 as a v2 /torch_cache holding the same rows (the v1 group is kept)"
            )
        } else if self.has_checksums() {
            format!("{rows} were appended by another writer (aenet's per-entry appends)")
        } else {
            format!(
                "the file holds no stowage checksums (written by aenet, or by stowage before it \
                 kept them): {rows}"
            )
        };
        Some(Unchecked {
            path: self.path().to_path_buf(),
            writer: FOREIGN_WRITER.to_owned(),
            samples: entries.len() as u64,
            next_step: format!(
                "{why}; run `stowage adopt {}` to check and checksum them",
                self.path().display()
            ),
        })
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
