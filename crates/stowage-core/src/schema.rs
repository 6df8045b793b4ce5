//! Schemas: what each field of a cache's samples must look like, and validation against them.

use crate::{DType, Error, Result, Sample, Value, shape};
use serde::{Deserialize, Serialize};

/// The shape rule of a tensor field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "rule", content = "dims")]
pub enum ShapeRule {
    /// Every sample has exactly this shape.
    Fixed(Vec<usize>),
    /// Same rank as this shape; every dimension `<=` the given maximum (zero-length allowed).
    Max(Vec<usize>),
    /// Any leading dimension, then exactly these trailing dimensions (a ragged first axis).
    RaggedLeading(Vec<usize>),
    /// Any shape of any rank.
    Any,
}

impl ShapeRule {
    /// Checks a sample shape against the rule; the error text names both sides.
    ///
    /// ```
    /// use stowage_core::ShapeRule;
    /// let rule = ShapeRule::Max(vec![2, 3]);
    /// assert!(rule.check(&[2, 0]).is_ok());
    /// assert_eq!(rule.check(&[3, 1]).unwrap_err(), "shape (3, 1) exceeds schema max (2, 3)");
    /// ```
    pub fn check(&self, got: &[usize]) -> std::result::Result<(), String> {
        let rank_mismatch = |want: usize| format!("data rank {} != schema rank {want}", got.len());
        match self {
            ShapeRule::Fixed(want) if got != want.as_slice() => Err(format!(
                "data shape {} != fixed schema {}",
                shape::display(got),
                shape::display(want)
            )),
            ShapeRule::Max(max) if got.len() != max.len() => Err(rank_mismatch(max.len())),
            ShapeRule::Max(max) if got.iter().zip(max).any(|(g, m)| g > m) => Err(format!(
                "shape {} exceeds schema max {}",
                shape::display(got),
                shape::display(max)
            )),
            ShapeRule::RaggedLeading(trailing) if got.len() != trailing.len() + 1 => {
                Err(rank_mismatch(trailing.len() + 1))
            }
            ShapeRule::RaggedLeading(trailing) if got[1..] != trailing[..] => Err(format!(
                "shape {} has trailing dims {} != schema trailing dims {}",
                shape::display(got),
                shape::display(&got[1..]),
                shape::display(trailing)
            )),
            _ => Ok(()),
        }
    }

    /// The rank the rule requires, or `None` for [`ShapeRule::Any`].
    pub fn rank(&self) -> Option<usize> {
        match self {
            ShapeRule::Fixed(d) | ShapeRule::Max(d) => Some(d.len()),
            ShapeRule::RaggedLeading(d) => Some(d.len() + 1),
            ShapeRule::Any => None,
        }
    }
}

/// What kind of value a field holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FieldKind {
    /// A tensor of one dtype under a shape rule.
    Tensor {
        /// The element type every sample must have.
        dtype: DType,
        /// The shape rule.
        shape: ShapeRule,
    },
    /// Opaque bytes.
    Bytes,
    /// JSON text, optionally stored once per distinct value.
    Json {
        /// Store each distinct text once and reference it from rows.
        deduplicate: bool,
    },
}

/// One named field of a [`Schema`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSpec {
    /// The field name.
    pub name: String,
    /// The value kind.
    #[serde(flatten)]
    pub kind: FieldKind,
    /// Whether the field may be [`Value::Null`] (or absent from a sample, which means null).
    #[serde(default)]
    pub nullable: bool,
}

/// The fields every sample of a cache has, in order.
///
/// ```
/// use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![2, 3]));
/// let bad = Sample::new().with("x", Tensor::zeros(DType::F32, &[3, 1]).unwrap());
/// assert_eq!(
///     schema.validate(&bad).unwrap_err().to_string(),
///     "schema mismatch: field \"x\": shape (3, 1) exceeds schema max (2, 3)"
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// The fields, in order.
    pub fields: Vec<FieldSpec>,
}

impl Schema {
    /// A schema with no fields; add them with the builder methods.
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Adds a field (builder). Panics on a duplicate name, which is a programming error.
    pub fn field(mut self, spec: FieldSpec) -> Schema {
        assert!(self.get(&spec.name).is_none(), "schema already has a field named {:?}", spec.name);
        self.fields.push(spec);
        self
    }

    /// Adds a non-nullable tensor field.
    pub fn tensor(self, name: &str, dtype: DType, shape: ShapeRule) -> Schema {
        self.field(FieldSpec {
            name: name.into(),
            kind: FieldKind::Tensor { dtype, shape },
            nullable: false,
        })
    }

    /// Adds a nullable tensor field.
    pub fn nullable_tensor(self, name: &str, dtype: DType, shape: ShapeRule) -> Schema {
        self.field(FieldSpec {
            name: name.into(),
            kind: FieldKind::Tensor { dtype, shape },
            nullable: true,
        })
    }

    /// Adds a non-nullable bytes field.
    pub fn bytes(self, name: &str) -> Schema {
        self.field(FieldSpec { name: name.into(), kind: FieldKind::Bytes, nullable: false })
    }

