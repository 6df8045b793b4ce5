//! A segment row as a stowage [`Sample`], by torchcachex's output structure.
//!
//! | structure | sample fields |
//! |---|---|
//! | `tensor` | `tensor` from `data` + `shape` |
//! | `dict` | one per entry, named as the entry: `<name>_data` + `<name>_shape` is a tensor, `<name>_blob` bytes, `<name>_json` JSON text (stowage's) |
//! | `tuple`, `list` | `item0`, `item1`, … the same way |
//! | `blob` | `blob`, bytes |
//!
//! Tensor values share the segment's memory map (zero-copy), except bool (bit-packed in Arrow,
//! unpacked here). The element type comes from the Arrow column (and its `stowage_dtype` metadata
//! for bfloat16), never from `schema.json`. A value is null when the field's null column
//! (`<name>_null`, `null` in the tensor and blob structures; stowage's, see [`crate::encode`])
//! says so, when it is an Arrow null, and when it is torchcachex's placeholder for a missing
//! value: a list and shape both empty, or `b""`. Bytes are decoded as the cache's
//! [`BlobEncoding`] says: a pickle of Python `bytes` read strictly, a pickle kept verbatim, or raw.

use std::sync::Arc;

use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, BinaryArray, BooleanArray, Int64Array, ListArray, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow_buffer::Buffer;
use arrow_schema::DataType;
use stowage_core::bytes::Bytes;
use stowage_core::cold_reads::PagePlan;
use stowage_core::prefetch::{prefetch, prefetch_value};
use stowage_core::{DType, Sample, Tensor, Value};

use crate::blob_encoding::{self, BlobEncoding, UnpickleError};
use crate::schema_json::OutputStructure;

/// The field name of the `tensor` structure's one tensor.
pub const TENSOR_FIELD: &str = "tensor";
/// The field name of the `blob` structure's pickled sample.
pub const BLOB_FIELD: &str = "blob";

/// How one sample field is stored: the columns it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnGroup {
    /// A tensor.
    Tensor {
        /// The sample field name (shared by every decoded sample: no allocation per row).
        name: Arc<str>,
        /// The element type (from the `_data` column's type and metadata).
        dtype: DType,
        /// Position of its `_data` (`list<T>`) column.
        data: usize,
        /// Position of its `_shape` (`list<int64>`) column.
        shape: usize,
        /// Position of its `_null` (bool) column, when it has one.
        null: Option<usize>,
    },
    /// Bytes.
    Blob {
        /// The sample field name.
        name: Arc<str>,
        /// Position of its `_blob` (binary) column.
        column: usize,
        /// How the values are stored.
        encoding: BlobEncoding,
        /// Position of its `_null` (bool) column, when it has one.
        null: Option<usize>,
    },
    /// JSON text.
    Json {
        /// The sample field name.
        name: Arc<str>,
        /// Position of its `_json` (utf8) column.
        column: usize,
    },
}

impl ColumnGroup {
    /// The sample field name.
    pub fn name(&self) -> &str {
        self.shared_name()
    }

    fn shared_name(&self) -> &Arc<str> {
        match self {
            ColumnGroup::Tensor { name, .. }
            | ColumnGroup::Blob { name, .. }
            | ColumnGroup::Json { name, .. } => name,
        }
    }
}

/// Why a row does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The row cannot be a sample (a shape that does not match its values, a null inside a
    /// tensor, a broken pickle): damage. The text names the field and what is wrong.
    Damaged(String),
    /// The row is valid but holds what stowage does not return as the field's value (a pickle of
    /// another object than Python bytes in a pickled-bytes column). The text names the field and
    /// what was found.
    Unsupported(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Damaged(why) | DecodeError::Unsupported(why) => f.write_str(why),
        }
    }
}

/// The sample fields of a segment with Arrow schema `schema` (`key` column included), in column
/// order, with bytes read as verbatim pickles (torchcachex's own caches; see
/// [`column_groups_for`]). Errors name the column that has no partner, does not fit `structure`
/// or holds no tensor element type.
pub fn column_groups(
    schema: &arrow_schema::Schema,
    structure: OutputStructure,
) -> std::result::Result<Vec<ColumnGroup>, String> {
    column_groups_for(schema, structure, BlobEncoding::VerbatimPickles)
}

