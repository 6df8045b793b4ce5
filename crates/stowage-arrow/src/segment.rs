//! One segment: an Arrow IPC *file*, memory-mapped once and decoded without copying.
//!
//! The record batches' buffers are slices of the map (`bytes::Bytes` shared with
//! `arrow_buffer::Buffer`), so a tensor read from a segment shares the map too. Segments are
//! untrusted input: a bad magic, footer or batch is [`Error::Corrupted`] naming the file, and a
//! panic inside the Arrow decoder is caught and reported the same way.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{FileDecoder, read_footer_length};
use arrow_schema::SchemaRef;
use memmap2::Mmap;
use stowage_core::bytes::Bytes;
use stowage_core::cold_reads::PagePlan;
use stowage_core::{Error, IoResultExt, Result};

use crate::row_layout::RowLayout;

/// Bytes at each end of a segment file that opening it reads (schema, batch metadata, footer),
/// asked for together by [`Segment::will_open`].
pub const OPEN_READS: usize = 64 << 10;

/// Segment files larger than this are opened by reading only what opening needs
/// ([`Segment::open`]), and read at random afterwards; smaller ones are read whole by the first
/// fault. Measured with `examples/cold_profile.rs` (page cache dropped, 2,048-row segments of
/// `f32[N]`; cold single gets / rows of cold batches of 1,024 per second, read whole vs planned):
/// 104 KB segments 10 k vs 7 k batch rows; 333 KB 6.3 k vs 5.4 k gets, 46 k vs 43 k batch rows;
/// 1.1 MB 3.4 k vs 5.4 k gets, 19 k vs 36 k; 4.3 MB 2.0 k vs 6.5 k gets, 14 k vs 53 k.
pub const PLANNED_OPEN_ABOVE: usize = 512 << 10;

/// The magic at both ends of an Arrow IPC file.
pub(crate) const MAGIC: &[u8; 6] = b"ARROW1";

/// An open segment: its schema and record batches, all sharing one memory map.
#[derive(Debug)]
pub struct Segment {
    // Read through `id()`, which only the fuzz targets and tests call.
    #[cfg_attr(not(any(test, feature = "fuzzing", feature = "test-support")), allow(dead_code))]
    id: u64,
    path: PathBuf,
    schema: SchemaRef,
    form: Form,
    /// The whole map (shared with the batches' buffers).
    bytes: Bytes,
}

/// How a segment's rows are read.
#[derive(Debug)]
enum Form {
    /// Decoded whole when opened: every batch checked by the Arrow decoder.
    Decoded {
        batches: Vec<RecordBatch>,
        /// Row number at which each batch starts, and the total at the end.
        starts: Vec<usize>,
    },
    /// Read row by row, each row checked when read ([`crate::row_layout`]).
    Rows(Arc<RowLayout>),
}

/// A segment file mapped, not yet read: a reader first asks for the pages opening it reads
/// (with its row checksums'), then opens it row by row ([`MappedSegment::by_rows`]) or whole
/// ([`MappedSegment::decode`]).
#[derive(Debug)]
pub struct MappedSegment {
    id: u64,
    path: PathBuf,
    map: Mmap,
}

impl MappedSegment {
    /// Maps `path`, segment `id`; nothing of it is read.
    ///
    /// Errors: [`Error::Io`] when it cannot be opened or mapped.
    pub fn open(id: u64, path: &Path) -> Result<MappedSegment> {
        let file = File::open(path).at(path)?;
        // SAFETY: segments are immutable once renamed into place (writers only ever create new
        // ones and compaction replaces files by rename, never in place); a reader maps the file it
        // opened. Truncating a segment under a reader is outside the cache contract.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        Ok(MappedSegment { id, path: path.to_path_buf(), map })
    }

    /// The file's length.
    pub fn file_len(&self) -> usize {
        self.map.len()
    }

