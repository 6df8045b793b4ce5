//! The reading half of [`JournalBackend`]: the [`Reader`] trait, which every handle offers,
//! read-only or not.

use std::path::Path;

use stowage_core::{
    Capabilities, Error, Format, Reader, Result, Sample, Schema, ValidationLevel, ValidationReport,
};

use crate::JournalBackend;
use crate::backend::{BACKEND_NAME, marker_path, read_marker};

impl Reader for JournalBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        &crate::JOURNAL
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        Ok(self.index.get(key).map(|&at| self.samples[at].1.clone()))
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.index.contains_key(key))
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.samples.iter().map(|(key, _)| key.clone()).collect())
    }

    fn is_finalized(&self) -> bool {
        self.state.is_finalized()
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        // Every record is checksummed by the journal: reading it back is the full check.
        let _ = level;
        let mut report = ValidationReport { files_checked: 1, ..ValidationReport::default() };
        match JournalBackend::load(&self.dir) {
            Ok(cache) => {
                report.samples_checked = cache.samples.len() as u64;
                if cache.state.is_finalized() && read_marker(&self.dir)?.is_none() {
                    let detail = "missing, though the journal says the cache was finalized";
                    report.problem(Some(&marker_path(&self.dir)), None, detail);
                }
            }
            Err(Error::Corrupted { path, key, detail }) => {
                report.problem(Some(&path), key.as_deref(), detail);
            }
            Err(e) => return Err(e),
        }
        Ok(report)
    }
}