/// [`column_groups`] for a cache whose bytes fields are stored as `encoding`.
///
/// ```
/// use std::sync::Arc;
/// use arrow_schema::{DataType, Field, Schema};
/// use stowage_arrow::BlobEncoding;
/// use stowage_arrow::test_support::decode::{ColumnGroup, column_groups_for};
/// use stowage_arrow::OutputStructure;
/// let schema = Schema::new(vec![
///     Field::new("key", DataType::Utf8, true),
///     Field::new("meta_blob", DataType::Binary, true),
///     Field::new("meta_null", DataType::Boolean, true),
/// ]);
/// let groups = column_groups_for(&schema, OutputStructure::Dict, BlobEncoding::VerbatimPickles);
/// let blob = ColumnGroup::Blob {
///     name: "meta".into(),
///     column: 1,
///     encoding: BlobEncoding::VerbatimPickles,
///     null: Some(2),
/// };
/// assert_eq!(groups.unwrap(), [blob]);
/// ```
pub fn column_groups_for(
    schema: &arrow_schema::Schema,
    structure: OutputStructure,
    encoding: BlobEncoding,
) -> std::result::Result<Vec<ColumnGroup>, String> {
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let position = |name: &str| columns.iter().position(|c| *c == name);
    let tensor =
        |name: &str, data: usize, prefix: &str| -> std::result::Result<ColumnGroup, String> {
            let shape_column = format!("{prefix}shape");
            let shape = position(&shape_column).ok_or_else(|| {
                format!("column {:?} has no {shape_column:?} beside it", columns[data])
            })?;
            let dtype =
                crate::encode::stored_dtype(schema.field(data)).map_err(|e| e.to_string())?;
            Ok(ColumnGroup::Tensor { name: name.into(), dtype, data, shape, null: None })
        };
    let blob = |name: &str, column: usize| ColumnGroup::Blob {
        name: name.into(),
        column,
        encoding,
        null: None,
    };
    let mut groups = Vec::new();
    let mut null_columns: Vec<(usize, &str)> = Vec::new();
    match structure {
        OutputStructure::Tensor => {
            let data = position("data").ok_or("no \"data\" column")?;
            groups.push(tensor(TENSOR_FIELD, data, "")?);
            null_columns.extend(position("null").map(|at| (at, TENSOR_FIELD)));
        }
        OutputStructure::Blob => {
            let column = position("blob").ok_or("no \"blob\" column")?;
            groups.push(blob(BLOB_FIELD, column));
            null_columns.extend(position("null").map(|at| (at, BLOB_FIELD)));
        }
        OutputStructure::Dict | OutputStructure::Tuple | OutputStructure::List => {
            for (i, column) in columns.iter().enumerate() {
                if let Some(name) = column.strip_suffix("_data") {
                    groups.push(tensor(name, i, &format!("{name}_"))?);
                } else if let Some(name) = column.strip_suffix("_blob") {
                    groups.push(blob(name, i));
                } else if let Some(name) = column.strip_suffix("_json") {
                    groups.push(ColumnGroup::Json { name: name.into(), column: i });
                } else if let Some(name) = column.strip_suffix("_null") {
                    null_columns.push((i, name));
                } else if *column != "key" && !column.ends_with("_shape") {
                    return Err(format!(
                        "column {column:?} is neither _data, _shape, _blob, _json nor _null"
                    ));
                }
            }
        }
    }
    for (at, name) in null_columns {
        if schema.field(at).data_type() != &DataType::Boolean {
            return Err(format!(
                "null column {:?} is {}, not bool",
                columns[at],
                schema.field(at).data_type()
            ));
        }
        let group = groups.iter_mut().find(|g| g.name() == name);
        match group {
            Some(ColumnGroup::Tensor { null, .. } | ColumnGroup::Blob { null, .. }) => {
                *null = Some(at);
            }
            _ => return Err(format!("null column {:?} has no tensor or blob field", columns[at])),
        }
    }
    Ok(groups)
}