    /// The map (nothing of it read yet: for hints).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Adds what opening it row by row reads first to `plan`: its first page (the schema and,
    /// in a segment of one batch, the batch's metadata) and its last [`END_READS`] bytes (the
    /// footer).
    pub fn plan_open<'a>(&'a self, plan: &mut PagePlan<'a>) {
        let len = self.map.len();
        let page = stowage_core::cold_reads::page_size();
        let _ = plan.add(&self.map, 0..len.min(page));
        let _ = plan.add(&self.map, len.saturating_sub(END_READS)..len);
    }

    /// The segment read row by row: only its footer and batch metadata are parsed now (and the
    /// map set to random reads, so that a row's read takes the row's pages, not the file), each
    /// row checked when it is read ([`crate::row_layout`]). A file that cannot be read that way
    /// (damaged, or holding what the row reader does not read) is mapped again and decoded
    /// whole ([`Segment::open`]), which reports its damage.
    ///
    /// The rows read this way are checked for structure only (offsets, utf8, buffer sizes):
    /// damage to a row's values, to the metadata that places them or to another row is found by
    /// the row's checksum ([`crate::row_sums`]), which covers everything a read returns; a
    /// reader opens a segment this way only when it has row checksums.
    ///
    /// Errors: as [`Segment::open`].
    pub fn by_rows(self) -> Result<Segment> {
        let MappedSegment { id, path, map } = self;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
        let bytes = Bytes::from_owner(map);
        let buffer = Buffer::from(bytes.clone());
        let parse = std::panic::AssertUnwindSafe(|| RowLayout::parse(&buffer));
        match std::panic::catch_unwind(parse) {
            Ok(Some(layout)) => {
                let schema = layout.schema().clone();
                Ok(Segment { id, path, schema, form: Form::Rows(Arc::new(layout)), bytes })
            }
            _ => {
                drop((buffer, bytes));
                Segment::open(id, &path)
            }
        }
    }

    /// The segment decoded whole (see [`Segment::open`]).
    ///
    /// Errors: as [`Segment::open`].
    pub fn decode(self) -> Result<Segment> {
        let MappedSegment { id, path, map } = self;
        if map.len() > PLANNED_OPEN_ABOVE {
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Random);
            plan_open_reads(&map);
        }
        Segment::decoded(id, path, Bytes::from_owner(map))
    }
}

impl Segment {
    /// The segment in `bytes` (the map of `path`) decoded whole: every batch checked.
    fn decoded(id: u64, path: PathBuf, bytes: Bytes) -> Result<Segment> {
        let decode = std::panic::AssertUnwindSafe(|| decode(&bytes));
        let (schema, batches) = match std::panic::catch_unwind(decode) {
            Ok(decoded) => decoded.map_err(|why| Error::corrupted(&path, why))?,
            Err(_) => {
                return Err(Error::corrupted(&path, "the Arrow IPC decoder failed on this file"));
            }
        };
        // A batch's row count is backed by its key column's offsets only when it has one (a batch
        // without columns may claim any count): every segment has one, and nothing else may be
        // trusted to size or bound a walk over the rows.
        let mut starts = vec![0];
        for (number, batch) in batches.iter().enumerate() {
            if key_column(batch).is_none() {
                return Err(Error::corrupted(
                    &path,
                    format!("record batch {number} has no utf8 \"key\" column"),
                ));
            }
            starts.push(starts.last().expect("starts with 0") + batch.num_rows());
        }
        Ok(Segment { id, path, schema, form: Form::Decoded { batches, starts }, bytes })
    }
}

impl Segment {
    /// Maps and decodes `path`, segment `id`.
    ///
    /// A file larger than [`PLANNED_OPEN_ABOVE`] is read only where opening needs it, each part
    /// asked for as soon as its place is known (`plan_open_reads`): its first page and its end
    /// (the schema, the first batch's metadata, the footer) together, then every batch's
    /// metadata, then the buffers the decoder checks (validity bitmaps, offsets, the key strings),
    /// not the tensors' values; its map then reads at random (`MADV_RANDOM`), so that a row's
    /// read takes the row's pages (a cold get of a 4.3 MB segment read 17.5 KiB instead of 408).
    /// A smaller file is left to the kernel: the first fault's read-around (8 MiB on the scale
    /// suite's disk) reads it whole in one request, which costs less than the planned rounds
    /// (figures at [`PLANNED_OPEN_ABOVE`]). The checks are the same either way.
    ///
    /// Errors: [`Error::Io`] when it cannot be opened or mapped; [`Error::Corrupted`] naming the
    /// file when it is not a complete, valid Arrow IPC file.
    pub fn open(id: u64, path: &Path) -> Result<Segment> {
        MappedSegment::open(id, path)?.decode()
    }

