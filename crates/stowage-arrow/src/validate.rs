//! `CacheReader::validate`: every segment, sidecar, checksum and key index run checked
//! against the segments, which are the truth. Never mutates; lists every problem with its file
//! and key, and every segment another writer added (read, decoded and checked against the
//! schema, but covered by no checksum) as unchecked.

use std::collections::HashMap;

use stowage_core::{Result, Unchecked, ValidationReport};

use crate::commit_log::RunEntry;
use crate::decode::decode_row;
use crate::key_sidecar::{self, KeySidecar};
use crate::layout::Layout;
use crate::merged_index::MergedIndex;
use crate::ownership::SegmentOrigin;
use crate::reader::{CacheReader, conform};
use crate::row_sums::{self, RowSums};
use crate::segment::Segment;

impl CacheReader {
    /// Checks the whole cache: each segment decodes, every row decodes and matches its row
    /// checksum (where the segment has them), each key sidecar finds every key of its segment at
    /// its winning row, and each key index run finds every key of the segments it covers at its
    /// winning row and counts them right. Damage is a [`stowage_core::Problem`] in the report,
    /// not an error; only a directory that cannot be listed is. A segment another writer added
    /// (`SegmentOrigin::Foreign`) is one [`Unchecked`] entry: its rows are
    /// decoded (and checked against the schema given to [`CacheReader::with_schema`]), a failure
    /// being a problem, but no checksum covers them.
    pub fn validate(&self) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        // Every readable committed segment's keys, read once, for the runs' check.
        let mut segment_keys: Vec<(u64, Vec<String>)> = Vec::new();
        for (id, path, origin) in self.segment_origins() {
            let path = path.to_path_buf();
            report.files_checked += 1;
            let segment = match Segment::open(id, &path) {
                Ok(segment) => {
                    // Every row is read: the whole file asked for at once.
                    segment.will_need();
                    segment
                }
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
            if let SegmentOrigin::Foreign { writer } = origin {
                report.unchecked.push(unchecked_segment(self.layout(), &path, writer, keys.len()));
            } else {
                let mut last_row: HashMap<&str, usize> = HashMap::new();
                for (row, key) in keys.iter().enumerate() {
                    last_row.insert(key, row);
                }
                segment_keys.push((id, keys.iter().map(|k| (*k).to_owned()).collect()));
                check_sidecar(&mut report, &segment, &keys, &last_row);
            }
            let groups = match self.groups_of(&segment) {
                Ok(groups) => groups,
                Err(why) => {
                    report.problem(Some(&path), None, format!("columns do not fit: {why}"));
                    continue;
                }
            };
            let sums_path = row_sums::sums_path(&path);
            // Another writer's segment has no checksums; a file of that name is not vouched for.
            let sums = match origin.is_foreign() {
                true => None,
                false => open_sums(&mut report, &sums_path, keys.len()),
            };
            for (row, key) in keys.iter().enumerate() {
                // Another writer's rows are decoded, but no checksum vouches for their bytes.
                report.samples_checked += u64::from(!origin.is_foreign());
                let (batch, at) = segment.locate(row).expect("rows of the segment");
                let decoded = decode_row(batch, at, &groups).map_err(|e| e.to_string());
                let decoded = match (self.schema(), origin.is_stowage()) {
                    (Some(schema), false) => decoded.and_then(|s| conform(s, schema)),
                    _ => decoded,
                };
                match decoded {
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
        check_runs(self, &mut report, &segment_keys);
        Ok(report)
    }
}

/// The [`Unchecked`] entry of another writer's segment at `path` (of the cache `layout`), which
/// `writer` wrote with `rows` rows.
pub(crate) fn unchecked_segment(
    layout: &Layout,
    path: &std::path::Path,
    writer: &str,
    rows: usize,
) -> Unchecked {
    Unchecked {
        path: path.to_path_buf(),
        writer: writer.to_owned(),
        samples: rows as u64,
        next_step: format!(
            "run `stowage adopt {}` (ArrowBackend::adopt) to checksum it",
            layout.root().display()
        ),
    }
}

/// The row checksums at `path` of a segment of `rows` rows, checked whole; `None` when there
/// are none (a problem when they are damaged).
fn open_sums(
    report: &mut ValidationReport,
    path: &std::path::Path,
    rows: usize,
) -> Option<RowSums> {
    match RowSums::open(path) {
        Ok(sums) => {
            report.files_checked += 1;
            if let Err(e) = sums.verify() {
                report.problem(Some(path), None, e.to_string());
            }
            if sums.rows() != rows {
                let detail = format!("{} checksums for {rows} rows", sums.rows());
                report.problem(Some(path), None, detail);
            }
            Some(sums)
        }
        Err(stowage_core::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            None
        }
        Err(e) => {
            report.problem(Some(path), None, e.to_string());
            None
        }
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

/// Each key index run finds every key of the segments it covers (of `segment_keys`: every
/// readable segment's keys, in id order) at its winner within them, and counts its keys and the
/// keys new to it right. The runs checked are the ones the commit log vouches for (a missing or
/// disagreeing one is a problem: lookups then fall back to the sidecars), or for a cache without
/// one, every run file in the directory.
pub(crate) fn check_runs(
    reader: &CacheReader,
    report: &mut ValidationReport,
    segment_keys: &[(u64, Vec<String>)],
) {
    // The runs this reader mapped at open are checked as mapped: a writer's merge or finalize
    // may have replaced their files since, and the reader still answers from them.
    let mut loaded: Vec<&MergedIndex> = Vec::new();
    let mut opened: Vec<MergedIndex> = Vec::new();
    match reader.expected_runs() {
        Some(entries) => {
            for entry in entries {
                if let Some(run) = reader.runs().find(|run| run.entry() == *entry) {
                    loaded.push(run);
                    continue;
                }
                let path = reader.layout().index_run(entry.first, entry.through);
                match MergedIndex::open_entry(reader.layout(), entry) {
                    Ok(run) => opened.push(run),
                    // An earlier stowage's format: readers do not use it (the sidecars answer),
                    // and the writer's next merge rebuilds the index. Not damage, and nothing
                    // checked.
                    Err(_) if MergedIndex::is_legacy(&path) => {}
                    Err(e) => {
                        let detail = format!(
                            "{e} (the commit log records {entry:?}; lookups fall back to the \
                             sidecars and the writer's next merge rebuilds it)"
                        );
                        report.problem(Some(&path), None, detail);
                    }
                }
            }
        }
        // Without a commit log, every run file there is: one a reader skips as damaged is
        // still damage.
        None => {
            let found = reader.layout().list_index_runs().unwrap_or_default();
            for (_, _, path) in found {
                match MergedIndex::open(&path) {
                    Ok(run) => opened.push(run),
                    Err(_) if MergedIndex::is_legacy(&path) => {}
                    Err(e) => report.problem(Some(&path), None, e.to_string()),
                }
            }
        }
    }
    for run in loaded.into_iter().chain(&opened) {
        check_run(report, run, segment_keys);
    }
}

fn check_run(
    report: &mut ValidationReport,
    run: &MergedIndex,
    segment_keys: &[(u64, Vec<String>)],
) {
    let path = run.path();
    report.files_checked += 1;
    if let Err(e) = run.verify() {
        report.problem(Some(path), None, e.to_string());
    }
    // The winners among the covered segments only: a newer segment may hold the key again.
    let RunEntry { first, through, .. } = run.entry();
    let segments: Vec<&(u64, Vec<String>)> =
        segment_keys.iter().filter(|(id, _)| (first..=through).contains(id)).collect();
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
        let found = run.find(key, |id, row| key_of(id, row).is_some_and(|k| k == key));
        if found != Some(winner) {
            let detail = format!("finds {found:?}, the segments' winner is {winner:?}");
            report.problem(Some(path), Some(key), detail);
        }
    }
    if run.keys() != covered.len() as u64 {
        let detail = format!("counts {} keys, the segments hold {}", run.keys(), covered.len());
        report.problem(Some(path), None, detail);
    }
    let older: std::collections::HashSet<&str> = segment_keys
        .iter()
        .filter(|(id, _)| *id < first)
        .flat_map(|(_, keys)| keys.iter().map(String::as_str))
        .collect();
    let new_keys = covered.keys().filter(|key| !older.contains(*key)).count() as u64;
    if run.new_keys() != new_keys {
        let detail = format!(
            "counts {} keys no older segment holds, the segments give {new_keys}",
            run.new_keys()
        );
        report.problem(Some(path), None, detail);
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
    let committed = match crate::lost_segments::read(layout) {
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
    // A finalized log may hold more records than its marker counts: Arrow's own records
    // (adoptions, key index runs) follow `finalized` without unfinalizing.
    committed.check_marker(&log_path, &layout.complete_marker(), report);
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