/// Row `row` of `batch` as a sample with the fields `groups` describe.
///
/// Errors: [`DecodeError`] naming the field and what is wrong.
pub fn decode_row(
    batch: &RecordBatch,
    row: usize,
    groups: &[ColumnGroup],
) -> std::result::Result<Sample, DecodeError> {
    let mut sample = Sample::new();
    for group in groups {
        let damaged = |name: &str, e: String| DecodeError::Damaged(format!("field {name:?}: {e}"));
        let value = match group {
            ColumnGroup::Tensor { name, dtype, data, shape, null } => {
                match marked_null(batch, row, *null).map_err(|e| damaged(name, e))? {
                    true => Value::Null,
                    false => decode_tensor(batch, row, *dtype, *data, *shape)
                        .map_err(|e| damaged(name, e))?,
                }
            }
            ColumnGroup::Blob { name, column, encoding, null } => {
                let blobs = typed_column::<BinaryArray>(batch, *column, "binary")
                    .map_err(|e| damaged(name, e))?;
                let is_null = marked_null(batch, row, *null).map_err(|e| damaged(name, e))?;
                match is_null || blobs.is_null(row) {
                    true => Value::Null,
                    false => decode_blob(blobs.value(row), *encoding).map_err(|e| match e {
                        DecodeError::Damaged(e) => damaged(name, e),
                        DecodeError::Unsupported(e) => DecodeError::Unsupported(format!(
                            "field {name:?}: the {} column holds {e}",
                            encoding.name()
                        )),
                    })?,
                }
            }
            ColumnGroup::Json { name, column } => {
                let texts = typed_column::<StringArray>(batch, *column, "utf8")
                    .map_err(|e| damaged(name, e))?;
                match texts.is_null(row) {
                    true => Value::Null,
                    false => Value::Json(texts.value(row).to_owned()),
                }
            }
        };
        sample.insert(group.shared_name().clone(), value);
    }
    Ok(sample)
}

/// Whether the null column at `column` (if any) marks row `row` null: `true` only; `false` and an
/// Arrow null (what torchcachex writes into a column it does not know) are not null.
fn marked_null(
    batch: &RecordBatch,
    row: usize,
    column: Option<usize>,
) -> std::result::Result<bool, String> {
    let Some(column) = column else { return Ok(false) };
    let flags = typed_column::<BooleanArray>(batch, column, "bool")?;
    Ok(flags.is_valid(row) && flags.value(row))
}

/// One stored blob as the field's value.
fn decode_blob(stored: &[u8], encoding: BlobEncoding) -> std::result::Result<Value, DecodeError> {
    match encoding {
        BlobEncoding::Raw => Ok(Value::Bytes(Bytes::copy_from_slice(stored))),
        // torchcachex's placeholder for a value its row did not have.
        _ if stored.is_empty() => Ok(Value::Null),
        BlobEncoding::VerbatimPickles => Ok(Value::Bytes(Bytes::copy_from_slice(stored))),
        BlobEncoding::PickledBytes => match blob_encoding::unpickle_bytes(stored) {
            Ok(Some(bytes)) => Ok(Value::Bytes(Bytes::copy_from_slice(bytes))),
            Ok(None) => Ok(Value::Null),
            Err(UnpickleError::Broken(why)) => Err(DecodeError::Damaged(why)),
            // A well-formed pickle of something else: not the field's bytes.
            Err(UnpickleError::NotBytes(why)) => Err(DecodeError::Unsupported(why)),
        },
    }
}

/// Column `column` of `batch` as array type `A` (`wanted` names it for the error).
fn typed_column<'a, A: 'static>(
    batch: &'a RecordBatch,
    column: usize,
    wanted: &str,
) -> std::result::Result<&'a A, String> {
    let array = batch.column(column);
    array
        .as_any()
        .downcast_ref::<A>()
        .ok_or_else(|| format!("column {column} is {}, not {wanted}", array.data_type()))
}

