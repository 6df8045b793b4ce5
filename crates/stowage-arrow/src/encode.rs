//! Samples as one Arrow record batch in torchcachex's columns, the inverse of [`crate::decode`].
//!
//! Every column is nullable and list children are named `item`, as pyarrow writes them. A tensor
//! becomes its C-order values (`<name>_data: list<T>`) and its shape (`<name>_shape:
//! list<int64>`); bytes become `<name>_blob: binary`, pickled as the cache's
//! [`BlobEncoding`] says. The schema metadata carries `torch_dtype` (tensor structure) or
//! `tensor_keys` (dict), which torchcachex needs to decode.
//!
//! Every row decodes in torchcachex's `_deserialize_sample`. What torchcachex cannot express is
//! stored losslessly in a way it ignores or reads without error:
//! - a bfloat16 tensor is `list<uint16>` (its raw bits) whose `_data` field carries the metadata
//!   `stowage_dtype: bfloat16` (torchcachex returns a uint16 tensor of the bits);
//! - a JSON field is `<name>_json: utf8` (dict structure only; torchcachex skips the column);
//! - a null tensor is data `[]` with shape `[0]` (torchcachex returns an empty tensor of shape
//!   `(0,)`), marked null in the field's `<name>_null: bool` column (`null` in the tensor and
//!   blob structures), which torchcachex ignores and fills with Arrow nulls ("not null") when it
//!   appends rows;
//! - a null bytes value is the pickle of `None` (torchcachex returns `None`); with
//!   [`BlobEncoding::VerbatimPickles`] it is also marked in the field's null column, as the
//!   pickle of `None` may be a value there;
//! - a null JSON value is an Arrow null.
//!
//! Caches written before commit log version 3 ([`legacy_columns`]) keep their layout: raw bytes,
//! Arrow nulls for null bytes, torchcachex's `[]` / `[]` placeholder for a null tensor (which
//! torchcachex cannot read back), no null columns.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, ListArray, RecordBatch, StringArray, make_array,
};
use arrow_buffer::{Buffer, MutableBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Schema};
use stowage_core::{DType, Error, Result, Sample, Value};
use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};

use crate::blob_encoding::{self, BlobEncoding};
use crate::error::ArrowCacheError;
use crate::schema_json::OutputStructure;

/// One sample field as the columns store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldColumns {
    /// A tensor of this element type: `<name>_data` + `<name>_shape` (`data` + `shape` for the
    /// tensor structure), and `<name>_null` when `null_column`.
    Tensor {
        /// The sample field name.
        name: String,
        /// The element type of every value.
        dtype: DType,
        /// A `<name>_null: bool` column marks null values (nullable fields of caches written
        /// from commit log version 3 on).
        null_column: bool,
    },
    /// Bytes: `<name>_blob` (`blob` for the blob structure), and `<name>_null` when
    /// `null_column`.
    Blob {
        /// The sample field name.
        name: String,
        /// How each value is stored in the column.
        encoding: BlobEncoding,
        /// A `<name>_null: bool` column marks null values (nullable fields stored as verbatim
        /// pickles).
        null_column: bool,
    },
    /// JSON text: `<name>_json` (utf8). Only in the dict structure.
    Json {
        /// The sample field name.
        name: String,
    },
}

impl FieldColumns {
    /// The sample field name.
    pub fn name(&self) -> &str {
        match self {
            FieldColumns::Tensor { name, .. }
            | FieldColumns::Blob { name, .. }
            | FieldColumns::Json { name } => name,
        }
    }

    /// Whether a bool column beside the field's own marks its null values.
    pub fn has_null_column(&self) -> bool {
        match self {
            FieldColumns::Tensor { null_column, .. } | FieldColumns::Blob { null_column, .. } => {
                *null_column
            }
            FieldColumns::Json { .. } => false,
        }
    }
}

/// The `_data` field metadata key naming a tensor dtype the Arrow type alone does not tell.
pub const DTYPE_METADATA: &str = "stowage_dtype";

