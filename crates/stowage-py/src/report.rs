//! What `Cache.validate` found, and a backend's capabilities, as Python objects.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stowage_core::Capabilities;

/// What `Cache.validate` found.
///
/// ```python
/// report = cache.validate()
/// if not report.clean:
///     for path, key, detail in report.problems:
///         print(path, key, detail)
/// ```
#[pyclass(frozen, module = "stowage", name = "ValidationReport")]
pub struct ValidationReport {
    /// No problem found and every byte checked (no data another writer added).
    #[pyo3(get)]
    clean: bool,
    /// No problem found in what was checked.
    #[pyo3(get)]
    undamaged: bool,
    /// Samples whose bytes or records were checked.
    #[pyo3(get)]
    samples_checked: u64,
    /// Files examined.
    #[pyo3(get)]
    files_checked: u64,
    /// `(path, key, detail)` of each problem.
    #[pyo3(get)]
    problems: Vec<(Option<String>, Option<String>, String)>,
    /// One line per file of data another writer added, which stowage's checksums do not cover.
    #[pyo3(get)]
    unchecked: Vec<String>,
}

impl From<stowage_core::ValidationReport> for ValidationReport {
    fn from(report: stowage_core::ValidationReport) -> ValidationReport {
        ValidationReport {
            clean: report.is_clean(),
            undamaged: report.is_undamaged(),
            samples_checked: report.samples_checked,
            files_checked: report.files_checked,
            problems: report
                .problems
                .iter()
                .map(|p| {
                    (
                        p.path.as_ref().map(|p| p.display().to_string()),
                        p.key.clone(),
                        p.detail.clone(),
                    )
                })
                .collect(),
            unchecked: report.unchecked.iter().map(ToString::to_string).collect(),
        }
    }
}

#[pymethods]
impl ValidationReport {
    fn __repr__(&self) -> String {
        format!(
            "<stowage.ValidationReport clean={} samples_checked={} problems={} unchecked={}>",
            if self.clean { "True" } else { "False" },
            self.samples_checked,
            self.problems.len(),
            self.unchecked.len()
        )
    }

    fn __bool__(&self) -> bool {
        self.clean
    }
}

/// A backend's capabilities as a dict: each flag by its Rust name (`zero_copy_get`, `ragged`,
/// ...), `dtypes` as names, and the limits (`None` when unlimited).
pub fn capabilities_dict<'py>(
    py: Python<'py>,
    caps: &Capabilities,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let flags = [
        ("variable_shapes", caps.variable_shapes),
        ("ragged", caps.ragged),
        ("nullable", caps.nullable),
        ("bytes_fields", caps.bytes_fields),
        ("json_fields", caps.json_fields),
        ("overwrite", caps.overwrite),
        ("append_after_finalize", caps.append_after_finalize),
        ("resume", caps.resume),
        ("durable_flush", caps.durable_flush),
        ("checksums", caps.checksums),
        ("zero_copy_get", caps.zero_copy_get),
        ("concurrent_readers", caps.concurrent_readers),
        ("concurrent_writers", caps.concurrent_writers),
    ];
    for (name, flag) in flags {
        dict.set_item(name, flag)?;
    }
    let dtypes: Vec<&str> = caps.dtypes.iter().map(|d| d.name()).collect();
    dict.set_item("dtypes", dtypes)?;
    dict.set_item("max_rank", caps.max_rank)?;
    dict.set_item("max_key_bytes", caps.max_key_bytes)?;
    dict.set_item("max_fields", caps.max_fields)?;
    Ok(dict)
}
