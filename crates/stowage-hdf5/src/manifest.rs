//! aenet's `/descriptor_manifest`: the descriptor configuration a dataset file records, which
//! aenet uses to rebuild the descriptor when a file is loaded without one (`descriptor=None`) and
//! checks an explicit descriptor against when the file is opened.
//!
//! aenet-python (`descriptor_manifest.py`, `hdf5_dataset.py` at eb2bca7) writes it as a group
//! with five attributes: `schema_version` (1), `manifest_format`, `descriptor_class`,
//! `config_json` (`json.dumps(config, sort_keys=True, separators=(",", ":"))` of the descriptor's
//! `species, rad_order, rad_cutoff, ang_order, ang_cutoff, min_cutoff, dtype, device, n_features`)
//! and `config_sha256`. On open it parses `config_json`, checks the version and the format, and
//! compares the descriptor's compatibility signature with the one the config gives
//! (`descriptor_compat_signature_from_config`): a mismatch is "Persisted descriptor manifest is
//! incompatible with the explicit descriptor configuration". A `/torch_cache` whose signature
//! contradicts the manifest is therefore unusable: with the manifest's descriptor the cache is
//! refused, with the cache's the file is.

use std::path::Path;

use serde_json::Value;
use stowage_core::{Error, Result};
use stowage_fingerprint::canonical_json::{PyJsonOptions, PyValue, sha256_hex, to_python_json};

use crate::attributes::Attributes;
use crate::compat::{DescriptorCompat, StorageDtype};
use crate::error::{read_error, write_error};
use crate::ffi;
use crate::layout::{self, attr};

/// The descriptor a cache is written for, as aenet records it in `/descriptor_manifest`: the
/// compatibility settings plus the runtime placement aenet stores beside them (dtype, device) and
/// the feature count.
///
/// ```
/// use stowage_hdf5::{DescriptorCompat, DescriptorConfig, StorageDtype};
/// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
/// let config = DescriptorConfig::new(&compat, StorageDtype::Float64);
/// assert_eq!((config.device.as_str(), config.n_features), ("cpu", 6));
/// assert_eq!(
///     config.config_json(),
///     r#"{"ang_cutoff":2.0,"ang_order":0,"device":"cpu","dtype":"float64","min_cutoff":0.1,"n_features":6,"rad_cutoff":2.0,"rad_order":1,"species":["A","B"]}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DescriptorConfig {
    /// The settings that decide the payloads (species, orders, cutoffs, class).
    pub compat: DescriptorCompat,
    /// The descriptor's dtype (`config["dtype"]`); aenet stores cache payloads in it.
    pub dtype: StorageDtype,
    /// The descriptor's device as aenet prints it (`str(descriptor.device)`: `cpu`, `cuda:0`).
    pub device: String,
    /// Features per atom (`descriptor.get_n_features()`).
    pub n_features: usize,
}

impl DescriptorConfig {
    /// The config of aenet's `ChebyshevDescriptor` with `compat`'s settings and `dtype`, on the
    /// CPU (its default device), with its feature count: `2·(rad_order + 1 + ang_order + 1)`
    /// with more than one species, else `rad_order + 1 + ang_order + 1`. For another descriptor
    /// class, set [`DescriptorConfig::n_features`] to its own count.
    pub fn new(compat: &DescriptorCompat, dtype: StorageDtype) -> DescriptorConfig {
        let per_set = compat.n_radial_features() + compat.n_angular_features();
        DescriptorConfig {
            compat: compat.clone(),
            dtype,
            device: "cpu".to_owned(),
            n_features: if compat.multi() { 2 * per_set } else { per_set },
        }
    }