/// The output structure and columns a new cache of `schema` is stored in, with the defaults of
/// [`crate::ArrowOptions`]: the structure inferred and bytes as [`BlobEncoding::PickledBytes`]
/// (see [`columns_with`]).
///
/// One tensor field named `tensor` is torchcachex's `tensor` structure and one bytes field named
/// `blob` its `blob` structure, so such caches read back in torchcachex as a plain tensor or
/// object; any other schema is a `dict` of its fields, in schema order.
///
/// ```
/// use stowage_arrow::test_support::encode::{FieldColumns, columns_for};
/// use stowage_arrow::OutputStructure;
/// use stowage_core::{DType, Schema, ShapeRule};
/// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
/// let (structure, fields) = columns_for(&schema);
/// assert_eq!(structure, OutputStructure::Tensor);
/// assert_eq!(
///     fields,
///     [FieldColumns::Tensor { name: "tensor".into(), dtype: DType::F32, null_column: false }]
/// );
/// ```
#[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
pub fn columns_for(schema: &stowage_core::Schema) -> (OutputStructure, Vec<FieldColumns>) {
    columns_with(schema, None, BlobEncoding::PickledBytes).expect("an inferred structure fits")
}

/// The output structure and columns of a cache of `schema` written with `structure` (`None`:
/// inferred as [`columns_for`] says) and bytes stored as `encoding`. A nullable tensor gets a null
/// column, and so does a nullable bytes field stored as verbatim pickles.
///
/// Errors: [`Error::InvalidArgument`] naming the structure and the schema's fields when they do
/// not fit it: `tensor` takes one tensor field named `tensor`, `blob` one bytes field named
/// `blob`, `tuple` and `list` tensor or bytes fields named `item0`, `item1`, … in order (a JSON
/// field would end torchcachex's decoding of the items there), `dict` any fields.
///
/// ```
/// use stowage_arrow::BlobEncoding;
/// use stowage_arrow::test_support::encode::columns_with;
/// use stowage_arrow::OutputStructure;
/// use stowage_core::{DType, Schema, ShapeRule};
/// let pair = Schema::new()
///     .tensor("item0", DType::F32, ShapeRule::Any)
///     .bytes("item1");
/// let tuple = Some(OutputStructure::Tuple);
/// assert!(columns_with(&pair, tuple, BlobEncoding::PickledBytes).is_ok());
/// let named = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
/// let err = columns_with(&named, tuple, BlobEncoding::PickledBytes).unwrap_err();
/// assert!(err.to_string().contains("item0"), "{err}");
/// ```
pub fn columns_with(
    schema: &stowage_core::Schema,
    structure: Option<OutputStructure>,
    encoding: BlobEncoding,
) -> Result<(OutputStructure, Vec<FieldColumns>)> {
    let mut fields = Vec::with_capacity(schema.fields.len());
    for field in &schema.fields {
        fields.push(match &field.kind {
            stowage_core::FieldKind::Tensor { dtype, .. } => FieldColumns::Tensor {
                name: field.name.clone(),
                dtype: *dtype,
                null_column: field.nullable,
            },
            stowage_core::FieldKind::Bytes => FieldColumns::Blob {
                name: field.name.clone(),
                encoding,
                null_column: field.nullable && encoding == BlobEncoding::VerbatimPickles,
            },
            // Deduplication is a storage hint; Arrow's column holds each row's text.
            stowage_core::FieldKind::Json { .. } => FieldColumns::Json { name: field.name.clone() },
        });
    }
    let structure = match structure {
        Some(structure) => {
            check_structure(structure, &fields)?;
            structure
        }
        None => match fields.as_slice() {
            [FieldColumns::Tensor { name, .. }] if name == crate::decode::TENSOR_FIELD => {
                OutputStructure::Tensor
            }
            [FieldColumns::Blob { name, .. }] if name == crate::decode::BLOB_FIELD => {
                OutputStructure::Blob
            }
            _ => OutputStructure::Dict,
        },
    };
    Ok((structure, fields))
}

/// The columns of a cache written before commit log version 3: the structure inferred, bytes
/// raw, no null columns.
pub fn legacy_columns(schema: &stowage_core::Schema) -> (OutputStructure, Vec<FieldColumns>) {
    let (structure, mut fields) =
        columns_with(schema, None, BlobEncoding::Raw).expect("an inferred structure fits");
    for field in &mut fields {
        match field {
            FieldColumns::Tensor { null_column, .. } | FieldColumns::Blob { null_column, .. } => {
                *null_column = false;
            }
            FieldColumns::Json { .. } => {}
        }
    }
    (structure, fields)
}

