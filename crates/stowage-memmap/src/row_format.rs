//! How a stowage [`Schema`] maps onto the files, index columns and manifest keys of a memmap row
//! cache, and `stowage.json`, the stowage-only file that records the schema of a cache stowage wrote.
//!
//! | schema field | stored as |
//! |---|---|
//! | fixed-shape tensor `f` | `<f>.bin`, described in `shapes.json`; manifest key `<f>_shape` |
//! | nullable tensor `f` | the same, a zero placeholder for null rows, and a `has_<f>` bool column / manifest key |
//! | deduplicated JSON `f` | `<f>.json` sidecar (keys in first-seen order) + `<f>_key` int32 column |
//! | plain JSON `f` | a utf8 column `<f>`; manifest key `<f>` |
//!
//! DNANet's own names are kept where they differ from the rule: `annotation` -> `ann_shape`,
//! `panel` -> `panels.json` / `adjusted_panel_json`, `allele` -> `alleles.json` /
//! `allele_annotation_json`, so a cache of the [`crate::dnanet`] schema is exactly DNANet's layout.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use stowage_core::{Error, FieldKind, Result, Schema, ShapeRule};

use crate::BACKEND_NAME;
use crate::layout::{FieldLayout, check_field_name};

/// `stowage.json`: written by stowage's writer at create, ignored by DNANet.
pub const STOWAGE_META_FILE: &str = "stowage.json";
/// Per-row checksums (xxh3-64 of the key and of every field), one fixed-size row per cache row.
pub const CHECKSUMS_FILE: &str = "stowage_checksums.bin";
/// The value of `format` in `stowage.json`.
pub const FORMAT_NAME: &str = "dnanet-memmap-row";
/// The version of stowage's additions (`stowage.json`, the checksum file). Version 1 (xxh64
/// checksums) was never released; its caches are refused as `Incompatible`.
pub const FORMAT_VERSION: u32 = 2;

/// Files of the layout itself; no field may map onto one of them.
const RESERVED_FILES: [&str; 8] = [
    "index.parquet",
    "shapes.json",
    "fingerprint.json",
    "manifest.jsonl",
    "_COMPLETE",
    STOWAGE_META_FILE,
    CHECKSUMS_FILE,
    ".stowage.lock",
];

/// One fixed-shape tensor field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorColumn {
    /// Its `.bin` file's row layout.
    pub layout: FieldLayout,
    /// `has_<name>`, when the field is nullable.
    pub has_column: Option<String>,
    /// The manifest key holding the row's shape (`<name>_shape`, DNANet's `ann_shape`).
    pub shape_key: String,
}

/// Where a JSON field's text lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonStorage {
    /// Stored once per distinct text in a sidecar, referenced by an int32 key column.
    Deduplicated {
        /// The sidecar's file name (`panels.json`).
        sidecar: String,
        /// The int32 key column (`panel_key`).
        key_column: String,
    },
    /// Stored per row in a utf8 column.
    Plain {
        /// The column name (`meta_json`).
        column: String,
    },
}

/// One JSON field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonColumn {
    /// The schema field name.
    pub name: String,
    /// Where its text lives.
    pub storage: JsonStorage,
    /// The manifest key holding the row's text.
    pub manifest_key: String,
}

/// Where a schema field sits among the tensor and JSON columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldSlot {
    /// Position in [`RowFormat::tensors`].
    Tensor(usize),
    /// Position in [`RowFormat::json`].
    Json(usize),
}

/// A schema resolved into files, columns and manifest keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFormat {
    /// The schema samples follow.
    pub schema: Schema,
    /// Tensor fields, in schema order.
    pub tensors: Vec<TensorColumn>,
    /// JSON fields, in schema order.
    pub json: Vec<JsonColumn>,
    /// For each schema field (schema order), its column.
    pub slots: Vec<FieldSlot>,
    /// Whether the cache has `stowage_checksums.bin` (caches stowage wrote do; DNANet's do not).
    pub checksums: bool,
}

