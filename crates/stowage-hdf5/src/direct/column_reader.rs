//! Reading one variable-length dataset's rows from the file's map: chunk descriptors decoded on
//! first use and kept, then each row's global heap object.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use hdf5::Dataset;

use super::filters::Pipeline;
use super::global_heap::Collection;
use super::{DESCRIPTOR, Descriptor, MAX_CHUNK_BYTES, MappedFile};
use crate::ffi::storage::{self, ChunkLocation};
use crate::ffi::{self, Element};

/// A decoded chunk: where each of its rows' values lie in the file, or nothing for a chunk never
/// written (every row empty, the fill value).
#[derive(Debug)]
enum Chunk {
    Unwritten,
    /// The chunk's descriptors as stored (16 bytes per row), each row's heap object found when
    /// the row is first read ([`DirectReader::resolve_on_read`]) and where it lies kept in
    /// `resolved` (by row of the chunk: [`pack`]ed file offset and length, 0 until found), so a
    /// warm read is one load, as with [`Chunk::Rows`].
    Descriptors {
        descriptors: Box<[u8]>,
        resolved: Box<[AtomicU64]>,
    },
    /// By row of the chunk: the file offset and length of its values, every descriptor followed
    /// to its heap object once, when the chunk was decoded (a read is then one index, not a
    /// collection lookup). A row whose object does not resolve is [`BAD_ROW`].
    Rows(Box<[(u64, u64)]>),
}

impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        match self {
            Chunk::Unwritten => Chunk::Unwritten,
            Chunk::Descriptors { descriptors, resolved } => Chunk::Descriptors {
                descriptors: descriptors.clone(),
                resolved: resolved
                    .iter()
                    .map(|w| AtomicU64::new(w.load(Ordering::Relaxed)))
                    .collect(),
            },
            Chunk::Rows(rows) => Chunk::Rows(rows.clone()),
        }
    }
}

/// A row's file offset and length as one word for [`Chunk::Descriptors`]' `resolved`: offset
/// below 2^40, length from 1 to 2^24 - 1 (never 0: 0 means not resolved); `None` otherwise (the
/// row is then found again at every read).
fn pack(start: usize, len: usize) -> Option<u64> {
    let (start, len) = (u64::try_from(start).ok()?, u64::try_from(len).ok()?);
    (start < 1 << 40 && (1..1 << 24).contains(&len)).then_some(start << 24 | len)
}

/// The file offset and length of a [`pack`]ed word.
fn unpack(word: u64) -> (usize, usize) {
    ((word >> 24) as usize, (word & ((1 << 24) - 1)) as usize)
}

/// The [`Chunk::Rows`] entry of a row whose descriptor or heap object is damaged: its read
/// follows the descriptor again, to say what is wrong.
const BAD_ROW: (u64, u64) = (u64::MAX, u64::MAX);

/// Rows of one `VLEN` dataset read from the map.
#[derive(Debug)]
pub(crate) struct DirectReader {
    file: Arc<MappedFile>,
    /// Where each chunk lies: asked of libhdf5 on first use while attached; every chunk's
    /// location resolved once and the dataset closed when [detached](DirectReader::detach).
    locations: Locations,
    rows: u64,
    chunk_rows: u64,
    pipeline: Pipeline,
    element: Element,
    /// The chunks kept once decoded, by number: as many as the file could hold written chunks
    /// (see [`kept_chunks`]); chunks past them are decoded on every read.
    chunks: Box<[OnceLock<Chunk>]>,
    /// Chunks keep their descriptors and each read finds its row's heap object
    /// ([`DirectReader::resolve_on_read`]), instead of resolving every row of a chunk when it is
    /// decoded.
    lazy: bool,
}

/// Where a reader finds its chunks.
#[derive(Debug)]
enum Locations {
    /// libhdf5 is asked, through the open dataset.
    Attached(Dataset),
    /// Every chunk's location, by number (`None`: never written), resolved at detach.
    Detached(Box<[Option<ChunkLocation>]>),
}

/// How many chunks a reader keeps a slot for: never more than the dataset has, nor more than
/// the file could hold written (each written chunk costs at least 8 bytes of the file, its
/// address in the chunk index). The row count is the file's word, so a damaged one must not size
/// a table; the chunks past it are never written in an intact file (they read as empty rows).
fn kept_chunks(chunks: u64, file_bytes: u64) -> usize {
    usize::try_from(chunks.min(file_bytes / 8 + 1)).unwrap_or(usize::MAX)
}

