//! DNANet's exact field set, as a stowage [`Schema`].

use stowage_core::{FieldKind, FieldSpec, Schema, ShapeRule};

use crate::layout::FieldLayout;

/// Name of the tensor field that `has_annotation = false` turns into null.
pub const ANNOTATION_FIELD: &str = "annotation";
/// The deduplicated panel JSON field (`panel_key` -> `panels.json`).
pub const PANEL_FIELD: &str = "panel";
/// The deduplicated allele-annotation JSON field (`allele_key` -> `alleles.json`).
pub const ALLELE_FIELD: &str = "allele";
/// The per-row plain JSON field (`meta_json` column).
pub const META_FIELD: &str = "meta_json";

/// DNANet's tensor fields with `channels` (D) dye rows and `scanpoints` (L) scan points:
/// `data` `<i2` (D, L), `annotation` `|i1` (D, L), `scaler` `<f4` (L,).
///
/// ```
/// let fields = stowage_memmap::test_support::dnanet_fields(&[3, 32], &[3, 32], &[32]);
/// assert_eq!(fields.iter().map(|f| f.row_bytes).sum::<usize>(), 416);
/// ```
pub fn dnanet_fields(data: &[usize], annotation: &[usize], scaler: &[usize]) -> Vec<FieldLayout> {
    [("data", data, "<i2"), (ANNOTATION_FIELD, annotation, "|i1"), ("scaler", scaler, "<f4")]
        .into_iter()
        .map(|(name, shape, descr)| {
            FieldLayout::new(name, shape.to_vec(), descr).expect(
                "DNANet dtypes are supported; an overflowing shape is checked by the caller",
            )
        })
        .collect()
}

/// The schema stowage exposes for a cache with these tensor fields: each a `Fixed` tensor
/// (`annotation` nullable), then `panel` and `allele` (deduplicated JSON, nullable) and
/// `meta_json` (plain JSON, not nullable: DNANet always writes a JSON string, `"{}"` when empty,
/// and its reader breaks on a null there).
pub fn schema_for(fields: &[FieldLayout]) -> Schema {
    let mut schema = Schema::new();
    for field in fields {
        schema = schema.field(FieldSpec {
            name: field.name.clone(),
            kind: FieldKind::Tensor {
                dtype: field.dtype,
                shape: ShapeRule::Fixed(field.shape.clone()),
            },
            nullable: field.name == ANNOTATION_FIELD,
        });
    }
    for (name, deduplicate, nullable) in
        [(PANEL_FIELD, true, true), (ALLELE_FIELD, true, true), (META_FIELD, false, false)]
    {
        if schema.get(name).is_none() {
            schema = schema.field(FieldSpec {
                name: name.into(),
                kind: FieldKind::Json { deduplicate },
                nullable,
            });
        }
    }
    schema
}

/// DNANet's exact schema for `channels` (D) dye rows and `scanpoints` (L) scan points.
///
/// ```
/// use stowage_core::{DType, FieldKind, ShapeRule};
/// let schema = stowage_memmap::dnanet(3, 32);
/// let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
/// assert_eq!(names, ["data", "annotation", "scaler", "panel", "allele", "meta_json"]);
/// assert!(schema.get("annotation").unwrap().nullable);
/// assert!(!schema.get("meta_json").unwrap().nullable);
/// assert_eq!(
///     schema.get("data").unwrap().kind,
///     FieldKind::Tensor { dtype: DType::I16, shape: ShapeRule::Fixed(vec![3, 32]) }
/// );
/// ```
pub fn dnanet(channels: usize, scanpoints: usize) -> Schema {
    schema_for(&dnanet_fields(&[channels, scanpoints], &[channels, scanpoints], &[scanpoints]))
}