impl RowFormat {
    /// Resolves a schema for writing: every tensor field fixed-shape with a numpy dtype, JSON
    /// fields, no bytes fields, and no two fields mapping onto one file, column or manifest key.
    ///
    /// Errors: [`Error::Unsupported`] for a field kind the format cannot store;
    /// [`Error::InvalidArgument`] naming the field for a name clash or an unusable file name.
    pub fn new(schema: &Schema, checksums: bool) -> Result<RowFormat> {
        let mut layouts = Vec::new();
        for field in &schema.fields {
            match &field.kind {
                FieldKind::Tensor { dtype, shape: ShapeRule::Fixed(shape) } => {
                    let descr = dtype.numpy_descr().ok_or_else(|| {
                        Error::unsupported(
                            BACKEND_NAME,
                            format!("field {:?}: dtype {dtype} (numpy has none)", field.name),
                        )
                    })?;
                    layouts.push(FieldLayout::new(&field.name, shape.clone(), descr)?);
                }
                FieldKind::Tensor { shape, .. } => {
                    return Err(Error::unsupported(
                        BACKEND_NAME,
                        format!(
                            "field {:?}: shape rule {shape:?} (rows are fixed-size)",
                            field.name
                        ),
                    ));
                }
                FieldKind::Bytes => {
                    return Err(Error::unsupported(
                        BACKEND_NAME,
                        format!("field {:?}: bytes fields", field.name),
                    ));
                }
                FieldKind::Json { .. } => {}
            }
        }
        Self::with_layouts(schema.clone(), layouts, checksums)
    }

    /// Resolves `schema` whose tensor fields (in order) have the given row layouts (read from
    /// `shapes.json`, so they may be big-endian). Errors as [`RowFormat::new`].
    pub fn with_layouts(
        schema: Schema,
        layouts: Vec<FieldLayout>,
        checksums: bool,
    ) -> Result<RowFormat> {
        let mut tensors = Vec::new();
        let mut json = Vec::new();
        let mut slots = Vec::new();
        let mut layouts = layouts.into_iter();
        let mut names = NameClaims::default();
        for name in ["row", "path"] {
            names.claim("index column", name.into(), name)?;
            names.claim("manifest key", name.into(), name)?;
        }
        for file in RESERVED_FILES {
            names.claim("file", file.into(), file)?;
        }
        names.claim("shapes.json key", "n".into(), "n")?;
        for field in &schema.fields {
            let name = field.name.as_str();
            match &field.kind {
                FieldKind::Tensor { .. } => {
                    let layout = layouts.next().filter(|l| l.name == name).ok_or_else(|| {
                        Error::invalid(format!("field {name:?} has no row layout"))
                    })?;
                    check_name(name)?;
                    names.claim("file", format!("{name}.bin"), name)?;
                    names.claim("shapes.json key", name.into(), name)?;
                    let shape_key = shape_key(name);
                    names.claim("manifest key", shape_key.clone(), name)?;
                    let has_column = field.nullable.then(|| format!("has_{name}"));
                    if let Some(has) = &has_column {
                        names.claim("index column", has.clone(), name)?;
                        names.claim("manifest key", has.clone(), name)?;
                    }
                    slots.push(FieldSlot::Tensor(tensors.len()));
                    tensors.push(TensorColumn { layout, has_column, shape_key });
                }
                FieldKind::Json { deduplicate } => {
                    let storage = if *deduplicate {
                        let sidecar = sidecar_file(name);
                        check_name(&sidecar)?;
                        names.claim("file", sidecar.clone(), name)?;
                        let key_column = format!("{name}_key");
                        names.claim("index column", key_column.clone(), name)?;
                        JsonStorage::Deduplicated { sidecar, key_column }
                    } else {
                        names.claim("index column", name.into(), name)?;
                        JsonStorage::Plain { column: name.into() }
                    };
                    let manifest_key = manifest_json_key(name);
                    names.claim("manifest key", manifest_key.clone(), name)?;
                    slots.push(FieldSlot::Json(json.len()));
                    json.push(JsonColumn { name: name.into(), storage, manifest_key });
                }
                FieldKind::Bytes => {
                    return Err(Error::unsupported(
                        BACKEND_NAME,
                        format!("field {name:?}: bytes fields"),
                    ));
                }
            }
        }
        Ok(RowFormat { schema, tensors, json, slots, checksums })
    }

    /// Number of `u64` checksums per row: the key, then every schema field.
    pub fn checksums_per_row(&self) -> usize {
        self.schema.fields.len() + 1
    }

    /// The row layout of `stowage_checksums.bin`.
    pub fn checksum_layout(&self) -> FieldLayout {
        FieldLayout::new("stowage_checksums", vec![self.checksums_per_row()], "<u8")
            .expect("a u64 vector as long as the schema fits")
    }
}

