//! What a backend can do, as plain data that the conformance suite checks in both directions.

use crate::{DType, Error, FieldKind, Result, Schema, ShapeRule};

/// The features a backend declares. A declared capability must work; an undeclared one must return
/// [`Error::Unsupported`]. The conformance suite checks both.
///
/// Capabilities are opt-in: start from [`Capabilities::none`] and switch on what the backend
/// supports. The struct is `#[non_exhaustive]`, so a capability added to the core later is off for
/// a backend that says nothing about it.
///
/// ```
/// use stowage_core::{Capabilities, DType, Schema, ShapeRule};
/// let mut caps = Capabilities::none();
/// caps.dtypes = vec![DType::F32];
/// caps.checksums = true;
/// assert!(caps.check_schema(&Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4])), "demo").is_ok());
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![4]));
/// assert!(caps.check_schema(&schema, "demo").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Tensor fields with [`ShapeRule::Max`] (same rank, each dimension up to a maximum).
    pub variable_shapes: bool,
    /// Tensor fields with [`ShapeRule::RaggedLeading`] or [`ShapeRule::Any`].
    pub ragged: bool,
    /// Nullable fields.
    pub nullable: bool,
    /// [`FieldKind::Bytes`] fields.
    pub bytes_fields: bool,
    /// [`FieldKind::Json`] fields.
    pub json_fields: bool,
    /// `put` of a key that already exists replaces its value (otherwise `Error::Unsupported`).
    pub overwrite: bool,
    /// `put` after `finalize` on a cache opened in append mode.
    pub append_after_finalize: bool,
    /// An unfinished cache (never finalized) can be reopened in append mode and written further.
    pub resume: bool,
    /// `flush` and `finalize` make their data durable (fsync): after they return, neither
    /// `kill -9` nor a power loss loses it. Without it, `Ok` only means the data reached the
    /// operating system: it survives `kill -9`, not a power cut (a backend's opt-out for speed,
    /// such as stowage-arrow's `durable: false`).
    pub durable_flush: bool,
    /// Every sample's bytes are checksummed; `get` and `validate` detect corruption.
    pub checksums: bool,
    /// `get` can return tensors that share a memory map instead of copying.
    pub zero_copy_get: bool,
    /// Several threads (and processes) may read one cache at once.
    pub concurrent_readers: bool,
    /// Several handles, in one process or many, may write one cache at once: `create` and
    /// `open(Append)` take no writer lock, and every put each of them flushed is kept (for
    /// backends on object stores, where each writer is its own rank and conditional puts keep
    /// them apart). Without it, a second writer is refused with `Error::Locked`.
    pub concurrent_writers: bool,
    /// The dtypes tensor fields may have.
    pub dtypes: Vec<DType>,
    /// Largest tensor rank, if limited.
    pub max_rank: Option<usize>,
    /// Longest key in bytes, if limited.
    pub max_key_bytes: Option<usize>,
    /// Most tensor fields per sample, if limited.
    pub max_fields: Option<usize>,
}

impl Capabilities {
    /// A backend that supports nothing beyond the basics every backend has (fixed-shape,
    /// non-nullable tensor fields of no dtype yet): the starting point every backend switches its
    /// capabilities on from.
    ///
    /// The limits (`max_rank`, `max_key_bytes`, `max_fields`) start unset (no limit); a backend
    /// with a limit sets it.
    pub fn none() -> Capabilities {
        Capabilities::default()
    }

    /// Checks that every field of `schema` is within these capabilities; otherwise returns
    /// [`Error::Unsupported`] naming the field and the missing capability.
    pub fn check_schema(&self, schema: &Schema, backend: &'static str) -> Result<()> {
        if let Some(max) = self.max_fields
            && schema.fields.len() > max
        {
            return Err(Error::unsupported(
                backend,
                format!("{} fields (at most {max})", schema.fields.len()),
            ));
        }
        for field in &schema.fields {
            let refuse = |what: String| {
                Err(Error::unsupported(backend, format!("field {:?}: {what}", field.name)))
            };
            if field.nullable && !self.nullable {
                return refuse("nullable fields".into());
            }
            match &field.kind {
                FieldKind::Bytes if !self.bytes_fields => return refuse("bytes fields".into()),
                FieldKind::Json { .. } if !self.json_fields => return refuse("JSON fields".into()),
                FieldKind::Tensor { dtype, shape } => {
                    if !self.dtypes.contains(dtype) {
                        return refuse(format!("dtype {dtype}"));
                    }
                    match shape {
                        ShapeRule::Max(_) if !self.variable_shapes => {
                            return refuse("variable (max) shapes".into());
                        }
                        ShapeRule::RaggedLeading(_) | ShapeRule::Any if !self.ragged => {
                            return refuse("ragged shapes".into());
                        }
                        _ => {}
                    }
                    if let (Some(max), Some(rank)) = (self.max_rank, shape.rank())
                        && rank > max
                    {
                        return refuse(format!("rank {rank} (at most {max})"));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks a key against [`Capabilities::max_key_bytes`] and rejects the empty key.
    pub fn check_key(&self, key: &str, backend: &'static str) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid("the empty string is not a valid key"));
        }
        if let Some(max) = self.max_key_bytes
            && key.len() > max
        {
            return Err(Error::unsupported(
                backend,
                format!("key of {} bytes (at most {max})", key.len()),
            ));
        }
        Ok(())
    }
}
