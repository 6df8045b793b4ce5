//! Where each row of a segment lies, read from its footer and batch metadata only, and one row
//! read as a checked one-row record batch (the row read of [`crate::segment::Segment::open_rows`]).
//!
//! Opening a segment this way parses the footer and every record batch's message (flatbuffers,
//! checked by the verifier of `arrow_ipc::root_as_footer` / `root_as_message`, so that a hostile
//! footer or message is refused, never read out of bounds) and checks that every buffer they
//! name lies inside its batch's body (and so inside the file), is 8-byte aligned, and that every
//! validity bitmap holds a bit per value. Nothing in the buffers is read. A row read then builds,
//! for each column, an Arrow array of one value at the row's position over the file's buffers
//! (`ArrayData` with `offset` = the row, built with full validation: the row's offsets are
//! checked monotone and inside the values, its utf8 checked, every buffer checked large enough),
//! so that what the decoder of a sample ([`crate::decode::decode_row`]) reads has been checked,
//! as the full decode checks every row at open. Only the row's own offsets and values are read.
//!
//! Why the row's checksum then suffices for the row's bytes: a reader opens a segment this way
//! only when it has row checksums (`crate::row_sums`), and every row read is compared with its
//! stored checksum before it is returned. That checksum covers the decoded sample whole: the key
//! asked for, every field's name and kind, and for a tensor its dtype, shape and the xxh3 of its
//! bytes, for bytes and JSON their content, and which fields are null. Every byte the row
//! depends on (its offsets, values, validity bits and null flags, and the footer and metadata
//! that place and type them) only reaches the caller through that sample, so damage to any of
//! them changes the sample, and the checksum no longer matches (but for a 2^-64 xxh3 collision):
//! the read is `Corrupted`. What the checksum cannot catch, a read outside the file or a panic on
//! malformed structure, is what the checks above prevent. Damage to other rows is not read and
//! does not matter to this one; `validate` still decodes and checks every byte.
//!
//! Anything this module does not know (dictionaries, compression, a metadata version before V4,
//! big-endian data, a type other than booleans, primitives, utf8, binary and lists of booleans
//! or primitives, a misaligned buffer) makes [`RowLayout::parse`] answer `None`: the segment is
//! then decoded whole.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, make_array};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::{DataType, SchemaRef};

/// Alignment asked of every buffer (the full decode copies a misaligned one; this path reads
/// them in place, so a file that needs the copy is decoded whole instead).
const ALIGNMENT: usize = 8;

/// One array's place in the file: its field node and buffers, checked to lie inside its body.
#[derive(Debug)]
struct ArrayPlace {
    data_type: DataType,
    /// Values (rows of a top-level column), from the field node.
    length: usize,
    /// The validity bitmap, when the field node counts nulls (as the IPC reader takes it).
    validity: Option<Buffer>,
    /// The other buffers, in the IPC order (offsets then values, or values).
    buffers: Vec<Buffer>,
    /// A list's values.
    children: Vec<ArrayPlace>,
}

/// One record batch: its row count and columns (in schema order).
#[derive(Debug)]
struct BatchPlace {
    rows: usize,
    columns: Vec<ArrayPlace>,
}

/// Where every row of a segment lies (see the module docs).
#[derive(Debug)]
pub struct RowLayout {
    /// The whole file (the buffers are slices of it).
    file: Buffer,
    schema: SchemaRef,
    batches: Vec<BatchPlace>,
    /// Position of the utf8 `key` column.
    key: usize,
    /// Row number at which each batch starts, and the total at the end.
    starts: Vec<usize>,
}