/// Names already used, so that two fields never share a file, column or key.
#[derive(Default)]
struct NameClaims {
    used: HashSet<(&'static str, String)>,
}

impl NameClaims {
    fn claim(&mut self, what: &'static str, name: String, field: &str) -> Result<()> {
        if self.used.insert((what, name.clone())) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "field {field:?} would use the {what} {name:?}, which the memmap layout already uses"
        )))
    }
}

fn check_name(name: &str) -> Result<()> {
    check_field_name(name).map_err(|why| Error::invalid(format!("field name {name:?} {why}")))
}

/// The manifest key of a tensor field's row shape.
fn shape_key(name: &str) -> String {
    match name {
        "annotation" => "ann_shape".into(),
        _ => format!("{name}_shape"),
    }
}

/// The sidecar file of a deduplicated JSON field.
fn sidecar_file(name: &str) -> String {
    match name {
        "panel" => "panels.json".into(),
        "allele" => "alleles.json".into(),
        _ => format!("{name}.json"),
    }
}

/// The manifest key of a JSON field's text.
fn manifest_json_key(name: &str) -> String {
    match name {
        "panel" => "adjusted_panel_json".into(),
        "allele" => "allele_annotation_json".into(),
        _ => name.into(),
    }
}

/// The content of `stowage.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StowageMeta {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The schema the cache was created with.
    pub schema: Schema,
    /// The checksum of `stowage_checksums.bin` rows ([`crate::checksum::ALGORITHM`]).
    pub checksums: String,
}

impl StowageMeta {
    /// The metadata of a new cache of `schema`.
    pub fn new(schema: &Schema) -> StowageMeta {
        StowageMeta {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            schema: schema.clone(),
            checksums: crate::checksum::ALGORITHM.into(),
        }
    }

    /// Reads `stowage.json`; `Ok(None)` when it does not exist (a cache DNANet wrote).
    /// Errors: [`Error::Corrupted`] naming the file when it does not parse;
    /// [`Error::Incompatible`] for another format or a newer version.
    pub fn read(path: &Path) -> Result<Option<StowageMeta>> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta: StowageMeta = serde_json::from_slice(&text)
            .map_err(|e| Error::corrupted(path, format!("does not parse: {e}")))?;
        if meta.format != FORMAT_NAME
            || meta.format_version != FORMAT_VERSION
            || meta.checksums != crate::checksum::ALGORITHM
        {
            return Err(Error::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "format {:?} version {} checksums {:?}; this reader knows {FORMAT_NAME:?} \
                     version {FORMAT_VERSION} with {:?}",
                    meta.format,
                    meta.format_version,
                    meta.checksums,
                    crate::checksum::ALGORITHM
                ),
            });
        }
        Ok(Some(meta))
    }

    /// The text written to `stowage.json`.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("metadata serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::DType;

    #[test]
    fn dnanet_schema_gets_dnanet_names() {
        let format = RowFormat::new(&crate::dnanet(3, 32), true).unwrap();
        assert_eq!(format.tensors[1].shape_key, "ann_shape");
        assert_eq!(format.tensors[1].has_column.as_deref(), Some("has_annotation"));
        assert_eq!(
            format.json[0].storage,
            JsonStorage::Deduplicated {
                sidecar: "panels.json".into(),
                key_column: "panel_key".into()
            }
        );
        assert_eq!(format.json[1].manifest_key, "allele_annotation_json");
        assert_eq!(format.json[2].storage, JsonStorage::Plain { column: "meta_json".into() });
    }

    #[test]
    fn clashing_and_unstorable_fields_are_refused() {
        let clash = Schema::new().json("shapes", true);
        let err = RowFormat::new(&clash, true).unwrap_err().to_string();
        assert!(err.contains("shapes.json") && err.contains("\"shapes\""), "{err}");
        let clash =
            Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1])).json("x_shape", false);
        assert!(RowFormat::new(&clash, true).is_err());
        let ragged = Schema::new().tensor("x", DType::U8, ShapeRule::Any);
        assert!(matches!(RowFormat::new(&ragged, true), Err(Error::Unsupported { .. })));
        let bf16 = Schema::new().tensor("x", DType::BF16, ShapeRule::Fixed(vec![1]));
        assert!(matches!(RowFormat::new(&bf16, true), Err(Error::Unsupported { .. })));
    }
}
