//! `CacheReader::validate`: every segment, sidecar, checksum and merged-table entry checked
//! against the segments, which are the truth. Never mutates; lists every problem with its file
//! and key.

use std::collections::HashMap;

use stowage_core::{Result, ValidationReport};

use crate::decode::{column_groups, decode_row};
use crate::key_sidecar::{self, KeySidecar};
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
        for (id, path) in self.layout().list_segments()? {
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
            let names: Vec<&str> =
                segment.schema().fields().iter().map(|f| f.name().as_str()).collect();
            let Some(groups) = structure.and_then(|s| column_groups(&names, s).ok()) else {
                report.problem(Some(&path), None, "columns do not fit the output structure");
                continue;
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
