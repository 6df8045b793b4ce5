//! Names in the `/torch_cache` container: groups, datasets, attributes and format strings, each
//! spelled once.

/// The v2 cache group.
pub const TORCH_CACHE: &str = "torch_cache";
/// The legacy v1 derivative group at the root.
pub const LEGACY_DERIVATIVES: &str = "force_derivatives";
/// The feature section inside `/torch_cache`.
pub const FEATURES: &str = "features";
/// The derivative section inside `/torch_cache`.
pub const DERIVATIVES: &str = "force_derivatives";
/// A section's compound index table.
pub const INDEX: &str = "index";
/// The feature rows.
pub const VALUES: &str = "values";
/// aenet's descriptor manifest group at the root (attributes only).
pub const DESCRIPTOR_MANIFEST: &str = "descriptor_manifest";
/// stowage's row checksums inside `/torch_cache`: a group aenet never reads.
pub const CHECKSUMS: &str = "stowage_checksums";
/// The subgroups of a derivative section.
pub const DERIVATIVE_SUBGROUPS: [&str; 2] = ["radial", "angular"];

/// `cache_format` of v2.
pub const CACHE_FORMAT_V2: &str = "aenet.torch_training.cache.v2";
/// `payload_format` of a derivative section.
pub const DERIVATIVE_PAYLOAD_FORMAT: &str = "aenet.torch_training.local_derivatives.v1";
/// `schema_version` of the v2 root.
pub const CACHE_SCHEMA_VERSION: i64 = 2;
/// `schema_version` of a derivative section (and of legacy v1 files).
pub const DERIVATIVE_SCHEMA_VERSION: i64 = 1;
/// `manifest_format` of `/descriptor_manifest`.
pub const MANIFEST_FORMAT: &str = "aenet.torch_training.descriptor_manifest.v1";
/// `schema_version` of `/descriptor_manifest`.
pub const MANIFEST_SCHEMA_VERSION: i64 = 1;
/// `checksum_format` of [`CHECKSUMS`]: one xxh3-64 per index row (see `README.md`).
pub const CHECKSUM_FORMAT: &str = "stowage.hdf5.aenet_row_checksums.v1";

/// Attribute names.
pub mod attr {
    /// Root and derivative section.
    pub const SCHEMA_VERSION: &str = "schema_version";
    /// Root.
    pub const CACHE_FORMAT: &str = "cache_format";
    /// Root and derivative section.
    pub const COMPAT_JSON: &str = "descriptor_compat_json";
    /// Root and derivative section.
    pub const COMPAT_SHA256: &str = "descriptor_compat_sha256";
    /// Root and derivative section.
    pub const STORAGE_DTYPE: &str = "storage_dtype";
    /// Root (whether the feature section exists) and derivative section (always false).
    pub const CONTAINS_FEATURES: &str = "contains_features";
    /// Root.
    pub const CONTAINS_DERIVATIVES: &str = "contains_force_derivatives";
    /// Derivative section.
    pub const PAYLOAD_FORMAT: &str = "payload_format";
    /// Derivative section.
    pub const N_RADIAL_FEATURES: &str = "n_radial_features";
    /// Derivative section.
    pub const N_ANGULAR_FEATURES: &str = "n_angular_features";
    /// Derivative section.
    pub const MULTI: &str = "multi";
    /// Derivative section (always false).
    pub const CONTAINS_POSITIONS: &str = "contains_positions";
    /// Descriptor manifest.
    pub const MANIFEST_FORMAT: &str = "manifest_format";
    /// Descriptor manifest.
    pub const DESCRIPTOR_CLASS: &str = "descriptor_class";
    /// Descriptor manifest: canonical JSON of the descriptor's constructor-style config.
    pub const CONFIG_JSON: &str = "config_json";
    /// Descriptor manifest: lowercase hex SHA-256 of `config_json`.
    pub const CONFIG_SHA256: &str = "config_sha256";
    /// stowage's checksum group.
    pub const CHECKSUM_FORMAT: &str = "checksum_format";
}

/// The 11 derivative datasets, as `group/name`, in the order of
/// [`crate::LocalDerivatives`]' fields.
pub const DERIVATIVE_ARRAYS: [&str; 11] = [
    "radial/center_idx",
    "radial/neighbor_idx",
    "radial/dG_drij",
    "radial/neighbor_typespin",
    "angular/center_idx",
    "angular/neighbor_j_idx",
    "angular/neighbor_k_idx",
    "angular/grads_i",
    "angular/grads_j",
    "angular/grads_k",
    "angular/triplet_typespin",
];

/// Rows per chunk of a variable-length dataset (PyTables' choice: 8192 16-byte heap references).
pub const VLEN_CHUNK_ROWS: usize = 8192;
/// Rows per chunk of an index table (PyTables' choice for 24-byte rows: 64 KiB chunks).
pub const INDEX_CHUNK_ROWS: usize = 2730;
/// Deflate level of every dataset, as aenet writes.
pub const DEFLATE_LEVEL: u8 = 5;