impl DirectReader {
    /// The direct reader of `dataset` (of `rows` rows) in `file`, or `None` when its layout is
    /// one this reader leaves to libhdf5.
    pub fn open(
        file: &Arc<MappedFile>,
        dataset: &Dataset,
        rows: u64,
    ) -> ffi::Outcome<Option<DirectReader>> {
        let Some(layout) = storage::vlen_storage(dataset.id())? else { return Ok(None) };
        let (Some(element), Some(pipeline)) = (layout.element, Pipeline::new(&layout.filters))
        else {
            return Ok(None);
        };
        let chunk_bytes = layout.chunk_rows.checked_mul(DESCRIPTOR as u64);
        // A fill value of its own makes unwritten rows other than empty: libhdf5's to read.
        if chunk_bytes.is_none_or(|bytes| bytes > MAX_CHUNK_BYTES)
            || layout.user_fill
            || cfg!(target_endian = "big")
        {
            return Ok(None);
        }
        let chunks = kept_chunks(rows.div_ceil(layout.chunk_rows), file.len());
        Ok(Some(DirectReader {
            file: Arc::clone(file),
            locations: Locations::Attached(dataset.clone()),
            rows,
            chunk_rows: layout.chunk_rows,
            pipeline,
            element,
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
            lazy: false,
        }))
    }

    /// Resolves where every chunk lies and closes the dataset: from here on the reader needs
    /// nothing of libhdf5, only the map. `false` (and still attached) when the dataset has more
    /// chunks than a reader keeps a slot for (a detached reader could not find the others).
    ///
    /// Errors: what libhdf5 reports locating a chunk.
    pub fn detach(&mut self) -> Result<bool, String> {
        let Locations::Attached(dataset) = &self.locations else { return Ok(true) };
        let chunks = self.rows.div_ceil(self.chunk_rows);
        if chunks > self.chunks.len() as u64 {
            return Ok(false);
        }
        let locations = (0..chunks)
            .map(|number| {
                let first_row = number * self.chunk_rows;
                storage::chunk_location(dataset.id(), first_row)
                    .map_err(|e| format!("locating the chunk of row {first_row}: {e}"))
            })
            .collect::<Result<Box<[_]>, String>>()?;
        self.locations = Locations::Detached(locations);
        Ok(true)
    }

    /// From now on a chunk is decoded to its descriptors only, and a read walks its row's
    /// collection to the row's object ([`super::global_heap::find`]): a cold read of one row
    /// touches its chunk and its own collection, not the collection of every row of the chunk
    /// (a 2,048-row chunk of 16-byte rows points into 16 collections, most of a segment). A
    /// warm read pays the walk (up to a few hundred object headers of a 4 KiB collection). For
    /// readers whose rows are checked against a checksum: the walk stops at the object and does
    /// not check the rest of the collection (an index listed twice reads the first).
    pub fn resolve_on_read(&mut self) {
        self.lazy = true;
    }

    /// The file byte ranges of this dataset's stored chunks and of every global heap collection
    /// its rows point to (each chunk decoded, each collection parsed): the bytes stowage's own
    /// readers parse, as opposed to libhdf5's metadata. Only for a file this process trusts
    /// (one it just wrote): nothing is kept.
    ///
    /// Errors: what is wrong with a chunk or a collection.
    pub fn data_ranges(&self) -> Result<Vec<std::ops::Range<u64>>, String> {
        let Locations::Detached(locations) = &self.locations else {
            return Err("the dataset is not detached".into());
        };
        let mut ranges = Vec::new();
        let mut collections = std::collections::HashSet::new();
        for (number, location) in locations.iter().enumerate() {
            let Some(location) = location else { continue };
            ranges.push(self.file.file_range(location.address, location.size)?);
            let Some(descriptors) = self.chunk_descriptors(number as u64)? else { continue };
            for descriptor in descriptors.chunks_exact(DESCRIPTOR) {
                let Descriptor { count, address, .. } = Descriptor::decode(descriptor);
                if count != 0 && collections.insert(address) {
                    ranges.push(self.file.collection_span(address)?);
                }
            }
        }
        Ok(ranges)
    }

