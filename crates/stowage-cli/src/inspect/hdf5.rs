//! Reports of HDF5 caches: stowage's generic segment caches and aenet's torch caches (a
//! `/torch_cache` group, or the legacy `/force_derivatives`, inside a dataset file).

use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::{Format, OpenMode, Reader, ValidationLevel};
use stowage_hdf5::{AenetReader, CacheVersion, Hdf5Backend};

use super::report::{CacheReport, FileReport, Total, projected_memory};
use crate::error::CliError;
use crate::hangar::allocated_bytes;

/// A generic HDF5 segment cache stowage wrote, of `format` ([`stowage_hdf5::STOWAGE_HDF5`]).
pub fn stowage_hdf5(path: &Path, format: &'static Format) -> Result<CacheReport, CliError> {
    let cache = Hdf5Backend::open(path, OpenMode::ReadOnly)?;
    let mut report = CacheReport::new(path, format);
    report.format = Some(stowage_hdf5::commit_log::FORMAT_NAME.to_owned());
    let log = path.join("stowage.log");
    let committed = stowage_hdf5::commit_log::interpret(&log, &AppendLog::read_all(&log)?)?;
    report.version = Some(committed.header.version.to_string());
    report.finalized = Some(cache.is_finalized());
    report.state = super::report::segment_cache_state(cache.is_finalized());
    report.set_schema(cache.schema());
    let rows: u64 = committed.segments.iter().map(|s| s.rows).sum();
    report.detail("segments", committed.segments.len().to_string());
    report.rows = Some(rows);
    report.set_files(
        path,
        |name| {
            if name.ends_with(".h5") {
                "segment".into()
            } else {
                match name {
                    "stowage.log" => "commit log".into(),
                    "stowage.complete" => "finalize marker".into(),
                    _ => String::new(),
                }
            }
        },
        &[],
    )?;
    report.checksums.scheme = "xxh3 per segment file (in stowage.log, checked before libhdf5 \
                               reads it) and per row (in the segment's index, under Fletcher32)"
        .into();
    report.checksums.covered_files =
        report.files.iter().filter(|f| f.name.ends_with(".h5")).map(|f| f.name.clone()).collect();
    report.checksums.covered_samples = Some(rows);
    report.checksums.samples = Some(rows);
    let structure = cache.validate(ValidationLevel::Structure)?;
    let keys = cache.keys()?;
    report.keys = Some(keys.len() as u64);
    (report.memory, _) = projected_memory(&cache, &keys);
    report
        .set_integrity(&structure, "`stowage verify` also reads every row and checks its checksum");
    Ok(report)
}

/// An aenet dataset file's torch cache, of `format` ([`stowage_hdf5::AENET_HDF5`]).
pub fn aenet(path: &Path, format: &'static Format) -> Result<CacheReport, CliError> {
    let source = AenetReader::open(path)?;
    let cache = source.cache();
    let mut report = CacheReport::new(path, format);
    let signature = cache.signature();
    match cache.version() {
        CacheVersion::V2 => {
            report.format = Some(stowage_hdf5::layout::CACHE_FORMAT_V2.to_owned());
            report.version = Some("2 (/torch_cache)".into());
        }
        CacheVersion::V1Legacy => {
            report.format = Some(stowage_hdf5::layout::DERIVATIVE_PAYLOAD_FORMAT.to_owned());
            report.version = Some("1 (legacy /force_derivatives)".into());
        }
    }
    report.finalized = Some(true);
    report.state =
        "complete (aenet writes the whole file under another name, then renames it)".into();
    report.keys = Some(source.entries().len() as u64);
    report.set_schema(source.schema());
    report.detail("storage dtype", signature.storage_dtype.name());
    report.detail("features", format!("{} entries", cache.feature_entries().len()));
    report.detail(
        "derivatives",
        match cache.derivative_layout() {
            Some(layout) => format!(
                "{} entries (n_radial_features {}, n_angular_features {}, multi {})",
                cache.derivative_entries().len(),
                layout.n_radial_features,
                layout.n_angular_features,
                layout.multi
            ),
            None => "none".into(),
        },
    );
    report.detail("compat sha256", signature.compat_sha256.clone());
    report.detail("compat", signature.compat_json.clone());
    report.detail("manifest", descriptor_manifest(path)?);
    let meta = std::fs::metadata(path).map_err(|e| crate::error::io_error(path, &e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    report.files = vec![FileReport {
        name: name.clone(),
        bytes: meta.len(),
        allocated_bytes: allocated_bytes(&meta),
        role: "dataset file (/entries and the torch cache)".into(),
    }];
    report.total = Total { files: 1, bytes: meta.len(), allocated_bytes: allocated_bytes(&meta) };
    let entries = source.entries().len() as u64;
    let unchecked = cache.unchecked_entries().len() as u64;
    if cache.has_checksums() {
        report.checksums.scheme = "xxh3 per row stowage wrote, in /torch_cache/stowage_checksums \
                                   (a group aenet does not read; aenet's format has none)"
            .into();
    } else {
        report.checksums.scheme = "none (aenet's format has no checksums; libhdf5's Fletcher32 \
                                   is not used)"
            .into();
    }
    if unchecked == entries {
        report.checksums.uncovered_files = vec![name];
    } else {
        report.checksums.covered_files = vec![name];
    }
    report.checksums.covered_samples = Some(entries - unchecked);
    report.checksums.samples = Some(entries);
    let keys = source.keys()?;
    (report.memory, _) = projected_memory(&source, &keys);
    let structure = cache.check(ValidationLevel::Structure);
    report.set_integrity(
        &structure,
        "opening it checked the index tables; `stowage verify` also reads every entry",
    );
    Ok(report)
}

/// The file's `/descriptor_manifest`, as one line: its descriptor class and config hash, or that
/// there is none (aenet then needs a descriptor to load the cache).
fn descriptor_manifest(path: &Path) -> Result<String, CliError> {
    Ok(match stowage_hdf5::DescriptorManifest::read(path)? {
        Some(manifest) => {
            format!("{} (config sha256 {})", manifest.descriptor_class, manifest.config_sha256)
        }
        None => "none (aenet needs a descriptor to load the cache)".into(),
    })
}
