//! The key index of an unfinished cache: key index runs (core `key_runs`) over the manifest's
//! rows, written at flush once the rows since the last run (the *tail*, held in memory) reach
//! [`TAIL_BOUND`], so that a resume (or a read-only open) of an unfinished cache maps the runs
//! and replays only the manifest's tail instead of the whole manifest.
//!
//! Files, in `stowage_index/` (DNANet ignores them):
//!
//! - `tail_lines.bin`: per row covered, 16 bytes: the manifest byte offset of its line (u64), the
//!   line's length without its newline (u32) and the low 32 bits of the line's xxh3 (u32). A run's
//!   hash match is confirmed by reading the line there, checking its checksum and parsing it.
//! - `tail-<first>-<through>.run`: runs, payload `row + 1`; merged geometrically (`plan_merge`)
//!   off the flush, on a background thread (core `background_merge`): a flush writes the run of
//!   its tail alone (work that grows with the flushed rows, never with the cache) and starts the
//!   merge, which runs while the next tail gathers; the next run's flush installs it (waiting
//!   for it if need be), and until then its inputs answer lookups. So the runs, the merges and
//!   the files they write are the same whatever the timing (the fault campaign counts them).
//! - `tail_state`: the runs in use (name and header checksum), the rows and manifest bytes they
//!   cover, the xxh3 of the manifest line ending there, and the rows among them whose line another
//!   writer wrote; one JSON line, then the xxh3 of that line. Replaced atomically after the lines
//!   and runs it names are durable.
//!
//! A state that does not match the manifest (DNANet rewrote or cut it) is not used: the manifest
//! is replayed whole (correct, slower) and the next writer starts the files anew.

use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use memmap2::Mmap;
use stowage_core::background_merge::{BackgroundMerge, runs_to_merge};
use stowage_core::file_safety::{atomic_write, fsync_dir, open_no_follow};
use stowage_core::key_runs::{KeyRun, RunSpec, key_hash, write_run_file};
use stowage_core::{Error, IoResultExt, Result};
use xxhash_rust::xxh3::xxh3_64;

use crate::file_io::{read_exact_at, write_all_at};
use crate::index::RowEntry;
use crate::key_index::Lookup;
use crate::layout::Layout;
use crate::row_format::RowFormat;

/// Rows since the last run after which a flush writes a run (about 8 MB of tail in memory).
pub(crate) const TAIL_BOUND: usize = 65_536;

/// Bytes per row of `tail_lines.bin`.
const LINE_LOC: usize = 16;

/// The state file's name.
pub(crate) const STATE_NAME: &str = "tail_state";
/// The per-row line file's name.
pub(crate) const LINES_NAME: &str = "tail_lines.bin";

/// Whether `name` is one of this module's files in `stowage_index/` (runs included).
pub(crate) fn is_tail_file(name: &str) -> bool {
    name == STATE_NAME
        || name == LINES_NAME
        || (name.starts_with("tail-") && name.ends_with(".run"))
}

/// Where a row's manifest line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineLoc {
    /// Byte offset of the line in the manifest.
    pub offset: u64,
    /// Its length without the newline.
    pub len: u32,
    /// Low 32 bits of the xxh3 of the line's bytes.
    pub hash: u32,
}

impl LineLoc {
    /// The location of `line` (without its newline) at `offset`.
    pub(crate) fn of(offset: u64, line: &[u8]) -> LineLoc {
        LineLoc { offset, len: line.len() as u32, hash: xxh3_64(line) as u32 }
    }

    fn to_bytes(self) -> [u8; LINE_LOC] {
        let mut out = [0u8; LINE_LOC];
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out[12..].copy_from_slice(&self.hash.to_le_bytes());
        out
    }