    /// Advises the kernel to read the stored bytes of every chunk now
    /// ([`MappedFile::will_need`]): they are read together, not one fault each later.
    pub fn will_need_chunks(&self) {
        if let Locations::Detached(locations) = &self.locations {
            for location in locations.iter().flatten() {
                if let Ok(range) = self.file.file_range(location.address, location.size) {
                    self.file.will_need(range);
                }
            }
        }
    }

    /// The file bytes a read of row `row` will start with: the first page of the collection
    /// its object lies in (a lazy reader's, its chunk decoded now; `None` otherwise, or for an
    /// empty or damaged row). A read of several columns' rows advises these together first.
    pub fn row_page(&self, row: u64) -> Option<std::ops::Range<usize>> {
        if !self.lazy || row >= self.rows {
            return None;
        }
        let chunk = self.chunk(row / self.chunk_rows).ok()?;
        let Chunk::Descriptors { descriptors, .. } = chunk.as_ref() else { return None };
        let at = (row % self.chunk_rows) as usize * DESCRIPTOR;
        let Descriptor { count, address, .. } = Descriptor::decode(&descriptors[at..]);
        if count == 0 {
            return None;
        }
        let start = self.file.file_range(address, 16).ok()?.start as usize;
        Some(start..(start + 4096).min(self.file.len() as usize))
    }

    /// Whether rows can be returned as `element` values (the stored type, or a float of the
    /// other width, cast as libhdf5 casts).
    pub fn converts_to(&self, element: Element) -> bool {
        element == self.element
            || matches!(
                (self.element, element),
                (Element::F32, Element::F64) | (Element::F64, Element::F32)
            )
    }