    /// The segment id.
    #[cfg_attr(not(any(test, feature = "fuzzing", feature = "test-support")), allow(dead_code))]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Arrow schema (with torchcachex's metadata: `torch_dtype`, `tensor_keys`).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows across every batch.
    pub fn rows(&self) -> usize {
        match &self.form {
            Form::Decoded { starts, .. } => *starts.last().expect("starts with 0"),
            Form::Rows(layout) => layout.rows(),
        }
    }

    /// A segment read row by row decoded whole, sharing its map (every batch checked, as by
    /// [`Segment::open`]); a decoded one decoded again.
    ///
    /// Errors: as [`Segment::open`].
    pub fn decode_whole(&self) -> Result<Segment> {
        Segment::decoded(self.id, self.path.clone(), self.bytes.clone())
    }

    /// Whether it is read row by row ([`MappedSegment::by_rows`]), without decoded batches.
    pub fn by_rows(&self) -> Option<&Arc<RowLayout>> {
        match &self.form {
            Form::Rows(layout) => Some(layout),
            Form::Decoded { .. } => None,
        }
    }

    /// The batch holding row `row` and the row's position in it; `None` when out of range, or
    /// when the segment is read row by row (it has no decoded batches: see [`Segment::row`]).
    pub fn locate(&self, row: usize) -> Option<(&RecordBatch, usize)> {
        let Form::Decoded { batches, starts } = &self.form else { return None };
        if row >= self.rows() {
            return None;
        }
        let batch = starts.partition_point(|&start| start <= row) - 1;
        Some((&batches[batch], row - starts[batch]))
    }

    /// Row `row`: the batch holding it and its position there, a checked batch of that one row
    /// when the segment is read row by row. `Ok(None)` when out of range.
    ///
    /// Errors: text saying why the row's arrays do not check (row by row only: a decoded
    /// segment was checked whole when opened).
    pub fn row(
        &self,
        row: usize,
    ) -> std::result::Result<Option<(Cow<'_, RecordBatch>, usize)>, String> {
        match &self.form {
            Form::Decoded { .. } => Ok(self.locate(row).map(|(b, at)| (Cow::Borrowed(b), at))),
            Form::Rows(layout) => {
                // The row's arrays are built with Arrow's checks, which report, not panic; a
                // panic there would still be this row's damage, not the process's end.
                let built =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| layout.row(row)))
                        .unwrap_or_else(|_| Err("the row's arrays do not check".to_owned()));
                Ok(built?.map(|batch| (Cow::Owned(batch), 0)))
            }
        }
    }

    /// Asks the kernel to read the parts of the file at `path` that opening it reads (its first
    /// and last [`OPEN_READS`] bytes: of a segment, the schema, the first batch's metadata and
    /// the footer; a row checksum file whole), without waiting: a batch that opens many cold
    /// segments then has their reads in flight together. A hint: failures are ignored.
    pub fn will_open(path: &Path) {
        let Ok(file) = File::open(path) else { return };
        // SAFETY: as in `Segment::open`; the map lives only while the advice is given.
        let Ok(map) = (unsafe { Mmap::map(&file) }) else { return };
        let mut plan = PagePlan::new();
        let _ = plan.add(&map, 0..map.len().min(OPEN_READS));
        let _ = plan.add(&map, map.len().saturating_sub(OPEN_READS)..map.len());
        plan.advise();
    }

    /// Asks the kernel to read the whole segment now (a hint, for a reader of every row, as
    /// `validate`), in one pass instead of fault by fault.
    pub fn will_need(&self) {
        let mut plan = PagePlan::new();
        plan.add_whole(&self.bytes);
        plan.advise();
    }

    /// Every row's key (the `key` column), in row order.
    ///
    /// Errors: [`Error::Corrupted`] naming the file when there is no utf8 `key` column or a key is
    /// null.
    pub fn keys(&self) -> Result<Vec<&str>> {
        // The key columns are read whole: their pages asked for at once, not faulted one by one.
        let batches = match &self.form {
            Form::Decoded { batches, .. } => batches,
            Form::Rows(layout) => {
                // The map reads at random: the key columns are asked for whole first.
                let mut plan = PagePlan::new();
                layout.key_buffers(|bytes| plan.add_whole(bytes));
                plan.advise();
                return (0..layout.rows())
                    .map(|row| {
                        layout.key(row).ok_or_else(|| {
                            Error::corrupted(
                                &self.path,
                                format!("row {row} has a null or damaged key"),
                            )
                        })
                    })
                    .collect();
            }
        };
        let mut plan = PagePlan::new();
        for column in batches.iter().filter_map(key_column) {
            let _ =
                plan.add(column.offsets().inner().inner().as_slice(), 0..(column.len() + 1) * 4);
            plan.add_whole(column.value_data());
        }
        plan.advise();
        let mut keys = Vec::with_capacity(self.rows());
        for batch in batches {
            let column = key_column(batch)
                .ok_or_else(|| Error::corrupted(&self.path, "no utf8 \"key\" column"))?;
            for i in 0..column.len() {
                if column.is_null(i) {
                    return Err(Error::corrupted(
                        &self.path,
                        format!("row {} has a null key", keys.len()),
                    ));
                }
                keys.push(column.value(i));
            }
        }
        Ok(keys)
    }

    /// The key of row `row`; `None` when out of range, null or without a utf8 `key` column (a
    /// lookup then treats the row as not holding the key it looks for).
    pub fn key(&self, row: usize) -> Option<&str> {
        if let Form::Rows(layout) = &self.form {
            return layout.key(row);
        }
        let (batch, at) = self.locate(row)?;
        let column = key_column(batch)?;
        (!column.is_null(at)).then(|| column.value(at))
    }
}

