//! `CacheReader::validate`: every segment, sidecar, checksum and merged-table entry checked
//! against the segments, which are the truth. Never mutates; lists every problem with its file
//! and key.

use std::collections::HashMap;

use stowage_core::{Result, ValidationReport};

use crate::commit_log;
use crate::decode::{column_groups, decode_row};
use crate::key_sidecar::{self, KeySidecar};
use crate::layout::Layout;
use crate::merged_index::MergedIndex;
use crate::reader::CacheReader;
use crate::row_sums::{self, RowSums};
use crate::segment::Segment;

impl CacheReader {
    /// Checks the whole cache: each segment decodes, every row decodes and matches its row
    /// checksum (where the segment has them), each key sidecar finds every key of its segment at
    /// its winning row, and the merged table finds every key of the segments it covers at its
    /// winning row. Damage is a [`stowage_core::Problem`] in the report, not an error; only a
    /// directory that cannot be listed is.
    pub fn validate(&self) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        let structure = self.output_structure().ok();
        // Every readable segment's keys, read once, for the merged table's check.
        let mut segment_keys: Vec<(u64, Vec<String>)> = Vec::new();
        for (id, path) in self.segment_paths() {
            let path = path.to_path_buf();
            report.files_checked += 1;
            let segment = match Segment::open(id, &path) {
                Ok(segment) => segment,
                Err(e) => {
                    report.problem(Some(&path), None, e.to_string());
                    continue;
                }
            };
            let keys = match segment.keys() {
                Ok(keys) => keys,
                Err(e) => {
                    report.problem(Some(&path), None, e.to_string());
                    continue;
                }
            };
            let mut last_row: HashMap<&str, usize> = HashMap::new();
            for (row, key) in keys.iter().enumerate() {
                last_row.insert(key, row);
            }
            segment_keys.push((id, keys.iter().map(|k| (*k).to_owned()).collect()));
            check_sidecar(&mut report, &segment, &keys, &last_row);
            let groups = structure
                .ok_or_else(|| "schema.json names no output structure".to_owned())
                .and_then(|s| column_groups(segment.schema(), s));
            let groups = match groups {
                Ok(groups) => groups,
                Err(why) => {
                    report.problem(Some(&path), None, format!("columns do not fit: {why}"));
                    continue;
                }
            };
            let sums_path = row_sums::sums_path(&path);
            let sums = match RowSums::open(&sums_path) {
                Ok(sums) => {
                    report.files_checked += 1;
                    if let Err(e) = sums.verify() {
                        report.problem(Some(&sums_path), None, e.to_string());
                    }
                    if sums.rows() != keys.len() {
                        let detail = format!("{} checksums for {} rows", sums.rows(), keys.len());
                        report.problem(Some(&sums_path), None, detail);
                    }
                    Some(sums)
                }
                Err(stowage_core::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    None
                }
                Err(e) => {
                    report.problem(Some(&sums_path), None, e.to_string());
                    None
                }
            };
            for (row, key) in keys.iter().enumerate() {
                report.samples_checked += 1;
                let (batch, at) = segment.locate(row).expect("rows of the segment");
                match decode_row(batch, at, &groups) {
                    Err(why) => report.problem(Some(&path), Some(key), format!("row {row}: {why}")),
                    Ok(sample) => {
                        let actual = row_sums::of_sample(key, &sample);
                        if let Some(stored) = sums.as_ref().and_then(|s| s.get(row))
                            && stored != actual
                        {
                            let detail = format!(
                                "row {row}: checksum {actual:016x}, {} records {stored:016x}",
                                sums_path.display()
                            );
                            report.problem(Some(&path), Some(key), detail);
                        }
                    }
                }
            }
        }
        check_merged(self, &mut report, &segment_keys);
        Ok(report)
    }
}

/// The segment's key sidecar, when it has one, finds each key at its last row in the segment.
fn check_sidecar(
    report: &mut ValidationReport,
    segment: &Segment,
    keys: &[&str],
    last_row: &HashMap<&str, usize>,
) {
    let path = key_sidecar::sidecar_path(segment.path());
    let sidecar = match KeySidecar::open(&path) {
        Ok(sidecar) => sidecar,
        Err(stowage_core::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return;
        }
        Err(e) => return report.problem(Some(&path), None, e.to_string()),
    };
    report.files_checked += 1;
    if let Err(e) = sidecar.verify() {
        report.problem(Some(&path), None, e.to_string());
    }
    for (key, &row) in last_row {
        let found = sidecar.find(key, |r| keys.get(r) == Some(key));
        if found != Some(row) {
            report.problem(
                Some(&path),
                Some(key),
                format!("finds row {found:?}, the segment's is {row}"),
            );
        }
    }
}

