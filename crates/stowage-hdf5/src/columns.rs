//! Variable-length columns: a chunked, extendible 1-D `VLEN<element>` dataset with one row per
//! cached entry, written in batches and read one row at a time (by [`crate::direct`] where the
//! layout allows). Both the aenet sections and the generic sections are made of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hdf5::types::VarLenArray;
use hdf5::{Dataset, Group, H5Type};
use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};

use crate::direct::{DirectReader, DirectWriter, HeapFile, MappedFile};
use crate::error::{read_error, write_error};
use crate::ffi::{self, Element, Failure, VlenType};
use crate::layout::{DEFLATE_LEVEL, VLEN_CHUNK_ROWS};

/// Rows buffered before a batch is written (bounded memory, few calls into libhdf5).
const BATCH_ROWS: usize = 256;
/// Bytes buffered before a batch is written.
const BATCH_BYTES: usize = 32 << 20;

fn create_typed<T: H5Type + Copy>(
    group: &Group,
    name: &str,
    chunk_rows: usize,
) -> hdf5::Result<Dataset> {
    group
        .new_dataset::<VarLenArray<T>>()
        .chunk(chunk_rows)
        .shuffle()
        .deflate(DEFLATE_LEVEL)
        .shape(0..)
        .create(name)
}

/// Creates an empty extendible `VLEN<stored>` dataset `name` in `group`: chunks of `chunk_rows`
/// rows, shuffle + deflate 5, as aenet's PyTables writer lays it out. (libhdf5 refuses
/// Fletcher32 on variable-length datasets: their chunks hold only references into the global
/// heap.)
fn create_dataset(
    group: &Group,
    name: &str,
    stored: Element,
    chunk_rows: usize,
) -> hdf5::Result<Dataset> {
    let chunk_rows = chunk_rows.max(1);
    match stored {
        Element::U8 => create_typed::<u8>(group, name, chunk_rows),
        Element::U16 => create_typed::<u16>(group, name, chunk_rows),
        Element::U32 => create_typed::<u32>(group, name, chunk_rows),
        Element::U64 => create_typed::<u64>(group, name, chunk_rows),
        Element::I8 => create_typed::<i8>(group, name, chunk_rows),
        Element::I16 => create_typed::<i16>(group, name, chunk_rows),
        Element::I32 => create_typed::<i32>(group, name, chunk_rows),
        Element::I64 => create_typed::<i64>(group, name, chunk_rows),
        Element::F32 => create_typed::<f32>(group, name, chunk_rows),
        Element::F64 => create_typed::<f64>(group, name, chunk_rows),
    }
}

/// Reads rows of one variable-length dataset: through the direct reader ([`crate::direct`]) when
/// the file is mapped and the dataset's layout is one it decodes, else through libhdf5.
pub(crate) struct ColumnReader {
    /// `None` once [detached](ColumnReader::detach): every read is then the direct reader's.
    dataset: Option<Dataset>,
    direct: Option<DirectReader>,
    rows: u64,
    /// `<file>:<dataset path>`, for errors.
    file: PathBuf,
    name: String,
}

impl ColumnReader {
    /// Opens dataset `name` of `group` (in `file`); its rows are read from `mapped` when given.
    pub fn open(
        file: &Path,
        group: &Group,
        name: &str,
        mapped: Option<&Arc<MappedFile>>,
    ) -> Result<ColumnReader> {
        let full = format!("{}/{name}", group.name().trim_end_matches('/'));
        let failed = |e: Failure| read_error(file, &format!("dataset {full}"), e);
        let dataset = group.dataset(name).map_err(|e| failed(e.into()))?;
        let rows = ffi::row_count(dataset.id()).map_err(failed)?;
        let direct = match mapped {
            Some(mapped) => DirectReader::open(mapped, &dataset, rows).map_err(failed)?,
            None => None,
        };
        Ok(ColumnReader {
            dataset: Some(dataset),
            direct,
            rows,
            file: file.to_path_buf(),
            name: full,
        })
    }

