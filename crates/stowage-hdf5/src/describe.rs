//! What an HDF5 cache says about itself for a report ([`stowage_core::Reader::describe`]):
//! stowage's segment caches (commit log, one HDF5 file per segment) and aenet's torch caches (a
//! `/torch_cache` group, or the legacy `/force_derivatives`, inside a dataset file).

use stowage_core::describe::{
    Description, FileRoles, Integrity, projected_memory, segment_log_state,
};
use stowage_core::file_safety::AppendLog;
use stowage_core::{Reader, Result, ValidationLevel};

use crate::aenet_reader::AenetReader;
use crate::backend::{Hdf5Backend, segment_path};
use crate::reader::CacheVersion;

/// The description of a segment cache stowage wrote: the commit log's format and version, the
/// segments and rows (every one covered by the checksums the log and the segment's index keep),
/// memory projected from a sample read, and the structure check.
pub(crate) fn describe_stowage(cache: &Hdf5Backend) -> Result<Description> {
    let dir = cache.path();
    let log = dir.join("stowage.log");
    let committed = crate::commit_log::interpret(&log, &AppendLog::read_all(&log)?)?;
    let mut description = Description::new(segment_log_state(cache.is_finalized()));
    description.format_name = Some(crate::commit_log::FORMAT_NAME.to_owned());
    description.version = Some(committed.header.version.to_string());
    description.finalized = Some(cache.is_finalized());
    let rows: u64 = committed.segments.iter().map(|s| s.rows).sum();
    description.detail("segments", committed.segments.len().to_string());
    let covered = committed.own.runs.last().map_or(0, |run| run.through + 1);
    description.detail(
        "key index",
        format!(
            "{} over {covered} segments, {} segments read at open",
            match committed.own.runs.len() {
                1 => "1 run".to_owned(),
                n => format!("{n} runs"),
            },
            committed.segments.len() as u64 - covered.min(committed.segments.len() as u64)
        ),
    );
    description.rows = Some(rows);
    description.files = FileRoles::by(|name| {
        if name.ends_with(".h5") {
            "segment".into()
        } else if name.starts_with("index/run_") && name.ends_with(".bin") {
            "key index run".into()
        } else {
            match name {
                "stowage.log" => "commit log".into(),
                "stowage.complete" => "finalize marker".into(),
                _ => String::new(),
            }
        }
    });
    description.checksums.scheme = "xxh3 per segment file (in stowage.log, checked by \
                                    validate) and of its metadata (checked before libhdf5 \
                                    reads it), and per row (in the segment's index, under \
                                    Fletcher32)"
        .into();
    description.checksums.covered_files = committed
        .segments
        .iter()
        .map(|s| {
            let path = segment_path(dir, s.id);
            path.strip_prefix(dir).unwrap_or(&path).display().to_string()
        })
        .collect();
    description.checksums.covered_samples = Some(rows);
    description.checksums.samples = Some(rows);
    let structure = cache.validate(ValidationLevel::Structure)?;
    (description.memory, _) = projected_memory(cache, &cache.keys()?);
    description.integrity = Integrity::checked(
        structure,
        "`stowage verify` also reads every row and checks its checksum",
    );
    Ok(description)
}