    /// `config_json`: aenet's `descriptor_config_from_object` as canonical JSON.
    pub fn config_json(&self) -> String {
        let c = &self.compat;
        let value = PyValue::Dict(vec![
            ("ang_cutoff".into(), PyValue::Float(c.ang_cutoff)),
            ("ang_order".into(), PyValue::Int(c.ang_order.into())),
            ("device".into(), PyValue::Str(self.device.clone())),
            ("dtype".into(), PyValue::Str(self.dtype.name().to_owned())),
            ("min_cutoff".into(), PyValue::Float(c.min_cutoff)),
            ("n_features".into(), PyValue::Int(self.n_features as i128)),
            ("rad_cutoff".into(), PyValue::Float(c.rad_cutoff)),
            ("rad_order".into(), PyValue::Int(c.rad_order.into())),
            (
                "species".into(),
                PyValue::List(c.species.iter().cloned().map(PyValue::Str).collect()),
            ),
        ]);
        to_python_json(&value, &PyJsonOptions::aenet_compat())
    }

    /// `config_sha256`: lowercase hex SHA-256 of [`DescriptorConfig::config_json`].
    pub fn config_sha256(&self) -> String {
        sha256_hex(&self.config_json())
    }
}

/// A `/descriptor_manifest` as stored in a dataset file.
///
/// ```
/// use stowage_hdf5::{DescriptorCompat, DescriptorConfig, DescriptorManifest, StorageDtype};
/// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
/// let manifest = DescriptorManifest::of(&DescriptorConfig::new(&compat, StorageDtype::Float32));
/// assert_eq!(manifest.schema_version, 1);
/// assert_eq!(manifest.signature().unwrap(), compat);
/// manifest.check_matches(std::path::Path::new("dataset.h5"), &compat).unwrap();
/// let mut other = compat.clone();
/// other.rad_cutoff = 3.0;
/// let refused = manifest.check_matches(std::path::Path::new("dataset.h5"), &other).unwrap_err();
/// assert!(refused.to_string().contains("Persisted descriptor manifest is incompatible"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorManifest {
    /// `schema_version` (aenet supports 1).
    pub schema_version: i64,
    /// `manifest_format`.
    pub manifest_format: String,
    /// `descriptor_class`.
    pub descriptor_class: String,
    /// `config_json`.
    pub config_json: String,
    /// `config_sha256` (aenet writes it and never checks it).
    pub config_sha256: String,
}

impl DescriptorManifest {
    /// The manifest aenet writes for a descriptor with `config`.
    pub fn of(config: &DescriptorConfig) -> DescriptorManifest {
        DescriptorManifest {
            schema_version: layout::MANIFEST_SCHEMA_VERSION,
            manifest_format: layout::MANIFEST_FORMAT.to_owned(),
            descriptor_class: config.compat.descriptor_class.clone(),
            config_json: config.config_json(),
            config_sha256: config.config_sha256(),
        }
    }

