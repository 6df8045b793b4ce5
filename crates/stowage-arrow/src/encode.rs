//! Samples as one Arrow record batch in torchcachex's columns, the inverse of [`crate::decode`].
//!
//! Every column is nullable and list children are named `item`, as pyarrow writes them. A tensor
//! becomes its C-order values (`<name>_data: list<T>`) and its shape (`<name>_shape:
//! list<int64>`); opaque bytes become `<name>_blob: binary`; a null value becomes torchcachex's
//! placeholder (`[]` and `[]`, or `b""`). The schema metadata carries `torch_dtype` (tensor
//! structure) or `tensor_keys` (dict), which torchcachex needs to decode.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, ListArray, RecordBatch, StringArray, make_array,
};
use arrow_buffer::{Buffer, MutableBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Schema};
use stowage_core::canonical_json::{PyJsonOptions, to_python_json};
use stowage_core::{DType, Error, Result, Sample, Value};

use crate::schema_json::OutputStructure;

/// One sample field as the columns store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldColumns {
    /// A tensor of this element type: `<name>_data` + `<name>_shape` (`data` + `shape` for the
    /// tensor structure).
    Tensor {
        /// The sample field name.
        name: String,
        /// The element type of every value.
        dtype: DType,
    },
    /// Opaque bytes: `<name>_blob` (`blob` for the blob structure).
    Blob {
        /// The sample field name.
        name: String,
    },
}

/// The Arrow type of a tensor element type.
pub fn arrow_type(dtype: DType) -> Result<DataType> {
    Ok(match dtype {
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
        other => {
            return Err(Error::unsupported(
                crate::BACKEND_NAME,
                format!("{other} tensors (no Arrow element type holds them losslessly yet)"),
            ));
        }
    })
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

/// Column names of `fields` under `structure`: (data, shape) or (blob,).
fn column_names(structure: OutputStructure, name: &str) -> (String, String, String) {
    let prefix = match structure {
        OutputStructure::Tensor | OutputStructure::Blob => String::new(),
        _ => format!("{name}_"),
    };
    (format!("{prefix}data"), format!("{prefix}shape"), format!("{prefix}blob"))
}

/// The Arrow schema of a segment holding `fields` under `structure`, with torchcachex's metadata.
pub fn arrow_schema(structure: OutputStructure, fields: &[FieldColumns]) -> Result<Schema> {
    let mut columns = vec![Field::new("key", DataType::Utf8, true)];
    let mut metadata = std::collections::HashMap::new();
    let mut tensor_keys = Vec::new();
    for field in fields {
        match field {
            FieldColumns::Tensor { name, dtype } => {
                let (data, shape, _) = column_names(structure, name);
                columns.push(Field::new(data, list_of(arrow_type(*dtype)?), true));
                columns.push(Field::new(shape, list_of(DataType::Int64), true));
                tensor_keys.push(serde_json::Value::from(name.as_str()));
                if structure == OutputStructure::Tensor {
                    metadata.insert("torch_dtype".to_owned(), dtype.torch_name().to_owned());
                }
            }
            FieldColumns::Blob { name } => {
                let (_, _, blob) = column_names(structure, name);
                columns.push(Field::new(blob, DataType::Binary, true));
            }
        }
    }
    if structure == OutputStructure::Dict {
        let keys = serde_json::Value::Array(tensor_keys);
        metadata.insert("tensor_keys".to_owned(), to_python_json(&keys, &PyJsonOptions::default()));
    }
    Ok(Schema::new(columns).with_metadata(metadata))
}

/// One record batch of `rows` (key, sample) in the columns of `schema` (from [`fn@arrow_schema`]).
///
/// Errors: [`Error::InvalidArgument`] naming the key and field when a value does not fit its
/// column (another dtype, a tensor where bytes belong).
pub fn encode_batch(
    schema: Arc<Schema>,
    fields: &[FieldColumns],
    rows: &[(&str, &Sample)],
) -> Result<RecordBatch> {
    let keys: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(k, _)| *k)));
    let mut columns = vec![keys];
    for field in fields {
        match field {
            FieldColumns::Tensor { name, dtype } => {
                let (data, shape) = tensor_columns(name, *dtype, rows)?;
                columns.push(data);
                columns.push(shape);
            }
            FieldColumns::Blob { name } => {
                let mut values: Vec<&[u8]> = Vec::with_capacity(rows.len());
                for (key, sample) in rows {
                    values.push(match sample.get(name) {
                        Some(Value::Bytes(bytes)) => bytes,
                        None | Some(Value::Null) => b"",
                        Some(_) => return Err(misfit(key, name, "opaque bytes")),
                    });
                }
                columns.push(Arc::new(BinaryArray::from_vec(values)));
            }
        }
    }
    RecordBatch::try_new(schema, columns)
        .map_err(|e| Error::invalid(format!("building a record batch: {e}")))
}

fn misfit(key: &str, field: &str, wanted: &str) -> Error {
    Error::invalid(format!("key {key:?} field {field:?}: the column holds {wanted}"))
}

/// The `_data` and `_shape` columns of tensor field `name`.
fn tensor_columns(
    name: &str,
    dtype: DType,
    rows: &[(&str, &Sample)],
) -> Result<(ArrayRef, ArrayRef)> {
    // Arrow wants each values buffer aligned to its element type; MutableBuffer is.
    let mut bytes = MutableBuffer::new(0);
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
        let data = arrow_data::ArrayData::builder(arrow_type(dtype)?)
            .len(len)
            .add_buffer(Buffer::from(bytes))
            .build()
            .map_err(|e| Error::invalid(format!("field {name:?}: {e}")))?;
        make_array(data)
    };
    let item = |dt: DataType| Arc::new(Field::new("item", dt, true));
    let data = ListArray::try_new(
        item(arrow_type(dtype)?),
        OffsetBuffer::new(value_offsets.into()),
        values,
        None,
    )
    .map_err(|e| Error::invalid(format!("field {name:?}: {e}")))?;
    let shape = ListArray::try_new(
        item(DataType::Int64),
        OffsetBuffer::new(shape_offsets.into()),
        Arc::new(arrow_array::Int64Array::from(dims)),
        None,
    )
    .map_err(|e| Error::invalid(format!("field {name:?}: {e}")))?;
    debug_assert_eq!(data.len(), rows.len());
    Ok((Arc::new(data), Arc::new(shape)))
}