impl Segment {
    /// Asks the CPU to load what [`Segment::key`] reads for `row`: the key's offsets or, once
    /// they have arrived (`bytes`), the key's bytes (hints for batched lookups).
    pub fn prefetch_key(&self, row: usize, bytes: bool) {
        if self.by_rows().is_some() {
            return self.prefetch_row(row, bytes);
        }
        let Some((batch, at)) = self.locate(row) else { return };
        let Some(column) = key_column(batch) else { return };
        let offsets = column.value_offsets();
        if !bytes {
            if let Some(offset) = offsets.get(at) {
                stowage_core::prefetch::prefetch_value(offset);
            }
        } else if let (Some(&start), Some(&end)) = (offsets.get(at), offsets.get(at + 1))
            && let Some(key) = column.value_data().get(start as usize..end as usize)
        {
            stowage_core::prefetch::prefetch(key);
        }
    }
}

impl Segment {
    /// Adds what [`Segment::key`] reads for `row` to `plan`: the key's offsets or, once they are
    /// in memory (`bytes`), the key's bytes (the pages a cold batch asks the kernel for).
    pub fn plan_key<'a>(&'a self, row: usize, bytes: bool, plan: &mut PagePlan<'a>) {
        if self.by_rows().is_some() {
            // Row by row, the key is read with the rest of the row: its offsets and values are
            // asked for with the key's.
            return self.plan_row(row, bytes, plan);
        }
        let Some((batch, at)) = self.locate(row) else { return };
        let Some(column) = key_column(batch) else { return };
        let offsets = column.offsets().inner().inner().as_slice();
        if !bytes {
            let _ = plan.add(offsets, at * 4..(at + 2) * 4);
        } else if let (Some(&start), Some(&end)) =
            (column.value_offsets().get(at), column.value_offsets().get(at + 1))
        {
            let _ = plan.add(column.value_data(), start as usize..end as usize);
        }
    }
}

impl Segment {
    /// Asks the CPU to load what reading row `row` of a segment read row by row reads first
    /// (its offsets) or, with `values`, its values (it reads the offsets). Nothing for a decoded
    /// segment (see `crate::decode::prefetch_offsets`).
    pub fn prefetch_row(&self, row: usize, values: bool) {
        let Some(layout) = self.by_rows() else { return };
        match values {
            false => layout.row_offsets(row, |b| stowage_core::prefetch::prefetch_value(&b[0])),
            true => layout.row_values(row, stowage_core::prefetch::prefetch),
        }
    }

    /// Adds the pages of what reading row `row` of a segment read row by row reads to `plan`:
    /// its offsets (and where its values would lie were its batch's rows of one size), or, with
    /// `values`, its values (it reads the offsets). Nothing for a decoded segment (see
    /// `crate::decode::plan_offsets`).
    pub fn plan_row<'a>(&'a self, row: usize, values: bool, plan: &mut PagePlan<'a>) {
        let Some(layout) = self.by_rows() else { return };
        match values {
            false => {
                layout.row_offsets(row, |b| plan.add_whole(b));
                layout.row_values_guess(row, |b| plan.add_whole(b));
            }
            true => layout.row_values(row, |b| plan.add_whole(b)),
        }
    }
}

