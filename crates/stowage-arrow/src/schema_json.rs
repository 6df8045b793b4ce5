//! `schema.json`: the columns of a torchcachex cache, its Arrow schema metadata and its output
//! structure, as torchcachex writes it (`json.dump(..., indent=2)`).
//!
//! ```json
//! {"fields": [{"name": "key", "type": "string"}, {"name": "data", "type": "list<float>"}, ...],
//!  "metadata": {"torch_dtype": "torch.float32"}, "output_structure": "tensor"}
//! ```
//!
//! The file is descriptive only: a segment's own Arrow schema is the authority on value types
//! (torchcachex itself reads `list<halffloat>` back as `string`). So a type string this module does
//! not know is kept as it is ([`ColumnType::Other`]), never an error; only a file that is not this
//! shape of JSON is.

use std::path::Path;

use serde_json::{Map, Value};
use stowage_core::{DType, Error, IoResultExt, Result};
use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};

/// How a sample is split into columns; fixed by the first sample torchcachex wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStructure {
    /// One tensor: `data`, `shape`.
    Tensor,
    /// A dict: `<name>_data`/`<name>_shape` per tensor entry, `<name>_blob` per other entry.
    Dict,
    /// A tuple: `item<i>_data`/`item<i>_shape` or `item<i>_blob` per item.
    Tuple,
    /// A list, laid out as a tuple (only `schema.json` tells them apart).
    List,
    /// The whole sample pickled: `blob`.
    Blob,
}

impl OutputStructure {
    /// The name in `schema.json`.
    pub fn name(self) -> &'static str {
        match self {
            OutputStructure::Tensor => "tensor",
            OutputStructure::Dict => "dict",
            OutputStructure::Tuple => "tuple",
            OutputStructure::List => "list",
            OutputStructure::Blob => "blob",
        }
    }

    fn from_name(name: &str) -> Option<OutputStructure> {
        [
            OutputStructure::Tensor,
            OutputStructure::Dict,
            OutputStructure::Tuple,
            OutputStructure::List,
            OutputStructure::Blob,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }
}

/// A column's type as `schema.json` spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnType {
    /// `string` (the `key` column).
    String,
    /// `binary` (pickled values).
    Binary,
    /// `list<T>` of a tensor element type (`list<halffloat>` is float16).
    List(DType),
    /// Anything else, kept as written.
    Other(String),
}

/// pyarrow's names of the element types torchcachex writes, plus the unsigned widths stowage
/// stores losslessly.
const ELEMENT_NAMES: [(DType, &str); 12] = [
    (DType::F16, "halffloat"),
    (DType::F32, "float"),
    (DType::F64, "double"),
    (DType::I8, "int8"),
    (DType::I16, "int16"),
    (DType::I32, "int32"),
    (DType::I64, "int64"),
    (DType::U8, "uint8"),
    (DType::U16, "uint16"),
    (DType::U32, "uint32"),
    (DType::U64, "uint64"),
    (DType::Bool, "bool"),
];

impl ColumnType {
    /// The type string of `schema.json`: `list<` + pyarrow's type name + `>`, `binary`, `string`.
    ///
    /// ```
    /// use stowage_arrow::test_support::schema_json::ColumnType;
    /// use stowage_core::DType;
    /// assert_eq!(ColumnType::List(DType::F16).type_string(), "list<halffloat>");
    /// assert_eq!(ColumnType::parse("list<halffloat>"), ColumnType::List(DType::F16));
    /// ```
    pub fn type_string(&self) -> String {
        match self {
            ColumnType::String => "string".into(),
            ColumnType::Binary => "binary".into(),
            ColumnType::List(dtype) => {
                let name =
                    ELEMENT_NAMES.iter().find(|(d, _)| d == dtype).map_or("unknown", |e| e.1);
                format!("list<{name}>")
            }
            ColumnType::Other(text) => text.clone(),
        }
    }

    /// The type a `schema.json` type string names.
    pub fn parse(text: &str) -> ColumnType {
        let element = text.strip_prefix("list<").and_then(|t| t.strip_suffix('>'));
        match (text, element) {
            ("string", _) => ColumnType::String,
            ("binary", _) => ColumnType::Binary,
            (_, Some(name)) => ELEMENT_NAMES
                .iter()
                .find(|(_, n)| *n == name)
                .map_or_else(|| ColumnType::Other(text.into()), |(d, _)| ColumnType::List(*d)),
            _ => ColumnType::Other(text.into()),
        }
    }
}

/// One entry of `fields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaField {
    /// The column name.
    pub name: String,
    /// Its type.
    pub column_type: ColumnType,
}

/// The content of `schema.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaJson {
    /// Every column, `key` first, in file order.
    pub fields: Vec<SchemaField>,
    /// The Arrow schema metadata (`torch_dtype`, `tensor_keys`), in file order.
    pub metadata: Map<String, Value>,
    /// How samples are split into columns.
    pub output_structure: OutputStructure,
}