    /// The manifest of the HDF5 file at `path`, or `None` when it has none.
    ///
    /// Errors: `Error::NotFound` when the file does not exist; `Error::Corrupted` naming the
    /// file when it or the manifest's attributes cannot be read.
    pub fn read(path: impl AsRef<Path>) -> Result<Option<DescriptorManifest>> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::NotFound { what: format!("HDF5 file {}", path.display()) });
        }
        let file = hdf5::File::open(path).map_err(|e| read_error(path, "opening", e))?;
        Self::read_from(path, &file)
    }

    /// The manifest of the open `file` (at `path`, for errors).
    pub(crate) fn read_from(path: &Path, file: &hdf5::File) -> Result<Option<DescriptorManifest>> {
        if !file.link_exists(layout::DESCRIPTOR_MANIFEST) {
            return Ok(None);
        }
        let group = file
            .group(layout::DESCRIPTOR_MANIFEST)
            .map_err(|e| read_error(path, "/descriptor_manifest", e))?;
        let attributes = Attributes { file: path, object: &group };
        Ok(Some(DescriptorManifest {
            schema_version: attributes.int(attr::SCHEMA_VERSION)?,
            manifest_format: attributes.text(attr::MANIFEST_FORMAT)?,
            descriptor_class: attributes.text(attr::DESCRIPTOR_CLASS)?,
            config_json: attributes.text(attr::CONFIG_JSON)?,
            config_sha256: attributes.text(attr::CONFIG_SHA256)?,
        }))
    }

    /// Writes the manifest as aenet does (a group, five attributes in PyTables' encodings) into
    /// `file` (at `path`, for errors), which has none.
    pub(crate) fn write_to(&self, path: &Path, file: &hdf5::File) -> Result<()> {
        let group = file
            .create_group(layout::DESCRIPTOR_MANIFEST)
            .map_err(|e| write_error(path, "creating /descriptor_manifest", e))?;
        let id = group.id();
        ffi::write_i64_attribute(id, attr::SCHEMA_VERSION, self.schema_version)
            .and_then(|()| {
                ffi::write_utf8_attribute(id, attr::MANIFEST_FORMAT, &self.manifest_format)
            })
            .and_then(|()| {
                ffi::write_utf8_attribute(id, attr::DESCRIPTOR_CLASS, &self.descriptor_class)
            })
            .and_then(|()| ffi::write_utf8_attribute(id, attr::CONFIG_JSON, &self.config_json))
            .and_then(|()| ffi::write_utf8_attribute(id, attr::CONFIG_SHA256, &self.config_sha256))
            .map_err(|e| write_error(path, "/descriptor_manifest attributes", e))
    }

    /// The compatibility signature aenet derives from the manifest
    /// (`descriptor_compat_signature_from_config` over the parsed `config_json`, with its
    /// defaults for absent keys), after aenet's own checks of the JSON, the version and the
    /// format. `Err` says, in aenet's words where it has them, why aenet would refuse the
    /// manifest or why no stowage descriptor can match it.
    pub fn signature(&self) -> std::result::Result<DescriptorCompat, String> {
        let config: Value = serde_json::from_str(&self.config_json).map_err(|_| {
            "Invalid persisted descriptor manifest: malformed JSON configuration".to_owned()
        })?;
        if self.schema_version != layout::MANIFEST_SCHEMA_VERSION {
            return Err(format!(
                "Unsupported descriptor manifest schema version {}; expected {}",
                self.schema_version,
                layout::MANIFEST_SCHEMA_VERSION
            ));
        }
        if self.manifest_format != layout::MANIFEST_FORMAT {
            return Err(format!(
                "Unsupported descriptor manifest format '{}'; expected '{}'",
                self.manifest_format,
                layout::MANIFEST_FORMAT
            ));
        }
        let Value::Object(config) = config else {
            return Err(format!("config_json is not a JSON object: {}", self.config_json));
        };
        let get = |key: &str| config.get(key);
        let order = |key: &str| -> std::result::Result<u32, String> {
            let value = get(key).map_or(Some(0), python_int);
            value
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| format!("config {key} {:?} is not an order aenet can use", get(key)))
        };
        let cutoff = |key: &str| -> std::result::Result<f64, String> {
            get(key).map_or(Some(0.0), python_float).ok_or_else(|| {
                format!("config {key} {:?} is not a number aenet can read", get(key))
            })
        };
        Ok(DescriptorCompat {
            descriptor_class: self.descriptor_class.clone(),
            species: get("species").map_or(Ok(Vec::new()), python_species)?,
            rad_order: order("rad_order")?,
            rad_cutoff: cutoff("rad_cutoff")?,
            ang_order: order("ang_order")?,
            ang_cutoff: cutoff("ang_cutoff")?,
            min_cutoff: cutoff("min_cutoff")?,
        })
    }

    /// Whether aenet accepts a descriptor with `compat`'s settings for this manifest
    /// (`descriptor_matches_manifest`: the two signatures compared as Python dicts, so floats by
    /// value). `path` names the file in the error.
    ///
    /// Errors: `Error::Incompatible` naming the file, starting with aenet's message, and giving
    /// both signatures (or why the manifest cannot be used at all).
    pub fn check_matches(&self, path: &Path, compat: &DescriptorCompat) -> Result<()> {
        let stored = self.signature().map_err(|reason| Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "/descriptor_manifest cannot be checked against the descriptor {}: {reason} \
                 (config_json {})",
                compat.json(),
                self.config_json
            ),
        })?;
        if &stored == compat {
            return Ok(());
        }
        Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "Persisted descriptor manifest is incompatible with the explicit descriptor \
                 configuration: /descriptor_manifest describes {} (config_json {}), the \
                 descriptor is {}",
                stored.json(),
                self.config_json,
                compat.json()
            ),
        })
    }
}