    /// Adds a non-nullable JSON field.
    pub fn json(self, name: &str, deduplicate: bool) -> Schema {
        self.field(FieldSpec {
            name: name.into(),
            kind: FieldKind::Json { deduplicate },
            nullable: false,
        })
    }

    /// The field named `name`.
    pub fn get(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Checks a sample against the schema: every non-nullable field present with the right kind, dtype
    /// and shape, no unknown field, JSON text that parses. The error names the field and both sides.
    pub fn validate(&self, sample: &Sample) -> Result<()> {
        for (name, _) in sample.fields() {
            if self.get(name).is_none() {
                let known: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
                return Err(Error::schema(name, format!("not in the schema (fields: {known:?})")));
            }
        }
        for spec in &self.fields {
            match sample.get(&spec.name) {
                None | Some(Value::Null) if spec.nullable => {}
                None => return Err(Error::schema(&spec.name, "missing and not nullable")),
                Some(value) => check_value(spec, value)?,
            }
        }
        Ok(())
    }
}

fn check_value(spec: &FieldSpec, value: &Value) -> Result<()> {
    let mismatch = |detail: String| Err(Error::schema(&spec.name, detail));
    match (&spec.kind, value) {
        (FieldKind::Tensor { dtype, shape }, Value::Tensor(t)) => {
            if t.dtype() != *dtype {
                return mismatch(format!("dtype {} != schema {dtype}", t.dtype()));
            }
            shape.check(t.shape()).or_else(mismatch)
        }
        (FieldKind::Bytes, Value::Bytes(_)) => Ok(()),
        (FieldKind::Json { .. }, Value::Json(text)) => {
            match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                Ok(_) => Ok(()),
                Err(e) => mismatch(format!("JSON text does not parse: {e}")),
            }
        }
        (_, Value::Null) => mismatch("null but the field is not nullable".into()),
        (kind, other) => {
            let want = match kind {
                FieldKind::Tensor { .. } => "tensor",
                FieldKind::Bytes => "bytes",
                FieldKind::Json { .. } => "json",
            };
            mismatch(format!("value is {} but the schema wants {want}", other.kind_name()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;
    use rstest::rstest;

    fn schema() -> Schema {
        Schema::new()
            .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 3]))
            .nullable_tensor("y", DType::I64, ShapeRule::RaggedLeading(vec![2]))
            .json("meta", true)
    }

    fn sample(x: Tensor) -> Sample {
        Sample::new().with("x", x).with("meta", Value::Json("{}".into()))
    }

    #[rstest]
    #[case::fixed_shape(Tensor::zeros(DType::F32, &[2, 2]).unwrap(), "data shape (2, 2) != fixed schema (2, 3)")]
    #[case::dtype(Tensor::zeros(DType::F64, &[2, 3]).unwrap(), "dtype float64 != schema float32")]
    fn tensor_mismatches_name_both_sides(#[case] x: Tensor, #[case] detail: &str) {
        let err = schema().validate(&sample(x)).unwrap_err();
        assert_eq!(err.to_string(), format!("schema mismatch: field \"x\": {detail}"));
    }

    #[test]
    fn nullable_field_may_be_absent_or_null() {
        let ok = sample(Tensor::zeros(DType::F32, &[2, 3]).unwrap());
        schema().validate(&ok).unwrap();
        schema().validate(&ok.clone().with("y", Value::Null)).unwrap();
        let ragged = ok.with("y", Tensor::zeros(DType::I64, &[7, 2]).unwrap());
        schema().validate(&ragged).unwrap();
    }

    #[test]
    fn missing_unknown_and_wrong_kind_fields_are_rejected() {
        let s = schema();
        let x = Tensor::zeros(DType::F32, &[2, 3]).unwrap();
        assert!(s.validate(&Sample::new().with("x", x.clone())).is_err(), "missing meta");
        assert!(s.validate(&sample(x.clone()).with("zzz", Value::Null)).is_err(), "unknown");
        let wrong = Sample::new()
            .with("x", Value::Bytes("a".into()))
            .with("meta", Value::Json("{}".into()));
        assert!(s.validate(&wrong).unwrap_err().to_string().contains("value is bytes"));
        let bad_json = sample(x).with("meta", Value::Json("{".into()));
        assert!(s.validate(&bad_json).unwrap_err().to_string().contains("does not parse"));
    }

    #[test]
    fn ragged_and_max_rules() {
        assert_eq!(
            ShapeRule::RaggedLeading(vec![2]).check(&[3]).unwrap_err(),
            "data rank 1 != schema rank 2"
        );
        assert_eq!(
            ShapeRule::Max(vec![2, 3]).check(&[2]).unwrap_err(),
            "data rank 1 != schema rank 2"
        );
        assert!(ShapeRule::Any.check(&[1, 2, 3, 4]).is_ok());
    }

    #[test]
    fn schema_round_trips_through_json() {
        let text = serde_json::to_string(&schema()).unwrap();
        assert_eq!(serde_json::from_str::<Schema>(&text).unwrap(), schema());
    }
}