/// Errors unless `fields` fit `structure` (see [`columns_with`]).
fn check_structure(structure: OutputStructure, fields: &[FieldColumns]) -> Result<()> {
    let why = match structure {
        OutputStructure::Dict => None,
        OutputStructure::Tensor => match fields {
            [FieldColumns::Tensor { name, .. }] if name == crate::decode::TENSOR_FIELD => None,
            _ => Some("it takes exactly one tensor field named \"tensor\"".to_owned()),
        },
        OutputStructure::Blob => match fields {
            [FieldColumns::Blob { name, .. }] if name == crate::decode::BLOB_FIELD => None,
            _ => Some("it takes exactly one bytes field named \"blob\"".to_owned()),
        },
        OutputStructure::Tuple | OutputStructure::List => {
            fields.iter().enumerate().find_map(|(i, field)| match field {
                FieldColumns::Json { name } => Some(format!(
                    "field {name:?} is JSON, which torchcachex's {} items cannot hold",
                    structure.name()
                )),
                other if other.name() != format!("item{i}") => Some(format!(
                    "its fields must be named item0, item1, … in order, and field {i} is {:?}",
                    other.name()
                )),
                _ => None,
            })
        }
    };
    match why {
        None => Ok(()),
        Some(why) => {
            let names: Vec<&str> = fields.iter().map(FieldColumns::name).collect();
            Err(Error::invalid(format!(
                "output structure {} does not fit the schema: {why}; the schema's fields are \
                 {names:?}",
                structure.name()
            )))
        }
    }
}

/// The Arrow type of a tensor element type. bfloat16, which Arrow lacks, is stored as its raw
/// bits (`UInt16`) and named by [`DTYPE_METADATA`].
pub fn arrow_type(dtype: DType) -> DataType {
    match dtype {
        DType::BF16 => DataType::UInt16,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
        DType::I8 => DataType::Int8,
        DType::I16 => DataType::Int16,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::UInt8,
        DType::U16 => DataType::UInt16,
        DType::U32 => DataType::UInt32,
        DType::U64 => DataType::UInt64,
        DType::Bool => DataType::Boolean,
    }
}

/// The tensor element type of an Arrow type, the inverse of [`arrow_type`] (`UInt16` is `U16`;
/// a `_data` field's [`DTYPE_METADATA`] may say bfloat16, see [`stored_dtype`]).
///
/// Errors: [`Error::Unsupported`] for a type that is not a tensor element type.
pub fn dtype_of(data_type: &DataType) -> Result<DType> {
    [
        DType::F16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ]
    .into_iter()
    .find(|d| arrow_type(*d) == *data_type)
    .ok_or_else(|| {
        Error::unsupported(crate::BACKEND_NAME, format!("{data_type} as a tensor element type"))
    })
}