    /// Closes the dataset when every read of `element` values is the direct reader's (its
    /// chunks located now): the reader then holds no libhdf5 object, only the file's map.
    /// `Ok(false)`, and nothing changed, when rows of `element` need libhdf5.
    ///
    /// Errors: `Error::Corrupted` naming the file and dataset when a chunk cannot be located.
    pub fn detach(&mut self, element: Element) -> Result<bool> {
        let Some(direct) = self.direct.as_mut().filter(|d| d.converts_to(element)) else {
            return Ok(false);
        };
        let located = direct
            .detach()
            .map_err(|e| Error::corrupted(&self.file, format!("{}: {e}", self.name)))?;
        if located {
            self.dataset = None;
        }
        Ok(located)
    }

    /// Rows in the dataset.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows read directly are found on read, not a chunk at a time
    /// ([`DirectReader::resolve_on_read`]): for columns whose rows are checked against a
    /// checksum.
    pub fn resolve_on_read(&mut self) {
        if let Some(direct) = self.direct.as_mut() {
            direct.resolve_on_read();
        }
    }

    /// The file byte ranges stowage's direct reader parses for this column (its chunks and
    /// collections, [`DirectReader::data_ranges`]); `None` when its rows of `element` are not
    /// read directly or it is not detached. For a file this process just wrote.
    pub fn data_ranges(&self, element: Element) -> Result<Option<Vec<std::ops::Range<u64>>>> {
        match &self.direct {
            Some(direct) if direct.converts_to(element) && self.dataset.is_none() => direct
                .data_ranges()
                .map(Some)
                .map_err(|e| Error::corrupted(&self.file, format!("{}: {e}", self.name))),
            _ => Ok(None),
        }
    }

    /// Starts reading every stored chunk of the column ([`DirectReader::will_need_chunks`]).
    pub fn will_need_chunks(&self) {
        if let Some(direct) = &self.direct {
            direct.will_need_chunks();
        }
    }

    /// The file bytes a direct read of row `row` starts with ([`DirectReader::row_page`]).
    pub fn row_page(&self, row: u64) -> Option<std::ops::Range<usize>> {
        self.direct.as_ref()?.row_page(row)
    }

    /// The dataset's libhdf5 id (for layout queries); `None` once detached.
    pub fn dataset_id(&self) -> Option<hdf5_sys::h5i::hid_t> {
        self.dataset.as_ref().map(|dataset| dataset.id())
    }

    /// The open dataset, for a read through libhdf5, or the error of a detached reader asked
    /// for what only libhdf5 reads (`context` says which).
    fn attached(&self, context: &str) -> Result<&Dataset> {
        self.dataset.as_ref().ok_or_else(|| {
            Error::unsupported(
                crate::error::BACKEND,
                format!(
                    "{}: {context}: a read through libhdf5 of a column detached from it",
                    self.file.display()
                ),
            )
        })
    }

    /// The dataset's path in its file, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether rows of `element` values are read without libhdf5.
    pub fn reads_directly(&self, element: Element) -> bool {
        self.direct.as_ref().is_some_and(|d| d.converts_to(element))
    }

    /// Row `row` as the bytes of `element` values (converted from the stored type). Damage is
    /// `Error::Corrupted` naming the file, the dataset, the row and `what` it holds.
    pub fn read(&self, row: u64, element: Element, what: &str) -> Result<Vec<u8>> {
        let context = || format!("{} row {row} ({what})", self.name);
        match &self.direct {
            Some(direct) if direct.converts_to(element) => direct
                .read(row, element)
                .map_err(|e| Error::corrupted(&self.file, format!("{}: {e}", context()))),
            _ => {
                let dataset = self.attached(&context())?;
                let memory =
                    VlenType::new(element).map_err(|e| read_error(&self.file, &context(), e))?;
                ffi::read_vlen_row(dataset.id(), row, &memory)
                    .map_err(|e| read_error(&self.file, &context(), e))
            }
        }
    }

