//! Schemas as plain Python dicts, both ways.
//!
//! A field is written as `("float32", [512])` (fixed shape), `("float32", [None, 3])` (ragged
//! leading dimension), `("float32", None)` (any shape), a dict (`{"dtype": "int64", "max_shape":
//! [128], "nullable": True}`), `"bytes"` or `"json"`. [`to_dict`] gives every field as a dict.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use stowage_core::{DType, FieldKind, FieldSpec, Schema, ShapeRule};

use crate::errors;

/// The schema a Python dict describes. Errors name the field and what was wrong with it.
pub fn from_dict(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let schema = schema.cast::<PyDict>().map_err(|_| {
        errors::invalid(
            py,
            "schema must be a dict of field name -> spec, e.g. {\"x\": (\"float32\", [512])}",
        )
    })?;
    if schema.is_empty() {
        return Err(errors::invalid(py, "schema has no fields"));
    }
    let mut fields = Vec::with_capacity(schema.len());
    for (name, spec) in schema.iter() {
        let name: String = name.extract().map_err(|_| {
            errors::invalid(py, format!("schema field names must be str, got {name:?}"))
        })?;
        let (kind, nullable) = field_from(py, &name, &spec)?;
        fields.push(FieldSpec { name, kind, nullable });
    }
    Ok(Schema { fields })
}

fn field_from(py: Python<'_>, name: &str, spec: &Bound<'_, PyAny>) -> PyResult<(FieldKind, bool)> {
    let bad = |what: String| errors::invalid(py, format!("schema field {name:?}: {what}"));
    if let Ok(text) = spec.cast::<PyString>() {
        return match text.to_cow()?.as_ref() {
            "bytes" => Ok((FieldKind::Bytes, false)),
            "json" => Ok((FieldKind::Json { deduplicate: false }, false)),
            other => Err(bad(format!(
                "{other:?} is not a field kind: write (dtype, shape), a dict, \"bytes\" or \"json\""
            ))),
        };
    }
    if let Ok(tuple) = spec.cast::<PyTuple>() {
        if tuple.len() != 2 {
            return Err(bad(format!("a tuple spec is (dtype, shape), got {} items", tuple.len())));
        }
        let dtype = dtype_from(py, name, &tuple.get_item(0)?)?;
        let shape = rule_from(py, name, &tuple.get_item(1)?, false)?;
        return Ok((FieldKind::Tensor { dtype, shape }, false));
    }
    let Ok(dict) = spec.cast::<PyDict>() else {
        return Err(bad(format!(
            "expected (dtype, shape), a dict, \"bytes\" or \"json\", got {spec:?}"
        )));
    };
    const KEYS: [&str; 6] = ["kind", "dtype", "shape", "max_shape", "nullable", "deduplicate"];
    for key in dict.keys() {
        let key: String = key.extract()?;
        if !KEYS.contains(&key.as_str()) {
            return Err(bad(format!("unknown key {key:?} (the keys are {})", KEYS.join(", "))));
        }
    }
    let nullable = match dict.get_item("nullable")? {
        Some(flag) => {
            flag.extract::<bool>().map_err(|_| bad("nullable must be True or False".into()))?
        }
        None => false,
    };
    let kind = match dict.get_item("kind")? {
        Some(kind) => Some(kind.extract::<String>().map_err(|_| bad("kind must be a str".into()))?),
        None => None,
    };
    match kind.as_deref() {
        Some("bytes") => return Ok((FieldKind::Bytes, nullable)),
        Some("json") => {
            let deduplicate = match dict.get_item("deduplicate")? {
                Some(flag) => flag.extract::<bool>()?,
                None => false,
            };
            return Ok((FieldKind::Json { deduplicate }, nullable));
        }
        Some("tensor") | None => {}
        Some(other) => return Err(bad(format!("kind {other:?} is not tensor, bytes or json"))),
    }
    let dtype = match dict.get_item("dtype")? {
        Some(dtype) => dtype_from(py, name, &dtype)?,
        None => return Err(bad("a tensor field needs a \"dtype\"".into())),
    };
    let shape = match (dict.get_item("shape")?, dict.get_item("max_shape")?) {
        (Some(_), Some(_)) => return Err(bad("give \"shape\" or \"max_shape\", not both".into())),
        (Some(shape), None) => rule_from(py, name, &shape, false)?,
        (None, Some(max)) => rule_from(py, name, &max, true)?,
        (None, None) => ShapeRule::Any,
    };
    Ok((FieldKind::Tensor { dtype, shape }, nullable))
}