/// The dtype of the tensors in `_data` column `field`: its [`DTYPE_METADATA`] when present and
/// stored in the column's Arrow type, else the Arrow type's own.
///
/// Errors: [`Error::Unsupported`] for a metadata dtype the column's type cannot hold (a hostile or
/// foreign file) or a column type that is not a tensor element type.
pub fn stored_dtype(field: &Field) -> Result<DType> {
    let DataType::List(item) = field.data_type() else {
        return Err(Error::unsupported(
            crate::BACKEND_NAME,
            format!("column {:?} of type {} as tensor data", field.name(), field.data_type()),
        ));
    };
    let Some(name) = field.metadata().get(DTYPE_METADATA) else {
        return dtype_of(item.data_type());
    };
    match DType::ALL.into_iter().find(|d| d.name() == name) {
        Some(dtype) if arrow_type(dtype) == *item.data_type() => Ok(dtype),
        _ => Err(Error::unsupported(
            crate::BACKEND_NAME,
            format!(
                "column {:?}: {DTYPE_METADATA} {name:?} stored as {}",
                field.name(),
                item.data_type()
            ),
        )),
    }
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

/// The name of column `suffix` (`data`, `shape`, `blob`, `json`, `null`) of field `name`: bare
/// in the tensor and blob structures, `<name>_<suffix>` otherwise.
pub fn column_name(structure: OutputStructure, name: &str, suffix: &str) -> String {
    match structure {
        OutputStructure::Tensor | OutputStructure::Blob => suffix.to_owned(),
        _ => format!("{name}_{suffix}"),
    }
}

/// The Arrow schema of a segment holding `fields` under `structure`, with torchcachex's metadata.
pub fn arrow_schema(structure: OutputStructure, fields: &[FieldColumns]) -> Schema {
    let mut columns = vec![Field::new("key", DataType::Utf8, true)];
    let mut metadata = std::collections::HashMap::new();
    let mut tensor_keys = Vec::new();
    for field in fields {
        match field {
            FieldColumns::Tensor { name, dtype, .. } => {
                let data = column_name(structure, name, "data");
                let mut data = Field::new(data, list_of(arrow_type(*dtype)), true);
                if *dtype == DType::BF16 {
                    let metadata = [(DTYPE_METADATA.to_owned(), dtype.name().to_owned())];
                    data = data.with_metadata(std::collections::HashMap::from(metadata));
                }
                columns.push(data);
                let shape = column_name(structure, name, "shape");
                columns.push(Field::new(shape, list_of(DataType::Int64), true));
                tensor_keys.push(serde_json::Value::from(name.as_str()));
                if structure == OutputStructure::Tensor {
                    metadata.insert("torch_dtype".to_owned(), dtype.torch_name().to_owned());
                }
            }
            FieldColumns::Blob { name, .. } => {
                let blob = column_name(structure, name, "blob");
                columns.push(Field::new(blob, DataType::Binary, true));
            }
            FieldColumns::Json { name } => {
                let json = column_name(structure, name, "json");
                columns.push(Field::new(json, DataType::Utf8, true));
            }
        }
        if field.has_null_column() {
            let null = column_name(structure, field.name(), "null");
            columns.push(Field::new(null, DataType::Boolean, true));
        }
    }
    if structure == OutputStructure::Dict {
        let keys = serde_json::Value::Array(tensor_keys);
        metadata.insert("tensor_keys".to_owned(), to_python_json(&keys, &PyJsonOptions::default()));
    }
    Schema::new(columns).with_metadata(metadata)
}

/// One record batch of `rows` (key, sample) in the columns of `schema` (from [`fn@arrow_schema`],
/// possibly with more schema metadata).
///
/// Errors: [`Error::InvalidArgument`] naming the key and field when a value does not fit its
/// column (another dtype, a tensor where bytes belong, a verbatim value that is not a pickle).
pub fn encode_batch(
    schema: Arc<Schema>,
    fields: &[FieldColumns],
    rows: &[(&str, &Sample)],
) -> Result<RecordBatch> {
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(k, _)| *k)));
    let mut columns = vec![keys];
    for field in fields {
        match field {
            FieldColumns::Tensor { name, dtype, null_column } => {
                let (data, shape) = tensor_columns(name, *dtype, *null_column, rows)?;
                columns.push(data);
                columns.push(shape);
            }
            FieldColumns::Blob { name, encoding, .. } => {
                columns.push(blob_column(name, *encoding, rows)?);
            }
            FieldColumns::Json { name } => {
                let mut values: Vec<Option<&str>> = Vec::with_capacity(rows.len());
                for (key, sample) in rows {
                    values.push(match sample.get(name) {
                        Some(Value::Json(text)) => Some(text),
                        None | Some(Value::Null) => None,
                        Some(_) => return Err(misfit(key, name, "JSON text")),
                    });
                }
                columns.push(Arc::new(StringArray::from(values)));
            }
        }
        if field.has_null_column() {
            let nulls: BooleanArray = rows
                .iter()
                .map(|(_, sample)| {
                    Some(matches!(sample.get(field.name()), None | Some(Value::Null)))
                })
                .collect();
            columns.push(Arc::new(nulls));
        }
    }
    RecordBatch::try_new(schema, columns)
        .map_err(|source| ArrowCacheError::Arrow { what: "record batch".into(), source }.into())
}