    /// Every row as `element` values.
    pub fn read_all(&self, element: Element) -> Result<Vec<Vec<u8>>> {
        if self.reads_directly(element) {
            return (0..self.rows)
                .map(|row| self.read(row, element, "reading every row"))
                .collect();
        }
        let dataset = self.attached(&self.name)?;
        let memory = VlenType::new(element).map_err(|e| read_error(&self.file, &self.name, e))?;
        ffi::read_vlen_rows(dataset.id(), 0, self.rows, &memory)
            .map_err(|e| read_error(&self.file, &self.name, e))
    }

    /// Row `row` as exactly `elements` `element` values, or `Error::Corrupted` naming both counts.
    pub fn read_exact(
        &self,
        row: u64,
        element: Element,
        elements: usize,
        what: &str,
    ) -> Result<Vec<u8>> {
        let bytes = self.read(row, element, what)?;
        let got = bytes.len() / element.size();
        if got != elements {
            return Err(Error::corrupted(
                &self.file,
                format!(
                    "{} row {row} ({what}) holds {got} elements, the index says {elements}",
                    self.name
                ),
            ));
        }
        Ok(bytes)
    }
}

/// Appends rows to one variable-length dataset in batches: through the direct writer
/// ([`crate::direct`]) when the file is open for it, else through libhdf5's `H5Dwrite`.
pub(crate) struct ColumnWriter {
    dataset: Dataset,
    memory: VlenType,
    direct: Option<DirectWriter>,
    /// Queued rows; a tensor's own bytes are shared, not copied.
    pending: Vec<Bytes>,
    pending_bytes: usize,
    written: u64,
    file: PathBuf,
}

impl ColumnWriter {
    /// Creates dataset `name` in `group` storing `element` values, for appending; its rows are
    /// written by the direct writer through `heap` when given.
    pub fn create(
        file: &Path,
        group: &Group,
        name: &str,
        element: Element,
        heap: Option<&Arc<HeapFile>>,
    ) -> Result<ColumnWriter> {
        Self::create_chunked(file, group, name, element, heap, VLEN_CHUNK_ROWS)
    }

    /// [`ColumnWriter::create`] with chunks of `chunk_rows` rows (at least 1) instead of
    /// PyTables' 8192.
    pub fn create_chunked(
        file: &Path,
        group: &Group,
        name: &str,
        element: Element,
        heap: Option<&Arc<HeapFile>>,
        chunk_rows: usize,
    ) -> Result<ColumnWriter> {
        let failed = |e: Failure| write_error(file, &format!("creating dataset {name}"), e);
        let dataset =
            create_dataset(group, name, element, chunk_rows).map_err(|e| failed(e.into()))?;
        let memory = VlenType::new(element).map_err(failed)?;
        let direct = match heap {
            Some(heap) => DirectWriter::new(heap, group, &dataset, element).map_err(failed)?,
            None => None,
        };
        Ok(ColumnWriter {
            dataset,
            memory,
            direct,
            pending: Vec::new(),
            pending_bytes: 0,
            written: 0,
            file: file.to_path_buf(),
        })
    }