impl RowLayout {
    /// The layout of the Arrow IPC file in `file` (the whole map as an Arrow buffer), or `None`
    /// when it cannot be read row by row (damaged, or holding what this module does not read:
    /// the full decode then decides, and reports damage).
    pub fn parse(file: &Buffer) -> Option<RowLayout> {
        let len = file.len();
        let magic = crate::segment::MAGIC;
        if len < 2 * magic.len() + 4 || &file[..magic.len()] != magic || &file[len - 6..] != magic {
            return None;
        }
        let footer =
            arrow_ipc::root_as_footer(&file[crate::segment::footer_range(file).ok()?]).ok()?;
        if footer.version() < arrow_ipc::MetadataVersion::V4
            || footer.dictionaries().is_some_and(|d| !d.is_empty())
        {
            return None;
        }
        let fb_schema = footer.schema()?;
        if fb_schema.endianness() != arrow_ipc::Endianness::Little {
            return None;
        }
        let schema = Arc::new(arrow_ipc::convert::try_fb_to_schema(fb_schema).ok()?);
        let key = schema.index_of("key").ok()?;
        if schema.field(key).data_type() != &DataType::Utf8 {
            return None;
        }
        let mut batches = Vec::new();
        let mut starts = vec![0usize];
        for block in footer.recordBatches()? {
            let (meta, body) = crate::segment::block_ranges(block, len)?;
            let message = file.get(meta)?;
            let message = match message.get(..4)? {
                [0xff, 0xff, 0xff, 0xff] => message.get(8..)?,
                _ => message.get(4..)?,
            };
            let message = arrow_ipc::root_as_message(message).ok()?;
            if message.version() < arrow_ipc::MetadataVersion::V4 {
                return None;
            }
            let batch = message.header_as_record_batch()?;
            if batch.compression().is_some() {
                return None;
            }
            let rows = usize::try_from(batch.length()).ok()?;
            let mut nodes = batch.nodes()?.iter();
            let mut buffers = batch.buffers()?.iter();
            let mut columns = Vec::with_capacity(schema.fields().len());
            for field in schema.fields() {
                let column = place(file, &body, field.data_type(), &mut nodes, &mut buffers, 0)?;
                if column.length != rows {
                    return None;
                }
                columns.push(column);
            }
            starts.push(starts.last()?.checked_add(rows)?);
            batches.push(BatchPlace { rows, columns });
        }
        Some(RowLayout { file: file.clone(), schema, batches, key, starts })
    }

    /// The Arrow schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows across every batch, as the batches' metadata records them.
    pub fn rows(&self) -> usize {
        *self.starts.last().expect("starts with 0")
    }

    /// The batch holding row `row` and the row's position in it.
    fn locate(&self, row: usize) -> Option<(&BatchPlace, usize)> {
        if row >= self.rows() {
            return None;
        }
        let batch = self.starts.partition_point(|&start| start <= row) - 1;
        Some((&self.batches[batch], row - self.starts[batch]))
    }

    /// The key of row `row`: `None` when out of range, null, or when its offsets are not
    /// monotone inside the key bytes or the bytes not utf8 (damage: the row then holds no key a
    /// lookup asks for).
    pub fn key(&self, row: usize) -> Option<&str> {
        let (batch, at) = self.locate(row)?;
        let column = &batch.columns[self.key];
        if let Some(validity) = &column.validity
            && validity.as_slice()[at / 8] & (1 << (at % 8)) == 0
        {
            return None;
        }
        let range = value_range(column, at)?;
        std::str::from_utf8(column.buffers.get(1)?.as_slice().get(range)?).ok()
    }

    /// Calls `each` with every batch's key offsets and key bytes (what reading every key reads).
    pub fn key_buffers<'a>(&'a self, mut each: impl FnMut(&'a [u8])) {
        for batch in &self.batches {
            batch.columns[self.key].buffers.iter().for_each(|buffer| each(buffer.as_slice()));
        }
    }