    fn from_bytes(b: &[u8; LINE_LOC]) -> LineLoc {
        LineLoc {
            offset: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            hash: u32::from_le_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
}

/// The rows the runs cover, on disk.
#[derive(Debug)]
pub(crate) struct Covered {
    dir: PathBuf,
    manifest_path: PathBuf,
    /// Rows covered (the runs hold rows `0..rows`).
    rows: usize,
    /// Manifest bytes holding those rows' lines.
    manifest_bytes: u64,
    /// xxh3 of the line of row `rows - 1` (0 without rows).
    last_line: u64,
    /// Oldest first, each named `tail-<first>-<through>.run`.
    runs: Vec<Arc<KeyRun>>,
    /// The merge running in the background, a writer's.
    merge: Option<BackgroundMerge>,
    /// Rows among `0..rows` whose line another writer wrote.
    foreign: Vec<Range<usize>>,
    lines: Option<File>,
    manifest: Option<File>,
}

/// The directory of the files.
fn dir(layout: &Layout) -> PathBuf {
    crate::key_index::dir(layout)
}

fn map(path: &Path) -> Result<Mmap> {
    let file = File::open(path).at(path)?;
    // SAFETY: runs are written whole under a temporary name and renamed into place, never
    // modified afterwards; a run's header is checked at open and every hit confirmed.
    let map = unsafe { Mmap::map(&file) }.at(path)?;
    let _ = map.advise(memmap2::Advice::Random);
    Ok(map)
}

struct RunBytes(Mmap);

impl AsRef<[u8]> for RunBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Covered {
    /// Nothing covered yet (a new cache, or one whose manifest is replayed whole).
    pub(crate) fn empty(layout: &Layout) -> Covered {
        Covered {
            dir: dir(layout),
            manifest_path: layout.manifest(),
            rows: 0,
            manifest_bytes: 0,
            last_line: 0,
            runs: Vec::new(),
            merge: None,
            foreign: Vec::new(),
            lines: None,
            manifest: None,
        }
    }

    /// Rows covered.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Manifest bytes covered: where the tail's lines start.
    pub(crate) fn manifest_bytes(&self) -> u64 {
        self.manifest_bytes
    }

    /// Rows among the covered ones whose line another writer wrote.
    pub(crate) fn foreign(&self) -> &[Range<usize>] {
        &self.foreign
    }

    /// Opens the state: `Ok(None)` without one, `Err(why)` when it cannot be used.
    pub(crate) fn open(layout: &Layout) -> std::result::Result<Option<Covered>, String> {
        // A writer may replace the state and remove the runs it replaced between our read of the
        // state and the maps of its runs: one more try reads the new state.
        Self::open_once(layout).or_else(|_| Self::open_once(layout))
    }

    fn open_once(layout: &Layout) -> std::result::Result<Option<Covered>, String> {
        let dir = dir(layout);
        let path = dir.join(STATE_NAME);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let bad = |why: &str| format!("{} {why}", path.display());
        let text = String::from_utf8(text).map_err(|_| bad("is not text"))?;
        let (body, sum) = text.trim_end().split_once('\n').ok_or_else(|| bad("is incomplete"))?;
        if format!("{:016x}", xxh3_64(body.as_bytes())) != sum {
            return Err(bad("does not match its checksum"));
        }
        let state: serde_json::Value =
            serde_json::from_str(body).map_err(|_| bad("is not a state record"))?;
        let num = |key: &str| state.get(key).and_then(serde_json::Value::as_u64);
        let (Some(rows), Some(manifest_bytes), Some(last_line)) =
            (num("rows"), num("manifest_bytes"), num("last_line"))
        else {
            return Err(bad("lacks a field"));
        };
        let rows = usize::try_from(rows).map_err(|_| bad("has too many rows"))?;
        let mut covered = Covered::empty(layout);
        covered.rows = rows;
        covered.manifest_bytes = manifest_bytes;
        covered.last_line = last_line;
        for pair in state.get("foreign").and_then(|f| f.as_array()).into_iter().flatten() {
            let a = pair.get(0).and_then(serde_json::Value::as_u64);
            let b = pair.get(1).and_then(serde_json::Value::as_u64);
            let (Some(a), Some(b)) = (a, b) else { return Err(bad("has a bad foreign range")) };
            covered.foreign.push(a as usize..b as usize);
        }
        let manifest = File::open(layout.manifest()).map_err(|e| format!("manifest: {e}"))?;
        let manifest_len = manifest.metadata().map_err(|e| e.to_string())?.len();
        if manifest_len < manifest_bytes {
            return Err(format!(
                "it covers {manifest_bytes} bytes of manifest.jsonl, which holds {manifest_len} \
                 (another writer rewrote it)"
            ));
        }
        covered.manifest = Some(manifest);
        if rows > 0 {
            let lines_path = dir.join(LINES_NAME);
            let lines = File::open(&lines_path).map_err(|e| format!("{LINES_NAME}: {e}"))?;
            let len = lines.metadata().map_err(|e| e.to_string())?.len();
            if len < (rows * LINE_LOC) as u64 {
                return Err(format!("{LINES_NAME} holds {len} bytes, fewer than {rows} rows"));
            }
            covered.lines = Some(lines);
            let last = covered.loc(rows - 1).ok_or("the last covered line is unreadable")?;
            let line = covered.line_at(last).ok_or_else(|| {
                "the last covered line of manifest.jsonl is not the one recorded (another \
                 writer rewrote the manifest)"
                    .to_string()
            })?;
            if last.offset + u64::from(last.len) + 1 != manifest_bytes
                || xxh3_64(&line) != last_line
            {
                return Err("the manifest line ending the covered rows is not the one recorded \
                            (another writer rewrote the manifest)"
                    .into());
            }
        }
        for run in state.get("runs").and_then(|r| r.as_array()).into_iter().flatten() {
            let name = run.get(0).and_then(|n| n.as_str()).ok_or_else(|| bad("names no run"))?;
            if !is_tail_file(name) || name.contains('/') {
                return Err(bad("names a run outside stowage_index/"));
            }
            let header = run.get(1).and_then(serde_json::Value::as_u64);
            let run_path = dir.join(name);
            let bytes = map(&run_path).map_err(|e| e.to_string())?;
            let opened =
                KeyRun::from_bytes(&run_path, RunBytes(bytes)).map_err(|e| e.to_string())?;
            if Some(opened.header().header_checksum) != header {
                return Err(format!("{name} is not the run recorded"));
            }
            covered.runs.push(Arc::new(opened));
        }
        Ok(Some(covered))
    }

    /// What is wrong with the runs and line locations (for `validate`): each run's slots against
    /// their checksum, and every covered row's line location against its line and row number.
    pub(crate) fn check(&self, format: &RowFormat) -> Vec<String> {
        let mut problems = Vec::new();
        for run in &self.runs {
            if let Err(e) = run.verify() {
                problems.push(format!("{}: {e}", run_name(run)));
            }
        }
        if let Some(row) = (0..self.rows).find(|&row| self.entry(row, format).is_none()) {
            problems.push(format!(
                "{LINES_NAME}: the line location of row {row} does not name its manifest line"
            ));
        }
        problems
    }

    /// The path of the directory holding the files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The line location of covered row `row`.
    fn loc(&self, row: usize) -> Option<LineLoc> {
        let file = self.lines.as_ref()?;
        let mut bytes = [0u8; LINE_LOC];
        read_exact_at(file, &mut bytes, (row * LINE_LOC) as u64).ok()?;
        Some(LineLoc::from_bytes(&bytes))
    }

    /// The manifest line at `loc`, when its checksum matches.
    fn line_at(&self, loc: LineLoc) -> Option<Vec<u8>> {
        // The location is the file's word: an end past the manifest (or past u64) is damage.
        if loc.offset.checked_add(u64::from(loc.len)).is_none_or(|end| end > self.manifest_bytes) {
            return None;
        }
        let file = self.manifest.as_ref()?;
        let mut line = vec![0u8; loc.len as usize];
        read_exact_at(file, &mut line, loc.offset).ok()?;
        (xxh3_64(&line) as u32 == loc.hash).then_some(line)
    }

    /// The entry of covered row `row`, read from its manifest line; `None` when the line or its
    /// location is damaged or not the row's.
    pub(crate) fn entry(&self, row: usize, format: &RowFormat) -> Option<RowEntry> {
        if row >= self.rows {
            return None;
        }
        let line = self.line_at(self.loc(row)?)?;
        crate::manifest::parse_one(&line, row, format)
    }

    /// The row of `key` among the covered rows.
    pub(crate) fn find(&self, key: &str, format: &RowFormat) -> Lookup {
        self.find_except(key, None, format)
    }

    /// A covered row other than `row` that holds `key` (a key stored twice), for `validate`: the
    /// runs' slots of `key`'s hash, `row`'s own skipped without reading its line, every other
    /// candidate confirmed by its line. [`Lookup::Unsure`] when such a candidate's line is damaged.
    pub(crate) fn find_other(&self, key: &str, row: usize, format: &RowFormat) -> Lookup {
        self.find_except(key, Some(row), format)
    }

    /// The covered row holding `key`, `except` skipped; [`Lookup::Unsure`] when a candidate's
    /// line is damaged and none confirmed.
    fn find_except(&self, key: &str, except: Option<usize>, format: &RowFormat) -> Lookup {
        let hash = key_hash(key.as_bytes());
        if self.runs.len() > 1 {
            // Every run's slot is asked for at once: a put's duplicate check (a miss in every
            // run) then waits about one memory latency, not one per run.
            self.runs.iter().for_each(|run| run.prefetch(hash));
        }
        let mut unsure = false;
        for run in self.runs.iter().rev() {
            let found = run.find(hash, |payload| {
                let Some(row) = (payload as usize).checked_sub(1).filter(|&r| Some(r) != except)
                else {
                    return false;
                };
                match self.entry(row, format) {
                    Some(entry) => &*entry.path == key,
                    None => {
                        unsure = true;
                        false
                    }
                }
            });
            if let Some(payload) = found {
                return Lookup::Found(payload as usize - 1);
            }
        }
        if unsure { Lookup::Unsure } else { Lookup::Absent }
    }

    /// Turns the tail into a run: `locs` and `hashes` (key hash per row) of rows
    /// `self.rows..self.rows + locs.len()`, committed in the manifest, whose bytes through
    /// `manifest_bytes` hold them; `foreign` every row range another writer's line holds.
    /// Order: the line locations (fdatasynced), the background merge the previous run started put
    /// in place of its inputs (waited for if it still runs), the run of these rows alone, the
    /// state (atomically), then the runs a merge replaced are removed and the next merge starts
    /// when [`stowage_core::key_runs::plan_merge`] finds runs to fold together.
    pub(crate) fn write_run(
        &mut self,
        locs: &[LineLoc],
        hashes: &[u64],
        manifest_bytes: u64,
        foreign: &[Range<usize>],
    ) -> Result<()> {
        let Some(last) = locs.last() else { return Ok(()) };
        if self.manifest.is_none() {
            self.manifest = Some(File::open(&self.manifest_path).at(&self.manifest_path)?);
        }
        let mut line = vec![0u8; last.len as usize];
        let manifest = self.manifest.as_ref().expect("opened above");
        read_exact_at(manifest, &mut line, last.offset).at(&self.manifest_path)?;
        if LineLoc::of(last.offset, &line) != *last
            || last.offset + u64::from(last.len) + 1 != manifest_bytes
        {
            return Err(Error::corrupted(
                &self.manifest_path,
                "the last committed line is not where the writer put it",
            ));
        }
        let last_line = xxh3_64(&line);
        if !self.dir.is_dir() {
            std::fs::create_dir_all(&self.dir).at(&self.dir)?;
            fsync_dir(self.dir.parent().expect("stowage_index/ is in the cache"))?;
        }
        let lines_path = self.dir.join(LINES_NAME);
        let lines = open_no_follow(
            OpenOptions::new().read(true).write(true).create(true).truncate(false),
            &lines_path,
        )
        .at(&lines_path)?;
        let start = (self.rows * LINE_LOC) as u64;
        lines.set_len(start).at(&lines_path)?;
        let bytes: Vec<u8> = locs.iter().flat_map(|l| l.to_bytes()).collect();
        write_all_at(&lines, &bytes, start).at(&lines_path)?;
        lines.sync_data().at(&lines_path)?;
        let new_rows = self.rows + locs.len();
        let replaced = self.install_merge()?;
        let fresh: Vec<(u64, u64)> =
            hashes.iter().enumerate().map(|(i, h)| (*h, (self.rows + i) as u64 + 1)).collect();
        let name = format!("tail-{}-{}.run", self.rows, new_rows - 1);
        let path = self.dir.join(&name);
        let spec =
            RunSpec { first: self.rows as u64, through: new_rows as u64 - 1, stamp: last_line };
        // Keys are distinct (put refuses a stored key): equal hashes are different keys.
        write_run_file(&path, &[], &fresh, spec, |a, b| a == b, |_, _| false, None)?;
        let opened = Arc::new(KeyRun::from_bytes(&path, RunBytes(map(&path)?))?);
        let mut runs: Vec<(String, u64)> =
            self.runs.iter().map(|r| (run_name(r), r.header().header_checksum)).collect();
        runs.push((name, opened.header().header_checksum));
        let foreign: Vec<[usize; 2]> = foreign
            .iter()
            .filter(|r| r.start < new_rows)
            .map(|r| [r.start, r.end.min(new_rows)])
            .collect();
        let body = serde_json::json!({
            "rows": new_rows,
            "manifest_bytes": manifest_bytes,
            "last_line": last_line,
            "runs": runs,
            "foreign": foreign,
        })
        .to_string();
        let text = format!("{body}\n{:016x}\n", xxh3_64(body.as_bytes()));
        atomic_write(self.dir.join(STATE_NAME), text.as_bytes())?;
        for old in replaced {
            // Readers that mapped it keep their map.
            let _ = std::fs::remove_file(old);
        }
        self.runs.push(opened);
        self.rows = new_rows;
        self.manifest_bytes = manifest_bytes;
        self.last_line = last_line;
        self.foreign = foreign.iter().map(|[a, b]| *a..*b).collect();
        self.lines = Some(lines);
        self.start_merge();
        Ok(())
    }

    /// Puts the background merge's run in place of its inputs, once it is done; returns the
    /// inputs' paths, to remove once the state no longer names them.
    fn install_merge(&mut self) -> Result<Vec<PathBuf>> {
        let Some(merge) = self.merge.take() else { return Ok(Vec::new()) };
        merge.install_into(&mut self.runs)
    }

    /// Starts merging the newest runs in the background when the newest run is at least as
    /// large as the runs before it that [`stowage_core::key_runs::plan_merge`] would fold into it.
    fn start_merge(&mut self) {
        let Some(inputs) = runs_to_merge(&self.runs) else { return };
        let dir = self.dir.clone();
        let merge = move |runs: &[Arc<KeyRun>], stop: &AtomicBool| merge_runs(&dir, runs, stop);
        self.merge = Some(BackgroundMerge::start("stowage-memmap-merge", inputs, merge));
    }

    /// Waits for the background merge, if one runs, and removes its run: finalize removes every
    /// file of the module, and nothing may be written into `stowage_index/` after that. Waited
    /// for, not cancelled, so that finalize writes the same files whatever the timing.
    pub(crate) fn finish_merge(&mut self) {
        if let Some(merge) = self.merge.take()
            && let Ok(run) = merge.wait()
        {
            let _ = std::fs::remove_file(run.path());
        }
    }
}

/// The file name of `run`.
fn run_name(run: &KeyRun) -> String {
    run.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Merges `inputs` (consecutive runs) into one run in `dir`, written through a small buffer and
/// made durable, stopping once `cancel` is set; returns it, mapped.
fn merge_runs(dir: &Path, inputs: &[Arc<KeyRun>], cancel: &AtomicBool) -> Result<KeyRun> {
    let (first, last) = (&inputs[0], &inputs[inputs.len() - 1]);
    let spec = RunSpec { first: first.first(), through: last.through(), stamp: last.stamp() };
    let path = dir.join(format!("tail-{}-{}.run", spec.first, spec.through));
    let inputs: Vec<&KeyRun> = inputs.iter().map(|run| &**run).collect();
    // Keys are distinct (put refuses a stored key): equal hashes are different keys.
    write_run_file(&path, &inputs, &[], spec, |a, b| a == b, |_, _| false, Some(cancel))?;
    KeyRun::from_bytes(&path, RunBytes(map(&path)?))
}

/// Removes every file of this module from `stowage_index/` (the state first): for a writer
/// whose state is stale, and for finalize.
pub(crate) fn remove_all(layout: &Layout) -> Result<()> {
    let dir = dir(layout);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Ok(()) };
    match std::fs::remove_file(dir.join(STATE_NAME)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io(dir.join(STATE_NAME), e));
        }
        _ => {}
    }
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let temp = name.starts_with(".tail-") || name.starts_with(".tail_");
        if is_tail_file(name) || temp {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    fsync_dir(&dir)
}

/// Removes run files the state does not name (a crash between a run and its state, or after the
/// state and before the removal of the runs it replaced), and temporaries.
pub(crate) fn remove_unused(layout: &Layout, covered: Option<&Covered>) {
    let dir = dir(layout);
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    let used: Vec<String> =
        covered.map(|c| c.runs.iter().map(|run| run_name(run)).collect()).unwrap_or_default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale_run =
            name.starts_with("tail-") && name.ends_with(".run") && !used.iter().any(|u| u == name);
        if stale_run || name.starts_with(".tail-") || name.starts_with(".tail_") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