/// Arrow's refusal to build a column of field `name`.
fn arrow_error(name: &str, source: arrow_schema::ArrowError) -> ArrowCacheError {
    ArrowCacheError::Arrow { what: format!("column of field {name:?}"), source }
}

fn misfit(key: &str, field: &str, wanted: &str) -> Error {
    Error::invalid(format!("key {key:?} field {field:?}: the column holds {wanted}"))
}

/// The `_blob` column of bytes field `name`, each value stored as `encoding` says.
fn blob_column(name: &str, encoding: BlobEncoding, rows: &[(&str, &Sample)]) -> Result<ArrayRef> {
    let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(rows.len());
    for (key, sample) in rows {
        values.push(match sample.get(name) {
            Some(Value::Bytes(bytes)) => Some(bytes),
            None | Some(Value::Null) => None,
            Some(_) => return Err(misfit(key, name, "bytes")),
        });
    }
    if encoding == BlobEncoding::Raw {
        return Ok(Arc::new(BinaryArray::from_opt_vec(values)));
    }
    // Laid out in one values buffer: pickling each value into a buffer of its own would copy
    // every payload twice.
    let mut total = 0usize;
    for ((key, _), value) in rows.iter().zip(&values) {
        total += match (encoding, value) {
            (_, None) => blob_encoding::PICKLED_NONE.len(),
            (BlobEncoding::VerbatimPickles, Some(value)) => {
                blob_encoding::check_pickle(value)
                    .map_err(|why| Error::invalid(format!("key {key:?} field {name:?}: {why}")))?;
                value.len()
            }
            (_, Some(value)) => value.len() + 20,
        };
    }
    let mut bytes = MutableBuffer::new(total);
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0i32);
    for value in values {
        match (encoding, value) {
            (_, None) => bytes.extend_from_slice(blob_encoding::PICKLED_NONE),
            (BlobEncoding::VerbatimPickles, Some(value)) => bytes.extend_from_slice(value),
            (_, Some(value)) => {
                let (head, tail) = blob_encoding::pickle_parts(value.len());
                bytes.extend_from_slice(&head);
                bytes.extend_from_slice(value);
                bytes.extend_from_slice(&tail);
            }
        }
        offsets.push(i32::try_from(bytes.len()).map_err(|_| {
            Error::invalid(format!(
                "field {name:?}: a segment's blobs exceed 2^31 bytes; flush more often"
            ))
        })?);
    }
    let array = BinaryArray::try_new(OffsetBuffer::new(offsets.into()), Buffer::from(bytes), None)
        .map_err(|source| arrow_error(name, source))?;
    Ok(Arc::new(array))
}

