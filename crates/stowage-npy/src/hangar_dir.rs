//! A bare hangar NUMPY_10 data directory: `data/10/<uid>.npy` collection files and the empty
//! `store_data/10` (committed) and `stage_data/10` (staged) marker files beside them.
//!
//! Such a directory holds no records (hangar keeps them in its LMDB database), so it has no keys
//! and no reader: what can be said about it is which collection files it holds, whether their
//! headers parse and their sizes match them, and how hangar marks each. That is what its
//! description ([`crate::describe`]) and its check plan report. Recognizing one is
//! [`crate::formats`]' job ([`crate::HANGAR_NUMPY10`]).

use std::io::Read;
use std::path::{Path, PathBuf};

use stowage_core::npy_header::{self, HeaderErrorKind, MAX_HEADER_LEN, NpyHeader};
use stowage_core::{Error, Result, shape};

/// Bytes read to find a header; a numpy header is 128 or 192 bytes, longer ones are read whole.
const FIRST_READ: usize = 4096;

fn is_npy_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "npy")
}

/// Whether a collection file is committed, staged or neither, by its marker files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerState {
    /// `store_data/10/<uid>.npy` exists: committed.
    Committed,
    /// Only `stage_data/10/<uid>.npy` exists: written after the last commit.
    Staged,
    /// No marker (a directory copied without its markers, or an abandoned write).
    Unmarked,
}

impl MarkerState {
    /// `committed`, `staged` or `unmarked`.
    pub fn name(self) -> &'static str {
        match self {
            MarkerState::Committed => "committed",
            MarkerState::Staged => "staged",
            MarkerState::Unmarked => "unmarked",
        }
    }
}

/// One collection file of a [`HangarDir`].
#[derive(Debug, Clone)]
pub struct HangarFile {
    /// The file name, `<uid>.npy` (lossily converted when not UTF-8).
    pub name: String,
    /// The full path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Its marker state.
    pub marker: MarkerState,
}

/// What checking one collection file found: its header when that parses, and a problem when the
/// header does not parse or the size does not match it.
#[derive(Debug, Clone)]
pub struct FileCheck {
    /// The parsed header.
    pub header: Option<NpyHeader>,
    /// What is wrong, without the file name.
    pub problem: Option<String>,
}

impl HangarFile {
    /// Parses the header and checks the size: exactly header + `prod(shape) * itemsize`, as
    /// hangar preallocates it, with at least one dimension (the slots).
    pub fn check(&self) -> FileCheck {
        let header = match read_header(&self.path) {
            Ok(header) => header,
            Err(problem) => return FileCheck { header: None, problem: Some(problem) },
        };
        let problem = size_problem(&header, self.size);
        FileCheck { header: Some(header), problem }
    }
}

fn read_header(path: &Path) -> Result<NpyHeader, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    let mut reader = file.take(FIRST_READ as u64);
    reader.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    match npy_header::parse(&bytes) {
        Err(e) => match e.kind() {
            HeaderErrorKind::Truncated { needed }
                if bytes.len() == FIRST_READ && needed <= MAX_HEADER_LEN + 12 =>
            {
                let file = reader.into_inner();
                file.take((needed - FIRST_READ) as u64)
                    .read_to_end(&mut bytes)
                    .map_err(|e| e.to_string())?;
                npy_header::parse(&bytes).map_err(|e| e.to_string())
            }
            _ => Err(e.to_string()),
        },
        ok => ok.map_err(|e| e.to_string()),
    }
}

fn size_problem(header: &NpyHeader, size: u64) -> Option<String> {
    if header.shape.is_empty() {
        return Some(format!(
            "a 0-d {} array has no slots; a collection file has shape (rows, ...)",
            header.descr
        ));
    }
    // parse checked that the data length fits in memory.
    let data_len = header.data_len().ok()? as u64;
    let expected = header.data_offset as u64 + data_len;
    if size == expected {
        return None;
    }
    let (relation, by) =
        if size < expected { ("short", expected - size) } else { ("long", size - expected) };
    Some(format!(
        "file is {size} bytes, {by} bytes too {relation}: the {}-byte header and {} array of shape \
         {} need {expected}",
        header.data_offset,
        header.descr,
        shape::display(&header.shape)
    ))
}

/// A scanned hangar data directory.
#[derive(Debug, Clone)]
pub struct HangarDir {
    /// Number of marker files in `store_data/10`, or `None` when that directory is absent.
    pub committed_markers: Option<usize>,
    /// Number of marker files in `stage_data/10`, or `None` when that directory is absent.
    pub staged_markers: Option<usize>,
    /// The collection files, by name.
    pub files: Vec<HangarFile>,
    /// Problems found while scanning, outside any one file's header (a marker without a data
    /// file): `(path, detail)`.
    pub problems: Vec<(PathBuf, String)>,
}

impl HangarDir {
    /// Lists `root/data/10/*.npy` and their markers.
    pub fn scan(root: &Path) -> Result<HangarDir> {
        let data = root.join("data").join("10");
        let store = root.join("store_data").join("10");
        let stage = root.join("stage_data").join("10");
        let store_names = marker_names(&store)?;
        let stage_names = marker_names(&stage)?;
        let mut files = Vec::new();
        let mut problems = Vec::new();
        for entry in std::fs::read_dir(&data).map_err(|e| Error::io(&data, e))? {
            let path = entry.map_err(|e| Error::io(&data, e))?.path();
            if !is_npy_name(&path) {
                continue;
            }
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    problems.push((path, format!("cannot be read: {e}")));
                    continue;
                }
            };
            if !meta.is_file() {
                problems.push((path, "is not a regular file".to_owned()));
                continue;
            }
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let in_markers = |names: &Option<Vec<String>>| {
                names.as_ref().is_some_and(|names| names.contains(&name))
            };
            let marker = if in_markers(&store_names) {
                MarkerState::Committed
            } else if in_markers(&stage_names) {
                MarkerState::Staged
            } else {
                MarkerState::Unmarked
            };
            files.push(HangarFile { name, size: meta.len(), path, marker });
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        for (dir, names) in [(&store, &store_names), (&stage, &stage_names)] {
            for name in names.iter().flatten() {
                if !files.iter().any(|f| &f.name == name) {
                    problems.push((
                        dir.join(name),
                        format!(
                            "marker without a data file: {} is missing",
                            data.join(name).display()
                        ),
                    ));
                }
            }
        }
        Ok(HangarDir {
            committed_markers: store_names.as_ref().map(Vec::len),
            staged_markers: stage_names.as_ref().map(Vec::len),
            files,
            problems,
        })
    }
}

/// The `.npy` marker file names in `dir`, or `None` when `dir` does not exist.
fn marker_names(dir: &Path) -> Result<Option<Vec<String>>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if is_npy_name(&path) {
            names.push(path.file_name().unwrap_or_default().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(Some(names))
}