fn dtype_from(py: Python<'_>, name: &str, dtype: &Bound<'_, PyAny>) -> PyResult<DType> {
    // A numpy dtype or type (np.float32) is taken by its name; bfloat16 only by name.
    let text = match dtype.extract::<String>() {
        Ok(text) => text,
        Err(_) => match PyModule::import(py, "numpy")?.getattr("dtype")?.call1((dtype,)) {
            Ok(descr) => descr.getattr("name")?.extract::<String>()?,
            Err(_) => String::new(),
        },
    };
    DType::from_name(&text).map_err(|_| {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        errors::invalid(
            py,
            format!("schema field {name:?}: dtype {dtype} is not one of {}", names.join(", ")),
        )
    })
}

fn rule_from(
    py: Python<'_>,
    name: &str,
    shape: &Bound<'_, PyAny>,
    max: bool,
) -> PyResult<ShapeRule> {
    if shape.is_none() {
        return Ok(ShapeRule::Any);
    }
    let bad = || {
        errors::invalid(
            py,
            format!(
                "schema field {name:?}: shape {shape} must be None or a list of dimensions (ints, \
                 or None for a ragged leading one)"
            ),
        )
    };
    let dims: Vec<Option<usize>> = shape.extract().map_err(|_| bad())?;
    if max {
        let dims: Option<Vec<usize>> = dims.into_iter().collect();
        return dims.map(ShapeRule::Max).ok_or_else(bad);
    }
    match dims.split_first() {
        Some((None, rest)) => {
            let rest: Option<Vec<usize>> = rest.iter().copied().collect();
            rest.map(ShapeRule::RaggedLeading).ok_or_else(bad)
        }
        _ => {
            let dims: Option<Vec<usize>> = dims.into_iter().collect();
            dims.map(ShapeRule::Fixed).ok_or_else(bad)
        }
    }
}

/// The schema as a dict: field name -> `{"kind": "tensor", "dtype": ..., "rule": ..., "shape":
/// ..., "nullable": ...}`, `{"kind": "bytes", ...}` or `{"kind": "json", ...}`, in order.
pub fn to_dict<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for field in &schema.fields {
        let spec = PyDict::new(py);
        match &field.kind {
            FieldKind::Tensor { dtype, shape } => {
                spec.set_item("kind", "tensor")?;
                spec.set_item("dtype", dtype.name())?;
                let (rule, dims): (&str, Option<Vec<Option<usize>>>) = match shape {
                    ShapeRule::Fixed(d) => ("fixed", Some(d.iter().map(|&d| Some(d)).collect())),
                    ShapeRule::Max(d) => ("max", Some(d.iter().map(|&d| Some(d)).collect())),
                    ShapeRule::RaggedLeading(d) => (
                        "ragged_leading",
                        Some(std::iter::once(None).chain(d.iter().map(|&d| Some(d))).collect()),
                    ),
                    ShapeRule::Any => ("any", None),
                };
                spec.set_item("rule", rule)?;
                match dims {
                    Some(dims) => spec.set_item("shape", PyList::new(py, dims)?)?,
                    None => spec.set_item("shape", py.None())?,
                }
            }
            FieldKind::Bytes => spec.set_item("kind", "bytes")?,
            FieldKind::Json { deduplicate } => {
                spec.set_item("kind", "json")?;
                spec.set_item("deduplicate", *deduplicate)?;
            }
        }
        spec.set_item("nullable", field.nullable)?;
        dict.set_item(&field.name, spec)?;
    }
    Ok(dict)
}
