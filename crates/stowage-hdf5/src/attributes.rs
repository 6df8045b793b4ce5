//! Typed reads of the cache's attributes, with errors naming the file, the object, the attribute
//! and both sides of a mismatch.

use std::path::Path;

use stowage_core::{Error, Result};

use crate::error::read_error;
use crate::ffi::{self, AttributeValue};

/// Reads the attributes of one object (a group) of one file.
pub(crate) struct Attributes<'a> {
    pub file: &'a Path,
    pub object: &'a hdf5::Location,
}

impl Attributes<'_> {
    fn get(&self, name: &str) -> Result<AttributeValue> {
        let where_ = || format!("{} attribute {name}", self.object.name());
        ffi::read_attribute(self.object.id(), name)
            .map_err(|e| read_error(self.file, &where_(), e))?
            .ok_or_else(|| Error::corrupted(self.file, format!("{} is missing", where_())))
    }

    fn mismatch(&self, name: &str, want: &str, got: &AttributeValue) -> Error {
        Error::corrupted(
            self.file,
            format!(
                "{} attribute {name} is {} ({got:?}), expected {want}",
                self.object.name(),
                got.kind()
            ),
        )
    }

    /// A string attribute.
    pub fn text(&self, name: &str) -> Result<String> {
        match self.get(name)? {
            AttributeValue::Text(text) => Ok(text),
            other => Err(self.mismatch(name, "a string", &other)),
        }
    }

    /// A bool attribute (bitfield or enum; an integer 0/1 is accepted too).
    pub fn flag(&self, name: &str) -> Result<bool> {
        match self.get(name)? {
            AttributeValue::Bool(flag) => Ok(flag),
            AttributeValue::Int(int @ (0 | 1)) => Ok(int == 1),
            other => Err(self.mismatch(name, "a bool", &other)),
        }
    }

    /// An integer attribute (in any form, as Python's `int(...)` would read it).
    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name)? {
            AttributeValue::Int(int) => Ok(int),
            other => Err(self.mismatch(name, "an integer", &other)),
        }
    }
}