    /// Row `row` as a record batch of one row, every column built over the file's buffers at the
    /// row's position and checked (see the module docs). `Ok(None)` when out of range.
    ///
    /// Errors: what the row's arrays fail (offsets out of order or outside the values, bad
    /// utf8, a buffer too short for the row).
    pub fn row(&self, row: usize) -> std::result::Result<Option<RecordBatch>, String> {
        let Some((batch, at)) = self.locate(row) else { return Ok(None) };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.columns.len());
        for (column, field) in batch.columns.iter().zip(self.schema.fields()) {
            let data =
                array_data(column, at, 1).map_err(|e| format!("column {:?}: {e}", field.name()))?;
            columns.push(make_array(data));
        }
        RecordBatch::try_new(self.schema.clone(), columns).map(Some).map_err(|e| e.to_string())
    }

    /// Calls `each` with the bytes the read of row `row` reads first: every column's validity
    /// byte, offsets and fixed-width value at the row (no byte of the file is read for it).
    pub fn row_offsets<'a>(&'a self, row: usize, mut each: impl FnMut(&'a [u8])) {
        let Some((batch, at)) = self.locate(row) else { return };
        for column in &batch.columns {
            if let Some(validity) = &column.validity
                && let Some(byte) = validity.as_slice().get(at / 8..at / 8 + 1)
            {
                each(byte);
            }
            match (&column.data_type, column.buffers.first()) {
                (DataType::Boolean, Some(values)) => {
                    if let Some(byte) = values.as_slice().get(at / 8..at / 8 + 1) {
                        each(byte);
                    }
                }
                (DataType::Utf8 | DataType::Binary | DataType::List(_), Some(offsets)) => {
                    if let Some(pair) = offsets.as_slice().get(at * 4..at * 4 + 8) {
                        each(pair);
                    }
                }
                (data_type, Some(values)) => {
                    let width = data_type.primitive_width().unwrap_or(0);
                    if let Some(value) = values.as_slice().get(at * width..(at + 1) * width) {
                        each(value);
                    }
                }
                (_, None) => {}
            }
        }
    }

    /// Calls `each` with the values of row `row`'s variable-length columns (its strings, blobs
    /// and lists' values). It reads the row's offsets; a range they do not give is skipped.
    pub fn row_values<'a>(&'a self, row: usize, mut each: impl FnMut(&'a [u8])) {
        let Some((batch, at)) = self.locate(row) else { return };
        for column in &batch.columns {
            let Some(range) = value_range(column, at) else { continue };
            let (values, width) = match &column.data_type {
                DataType::Utf8 | DataType::Binary => (column.buffers.get(1), 1),
                DataType::List(field) => {
                    let child = column.children.first();
                    let width = field.data_type().primitive_width().unwrap_or(0);
                    (child.and_then(|c| c.buffers.first()), width)
                }
                _ => continue,
            };
            let (Some(values), Some(start), Some(end)) =
                (values, range.start.checked_mul(width), range.end.checked_mul(width))
            else {
                continue;
            };
            if let Some(bytes) = values.as_slice().get(start..end) {
                each(bytes);
            }
        }
    }

    /// Calls `each` with where row `row`'s variable-length values would lie if every row of its
    /// batch were as long (a guess made without reading the offsets, exact for rows of one
    /// size: a cold read asks for them with the offsets, in one round).
    pub fn row_values_guess<'a>(&'a self, row: usize, mut each: impl FnMut(&'a [u8])) {
        let Some((batch, at)) = self.locate(row) else { return };
        for column in &batch.columns {
            let values = match &column.data_type {
                DataType::Utf8 | DataType::Binary => column.buffers.get(1),
                DataType::List(_) => column.children.first().and_then(|c| c.buffers.first()),
                _ => None,
            };
            let Some(values) = values.map(Buffer::as_slice) else { continue };
            let per_row = values.len() / batch.rows.max(1);
            let start = per_row.saturating_mul(at);
            if let Some(bytes) = values.get(start..start.saturating_add(per_row).min(values.len()))
            {
                each(bytes);
            }
        }
    }
}

impl RowLayout {
    /// Calls `each` with the byte ranges in the file of what [`RowLayout::row_offsets`] and
    /// [`RowLayout::row_values_guess`] give for row `row` (for a hint at another file laid out
    /// alike).
    pub fn row_file_ranges(&self, row: usize, mut each: impl FnMut(Range<usize>)) {
        let base = self.file.as_ptr() as usize;
        let mut place = |bytes: &[u8]| {
            let start = (bytes.as_ptr() as usize).wrapping_sub(base);
            if start <= self.file.len() {
                each(start..start.saturating_add(bytes.len()).min(self.file.len()));
            }
        };
        self.row_offsets(row, &mut place);
        self.row_values_guess(row, &mut place);
    }
}