fn decode_tensor(
    batch: &RecordBatch,
    row: usize,
    dtype: DType,
    data: usize,
    shape: usize,
) -> std::result::Result<Value, String> {
    let data = typed_column::<ListArray>(batch, data, "a list")?;
    let shape = typed_column::<ListArray>(batch, shape, "a list")?;
    if data.is_null(row) || shape.is_null(row) {
        return Ok(Value::Null);
    }
    let dims = shape_of(shape, row)?;
    let offsets = data.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    if dims.is_empty() && start == end {
        return Ok(Value::Null); // torchcachex's placeholder for a missing value
    }
    let count = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or("shape overflows")?;
    if count != end - start {
        return Err(format!("shape {dims:?} holds {count} values, the list holds {}", end - start));
    }
    let values = data.values();
    if values.null_count() > 0 && values.slice(start, end - start).null_count() > 0 {
        return Err("the values hold a null".into());
    }
    if crate::encode::arrow_type(dtype) != *values.data_type() {
        return Err(format!("{dtype} tensors stored as {}", values.data_type()));
    }
    if dtype == DType::Bool {
        // Bit-packed in Arrow: unpacked into a tensor of its own.
        let bools = values.as_any().downcast_ref::<BooleanArray>().expect("boolean type");
        let flags: Vec<bool> = (start..end).map(|i| bools.value(i)).collect();
        return Tensor::from_bools(&dims, &flags).map(Value::Tensor).map_err(|e| e.to_string());
    }
    let item = dtype.item_size();
    let buffer = value_buffer(values.as_ref(), dtype).expect("a primitive type, checked above");
    let buffer = buffer.slice_with_length(start * item, (end - start) * item);
    Tensor::shared(dtype, dims, Bytes::from(buffer)).map(Value::Tensor).map_err(|e| e.to_string())
}

/// The dims of row `row` of a `list<int64>` shape column, read in place.
fn shape_of(shape: &ListArray, row: usize) -> std::result::Result<Vec<usize>, String> {
    let dims = shape.values().as_any().downcast_ref::<Int64Array>();
    let dims = dims.ok_or("shape is not a list of int64")?;
    let offsets = shape.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    if dims.null_count() > 0 && (start..end).any(|i| dims.is_null(i)) {
        return Err("shape holds a null".into());
    }
    dims.values()[start..end]
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("shape holds {d}")))
        .collect()
}

/// The value buffer of a primitive array of `dtype` (starting at the array's first value), without
/// building an `ArrayData`; `None` for bool (bit-packed) or when the array is not of that type.
fn value_buffer(values: &dyn Array, dtype: DType) -> Option<&Buffer> {
    fn inner<T: ArrowPrimitiveType>(values: &dyn Array) -> Option<&Buffer> {
        values.as_any().downcast_ref::<PrimitiveArray<T>>().map(|a| a.values().inner())
    }
    match dtype {
        DType::F16 => inner::<Float16Type>(values),
        DType::F32 => inner::<Float32Type>(values),
        DType::F64 => inner::<Float64Type>(values),
        DType::I8 => inner::<Int8Type>(values),
        DType::I16 => inner::<Int16Type>(values),
        DType::I32 => inner::<Int32Type>(values),
        DType::I64 => inner::<Int64Type>(values),
        DType::U8 => inner::<UInt8Type>(values),
        DType::U16 | DType::BF16 => inner::<UInt16Type>(values),
        DType::U32 => inner::<UInt32Type>(values),
        DType::U64 => inner::<UInt64Type>(values),
        DType::Bool => None,
    }
}

/// Calls `visit` with the bytes decoding row `row` reads first: every tensor's two list offsets
/// bounding the row, in its data and its shape column.
fn row_offsets<'a>(
    batch: &'a RecordBatch,
    row: usize,
    groups: &[ColumnGroup],
    mut visit: impl FnMut(&'a [u8]),
) {
    for group in groups {
        let ColumnGroup::Tensor { data, shape, .. } = group else { continue };
        for column in [*data, *shape] {
            let Ok(list) = typed_column::<ListArray>(batch, column, "a list") else { continue };
            let offsets = list.offsets().inner().inner().as_slice();
            if let Some(bytes) = offsets.get(row * 4..(row + 2) * 4) {
                visit(bytes);
            }
        }
    }
}

/// Calls `visit` with every tensor's values and dims of row `row` (reading its offsets).
fn row_values<'a>(
    batch: &'a RecordBatch,
    row: usize,
    groups: &[ColumnGroup],
    mut visit: impl FnMut(&'a [u8]),
) {
    for group in groups {
        let ColumnGroup::Tensor { dtype, data, shape, .. } = group else { continue };
        let lists = [(*data, *dtype), (*shape, DType::I64)];
        for (column, dtype) in lists {
            let Ok(list) = typed_column::<ListArray>(batch, column, "a list") else { continue };
            let offsets = list.value_offsets();
            let (Some(&start), Some(&end)) = (offsets.get(row), offsets.get(row + 1)) else {
                continue;
            };
            let item = dtype.item_size();
            if let Some(buffer) = value_buffer(list.values().as_ref(), dtype) {
                let range = start as usize * item..end as usize * item;
                if let Some(bytes) = buffer.as_slice().get(range) {
                    visit(bytes);
                }
            }
        }
    }
}

