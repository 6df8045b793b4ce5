//! The descriptor compatibility signature aenet stores with a cache: which descriptor settings the
//! payloads depend on, as Python's canonical JSON and its SHA-256.

use stowage_core::{DType, Error, Result};
use stowage_fingerprint::canonical_json::{PyJsonOptions, PyValue, sha256_hex, to_python_json};

/// The descriptor settings that change stored payloads (dtype and device excluded: a cache
/// written as float64 loads through a float32 descriptor with values cast, and vice versa).
///
/// ```
/// use stowage_hdf5::DescriptorCompat;
/// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
/// assert_eq!(
///     compat.sha256(),
///     "d644760cab4bc4ef580db1c81bb1381414c56a602276e0ebd4cd04f10f28e50d"
/// );
/// assert_eq!((compat.n_radial_features(), compat.n_angular_features()), (2, 1));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DescriptorCompat {
    /// The descriptor's Python class path.
    pub descriptor_class: String,
    /// Species symbols, in descriptor order.
    pub species: Vec<String>,
    /// Radial expansion order (`n_radial_features = rad_order + 1`).
    pub rad_order: u32,
    /// Radial cutoff.
    pub rad_cutoff: f64,
    /// Angular expansion order (`n_angular_features = ang_order + 1`).
    pub ang_order: u32,
    /// Angular cutoff.
    pub ang_cutoff: f64,
    /// Minimum cutoff.
    pub min_cutoff: f64,
}

/// aenet's Chebyshev descriptor class path.
pub const CHEBYSHEV_DESCRIPTOR: &str = "aenet.torch_featurize.featurize.ChebyshevDescriptor";

impl DescriptorCompat {
    /// The settings of aenet's `ChebyshevDescriptor`.
    pub fn chebyshev(
        species: &[&str],
        rad_order: u32,
        rad_cutoff: f64,
        ang_order: u32,
        ang_cutoff: f64,
        min_cutoff: f64,
    ) -> DescriptorCompat {
        DescriptorCompat {
            descriptor_class: CHEBYSHEV_DESCRIPTOR.to_owned(),
            species: species.iter().map(|s| (*s).to_owned()).collect(),
            rad_order,
            rad_cutoff,
            ang_order,
            ang_cutoff,
            min_cutoff,
        }
    }

    /// Whether there is more than one species (typespin arrays are stored then).
    pub fn multi(&self) -> bool {
        self.species.len() > 1
    }

    /// Radial features per edge in `dG_drij`: `rad_order + 1`.
    pub fn n_radial_features(&self) -> usize {
        self.rad_order as usize + 1
    }

    /// Angular features per triplet in `grads_*`: `ang_order + 1`.
    pub fn n_angular_features(&self) -> usize {
        self.ang_order as usize + 1
    }

    /// `descriptor_compat_json`: `json.dumps(compat, sort_keys=True, separators=(",", ":"))`.
    ///
    /// ```
    /// let compat = stowage_hdf5::DescriptorCompat::chebyshev(&["A"], 3, 4.0, 1, 1e-5, 0.5);
    /// assert_eq!(
    ///     compat.json(),
    ///     r#"{"ang_cutoff":1e-05,"ang_order":1,"descriptor_class":"aenet.torch_featurize.featurize.ChebyshevDescriptor","min_cutoff":0.5,"multi":false,"rad_cutoff":4.0,"rad_order":3,"species":["A"]}"#
    /// );
    /// ```
    pub fn json(&self) -> String {
        let value = PyValue::Dict(vec![
            ("ang_cutoff".into(), PyValue::Float(self.ang_cutoff)),
            ("ang_order".into(), PyValue::Int(self.ang_order.into())),
            ("descriptor_class".into(), PyValue::Str(self.descriptor_class.clone())),
            ("min_cutoff".into(), PyValue::Float(self.min_cutoff)),
            ("multi".into(), PyValue::Bool(self.multi())),
            ("rad_cutoff".into(), PyValue::Float(self.rad_cutoff)),
            ("rad_order".into(), PyValue::Int(self.rad_order.into())),
            (
                "species".into(),
                PyValue::List(self.species.iter().cloned().map(PyValue::Str).collect()),
            ),
        ]);
        to_python_json(&value, &PyJsonOptions::aenet_compat())
    }

    /// `descriptor_compat_sha256`: lowercase hex SHA-256 of [`DescriptorCompat::json`].
    pub fn sha256(&self) -> String {
        sha256_hex(&self.json())
    }
}

/// The float element type a cache stores (`storage_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageDtype {
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
}

impl StorageDtype {
    /// The attribute spelling, `float32` or `float64`.
    pub fn name(self) -> &'static str {
        match self {
            StorageDtype::Float32 => "float32",
            StorageDtype::Float64 => "float64",
        }
    }

    /// Parses the attribute spelling.
    ///
    /// ```
    /// use stowage_hdf5::StorageDtype;
    /// assert_eq!(StorageDtype::from_name("float32").unwrap(), StorageDtype::Float32);
    /// assert!(StorageDtype::from_name("float16").is_err());
    /// ```
    pub fn from_name(name: &str) -> Result<StorageDtype> {
        match name {
            "float32" => Ok(StorageDtype::Float32),
            "float64" => Ok(StorageDtype::Float64),
            other => Err(Error::invalid(format!(
                "storage_dtype {other:?} is neither \"float32\" nor \"float64\""
            ))),
        }
    }

    /// The stowage dtype.
    pub fn dtype(self) -> DType {
        match self {
            StorageDtype::Float32 => DType::F32,
            StorageDtype::Float64 => DType::F64,
        }
    }

    /// The storage dtype of a float32 or float64 stowage dtype.
    pub fn of(dtype: DType) -> Option<StorageDtype> {
        match dtype {
            DType::F32 => Some(StorageDtype::Float32),
            DType::F64 => Some(StorageDtype::Float64),
            _ => None,
        }
    }
}