/// The value range (in values, not bytes) of row `at` of a utf8, binary or list `column`:
/// `None` for another type, or when its two offsets are missing, negative or out of order.
fn value_range(column: &ArrayPlace, at: usize) -> Option<Range<usize>> {
    if !matches!(column.data_type, DataType::Utf8 | DataType::Binary | DataType::List(_)) {
        return None;
    }
    let offsets = column.buffers.first()?.as_slice().get(at.checked_mul(4)?..)?.get(..8)?;
    let start = i32::from_le_bytes(offsets[..4].try_into().expect("4 bytes"));
    let end = i32::from_le_bytes(offsets[4..].try_into().expect("4 bytes"));
    let (start, end) = (usize::try_from(start).ok()?, usize::try_from(end).ok()?);
    (start <= end).then_some(start..end)
}

/// `place`'s array of `len` values from value `offset`, checked (children whole).
fn array_data(
    place: &ArrayPlace,
    offset: usize,
    len: usize,
) -> std::result::Result<ArrayData, arrow_schema::ArrowError> {
    let children = place
        .children
        .iter()
        .map(|child| array_data(child, 0, child.length))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    ArrayData::builder(place.data_type.clone())
        .len(len)
        .offset(offset)
        .null_bit_buffer(place.validity.clone())
        .buffers(place.buffers.clone())
        .child_data(children)
        .build()
}

/// The place of an array of `data_type`, taking its field node and buffers (and its
/// children's) from `nodes` and `buffers`, each buffer checked inside `body`; `None` for what
/// this module does not read or a place outside the body (see the module docs).
fn place<'a>(
    file: &Buffer,
    body: &Range<usize>,
    data_type: &DataType,
    nodes: &mut impl Iterator<Item = &'a arrow_ipc::FieldNode>,
    buffers: &mut impl Iterator<Item = &'a arrow_ipc::Buffer>,
    depth: usize,
) -> Option<ArrayPlace> {
    let node = nodes.next()?;
    let length = usize::try_from(node.length()).ok()?;
    let null_count = usize::try_from(node.null_count()).ok()?;
    let validity = take(file, body, buffers, 1)?;
    // The element size of each buffer after the validity bitmap, and a list's value type.
    let (units, child): (&[usize], _) = match data_type {
        DataType::Boolean => (&[1], None),
        t if t.is_primitive() => (&[t.primitive_width()?], None),
        DataType::Utf8 | DataType::Binary => (&[4, 1], None),
        DataType::List(field)
            if depth == 0
                && (field.data_type().is_primitive()
                    || field.data_type() == &DataType::Boolean) =>
        {
            (&[4], Some(field.data_type()))
        }
        _ => return None,
    };
    let buffers_own =
        units.iter().map(|&unit| take(file, body, buffers, unit)).collect::<Option<Vec<_>>>()?;
    let children = match child {
        Some(child) => vec![place(file, body, child, nodes, buffers, depth + 1)?],
        None => Vec::new(),
    };
    // The bitmap must hold a bit per value: building an array over a shorter one panics.
    let validity = match null_count > 0 {
        true if validity.len().checked_mul(8)? < length => return None,
        true => Some(validity),
        false => None,
    };
    Some(ArrayPlace {
        data_type: data_type.clone(),
        length,
        validity,
        buffers: buffers_own,
        children,
    })
}