impl SchemaJson {
    /// Reads `path`; `Ok(None)` when it does not exist (the segments alone still describe the
    /// cache).
    ///
    /// Errors: [`Error::Corrupted`] naming the file and what is wrong when it is not a
    /// torchcachex `schema.json`; [`Error::Io`] when it cannot be read.
    pub fn read(path: &Path) -> Result<Option<SchemaJson>> {
        match std::fs::read(path) {
            Ok(bytes) => SchemaJson::parse(&bytes, path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }

    /// Parses the bytes of `schema.json` (`path` names it in errors).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<SchemaJson> {
        let bad = |what: String| Error::corrupted(path, what);
        let root: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not a JSON object: {e}")))?;
        let fields = root
            .get("fields")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("\"fields\" is missing or not an array".into()))?
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let text = |key: &str| field.get(key).and_then(Value::as_str);
                match (text("name"), text("type")) {
                    (Some(name), Some(column_type)) => Ok(SchemaField {
                        name: name.into(),
                        column_type: ColumnType::parse(column_type),
                    }),
                    _ => {
                        Err(bad(format!("fields[{i}] needs string \"name\" and \"type\": {field}")))
                    }
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let metadata = match root.get("metadata") {
            None => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => return Err(bad(format!("\"metadata\" is not an object: {other}"))),
        };
        let structure = root.get("output_structure").and_then(Value::as_str).unwrap_or("");
        let output_structure = OutputStructure::from_name(structure).ok_or_else(|| {
            bad(format!(
                "\"output_structure\" is {structure:?}, not one of tensor, dict, tuple, list, blob"
            ))
        })?;
        Ok(SchemaJson { fields, metadata, output_structure })
    }

    /// The `schema.json` torchcachex writes for a segment schema (from
    /// [`crate::encode::arrow_schema`]): every column with its type string, the schema metadata
    /// (sorted by key) and the structure.
    ///
    /// Errors: [`Error::Unsupported`] for a column type `schema.json` has no name for.
    pub fn describe(
        structure: OutputStructure,
        schema: &arrow_schema::Schema,
    ) -> Result<SchemaJson> {
        use arrow_schema::DataType;
        let fields = schema
            .fields()
            .iter()
            .map(|field| {
                let column_type = match field.data_type() {
                    DataType::Utf8 => ColumnType::String,
                    DataType::Binary => ColumnType::Binary,
                    DataType::List(item) => {
                        ColumnType::List(crate::encode::dtype_of(item.data_type())?)
                    }
                    // stowage's null columns; torchcachex's type parser reads "bool" back.
                    DataType::Boolean => ColumnType::Other("bool".into()),
                    other => {
                        return Err(Error::unsupported(
                            crate::BACKEND_NAME,
                            format!("column {:?} of type {other} in schema.json", field.name()),
                        ));
                    }
                };
                Ok(SchemaField { name: field.name().clone(), column_type })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut keys: Vec<&String> = schema.metadata().keys().collect();
        keys.sort();
        let metadata = keys
            .into_iter()
            .map(|k| (k.clone(), Value::from(schema.metadata()[k].as_str())))
            .collect();
        Ok(SchemaJson { fields, metadata, output_structure: structure })
    }

    /// The bytes torchcachex writes for this schema: `json.dump(..., indent=2)` (no trailing
    /// newline).
    pub fn to_json(&self) -> Vec<u8> {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                let mut field = Map::new();
                field.insert("name".into(), Value::from(f.name.as_str()));
                field.insert("type".into(), Value::from(f.column_type.type_string()));
                Value::Object(field)
            })
            .collect();
        let mut root = Map::new();
        root.insert("fields".into(), Value::Array(fields));
        root.insert("metadata".into(), Value::Object(self.metadata.clone()));
        root.insert("output_structure".into(), Value::from(self.output_structure.name()));
        to_python_json(&Value::Object(root), &PyJsonOptions::indented(2)).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_strings_round_trip_and_unknown_ones_are_kept() {
        for (dtype, _) in ELEMENT_NAMES {
            let column = ColumnType::List(dtype);
            assert_eq!(ColumnType::parse(&column.type_string()), column);
        }
        assert_eq!(
            ColumnType::parse("list<complex64>"),
            ColumnType::Other("list<complex64>".into())
        );
        assert_eq!(ColumnType::parse("large_binary"), ColumnType::Other("large_binary".into()));
    }

    #[test]
    fn damaged_files_are_corruption_naming_what_is_wrong() {
        let path = Path::new("cache/schema.json");
        for (text, needle) in [
            ("[1]", "not a JSON object"),
            ("{}", "\"fields\""),
            (
                r#"{"fields": [{"name": 1, "type": "binary"}], "output_structure": "blob"}"#,
                "fields[0]",
            ),
            (r#"{"fields": [], "metadata": [], "output_structure": "blob"}"#, "\"metadata\""),
            (r#"{"fields": [], "output_structure": "set"}"#, "\"set\""),
        ] {
            let err = SchemaJson::parse(text.as_bytes(), path).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(
                err.to_string().contains("schema.json") && err.to_string().contains(needle),
                "{err}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SchemaJson::read(&dir.path().join("schema.json")).unwrap(), None);
    }
}