/// Bytes at the end of a segment asked for with its first page by [`plan_open_reads`] (the
/// trailer and, for a segment of a few batches, the whole footer).
const END_READS: usize = 16 << 10;

/// Asks the kernel, round by round, for the parts of the Arrow IPC file in `bytes` that decoding
/// it reads ([`Segment::open`] of a large file). Only hints: a file that does not parse is left
/// to [`decode`], which reports it.
fn plan_open_reads(bytes: &[u8]) {
    let len = bytes.len();
    if len < 2 * MAGIC.len() + 4 {
        return;
    }
    let advise = |ranges: &mut dyn Iterator<Item = std::ops::Range<usize>>| {
        let mut plan = PagePlan::new();
        for range in ranges {
            let _ = plan.add(bytes, range);
        }
        plan.advise();
    };
    let page = stowage_core::cold_reads::page_size();
    advise(&mut [0..len.min(page), len.saturating_sub(END_READS)..len].into_iter());
    let Ok(footer_range) = footer_range(bytes) else { return };
    advise(&mut std::iter::once(footer_range.clone()));
    let Ok(footer) = arrow_ipc::root_as_footer(&bytes[footer_range]) else { return };
    let Some(schema) = footer.schema() else { return };
    // (metadata, body) of each block that lies inside the file.
    let parts: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = footer
        .recordBatches()
        .into_iter()
        .flatten()
        .filter_map(|block| block_ranges(block, len))
        .collect();
    advise(&mut parts.iter().map(|(meta, _)| meta.clone()));
    let dictionaries = footer.dictionaries().is_some_and(|d| !d.is_empty());
    let mut plan = PagePlan::new();
    for (meta, body) in &parts {
        let checked =
            (!dictionaries).then(|| record_batch_buffers(&bytes[meta.clone()], schema)).flatten();
        let Some(ranges) = checked else {
            let _ = plan.add(bytes, body.clone());
            continue;
        };
        for range in ranges {
            let start = body.start.saturating_add(range.start);
            let end = body.start.saturating_add(range.end);
            if end <= body.end {
                let _ = plan.add(bytes, start..end);
            }
        }
    }
    plan.advise();
}

/// The byte ranges (in the body) of the buffers that decoding the record batch whose message is
/// `meta` reads, for a batch of `schema`'s fields: `None` when that cannot be told (not a record
/// batch, compressed, a type not listed in [`read_buffers`]), and the whole body is then asked
/// for.
fn record_batch_buffers(
    meta: &[u8],
    schema: arrow_ipc::Schema<'_>,
) -> Option<Vec<std::ops::Range<usize>>> {
    let message = match meta.get(..4)? {
        [0xff, 0xff, 0xff, 0xff] => meta.get(8..)?,
        _ => meta.get(4..)?,
    };
    let message = arrow_ipc::root_as_message(message).ok()?;
    let batch = message.header_as_record_batch()?;
    if batch.compression().is_some() {
        return None;
    }
    let mut buffers = batch.buffers()?.iter();
    let mut ranges = Vec::new();
    for field in schema.fields()? {
        read_buffers(field, &mut buffers, &mut ranges)?;
    }
    Some(ranges)
}