    /// Queues one row (the bytes of whole elements); writes a batch when enough is queued.
    pub fn push(&mut self, row: impl Into<Bytes>) -> Result<()> {
        let row = row.into();
        self.pending_bytes += row.len();
        self.pending.push(row);
        if self.pending.len() >= BATCH_ROWS || self.pending_bytes >= BATCH_BYTES {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Rows pushed so far (written or queued).
    pub fn rows(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    /// Writes every queued row.
    fn write_pending(&mut self) -> Result<()> {
        let written = match &mut self.direct {
            Some(direct) => direct.write(&self.pending),
            None => {
                let rows: Vec<&[u8]> = self.pending.iter().map(|row| &row[..]).collect();
                ffi::write_vlen_rows(self.dataset.id(), self.written, &rows, &self.memory)
            }
        };
        written.map_err(|e| write_error(&self.file, &self.dataset.name(), e))?;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(())
    }

    /// Writes every queued row and completes the dataset.
    pub fn finish(&mut self) -> Result<()> {
        self.write_pending()?;
        if let Some(direct) = &mut self.direct {
            direct.finish().map_err(|e| write_error(&self.file, &self.dataset.name(), e))?;
        }
        Ok(())
    }

    /// Whether rows are written by the direct writer.
    #[cfg(test)]
    pub fn writes_directly(&self) -> bool {
        self.direct.is_some()
    }
}

/// The bytes of `values` little-endian.
pub(crate) fn le_bytes_i64(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `i64` values from little-endian bytes (a whole number of 8-byte elements).
pub(crate) fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of every size class: empty, small (shared collections), large (their own), across
    /// two chunks.
    fn rows() -> Vec<Vec<u8>> {
        (0..VLEN_CHUNK_ROWS + 300)
            .map(|i| match i % 5 {
                0 => Vec::new(),
                1 | 2 => (0..(i % 7) * 8).map(|b| b as u8).collect(),
                3 => vec![i as u8; 8 * 700],
                _ => vec![(i % 251) as u8; 8 * (i % 40)],
            })
            .collect()
    }

    #[test]
    fn directly_written_rows_read_back_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.h5");
        let rows = rows();
        {
            let file = hdf5::File::create(&path).unwrap();
            let heap = HeapFile::open(&path, &file).unwrap().expect("a POSIX file");
            let group = file.create_group("g").unwrap();
            let mut column =
                ColumnWriter::create(&path, &group, "values", Element::I64, Some(&heap)).unwrap();
            assert!(column.writes_directly());
            for row in &rows {
                column.push(row.clone()).unwrap();
            }
            column.finish().unwrap();
            assert_eq!(column.rows(), rows.len() as u64);
        }
        let file = hdf5::File::open(&path).unwrap();
        let group = file.group("g").unwrap();
        let mapped = MappedFile::open(&path, &file).unwrap().expect("mapped");
        let direct = ColumnReader::open(&path, &group, "values", Some(&mapped)).unwrap();
        let libhdf5 = ColumnReader::open(&path, &group, "values", None).unwrap();
        assert!(direct.reads_directly(Element::I64));
        assert_eq!(libhdf5.read_all(Element::I64).unwrap(), rows);
        assert_eq!(direct.read_all(Element::I64).unwrap(), rows);
    }

    #[test]
    fn damaged_descriptors_are_errors_naming_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.h5");
        let rows: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 8 * (i + 1)]).collect();
        let chunk = {
            let file = hdf5::File::create(&path).unwrap();
            let heap = HeapFile::open(&path, &file).unwrap().unwrap();
            // No filters: the descriptors are stored as they are, to be damaged one by one.
            let dataset =
                file.new_dataset::<VarLenArray<i64>>().chunk(8).shape(0..).create("raw").unwrap();
            let mut writer =
                DirectWriter::new(&heap, &file, &dataset, Element::I64).unwrap().unwrap();
            writer.write(&rows.iter().cloned().map(Bytes::from).collect::<Vec<_>>()).unwrap();
            writer.finish().unwrap();
            crate::ffi::storage::chunk_location(dataset.id(), 0).unwrap().unwrap()
        };
        let intact = std::fs::read(&path).unwrap();
        let read_row = |bytes: &[u8], row: u64| {
            std::fs::write(&path, bytes).unwrap();
            let file = hdf5::File::open(&path).unwrap();
            let mapped = MappedFile::open(&path, &file).unwrap().unwrap();
            let column = ColumnReader::open(&path, &file, "raw", Some(&mapped)).unwrap();
            column.read(row, Element::I64, "row under test")
        };
        assert_eq!(read_row(&intact, 2).unwrap(), rows[2]);
        let at = chunk.address as usize + 2 * 16;
        let cases: [(usize, &[u8], &str); 3] = [
            (0, &1000u32.to_le_bytes(), "elements need"),
            (4, &u64::MAX.to_le_bytes(), "past the file's end"),
            (12, &77u32.to_le_bytes(), "holds no object 77"),
        ];
        for (offset, value, expected) in cases {
            let mut bad = intact.clone();
            bad[at + offset..at + offset + value.len()].copy_from_slice(value);
            let error = read_row(&bad, 2).unwrap_err();
            assert!(matches!(error, Error::Corrupted { .. }), "{error}");
            let text = error.to_string();
            assert!(
                text.contains(expected) && text.contains("raw row 2 (row under test)"),
                "{text}"
            );
        }
    }
}