/// The description of an aenet dataset file's torch cache: its format version, storage dtype,
/// sections, descriptor compatibility and manifest, what stowage's row checksums cover, memory
/// projected from a sample read, and the structure check.
///
/// Errors: the keys cannot be listed; `/descriptor_manifest` cannot be read.
pub(crate) fn describe_aenet(source: &AenetReader) -> Result<Description> {
    let cache = source.cache();
    let path = source.path();
    let mut description = Description::new(
        "complete (aenet writes the whole file under another name, then renames it)",
    );
    let signature = cache.signature();
    match cache.version() {
        CacheVersion::V2 => {
            description.format_name = Some(crate::layout::CACHE_FORMAT_V2.to_owned());
            description.version = Some("2 (/torch_cache)".into());
        }
        CacheVersion::V1Legacy => {
            description.format_name = Some(crate::layout::DERIVATIVE_PAYLOAD_FORMAT.to_owned());
            description.version = Some("1 (legacy /force_derivatives)".into());
        }
    }
    description.finalized = Some(true);
    description.detail("storage dtype", signature.storage_dtype.name());
    description.detail("features", format!("{} entries", cache.feature_entries().len()));
    description.detail(
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
    description.detail("compat sha256", signature.compat_sha256.clone());
    description.detail("compat", signature.compat_json.clone());
    description.detail(
        "manifest",
        match crate::DescriptorManifest::read(path)? {
            Some(manifest) => {
                format!("{} (config sha256 {})", manifest.descriptor_class, manifest.config_sha256)
            }
            None => "none (aenet needs a descriptor to load the cache)".into(),
        },
    );
    description.files = FileRoles::by(|_| "dataset file (/entries and the torch cache)".into());
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let entries = source.entries().len() as u64;
    let unchecked = cache.unchecked_entries().len() as u64;
    description.checksums.scheme = if cache.has_checksums() {
        "xxh3 per row stowage wrote, in /torch_cache/stowage_checksums (a group aenet does not \
         read; aenet's format has none)"
            .into()
    } else {
        "none (aenet's format has no checksums; libhdf5's Fletcher32 is not used)".into()
    };
    if unchecked == entries {
        description.checksums.uncovered_files = vec![name];
    } else {
        description.checksums.covered_files = vec![name];
    }
    description.checksums.covered_samples = Some(entries - unchecked);
    description.checksums.samples = Some(entries);
    (description.memory, _) = projected_memory(source, &source.keys()?);
    description.integrity = Integrity::checked(
        cache.check(ValidationLevel::Structure),
        "opening it checked the index tables; `stowage verify` also reads every entry",
    );
    Ok(description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

    #[test]
    fn a_segment_cache_covers_its_committed_segments() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
        let mut cache = Hdf5Backend::create(dir.path(), &schema).unwrap();
        for (i, key) in ["a", "b"].into_iter().enumerate() {
            let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[i as f32; 2]).unwrap());
            cache.put(key, &sample).unwrap();
            cache.flush().unwrap();
        }
        cache.finalize().unwrap();
        drop(cache);
        let cache = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
        let d = cache.describe().unwrap();
        assert_eq!(d.format_name.as_deref(), Some("stowage-hdf5"));
        assert_eq!((d.finalized, d.rows), (Some(true), Some(2)));
        assert_eq!(
            d.checksums.covered_files,
            ["segments/segment_000000.h5", "segments/segment_000001.h5"]
        );
        assert_eq!(d.files.role("segments/segment_000001.h5"), "segment");
        assert_eq!(d.files.role("stowage.log"), "commit log");
        assert_eq!(d.memory.as_ref().unwrap().bytes, 2 * 8);
        assert!(matches!(d.integrity, Integrity::Checked { ref report, .. } if report.is_clean()));
    }

    #[test]
    fn an_aenet_file_is_one_covered_file_with_its_signature() {
        use crate::{CacheSections, DescriptorCompat, StorageDtype, TorchCacheWriter};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dataset.h5");
        let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
        let only_features = CacheSections { features: true, derivatives: false };
        let mut writer =
            TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, only_features).unwrap();
        writer.add_features(3, &Tensor::from_slice(&[2, 6], &[0.5f64; 12]).unwrap()).unwrap();
        writer.finish().unwrap();
        let source = AenetReader::open(&path).unwrap();
        let d = source.describe().unwrap();
        assert_eq!(d.format_name.as_deref(), Some(crate::layout::CACHE_FORMAT_V2));
        assert_eq!(d.finalized, Some(true));
        assert_eq!(d.checksums.covered_files, ["dataset.h5"]);
        assert_eq!((d.checksums.covered_samples, d.checksums.samples), (Some(1), Some(1)));
        assert_eq!(d.files.role("dataset.h5"), "dataset file (/entries and the torch cache)");
        let detail =
            |label: &str| d.details.iter().find(|x| x.label == label).unwrap().value.clone();
        assert_eq!(detail("storage dtype"), "float64");
        assert_eq!(detail("features"), "1 entries");
        assert_eq!(detail("derivatives"), "none");
        assert!(!detail("manifest").starts_with("none"), "stowage writes aenet's manifest");
        assert_eq!(d.memory.as_ref().unwrap().bytes, 12 * 8);
        assert!(matches!(d.integrity, Integrity::Checked { ref report, .. } if report.is_clean()));
    }
}
