//! Checks the campaigns make of a cache, with failure messages that quote what the backend said.

use stowage_core::{Backend, ValidationLevel};

/// `validate(Full)` of `cache` reports no problem; the error lists every problem it reports.
pub fn validate_clean(cache: &dyn Backend) -> Result<(), String> {
    let report = cache.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
    if report.is_clean() {
        return Ok(());
    }
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    Err(format!("validate(Full) reports: {}", problems.join("; ")))
}