/// The `_data` and `_shape` columns of tensor field `name`; a null value is data `[]` with shape
/// `[0]` when a null column marks it, else torchcachex's `[]` / `[]` placeholder.
fn tensor_columns(
    name: &str,
    dtype: DType,
    null_column: bool,
    rows: &[(&str, &Sample)],
) -> Result<(ArrayRef, ArrayRef)> {
    // Arrow wants each values buffer aligned to its element type; MutableBuffer is. Sized up
    // front: growing it would copy the segment's values again on every doubling.
    let total: usize = rows
        .iter()
        .filter_map(|(_, sample)| sample.tensor(name))
        .filter(|tensor| dtype != DType::Bool && tensor.dtype() == dtype)
        .map(|tensor| tensor.bytes().len())
        .sum();
    let mut bytes = MutableBuffer::new(total);
    let mut bools = Vec::new();
    let mut value_offsets = vec![0i32];
    let mut dims = Vec::new();
    let mut shape_offsets = vec![0i32];
    for (key, sample) in rows {
        match sample.get(name) {
            Some(Value::Tensor(tensor)) if tensor.dtype() == dtype => {
                if dtype == DType::Bool {
                    bools.extend(tensor.bytes().iter().map(|&b| b != 0));
                } else {
                    bytes.extend_from_slice(tensor.bytes());
                }
                dims.extend(tensor.shape().iter().map(|&d| d as i64));
            }
            // An empty tensor of shape (0,) to torchcachex; the null column says null.
            None | Some(Value::Null) if null_column => dims.push(0),
            None | Some(Value::Null) => {} // torchcachex's placeholder: [] and []
            Some(_) => return Err(misfit(key, name, &format!("{dtype} tensors"))),
        }
        let values =
            if dtype == DType::Bool { bools.len() } else { bytes.len() / dtype.item_size() };
        let offset = |n: usize| {
            i32::try_from(n).map_err(|_| {
                Error::invalid("a segment's list column exceeds 2^31 values; flush more often")
            })
        };
        value_offsets.push(offset(values)?);
        shape_offsets.push(offset(dims.len())?);
    }
    let values: ArrayRef = if dtype == DType::Bool {
        Arc::new(BooleanArray::from(bools))
    } else {
        let len = bytes.len() / dtype.item_size();
        let data = arrow_data::ArrayData::builder(arrow_type(dtype))
            .len(len)
            .add_buffer(Buffer::from(bytes))
            .build()
            .map_err(|source| arrow_error(name, source))?;
        make_array(data)
    };
    let item = |dt: DataType| Arc::new(Field::new("item", dt, true));
    let data = ListArray::try_new(
        item(arrow_type(dtype)),
        OffsetBuffer::new(value_offsets.into()),
        values,
        None,
    )
    .map_err(|source| arrow_error(name, source))?;
    let shape = ListArray::try_new(
        item(DataType::Int64),
        OffsetBuffer::new(shape_offsets.into()),
        Arc::new(arrow_array::Int64Array::from(dims)),
        None,
    )
    .map_err(|source| arrow_error(name, source))?;
    debug_assert_eq!(data.len(), rows.len());
    Ok((Arc::new(data), Arc::new(shape)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{Schema, ShapeRule};

    #[test]
    fn schemas_map_to_structures() {
        let blob = Schema::new().bytes("blob");
        assert_eq!(columns_for(&blob).0, OutputStructure::Blob);
        let dict = Schema::new().tensor("x", DType::U16, ShapeRule::Any).bytes("meta");
        let (structure, fields) = columns_for(&dict);
        assert_eq!(structure, OutputStructure::Dict);
        let meta = FieldColumns::Blob {
            name: "meta".into(),
            encoding: BlobEncoding::PickledBytes,
            null_column: false,
        };
        assert_eq!(fields[1], meta);
        let named_x = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
        assert_eq!(columns_for(&named_x).0, OutputStructure::Dict, "only `tensor`");
        let json = Schema::new().json("j", true);
        let (structure, fields) = columns_for(&json);
        assert_eq!(
            (structure, &fields[0]),
            (OutputStructure::Dict, &FieldColumns::Json { name: "j".into() })
        );
        let names: Vec<String> =
            arrow_schema(structure, &fields).fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["key", "j_json"]);
        for dtype in [DType::F16, DType::U64, DType::Bool, DType::I8] {
            assert_eq!(dtype_of(&arrow_type(dtype)).unwrap(), dtype);
        }
    }

    #[test]
    fn bfloat16_is_raw_bits_named_by_field_metadata() {
        let bf16 = Schema::new().tensor("tensor", DType::BF16, ShapeRule::Any);
        let (structure, fields) = columns_for(&bf16);
        let schema = arrow_schema(structure, &fields);
        let data = schema.field_with_name("data").unwrap();
        assert_eq!(data.data_type(), &list_of(DataType::UInt16));
        assert_eq!(stored_dtype(data).unwrap(), DType::BF16);
        assert_eq!(schema.metadata()["torch_dtype"], "torch.bfloat16");
        // Metadata that the column's type cannot hold is refused, not trusted.
        let metadata = [(DTYPE_METADATA.to_owned(), "float64".to_owned())];
        let lying = data.clone().with_metadata(std::collections::HashMap::from(metadata));
        assert!(matches!(stored_dtype(&lying).unwrap_err(), Error::Unsupported { .. }));
        let plain = Field::new("x_data", list_of(DataType::UInt16), true);
        assert_eq!(stored_dtype(&plain).unwrap(), DType::U16);
    }
}