/// The merged table, when there is one, finds every key of the segments it covers (of
/// `segment_keys`: every readable segment's keys, in id order) at its winner.
fn check_merged(
    reader: &CacheReader,
    report: &mut ValidationReport,
    segment_keys: &[(u64, Vec<String>)],
) {
    let path = reader.layout().merged_index();
    let merged = match MergedIndex::open(&path) {
        Ok(merged) => merged,
        Err(stowage_core::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return;
        }
        Err(e) => return report.problem(Some(&path), None, e.to_string()),
    };
    match reader.expected_merge() {
        // A table the commit log does not vouch for: withdrawn by a compaction, or written by a
        // merge whose record a crash cut off. Readers never use it; the next merge replaces it.
        Some(None) => return,
        Some(Some(through)) if merged.through() > through => return,
        Some(Some(through)) if through != merged.through() => {
            let detail = format!(
                "covers segments through {}, the commit log records one through {through}",
                merged.through()
            );
            return report.problem(Some(&path), None, detail);
        }
        _ => {}
    }
    report.files_checked += 1;
    if let Err(e) = merged.verify() {
        report.problem(Some(&path), None, e.to_string());
    }
    // The winners among the covered segments only: a newer segment may hold the key again.
    let segments: Vec<&(u64, Vec<String>)> =
        segment_keys.iter().filter(|(id, _)| *id <= merged.through()).collect();
    let mut covered: HashMap<&str, (u64, usize)> = HashMap::new();
    for (id, keys) in &segments {
        for (row, key) in keys.iter().enumerate() {
            covered.insert(key, (*id, row));
        }
    }
    let key_of = |id: u64, row: usize| {
        segments.iter().find(|(s, _)| *s == id).and_then(|(_, keys)| keys.get(row))
    };
    for (key, &winner) in &covered {
        let found = merged.find(key, |id, row| key_of(id, row).is_some_and(|k| k == key));
        if found != Some(winner) {
            let detail = format!("finds {found:?}, the segments' winner is {winner:?}");
            report.problem(Some(&path), Some(key), detail);
        }
    }
    if merged.keys() != covered.len() as u64 {
        let detail = format!("counts {} keys, the segments hold {}", merged.keys(), covered.len());
        report.problem(Some(&path), None, detail);
    }
}

/// What only a cache stowage writes must also satisfy: its commit log reads, every committed
/// segment is there with the size and rows recorded and has its key sidecar and row checksums,
/// and `schema.json` is what torchcachex needs for the schema (`expected_schema_json`).
pub(crate) fn check_commits(
    report: &mut ValidationReport,
    layout: &Layout,
    expected_schema_json: &[u8],
) -> Result<()> {
    let log_path = layout.commit_log();
    report.files_checked += 1;
    let committed = match commit_log::read(&log_path) {
        Ok(committed) => committed,
        Err(e) => {
            report.problem(Some(&log_path), None, e.to_string());
            return Ok(());
        }
    };
    for entry in &committed.segments {
        let path = layout.segment(entry.id);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.len() != entry.bytes => report.problem(
                Some(&path),
                None,
                format!("{} bytes, {} records {}", meta.len(), log_path.display(), entry.bytes),
            ),
            Ok(_) => {}
            Err(e) => report.problem(Some(&path), None, format!("committed segment: {e}")),
        }
        if let Ok(segment) = Segment::open(entry.id, &path)
            && segment.rows() as u64 != entry.rows
        {
            let detail =
                format!("{} rows, {} records {}", segment.rows(), log_path.display(), entry.rows);
            report.problem(Some(&path), None, detail);
        }
        for sidecar in [key_sidecar::sidecar_path(&path), row_sums::sums_path(&path)] {
            if !sidecar.exists() {
                report.problem(Some(&sidecar), None, "missing (every committed segment has one)");
            }
        }
    }
    let marker_path = layout.complete_marker();
    match commit_log::CompleteMarker::read(&marker_path) {
        Err(e) => report.problem(Some(&marker_path), None, e.to_string()),
        Ok(Some(marker)) if marker.log_records > committed.records => report.problem(
            Some(&log_path),
            None,
            format!(
                "holds {} complete records, {} says the cache was finalized at {}: the log was \
                 cut short",
                committed.records,
                marker_path.display(),
                marker.log_records
            ),
        ),
        Ok(None) if committed.finalized => report.problem(
            Some(&marker_path),
            None,
            "missing, though the commit log says the cache was finalized (reopening for writing \
             restores it)",
        ),
        Ok(_) => {}
    }
    if let Some(merged) = committed.merged
        && !layout.merged_index().exists()
    {
        let detail = format!(
            "missing, though {} records one through segment {} (lookups fall back to the \
             sidecars; a writer rebuilds it)",
            log_path.display(),
            merged.through
        );
        report.problem(Some(&layout.merged_index()), None, detail);
    }
    let schema_path = layout.schema();
    report.files_checked += 1;
    match std::fs::read(&schema_path) {
        Ok(bytes) if bytes == expected_schema_json => {}
        Ok(_) => report.problem(
            Some(&schema_path),
            None,
            format!(
                "differs from the one the schema in {} gives: {}",
                log_path.display(),
                String::from_utf8_lossy(expected_schema_json)
            ),
        ),
        Err(e) => report.problem(Some(&schema_path), None, format!("torchcachex needs it: {e}")),
    }
    Ok(())
}
