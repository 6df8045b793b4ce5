//! Samples: ordered named fields, each a tensor, opaque bytes, JSON text, or null.

use crate::Tensor;
use bytes::Bytes;
use std::sync::Arc;

/// The value of one field of a [`Sample`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An n-dimensional array.
    Tensor(Tensor),
    /// Opaque bytes (for example a pickled Python object).
    Bytes(Bytes),
    /// JSON text; schemas may deduplicate it across samples.
    Json(String),
    /// No value (only allowed for nullable fields).
    Null,
}

impl Value {
    /// The tensor, when this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// A short name of the variant for messages: `tensor`, `bytes`, `json`, `null`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Bytes(_) => "bytes",
            Value::Json(_) => "json",
            Value::Null => "null",
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

/// One cached item: named fields in insertion order.
///
/// Field names are `Arc<str>`, so a backend hands out samples whose names share its schema's
/// strings instead of allocating them per `get`.
///
/// ```
/// use stowage_core::{Sample, Tensor, Value};
/// let s = Sample::new()
///     .with("x", Tensor::from_slice(&[3], &[1.0f32, 2.0, 3.0]).unwrap())
///     .with("meta", Value::Json(r#"{"id": 7}"#.into()));
/// assert_eq!(s.len(), 2);
/// assert_eq!(s.tensor("x").unwrap().shape(), &[3]);
/// assert_eq!(s.field_names().collect::<Vec<_>>(), ["x", "meta"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    fields: Vec<(Arc<str>, Value)>,
}

impl Sample {
    /// An empty sample.
    pub fn new() -> Sample {
        Sample::default()
    }

    /// Builder form of [`Sample::insert`].
    pub fn with(mut self, name: impl Into<Arc<str>>, value: impl Into<Value>) -> Sample {
        self.insert(name, value);
        self
    }

    /// Sets field `name`, replacing an existing value in place (order kept) or appending a new field.
    pub fn insert(&mut self, name: impl Into<Arc<str>>, value: impl Into<Value>) {
        let name = name.into();
        let value = value.into();
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, slot)) => *slot = value,
            None => self.fields.push((name, value)),
        }
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }

    /// The tensor of field `name`, when that field is a tensor.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.get(name).and_then(Value::as_tensor)
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the sample has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The fields in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.fields.iter().map(|(n, v)| (&**n, v))
    }

    /// The field names in order.
    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(n, _)| &**n)
    }

    /// Consumes the sample, returning its fields.
    pub fn into_fields(self) -> Vec<(Arc<str>, Value)> {
        self.fields
    }
}

impl<N: Into<Arc<str>>> FromIterator<(N, Value)> for Sample {
    fn from_iter<I: IntoIterator<Item = (N, Value)>>(iter: I) -> Sample {
        let mut s = Sample::new();
        for (n, v) in iter {
            s.insert(n, v);
        }
        s
    }
}