    /// Row `row` as `element` values (see [`DirectReader::converts_to`]), or what is wrong with
    /// the file.
    pub fn read(&self, row: u64, element: Element) -> Result<Vec<u8>, String> {
        let stored = self.stored(row)?;
        Ok(match (self.element, element) {
            (Element::F32, Element::F64) => stored
                .chunks_exact(4)
                .flat_map(|b| {
                    f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))).to_le_bytes()
                })
                .collect(),
            (Element::F64, Element::F32) => stored
                .chunks_exact(8)
                .flat_map(|b| {
                    (f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32).to_le_bytes()
                })
                .collect(),
            _ => stored.to_vec(),
        })
    }

    /// Row `row`'s stored bytes, borrowed from the map.
    fn stored(&self, row: u64) -> Result<&[u8], String> {
        if row >= self.rows {
            return Err(format!("row {row} is past the dataset's {} rows", self.rows));
        }
        let number = row / self.chunk_rows;
        let chunk = self.chunk(number)?;
        let rows = match chunk.as_ref() {
            Chunk::Unwritten => return Ok(&[]),
            Chunk::Descriptors { descriptors, resolved } => {
                let at = (row % self.chunk_rows) as usize;
                let word = resolved[at].load(Ordering::Relaxed);
                if word != 0 {
                    // Packed from a range of this map at its first read: in bounds.
                    let (start, len) = unpack(word);
                    return Ok(self.file.range(start..start + len));
                }
                let size = self.element.size();
                let bytes =
                    row_object(row, &descriptors[at * DESCRIPTOR..], size, |address, index| {
                        self.file.find_object(address, index)
                    })?;
                if !bytes.is_empty() {
                    // A slice of the map (an empty row is not: it is never kept).
                    let start = bytes.as_ptr() as usize - self.file.whole().as_ptr() as usize;
                    if let Some(word) = pack(start, bytes.len()) {
                        resolved[at].store(word, Ordering::Relaxed);
                    }
                }
                return Ok(bytes);
            }
            Chunk::Rows(rows) => rows,
        };
        let (start, len) = rows[(row % self.chunk_rows) as usize];
        if (start, len) != BAD_ROW {
            // Resolved from this map at decode: in bounds.
            return Ok(self.file.range(start as usize..(start + len) as usize));
        }
        let descriptors = self.chunk_descriptors(number)?.unwrap_or_default();
        let at = (row % self.chunk_rows) as usize * DESCRIPTOR;
        row_object(row, &descriptors[at..], self.element.size(), |address, index| {
            self.file.heap_object(address, index)
        })
    }

    /// Chunk `number`, decoded on first use and kept when it has a slot.
    fn chunk(&self, number: u64) -> Result<Cow<'_, Chunk>, String> {
        let Some(cell) = usize::try_from(number).ok().and_then(|n| self.chunks.get(n)) else {
            return self.decode_chunk(number).map(Cow::Owned);
        };
        if let Some(chunk) = cell.get() {
            return Ok(Cow::Borrowed(chunk));
        }
        let chunk = self.decode_chunk(number)?;
        Ok(Cow::Borrowed(cell.get_or_init(|| chunk)))
    }

    /// Chunk `number` read from the map and decoded, each row's descriptor followed to its heap
    /// object (each collection parsed once for the chunk, then dropped: the chunk keeps 16
    /// bytes per row, whatever the collections hold).
    fn decode_chunk(&self, number: u64) -> Result<Chunk, String> {
        let Some(descriptors) = self.chunk_descriptors(number)? else {
            return Ok(Chunk::Unwritten);
        };
        if self.lazy {
            let resolved = (0..self.chunk_rows).map(|_| AtomicU64::new(0)).collect();
            return Ok(Chunk::Descriptors {
                descriptors: descriptors.into_boxed_slice(),
                resolved,
            });
        }
        let size = self.element.size();
        let mut collections: HashMap<u64, Result<Collection, String>> = HashMap::new();
        let rows = descriptors
            .chunks_exact(DESCRIPTOR)
            .map(|descriptor| {
                let Descriptor { count, address, index } = Descriptor::decode(descriptor);
                if count == 0 {
                    return (0, 0);
                }
                let collection =
                    collections.entry(address).or_insert_with(|| self.file.collection(address));
                let range = collection.as_ref().ok().and_then(|c| c.object(index));
                match range {
                    Some(range) if range.len() as u64 == u64::from(count) * size as u64 => {
                        (range.start as u64, range.len() as u64)
                    }
                    _ => BAD_ROW,
                }
            })
            .collect();
        Ok(Chunk::Rows(rows))
    }

    /// The descriptors of chunk `number` read from the map and unfiltered; `None` for a chunk
    /// never written.
    fn chunk_descriptors(&self, number: u64) -> Result<Option<Vec<u8>>, String> {
        let first_row = number * self.chunk_rows;
        let location = match &self.locations {
            Locations::Attached(dataset) => storage::chunk_location(dataset.id(), first_row)
                .map_err(|e| format!("locating the chunk of row {first_row}: {e}"))?,
            Locations::Detached(locations) => {
                let found = usize::try_from(number).ok().and_then(|n| locations.get(n));
                *found.ok_or_else(|| format!("row {first_row} is past the dataset's chunks"))?
            }
        };
        let Some(location) = location else { return Ok(None) };
        let stored = self.file.bytes(location.address, location.size)?;
        let expected = (self.chunk_rows as usize) * DESCRIPTOR;
        let decoded = self
            .pipeline
            .decode(stored, location.filter_mask, expected)
            .map_err(|e| format!("chunk of rows {first_row}..: {e}"))?;
        Ok(Some(decoded))
    }
}

/// Row `row`'s values: the heap object its descriptor (at the start of `descriptor`) points to,
/// found by `object(address, index)`, checked to hold the descriptor's count of
/// `element_size`-byte elements. An empty row (count 0) is empty without a lookup.
pub(super) fn row_object<'f>(
    row: u64,
    descriptor: &[u8],
    element_size: usize,
    object: impl FnOnce(u64, u32) -> Result<&'f [u8], String>,
) -> Result<&'f [u8], String> {
    let Descriptor { count, address, index } = Descriptor::decode(descriptor);
    if count == 0 {
        return Ok(&[]);
    }
    let found = object(address, index)
        .map_err(|e| format!("row {row} (heap object {index} at address {address}): {e}"))?;
    let expected = u64::from(count) * element_size as u64;
    if found.len() as u64 != expected {
        return Err(format!(
            "row {row}: heap object {index} at address {address} holds {} bytes, its {count} \
             elements need {expected}",
            found.len()
        ));
    }
    Ok(found)
}