/// Takes the buffers of `field` (and its children) from `buffers`, in the IPC format's order,
/// adding to `ranges` those the decoder's checks read: all but a fixed-width column's values.
/// `None` for a type not listed here.
fn read_buffers<'a>(
    field: arrow_ipc::Field<'_>,
    buffers: &mut impl Iterator<Item = &'a arrow_ipc::Buffer>,
    ranges: &mut Vec<std::ops::Range<usize>>,
) -> Option<()> {
    use arrow_ipc::Type;
    let mut take = |read: bool| -> Option<()> {
        let buffer = buffers.next()?;
        let start = usize::try_from(buffer.offset()).ok()?;
        let end = start.checked_add(usize::try_from(buffer.length()).ok()?)?;
        if read && end > start {
            ranges.push(start..end);
        }
        Some(())
    };
    if field.dictionary().is_some() {
        // The indices, checked against the dictionary.
        take(true)?;
        return take(true);
    }
    let (own, values_read, children) = match field.type_type() {
        Type::Null => (0, false, false),
        Type::Utf8 | Type::Binary | Type::LargeUtf8 | Type::LargeBinary => (3, true, false),
        Type::Int
        | Type::FloatingPoint
        | Type::Bool
        | Type::Decimal
        | Type::Date
        | Type::Time
        | Type::Timestamp
        | Type::Interval
        | Type::Duration
        | Type::FixedSizeBinary => (2, false, false),
        Type::List | Type::LargeList => (2, true, true),
        Type::Struct_ | Type::FixedSizeList => (1, true, true),
        _ => return None,
    };
    for i in 0..own {
        // The validity bitmap (first) is always read; a fixed-width column's values are not.
        take(i == 0 || values_read)?;
    }
    if children {
        for child in field.children()? {
            read_buffers(child, buffers, ranges)?;
        }
    }
    Some(())
}

/// A batch's `key` column, when it is utf8.
fn key_column(batch: &RecordBatch) -> Option<&StringArray> {
    batch.column_by_name("key")?.as_any().downcast_ref::<StringArray>()
}

/// The schema and batches of an IPC file held in `bytes`.
fn decode(bytes: &Bytes) -> std::result::Result<(SchemaRef, Vec<RecordBatch>), String> {
    let len = bytes.len();
    if len < 2 * MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC || &bytes[len - 6..] != MAGIC {
        return Err(format!("not an Arrow IPC file ({len} bytes, magic missing at either end)"));
    }
    let buffer = Buffer::from(bytes.clone());
    let footer = arrow_ipc::root_as_footer(&buffer[footer_range(&buffer)?])
        .map_err(|e| format!("bad footer: {e}"))?;
    let schema = footer.schema().ok_or("the footer has no schema")?;
    let schema = std::sync::Arc::new(
        arrow_ipc::convert::try_fb_to_schema(schema).map_err(|e| format!("bad schema: {e}"))?,
    );
    let mut decoder = FileDecoder::new(schema.clone(), footer.version());
    for block in footer.dictionaries().iter().flatten() {
        let data = block_data(&buffer, block)?;
        decoder.read_dictionary(block, &data).map_err(|e| format!("bad dictionary: {e}"))?;
    }
    let mut batches = Vec::new();
    for (i, block) in footer.recordBatches().iter().flatten().enumerate() {
        let data = block_data(&buffer, block)?;
        if let Some(batch) =
            decoder.read_record_batch(block, &data).map_err(|e| format!("record batch {i}: {e}"))?
        {
            batches.push(batch);
        }
    }
    Ok((schema, batches))
}

/// Where the footer of the IPC file in `bytes` lies (at least 10 bytes long: its trailer is the
/// footer's length and the closing magic).
pub(crate) fn footer_range(bytes: &[u8]) -> std::result::Result<std::ops::Range<usize>, String> {
    let trailer = bytes.len().checked_sub(10).ok_or("shorter than a footer's trailer")?;
    let footer_len = read_footer_length(bytes[trailer..].try_into().expect("10 bytes"))
        .map_err(|e| format!("bad footer length: {e}"))?;
    let footer_start = trailer.checked_sub(footer_len).ok_or("footer longer than the file")?;
    Ok(footer_start..trailer)
}

/// The (metadata, body) byte ranges of a footer block in a file of `len` bytes; `None` when the
/// block does not lie inside it.
pub(crate) fn block_ranges(
    block: &arrow_ipc::Block,
    len: usize,
) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let start = usize::try_from(block.offset()).ok()?;
    let body = start.checked_add(usize::try_from(block.metaDataLength()).ok()?)?;
    let end = body.checked_add(usize::try_from(block.bodyLength()).ok()?)?;
    (end <= len).then_some((start..body, body..end))
}