/// Asks the CPU to load what decoding row `row` reads first: every tensor's list offsets (the
/// first stage of a batched read; [`prefetch_values`] is the second).
pub fn prefetch_offsets(batch: &RecordBatch, row: usize, groups: &[ColumnGroup]) {
    row_offsets(batch, row, groups, |bytes| prefetch_value(&bytes[0]));
}

/// Asks the CPU to load every tensor's values and dims of row `row`. It reads the offsets, so it
/// pays off once [`prefetch_offsets`] has had time to bring them in.
pub fn prefetch_values(batch: &RecordBatch, row: usize, groups: &[ColumnGroup]) {
    row_values(batch, row, groups, prefetch);
}

/// Adds the pages of every tensor's list offsets of row `row` to `plan` (what a cold batch asks
/// the kernel for before the values, whose place the offsets give).
pub fn plan_offsets<'a>(
    batch: &'a RecordBatch,
    row: usize,
    groups: &[ColumnGroup],
    plan: &mut PagePlan<'a>,
) {
    row_offsets(batch, row, groups, |bytes| plan.add_whole(bytes));
}

/// Adds the pages of every tensor's values and dims of row `row` to `plan`. It reads the
/// offsets: call it once [`plan_offsets`]'s pages are advised.
pub fn plan_values<'a>(
    batch: &'a RecordBatch,
    row: usize,
    groups: &[ColumnGroup],
    plan: &mut PagePlan<'a>,
) {
    row_values(batch, row, groups, |bytes| plan.add_whole(bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};

    /// A schema of `columns`: `_data` as `list<float32>`, `_shape` as `list<int64>`, `_json` and
    /// `key` as utf8, anything else binary.
    fn schema(columns: &[&str]) -> Schema {
        let list = |t| DataType::List(Arc::new(Field::new("item", t, true)));
        Schema::new(
            columns
                .iter()
                .map(|c| {
                    let t = match c {
                        c if c.ends_with("data") => list(DataType::Float32),
                        c if c.ends_with("shape") => list(DataType::Int64),
                        c if c.ends_with("json") || *c == "key" => DataType::Utf8,
                        _ => DataType::Binary,
                    };
                    Field::new(*c, t, true)
                })
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn columns_group_into_fields_by_structure() {
        let dict = schema(&[
            "key",
            "feat_data",
            "feat_shape",
            "meta_blob",
            "label_data",
            "label_shape",
            "info_json",
        ]);
        let groups = column_groups(&dict, OutputStructure::Dict).unwrap();
        let names: Vec<&str> = groups.iter().map(ColumnGroup::name).collect();
        assert_eq!(names, ["feat", "meta", "label", "info"]);
        let feat = ColumnGroup::Tensor {
            name: "feat".into(),
            dtype: DType::F32,
            data: 1,
            shape: 2,
            null: None,
        };
        assert_eq!(groups[0], feat);
        assert_eq!(groups[3], ColumnGroup::Json { name: "info".into(), column: 6 });
        let tensor =
            column_groups(&schema(&["key", "data", "shape"]), OutputStructure::Tensor).unwrap();
        let expected = ColumnGroup::Tensor {
            name: "tensor".into(),
            dtype: DType::F32,
            data: 1,
            shape: 2,
            null: None,
        };
        assert_eq!(tensor, [expected]);
        let unpaired = column_groups(&schema(&["key", "x_data"]), OutputStructure::Tuple);
        assert!(unpaired.unwrap_err().contains("x_shape"));
        let odd = column_groups(&schema(&["key", "odd"]), OutputStructure::Dict);
        let orphan_null =
            column_groups(&schema(&["key", "x_json", "y_null"]), OutputStructure::Dict);
        assert!(orphan_null.unwrap_err().contains("y_null"));
        assert!(odd.unwrap_err().contains("odd"));
        assert!(column_groups(&schema(&["key"]), OutputStructure::Blob).is_err());
    }
}