/// Python's `int(value)` for a JSON value, where it gives an `i64`.
fn python_int(value: &Value) -> Option<i64> {
    match value {
        Value::Bool(flag) => Some(i64::from(*flag)),
        Value::Number(n) => n.as_i64().or_else(|| {
            let float = n.as_f64()?;
            (float.is_finite() && float.trunc().abs() < 9.2e18).then(|| float.trunc() as i64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// Python's `float(value)` for a JSON value.
fn python_float(value: &Value) -> Option<f64> {
    match value {
        Value::Bool(flag) => Some(f64::from(u8::from(*flag))),
        Value::Number(n) => n.as_f64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

/// Python's `list(value)` for the species, where every element is a string (a descriptor's
/// species always are, so anything else can never match).
fn python_species(value: &Value) -> std::result::Result<Vec<String>, String> {
    match value {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("config species holds {other}, not a symbol")),
            })
            .collect(),
        Value::String(text) => Ok(text.chars().map(String::from).collect()),
        other => Err(format!("config species {other} is not a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::CHEBYSHEV_DESCRIPTOR;

    fn manifest(config_json: &str) -> DescriptorManifest {
        DescriptorManifest {
            schema_version: 1,
            manifest_format: layout::MANIFEST_FORMAT.into(),
            descriptor_class: CHEBYSHEV_DESCRIPTOR.into(),
            config_json: config_json.into(),
            config_sha256: sha256_hex(config_json),
        }
    }

    #[test]
    fn the_signature_follows_aenets_reading_of_the_config() {
        let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
        // aenet's own manifest (reference set v2_both_f64.h5), byte for byte.
        let written =
            DescriptorManifest::of(&DescriptorConfig::new(&compat, StorageDtype::Float64));
        assert_eq!(
            written.config_sha256,
            "de323dd2480514b34a52ac8b8d56777aa1856fdc64a0b16a23fdfbfb3b392217"
        );
        assert_eq!(written.signature().unwrap(), compat);
        // int() and float() of what json.loads gives: 1.0 -> 1, "2" -> 2.0, absent -> defaults.
        let loose = manifest(
            r#"{"species":["A","B"],"rad_order":1.0,"rad_cutoff":"2","ang_cutoff":2,"min_cutoff":0.1}"#,
        );
        assert_eq!(loose.signature().unwrap(), compat);
        let single = manifest(r#"{"species":"A"}"#).signature().unwrap();
        assert_eq!(single.species, vec!["A".to_owned()]);
        assert_eq!((single.rad_order, single.min_cutoff), (0, 0.0));
        for (bad, reason) in [
            ("{", "malformed JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"rad_order":-1}"#, "rad_order"),
            (r#"{"species":[1]}"#, "not a symbol"),
            (r#"{"rad_cutoff":null}"#, "rad_cutoff"),
        ] {
            let error = manifest(bad).signature().unwrap_err();
            assert!(error.contains(reason), "{bad}: {error}");
        }
        let mut version = written.clone();
        version.schema_version = 2;
        assert!(version.signature().unwrap_err().contains("schema version 2; expected 1"));
        let mut format = written;
        format.manifest_format = "x".into();
        assert!(format.signature().unwrap_err().contains("format 'x'"));
    }
}