/// The next buffer of `buffers`, checked to lie inside `body` and to be aligned, as a slice of
/// `file` holding whole elements of `unit` bytes (a writer pads buffers to 8 bytes: a tail
/// shorter than an element is left out, as Arrow's typed views of a buffer refuse one).
fn take<'a>(
    file: &Buffer,
    body: &Range<usize>,
    buffers: &mut impl Iterator<Item = &'a arrow_ipc::Buffer>,
    unit: usize,
) -> Option<Buffer> {
    let buffer = buffers.next()?;
    let start = usize::try_from(buffer.offset()).ok()?;
    let len = usize::try_from(buffer.length()).ok()?;
    if start.checked_add(len)? > body.len() {
        return None;
    }
    let start = body.start + start;
    if len > 0 && !start.is_multiple_of(ALIGNMENT) {
        return None;
    }
    Some(file.slice_with_length(start, len - len % unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow_array::builder::{Float32Builder, ListBuilder};
    use arrow_array::{Array, BinaryArray, BooleanArray, Int64Array, StringArray};
    use arrow_ipc::writer::FileWriter;

    /// An IPC file of two batches with nulls in every kind of column this module reads: `key`
    /// (utf8), `v` (int64), `flag` (bool), `blob` (binary), `l` (list<float32>, ragged).
    fn file_of_every_kind() -> (Vec<u8>, Vec<RecordBatch>) {
        let rows = 9;
        let mut list = ListBuilder::new(Float32Builder::new());
        for i in 0..rows {
            match i % 3 {
                0 => list.append(false),
                _ => {
                    list.values().append_slice(&vec![i as f32; i]);
                    list.append(true);
                }
            }
        }
        let keys: Vec<String> = (0..rows).map(|i| format!("key/{i}")).collect();
        let batch = RecordBatch::try_from_iter([
            ("key", Arc::new(StringArray::from(keys)) as ArrayRef),
            (
                "v",
                Arc::new(Int64Array::from_iter(
                    (0..rows as i64).map(|i| (i % 2 == 0).then_some(i)),
                )),
            ),
            (
                "flag",
                Arc::new(BooleanArray::from_iter(
                    (0..rows).map(|i| (i % 4 != 1).then_some(i % 3 == 0)),
                )),
            ),
            (
                "blob",
                Arc::new(BinaryArray::from_iter(
                    (0..rows).map(|i| (i % 5 != 2).then(|| vec![i as u8; i])),
                )),
            ),
            ("l", Arc::new(list.finish())),
        ])
        .unwrap();
        let batches = vec![batch.slice(0, 4), batch.slice(4, rows - 4)];
        let mut bytes = Vec::new();
        let mut writer = FileWriter::try_new(&mut bytes, &batch.schema()).unwrap();
        for batch in &batches {
            writer.write(batch).unwrap();
        }
        writer.finish().unwrap();
        drop(writer);
        (bytes, batches)
    }

    /// Every row read through the layout is the same one-row batch as the decoded batch's slice
    /// (nulls included), with the same key; past the end there is no row.
    #[test]
    fn each_row_equals_the_decoded_batchs_slice() {
        let (bytes, batches) = file_of_every_kind();
        let layout = RowLayout::parse(&Buffer::from(bytes)).expect("read row by row");
        assert_eq!(layout.rows(), 9);
        let mut row = 0;
        for batch in &batches {
            for at in 0..batch.num_rows() {
                let read = layout.row(row).unwrap().unwrap();
                assert_eq!(read.num_rows(), 1);
                for (i, column) in batch.columns().iter().enumerate() {
                    assert_eq!(
                        read.column(i).to_data(),
                        column.slice(at, 1).to_data(),
                        "row {row} column {i}"
                    );
                }
                assert_eq!(layout.key(row), Some(format!("key/{row}").as_str()));
                row += 1;
            }
        }
        assert!(layout.row(row).unwrap().is_none());
        assert_eq!(layout.key(row), None);
    }

    /// Every single-bit flip of every byte and every truncation of the file: the layout does not
    /// parse, or every row and key read from it either fails or reads; never a panic or a read
    /// outside the file (the buffers are slices of it, bounds checked by Arrow).
    #[test]
    fn damaged_files_never_panic_and_rows_that_read_check() {
        let (good, _) = file_of_every_kind();
        let mut cases: Vec<Vec<u8>> = (0..good.len()).map(|len| good[..len].to_vec()).collect();
        for at in 0..good.len() {
            for bit in [0x01u8, 0x08, 0x80] {
                let mut bad = good.clone();
                bad[at] ^= bit;
                cases.push(bad);
            }
        }
        let mut parsed = 0;
        for bytes in cases {
            let Some(layout) = RowLayout::parse(&Buffer::from(bytes)) else { continue };
            parsed += 1;
            for row in 0..layout.rows().min(64) {
                let _ = layout.key(row);
                if let Ok(Some(batch)) = layout.row(row) {
                    // What reads is valid Arrow data: checking it whole again passes.
                    for column in batch.columns() {
                        column.to_data().validate_full().unwrap();
                    }
                }
                layout.row_offsets(row, |_| {});
                layout.row_values(row, |_| {});
                layout.row_values_guess(row, |_| {});
            }
        }
        assert!(parsed > 0, "some flips (in values) leave the metadata readable");
    }
}