/// The bytes of one footer block, checked to lie inside the file.
fn block_data(buffer: &Buffer, block: &arrow_ipc::Block) -> std::result::Result<Buffer, String> {
    let (meta, body) = block_ranges(block, buffer.len()).ok_or_else(|| {
        format!(
            "a block at offset {} ({} + {} bytes) lies outside the file",
            block.offset(),
            block.metaDataLength(),
            block.bodyLength()
        )
    })?;
    Ok(buffer.slice_with_length(meta.start, body.end - meta.start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::Int32Array;
    use arrow_ipc::writer::FileWriter;

    fn write_segment(path: &Path, keys: &[&str]) {
        let batch = RecordBatch::try_from_iter([
            ("key", Arc::new(StringArray::from(keys.to_vec())) as Arc<dyn Array>),
            ("v", Arc::new(Int32Array::from_iter_values(0..keys.len() as i32)) as _),
        ])
        .unwrap();
        let mut writer = FileWriter::try_new(File::create(path).unwrap(), &batch.schema()).unwrap();
        writer.write(&batch).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
    }

    /// A segment of `rows` rows in two batches: `key`, and `x_data` as `list<float32>` of
    /// `width` values each (a torchcachex tensor column), so that the values are most of the file.
    fn write_wide_segment(path: &Path, rows: usize, width: usize) {
        use arrow_array::builder::{Float32Builder, ListBuilder};
        let keys: Vec<String> = (0..rows).map(|i| format!("key/{i:06}")).collect();
        let mut values = ListBuilder::new(Float32Builder::new());
        for i in 0..rows {
            values.values().append_slice(&vec![i as f32; width]);
            values.append(true);
        }
        let batch = RecordBatch::try_from_iter([
            ("key", Arc::new(StringArray::from(keys)) as Arc<dyn Array>),
            ("x_data", Arc::new(values.finish()) as _),
        ])
        .unwrap();
        let mut writer = FileWriter::try_new(File::create(path).unwrap(), &batch.schema()).unwrap();
        writer.write(&batch.slice(0, rows / 2)).unwrap();
        writer.write(&batch.slice(rows / 2, rows - rows / 2)).unwrap();
        writer.finish().unwrap();
    }

    /// Where a buffer of `segment`'s first batch lies in its file: (start, end) offsets.
    fn place(segment: &Segment, buffer: &[u8]) -> std::ops::Range<usize> {
        let start = buffer.as_ptr() as usize - segment.bytes.as_ptr() as usize;
        start..start + buffer.len()
    }

    /// The reads planned for opening a segment ([`record_batch_buffers`]) cover every buffer the
    /// decoder checks (the keys' offsets and strings, the list offsets) and leave out the
    /// tensors' values.
    #[test]
    fn an_open_plans_the_checked_buffers_and_not_the_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.arrow");
        write_wide_segment(&path, 200, 64);
        let bytes = std::fs::read(&path).unwrap();
        let segment = Segment::open(0, &path).unwrap();
        let len = bytes.len();
        let footer_len = read_footer_length(bytes[len - 10..].try_into().unwrap()).unwrap();
        let footer = arrow_ipc::root_as_footer(&bytes[len - 10 - footer_len..len - 10]).unwrap();
        let block = footer.recordBatches().unwrap().get(0);
        let (meta, body) = (block.offset() as usize, block.metaDataLength() as usize);
        let planned: Vec<std::ops::Range<usize>> =
            record_batch_buffers(&bytes[meta..meta + body], footer.schema().unwrap())
                .expect("a batch of utf8 and list<float32> is planned")
                .into_iter()
                .map(|r| meta + body + r.start..meta + body + r.end)
                .collect();
        let covered = |range: &std::ops::Range<usize>| {
            planned.iter().any(|p| p.start <= range.start && range.end <= p.end)
        };
        let batch = segment.locate(0).unwrap().0;
        let keys = key_column(batch).unwrap();
        let list = batch.column(1).as_any().downcast_ref::<arrow_array::ListArray>().unwrap();
        let values = list.values().to_data().buffers()[0].clone();
        assert!(covered(&place(&segment, keys.offsets().inner().inner().as_slice())));
        assert!(covered(&place(&segment, keys.value_data())));
        assert!(covered(&place(&segment, list.offsets().inner().inner().as_slice())));
        let values = place(&segment, values.as_slice());
        assert!(values.len() >= 200 * 64 * 4 / 2, "{values:?}");
        assert!(planned.iter().all(|p| p.end <= values.start || values.end <= p.start));
    }

    /// Whether `path` is mapped in this process with `MADV_RANDOM` (`rr` in its smaps flags).
    #[cfg(target_os = "linux")]
    fn mapped_at_random(path: &Path) -> bool {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut ours = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                // A mapping's first line: address range, permissions, offset, device, inode, path.
                ours = line.ends_with(path.to_str().unwrap());
            }
            if ours && let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().any(|f| f == "rr");
            }
        }
        panic!("{} is not mapped", path.display());
    }

    /// A segment larger than [`PLANNED_OPEN_ABOVE`] is read at random once open, a smaller one
    /// through the kernel's read-around; both read back the same, and a damaged large one is
    /// corruption, never a panic or wrong keys.
    #[test]
    #[cfg(target_os = "linux")]
    fn large_segments_open_planned_and_read_at_random() {
        let dir = tempfile::tempdir().unwrap();
        let (small, large) = (dir.path().join("small.arrow"), dir.path().join("large.arrow"));
        write_wide_segment(&small, 200, 64);
        write_wide_segment(&large, 4_000, 64);
        assert!(std::fs::metadata(&small).unwrap().len() < PLANNED_OPEN_ABOVE as u64);
        assert!(std::fs::metadata(&large).unwrap().len() > PLANNED_OPEN_ABOVE as u64);
        for (path, rows, random) in [(&small, 200, false), (&large, 4_000, true)] {
            let segment = Segment::open(0, path).unwrap();
            assert_eq!(mapped_at_random(path), random, "{}", path.display());
            let keys = segment.keys().unwrap();
            assert_eq!(keys.len(), rows);
            assert!(keys.iter().enumerate().all(|(i, k)| *k == format!("key/{i:06}")));
        }
        let good = std::fs::read(&large).unwrap();
        let mut cases = vec![good[..good.len() - 100].to_vec(), good[..good.len() / 2].to_vec()];
        for at in (good.len() - 2_000..good.len()).step_by(97).chain((0..2_000).step_by(89)) {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            cases.push(bad);
        }
        for bytes in cases {
            std::fs::write(&large, &bytes).unwrap();
            match Segment::open(0, &large) {
                Ok(segment) => {
                    let _ = segment.keys();
                }
                Err(e) => assert!(matches!(e, Error::Corrupted { .. }), "{e}"),
            }
        }
    }

    #[test]
    fn rows_are_counted_across_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.arrow");
        write_segment(&path, &["a", "b", "c"]);
        let segment = Segment::open(0, &path).unwrap();
        assert_eq!(segment.rows(), 6);
        assert_eq!(segment.keys().unwrap(), ["a", "b", "c", "a", "b", "c"]);
        let (batch, at) = segment.locate(4).unwrap();
        assert_eq!((batch.num_rows(), at), (3, 1));
        assert!(segment.locate(6).is_none());
    }

    #[test]
    fn damaged_files_are_corruption_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.arrow");
        write_segment(&path, &["a", "b", "c"]);
        let good = std::fs::read(&path).unwrap();
        let mut cases: Vec<Vec<u8>> =
            vec![Vec::new(), b"ARROW1".to_vec(), good[..good.len() / 2].to_vec()];
        // Every single-byte flip in the footer region and a sample of the body.
        for at in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            cases.push(bad);
        }
        for bytes in cases {
            std::fs::write(&path, &bytes).unwrap();
            match Segment::open(0, &path) {
                Ok(segment) => {
                    // A flip in a value may still decode; reading every key must not panic.
                    let _ = segment.keys();
                }
                Err(e) => assert!(matches!(e, Error::Corrupted { .. }), "{e}"),
            }
        }
    }

    /// Found by the `arrow_segment` fuzz target: a batch without columns may claim any number of
    /// rows, and `keys()` sized its vector by that claim (a capacity-overflow panic).
    #[test]
    fn a_batch_without_a_key_column_is_refused_whatever_rows_it_claims() {
        use arrow_array::RecordBatchOptions;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.arrow");
        let schema = Arc::new(arrow_schema::Schema::empty());
        let options = RecordBatchOptions::new().with_row_count(Some(1 << 62));
        let batch = RecordBatch::try_new_with_options(schema.clone(), vec![], &options).unwrap();
        let mut writer = FileWriter::try_new(File::create(&path).unwrap(), &schema).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        let Err(err) = Segment::open(0, &path) else { panic!("a batch without a key was opened") };
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("record batch 0 has no utf8 \"key\" column"), "{err}");
    }
}
