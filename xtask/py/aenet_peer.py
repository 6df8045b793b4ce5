#!/usr/bin/env python3
"""aenet's torch-cache read and append paths, for the mixed-writer tests of stowage-hdf5.

Reproduces aenet-python at git commit eb2bca7 (atomisticnet/aenet-python,
src/aenet/torch_training/hdf5_dataset.py and descriptor_manifest.py), with PyTables and numpy in
place of torch. Written from aenet's behaviour, not copied. Functions reproduced, by name:

- descriptor_manifest.py: descriptor_config_from_object, descriptor_compat_signature_from_config,
  descriptor_compat_signature_from_object, descriptor_manifest_from_object, dtype_from_str,
  descriptor_from_config / descriptor_from_manifest (descriptor recovery), and
  descriptor_matches_manifest.
- hdf5_dataset.py, module level: _descriptor_derivative_cache_metadata, _tables_float_atom,
  _tensor_to_numpy_1d, _build_force_derivative_payload, _read_energy_filter_metadata.
- HDF5StructureDataset: __init__(mode="load") -> _open_readonly (entry count from
  /entries/structures, force indices from /entries/meta, energy-filter metadata,
  _initialize_descriptor_manifest_state, _validate_descriptor_manifest,
  _reconcile_descriptor_manifest, _initialize_persisted_cache_state with
  _validate_torch_cache_schema, _initialize_feature_cache_state,
  _initialize_v2_force_derivative_cache_state, _initialize_legacy_force_derivative_cache_state);
  _require_descriptor, _validate_cache_descriptor_compatibility,
  _validate_feature_cache_compatibility, _validate_force_derivative_cache_compatibility;
  load_persisted_features; load_persisted_force_derivatives; _append_feature_cache_entry with
  _append_feature_cache_payload; _append_force_derivative_cache_entry with
  _append_force_derivative_cache_payload; _v2_force_derivative_node_paths,
  _legacy_force_derivative_node_paths; _create_descriptor_manifest_storage,
  _create_torch_cache_storage, _create_feature_cache_storage, _create_v2_force_derivative_storage,
  _create_force_derivative_storage_nodes.

Where it departs from aenet:
- numpy stands in for torch. The descriptor is a plain object built from a JSON config (species,
  rad_order, rad_cutoff, ang_order, ang_cutoff, min_cutoff, dtype "float32"/"float64", device,
  descriptor_class) with aenet's ChebyshevDescriptor attributes (species, orders, cutoffs, dtype,
  device, multi, get_n_features()); its class path is the config's descriptor_class (aenet takes
  type(descriptor).__module__ + __name__). A torch dtype prints as "torch.float64"; aenet strips
  "torch." everywhere it stores one, so the peer keeps "float64". `torch.from_numpy(x).to(dtype)`
  is `x.astype(dtype)`; `.to(torch.int64)` is `astype(np.int64)`.
- Descriptor recovery does not build a ChebyshevDescriptor: it checks the class as
  descriptor_from_config does and makes the peer's descriptor from the config with the same
  defaults and conversions (min_cutoff 0.55, dtype_from_str, cuda -> cpu without CUDA: the peer
  never has CUDA).
- `create` runs aenet's storage-creation functions on an existing dataset file opened in mode
  "a" (aenet calls them inside build_database on the new temporary file, right after creating
  /entries), so a test can start from aenet's own plain dataset file without aenet's featurizer.
- `append` opens the file the way the reference set's aenet step did: the dataset in mode
  "load" (aenet's open-time checks, and the derivative node layout), closed, then
  tables.open_file(mode="a") and the per-entry append functions, then close. aenet's own
  build_database calls the same *_payload functions on a new file.
- `load` asks for features and derivatives as HDF5StructureDataset.materialize_sample does:
  features only when the file has a feature cache (_load_runtime_or_persisted_features, without
  its runtime cache), derivatives only when it has a derivative cache.
- Node titles (PyTables' TITLE attributes) of the nodes `create` makes are not aenet's texts.
- Errors aenet raises (RuntimeError, tables errors) are reported in the JSON output instead of a
  traceback, with aenet's message text.

Usage: aenet_peer.py COMMAND FILE, a JSON request on stdin, one JSON object on stdout.

Arrays travel as {"dtype": "float64"|"float32"|"int64", "shape": [...], "hex": "<C-order
little-endian bytes>"}; a descriptor as the config above.

- load    {"descriptor": CONFIG or null, "entries": [E, ...]}
          -> {"n_entries", "force_indices", "manifest": {...} | null, "descriptor": CONFIG,
              "has_persisted_features", "has_persisted_force_derivatives",
              "features": {"E": ARRAY | null}, "derivatives": {"E": {"radial/center_idx": ARRAY
              | null, ...} | null}}
             or {"error": "<aenet's message>"} when aenet refuses the file or a load.
- append  {"descriptor": CONFIG, "features": [{"entry_idx", "n_atoms", "features": ARRAY}],
           "derivatives": [{"entry_idx", "n_atoms", "arrays": {"radial/center_idx": ARRAY | null,
           ...}}]}
          -> {"features": [cache_row, ...], "derivatives": [cache_row, ...]} or {"error": ...}
- create  {"descriptor": CONFIG, "features": bool, "derivatives": bool}
          -> {"created": [node paths]} or {"error": ...}
"""

import hashlib
import json
import sys

import numpy as np
import tables

DESCRIPTOR_MANIFEST_SCHEMA_VERSION = 1
DESCRIPTOR_MANIFEST_FORMAT = "aenet.torch_training.descriptor_manifest.v1"
CHEBYSHEV_DESCRIPTOR_CLASS = "aenet.torch_featurize.featurize.ChebyshevDescriptor"
TORCH_CACHE_SCHEMA_VERSION = 2
TORCH_CACHE_FORMAT = "aenet.torch_training.cache.v2"
FORCE_DERIVATIVE_SCHEMA_VERSION = 1
FORCE_DERIVATIVE_PAYLOAD_FORMAT = "aenet.torch_training.local_derivatives.v1"

NODE_STRUCTURES = "/entries/structures"
NODE_META = "/entries/meta"
GROUP_DESCRIPTOR_MANIFEST = "/descriptor_manifest"
GROUP_TORCH_CACHE = "/torch_cache"
NODE_CACHE_FEATURE_INDEX = "/torch_cache/features/index"
NODE_CACHE_FEATURE_VALUES = "/torch_cache/features/values"
GROUP_CACHE_FORCE_DERIVATIVES = "/torch_cache/force_derivatives"
GROUP_LEGACY_FORCE_DERIVATIVES = "/force_derivatives"

# The payload arrays: aenet's node_paths key, group, leaf, and whether it holds indices.
ARRAYS = [
    ("radial_center", "radial", "center_idx", True),
    ("radial_neighbor", "radial", "neighbor_idx", True),
    ("radial_grads", "radial", "dG_drij", False),
    ("radial_typespin", "radial", "neighbor_typespin", False),
    ("angular_center", "angular", "center_idx", True),
    ("angular_neighbor_j", "angular", "neighbor_j_idx", True),
    ("angular_neighbor_k", "angular", "neighbor_k_idx", True),
    ("angular_grads_i", "angular", "grads_i", False),
    ("angular_grads_j", "angular", "grads_j", False),
    ("angular_grads_k", "angular", "grads_k", False),
    ("angular_typespin", "angular", "triplet_typespin", False),
]


class AenetError(Exception):
    """What aenet raises (RuntimeError in aenet), with its message."""


class FeatureIndexRow(tables.IsDescription):
    """aenet's _FeatureIndexRow."""

    entry_idx = tables.Int64Col()
    cache_row = tables.Int64Col()
    n_atoms = tables.Int32Col()
    n_features = tables.Int32Col()


class ForceDerivativeIndexRow(tables.IsDescription):
    """aenet's _ForceDerivativeIndexRow."""

    entry_idx = tables.Int64Col()
    cache_row = tables.Int64Col()
    n_atoms = tables.Int32Col()
    n_radial_edges = tables.Int32Col()
    n_angular_triplets = tables.Int32Col()


# -------------------- the descriptor (torch stand-in) --------------------


class PeerDescriptor:
    """The attributes aenet's cache paths read from a ChebyshevDescriptor."""

    def __init__(self, config):
        self.descriptor_class = str(config.get("descriptor_class", CHEBYSHEV_DESCRIPTOR_CLASS))
        self.species = list(config["species"])
        self.rad_order = int(config["rad_order"])
        self.rad_cutoff = float(config["rad_cutoff"])
        self.ang_order = int(config["ang_order"])
        self.ang_cutoff = float(config["ang_cutoff"])
        self.min_cutoff = float(config.get("min_cutoff", 0.55))
        self.device = str(config.get("device", "cpu"))
        self.dtype = str(config.get("dtype", "float64")).replace("torch.", "")
        self.multi = len(self.species) > 1

    def get_n_features(self):
        """ChebyshevDescriptor._calculate_n_features."""
        n_rad, n_ang = self.rad_order + 1, self.ang_order + 1
        return 2 * (n_rad + n_ang) if self.multi else n_rad + n_ang

    def config(self):
        """The JSON form this peer is given and returns."""
        return {
            "descriptor_class": self.descriptor_class,
            "species": list(self.species),
            "rad_order": self.rad_order,
            "rad_cutoff": self.rad_cutoff,
            "ang_order": self.ang_order,
            "ang_cutoff": self.ang_cutoff,
            "min_cutoff": self.min_cutoff,
            "dtype": self.dtype,
            "device": self.device,
        }


def numpy_dtype(descriptor):
    """np.dtype(str(descriptor.dtype).replace("torch.", ""))."""
    return np.dtype(descriptor.dtype)


def dtype_from_str(value):
    """descriptor_manifest.dtype_from_str, as a dtype name."""
    normalized = value.lower().replace("torch.", "")
    if normalized in {"float64", "double"}:
        return "float64"
    if normalized in {"float32", "float"}:
        return "float32"
    return "float64"


def descriptor_config_from_object(descriptor):
    """descriptor_manifest.descriptor_config_from_object."""
    try:
        n_features = int(descriptor.get_n_features())
    except Exception:
        n_features = 0
    return {
        "species": list(getattr(descriptor, "species", [])),
        "rad_order": int(getattr(descriptor, "rad_order", 0)),
        "rad_cutoff": float(getattr(descriptor, "rad_cutoff", 0.0)),
        "ang_order": int(getattr(descriptor, "ang_order", 0)),
        "ang_cutoff": float(getattr(descriptor, "ang_cutoff", 0.0)),
        "min_cutoff": float(getattr(descriptor, "min_cutoff", 0.55)),
        "dtype": str(getattr(descriptor, "dtype", "")).replace("torch.", ""),
        "device": str(getattr(descriptor, "device", "")),
        "n_features": n_features,
    }


def descriptor_compat_signature_from_config(config, descriptor_class):
    """descriptor_manifest.descriptor_compat_signature_from_config."""
    species = list(config.get("species", []))
    return {
        "descriptor_class": descriptor_class,
        "species": species,
        "rad_order": int(config.get("rad_order", 0)),
        "rad_cutoff": float(config.get("rad_cutoff", 0.0)),
        "ang_order": int(config.get("ang_order", 0)),
        "ang_cutoff": float(config.get("ang_cutoff", 0.0)),
        "min_cutoff": float(config.get("min_cutoff", 0.0)),
        "multi": bool(len(species) > 1),
    }


def descriptor_compat_signature_from_object(descriptor):
    """descriptor_manifest.descriptor_compat_signature_from_object."""
    return descriptor_compat_signature_from_config(
        descriptor_config_from_object(descriptor), descriptor.descriptor_class
    )


def descriptor_manifest_from_object(descriptor):
    """descriptor_manifest.descriptor_manifest_from_object."""
    config = descriptor_config_from_object(descriptor)
    config_json = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return {
        "schema_version": DESCRIPTOR_MANIFEST_SCHEMA_VERSION,
        "manifest_format": DESCRIPTOR_MANIFEST_FORMAT,
        "descriptor_class": descriptor.descriptor_class,
        "config": config,
        "config_json": config_json,
        "config_sha256": hashlib.sha256(config_json.encode("utf-8")).hexdigest(),
    }


def descriptor_from_config(config, descriptor_class):
    """descriptor_manifest.descriptor_from_config (the peer's descriptor, not a torch one)."""
    if descriptor_class != CHEBYSHEV_DESCRIPTOR_CLASS:
        raise AenetError(f"Unsupported persisted descriptor class {descriptor_class!r}.")
    dtype = dtype_from_str(str(config.get("dtype", "float64")))
    device = str(config.get("device", "cpu"))
    if device.startswith("cuda"):
        device = "cpu"  # torch.cuda.is_available() is False here
    return PeerDescriptor({
        "descriptor_class": descriptor_class,
        "species": list(config["species"]),
        "rad_order": int(config["rad_order"]),
        "rad_cutoff": float(config["rad_cutoff"]),
        "ang_order": int(config["ang_order"]),
        "ang_cutoff": float(config["ang_cutoff"]),
        "min_cutoff": float(config.get("min_cutoff", 0.55)),
        "device": device,
        "dtype": dtype,
    })


def descriptor_from_manifest(manifest):
    """descriptor_manifest.descriptor_from_manifest."""
    schema_version = int(manifest.get("schema_version", -1))
    if schema_version != DESCRIPTOR_MANIFEST_SCHEMA_VERSION:
        raise AenetError(
            "Unsupported descriptor manifest schema version "
            f"{schema_version}; expected {DESCRIPTOR_MANIFEST_SCHEMA_VERSION}."
        )
    manifest_format = str(manifest.get("manifest_format", ""))
    if manifest_format != DESCRIPTOR_MANIFEST_FORMAT:
        raise AenetError(f"Unsupported descriptor manifest format {manifest_format!r}.")
    return descriptor_from_config(manifest["config"], str(manifest["descriptor_class"]))


def descriptor_matches_manifest(descriptor, manifest):
    """descriptor_manifest.descriptor_matches_manifest."""
    expected = descriptor_compat_signature_from_config(
        manifest["config"], str(manifest["descriptor_class"])
    )
    return descriptor_compat_signature_from_object(descriptor) == expected


def descriptor_derivative_cache_metadata(descriptor):
    """hdf5_dataset._descriptor_derivative_cache_metadata."""
    compat = descriptor_compat_signature_from_object(descriptor)
    compat_json = json.dumps(compat, sort_keys=True, separators=(",", ":"))
    return {
        "compat": compat,
        "compat_json": compat_json,
        "compat_sha256": hashlib.sha256(compat_json.encode("utf-8")).hexdigest(),
        "storage_dtype": str(getattr(descriptor, "dtype", "")).replace("torch.", ""),
        "n_radial_features": int(getattr(descriptor, "rad_order", 0)) + 1,
        "n_angular_features": int(getattr(descriptor, "ang_order", 0)) + 1,
        "multi": bool(getattr(descriptor, "multi", False)),
    }


def tables_float_atom(dtype):
    """hdf5_dataset._tables_float_atom."""
    if dtype == "float32":
        return tables.Float32Atom()
    if dtype == "float64":
        return tables.Float64Atom()
    raise TypeError(
        "Persisted force-derivative caches require float32 or float64 "
        f"descriptor dtypes, got {dtype!r}."
    )


def tensor_to_numpy_1d(value, dtype):
    """hdf5_dataset._tensor_to_numpy_1d (value: a numpy array or None)."""
    if value is None:
        return np.empty(0, dtype=dtype)
    return np.ascontiguousarray(value).reshape(-1).astype(dtype, copy=False)


def build_force_derivative_payload(local_derivatives, descriptor_dtype):
    """hdf5_dataset._build_force_derivative_payload, keyed by aenet's node_paths keys."""
    float_dtype = np.float32 if descriptor_dtype == "float32" else np.float64
    blocks = {"radial": local_derivatives["radial"], "angular": local_derivatives["angular"]}
    return {
        key: tensor_to_numpy_1d(blocks[group][leaf], np.int64 if is_index else float_dtype)
        for key, group, leaf, is_index in ARRAYS
    }


def v2_force_derivative_node_paths():
    """HDF5StructureDataset._v2_force_derivative_node_paths."""
    paths = {"index": GROUP_CACHE_FORCE_DERIVATIVES + "/index"}
    for key, group, leaf, _ in ARRAYS:
        paths[key] = f"{GROUP_CACHE_FORCE_DERIVATIVES}/{group}/{leaf}"
    return paths


def legacy_force_derivative_node_paths():
    """HDF5StructureDataset._legacy_force_derivative_node_paths."""
    paths = {"index": GROUP_LEGACY_FORCE_DERIVATIVES + "/index"}
    for key, group, leaf, _ in ARRAYS:
        paths[key] = f"{GROUP_LEGACY_FORCE_DERIVATIVES}/{group}/{leaf}"
    return paths


# -------------------- HDF5StructureDataset(mode="load") --------------------


class LoadedDataset:
    """The state HDF5StructureDataset._open_readonly builds, and its load functions."""

    def __init__(self, descriptor, path):
        self.descriptor = descriptor
        self.h5 = tables.open_file(path, mode="r")
        try:
            self._open_readonly()
        except BaseException:
            self.h5.close()
            raise

    def close(self):
        """HDF5StructureDataset._close_handle."""
        self.h5.close()

    def _open_readonly(self):
        h5 = self.h5
        self.descriptor_manifest_info = None
        self.torch_cache_info = None
        self.feature_rows_by_entry = {}
        self.feature_cache_info = None
        self.force_derivative_rows_by_entry = {}
        self.force_derivative_cache_info = None
        self.force_derivative_node_paths = None
        try:
            structures = h5.get_node(NODE_STRUCTURES)
        except tables.NoSuchNodeError as exc:
            raise AenetError(f"Invalid database structure: missing {NODE_STRUCTURES}") from exc
        self.n_entries = int(len(structures))
        self.force_indices = [
            i for i, row in enumerate(h5.get_node(NODE_META)) if bool(row["has_forces"])
        ]
        self._read_energy_filter_metadata()
        self._initialize_descriptor_manifest_state()
        self._reconcile_descriptor_manifest()
        self._initialize_persisted_cache_state()

    def _read_energy_filter_metadata(self):
        """hdf5_dataset._read_energy_filter_metadata (values unused here; its errors kept)."""
        attrs = self.h5.root._v_attrs
        if not hasattr(attrs, "energy_filter_enabled"):
            return
        if bool(attrs.energy_filter_enabled):
            float(attrs.energy_filter_max_referenced_energy_per_atom)
        energies = str(getattr(attrs, "energy_filter_atomic_energies_json", ""))
        if energies:
            try:
                decoded = json.loads(energies)
            except json.JSONDecodeError as exc:
                raise AenetError(
                    "Invalid HDF5 energy-filter metadata: malformed atomic_energies JSON."
                ) from exc
            {str(key): float(value) for key, value in decoded.items()}

    def _initialize_descriptor_manifest_state(self):
        try:
            group = self.h5.get_node(GROUP_DESCRIPTOR_MANIFEST)
        except tables.NoSuchNodeError:
            return
        attrs = group._v_attrs
        config_json = str(attrs.config_json)
        try:
            config = json.loads(config_json)
        except json.JSONDecodeError as exc:
            raise AenetError(
                "Invalid persisted descriptor manifest: malformed JSON configuration."
            ) from exc
        self.descriptor_manifest_info = {
            "schema_version": int(attrs.schema_version),
            "manifest_format": str(attrs.manifest_format),
            "descriptor_class": str(attrs.descriptor_class),
            "config_json": config_json,
            "config_sha256": str(attrs.config_sha256),
            "config": config,
        }

    def _validate_descriptor_manifest(self):
        if self.descriptor_manifest_info is None:
            raise AenetError(
                "This HDF5 dataset does not contain a persisted descriptor manifest."
            )
        info = self.descriptor_manifest_info
        if info["schema_version"] != DESCRIPTOR_MANIFEST_SCHEMA_VERSION:
            raise AenetError(
                "Unsupported descriptor manifest schema version "
                f"{info['schema_version']}; expected {DESCRIPTOR_MANIFEST_SCHEMA_VERSION}."
            )
        if info["manifest_format"] != DESCRIPTOR_MANIFEST_FORMAT:
            raise AenetError(
                f"Unsupported descriptor manifest format {info['manifest_format']!r}."
            )
        return info

    def _reconcile_descriptor_manifest(self):
        if self.descriptor_manifest_info is None:
            return
        manifest = self._validate_descriptor_manifest()
        if self.descriptor is None:
            self.descriptor = descriptor_from_manifest(manifest)
            return
        if not descriptor_matches_manifest(self.descriptor, manifest):
            raise AenetError(
                "Persisted descriptor manifest is incompatible with the "
                "explicit descriptor configuration. Provide a matching "
                "descriptor or omit descriptor=... to recover the stored "
                "descriptor."
            )

    def _initialize_persisted_cache_state(self):
        try:
            cache_group = self.h5.get_node(GROUP_TORCH_CACHE)
        except tables.NoSuchNodeError:
            self._initialize_legacy_force_derivative_cache_state()
            return
        attrs = cache_group._v_attrs
        self.torch_cache_info = {
            "schema_version": int(attrs.schema_version),
            "cache_format": str(attrs.cache_format),
            "descriptor_compat_json": str(attrs.descriptor_compat_json),
            "descriptor_compat_sha256": str(attrs.descriptor_compat_sha256),
            "storage_dtype": str(attrs.storage_dtype),
            "contains_features": bool(attrs.contains_features),
            "contains_force_derivatives": bool(attrs.contains_force_derivatives),
        }
        self._validate_torch_cache_schema()
        if bool(self.torch_cache_info["contains_features"]):
            self.feature_cache_info = dict(self._validate_torch_cache_schema())
            for row in self.h5.get_node(NODE_CACHE_FEATURE_INDEX):
                self.feature_rows_by_entry[int(row["entry_idx"])] = int(row["cache_row"])
        if bool(self.torch_cache_info["contains_force_derivatives"]):
            info = self._validate_torch_cache_schema()
            attrs = self.h5.get_node(GROUP_CACHE_FORCE_DERIVATIVES)._v_attrs
            self.force_derivative_cache_info = {
                **info,
                "payload_format": str(attrs.payload_format),
                "n_radial_features": int(attrs.n_radial_features),
                "n_angular_features": int(attrs.n_angular_features),
                "multi": bool(attrs.multi),
            }
            self.force_derivative_node_paths = v2_force_derivative_node_paths()
            for row in self.h5.get_node(self.force_derivative_node_paths["index"]):
                self.force_derivative_rows_by_entry[int(row["entry_idx"])] = int(row["cache_row"])

    def _validate_torch_cache_schema(self):
        if self.torch_cache_info is None:
            raise AenetError("This HDF5 dataset does not contain a torch cache.")
        info = self.torch_cache_info
        if info["schema_version"] != TORCH_CACHE_SCHEMA_VERSION:
            raise AenetError(
                "Unsupported torch cache schema version "
                f"{info['schema_version']}; expected {TORCH_CACHE_SCHEMA_VERSION}."
            )
        if info["cache_format"] != TORCH_CACHE_FORMAT:
            raise AenetError(f"Unsupported torch cache format {info['cache_format']!r}.")
        return info

    def _initialize_legacy_force_derivative_cache_state(self):
        try:
            group = self.h5.get_node(GROUP_LEGACY_FORCE_DERIVATIVES)
        except tables.NoSuchNodeError:
            return
        attrs = group._v_attrs
        self.force_derivative_cache_info = {
            "schema_version": int(attrs.schema_version),
            "payload_format": str(attrs.payload_format),
            "descriptor_compat_json": str(attrs.descriptor_compat_json),
            "descriptor_compat_sha256": str(attrs.descriptor_compat_sha256),
            "storage_dtype": str(attrs.storage_dtype),
            "n_radial_features": int(attrs.n_radial_features),
            "n_angular_features": int(attrs.n_angular_features),
            "multi": bool(attrs.multi),
            "contains_features": bool(attrs.contains_features),
            "contains_positions": bool(attrs.contains_positions),
        }
        self.force_derivative_node_paths = legacy_force_derivative_node_paths()
        for row in self.h5.get_node(self.force_derivative_node_paths["index"]):
            self.force_derivative_rows_by_entry[int(row["entry_idx"])] = int(row["cache_row"])

    def _require_descriptor(self, action):
        if self.descriptor is not None:
            return
        raise AenetError(
            f"{action} requires a descriptor. Provide descriptor=... or "
            "persist a descriptor manifest with "
            "build_database(persist_descriptor=True)."
        )

    def _validate_cache_descriptor_compatibility(self, info, action):
        self._require_descriptor(action)
        expected = descriptor_derivative_cache_metadata(self.descriptor)
        if info["descriptor_compat_sha256"] != expected["compat_sha256"]:
            raise AenetError(
                f"{action} found an incompatible persisted cache. Rebuild the "
                "cache with matching species/order/cutoff settings."
            )
        return info

    def load_persisted_features(self, idx):
        """HDF5StructureDataset.load_persisted_features."""
        if self.feature_cache_info is None:
            raise AenetError("This HDF5 dataset does not contain persisted features.")
        info = self._validate_torch_cache_schema()
        self._validate_cache_descriptor_compatibility(info, "Loading persisted features")
        cache_row = self.feature_rows_by_entry.get(int(idx))
        if cache_row is None:
            return None
        row = self.h5.get_node(NODE_CACHE_FEATURE_INDEX)[cache_row]
        values = np.asarray(self.h5.get_node(NODE_CACHE_FEATURE_VALUES)[cache_row]).reshape(
            int(row["n_atoms"]), int(row["n_features"])
        )
        return values.astype(numpy_dtype(self.descriptor))

    def load_persisted_force_derivatives(self, idx):
        """HDF5StructureDataset.load_persisted_force_derivatives."""
        if self.force_derivative_cache_info is None:
            raise AenetError("This HDF5 dataset does not contain a force-derivative cache.")
        info = self.force_derivative_cache_info
        if int(info["schema_version"]) == TORCH_CACHE_SCHEMA_VERSION:
            self._validate_torch_cache_schema()
        elif int(info["schema_version"]) != FORCE_DERIVATIVE_SCHEMA_VERSION:
            raise AenetError(
                f"Unsupported force-derivative cache schema version {info['schema_version']}."
            )
        if info["payload_format"] != FORCE_DERIVATIVE_PAYLOAD_FORMAT:
            raise AenetError(
                "Unsupported force-derivative cache payload format "
                f"{info['payload_format']!r}."
            )
        self._validate_cache_descriptor_compatibility(info, "Loading persisted force derivatives")
        if self.force_derivative_node_paths is None:
            raise AenetError("Missing force-derivative node layout metadata.")
        cache_row = self.force_derivative_rows_by_entry.get(int(idx))
        if cache_row is None:
            return None
        paths = self.force_derivative_node_paths
        row = self.h5.get_node(paths["index"])[cache_row]
        shapes = {
            "radial_grads": (int(row["n_radial_edges"]), int(info["n_radial_features"]), 3),
            "angular_grads_i": (int(row["n_angular_triplets"]), int(info["n_angular_features"]), 3),
            "angular_grads_j": (int(row["n_angular_triplets"]), int(info["n_angular_features"]), 3),
            "angular_grads_k": (int(row["n_angular_triplets"]), int(info["n_angular_features"]), 3),
        }
        float_dtype = numpy_dtype(self.descriptor)
        out = {}
        for key, group, leaf, is_index in ARRAYS:
            node = self.h5.get_node(paths[key])
            if is_index:
                values = np.asarray(node[cache_row], dtype=np.int64).astype(np.int64)
            else:
                values = np.asarray(node[cache_row])
                if key in shapes:
                    values = values.reshape(shapes[key])
                if key.endswith("typespin") and not bool(info["multi"]):
                    values = None
                else:
                    values = values.astype(float_dtype)
            out[f"{group}/{leaf}"] = values
        return out

    # -------------------- the per-entry appends (h5 opened in mode "a") --------------------

    def append_feature_cache_entry(self, h5, entry_idx, n_atoms, features):
        """HDF5StructureDataset._append_feature_cache_entry and _append_feature_cache_payload."""
        feature_values = tensor_to_numpy_1d(features, numpy_dtype(self.descriptor))
        n_features = int(features.shape[-1])
        index_table = h5.get_node(NODE_CACHE_FEATURE_INDEX)
        values = h5.get_node(NODE_CACHE_FEATURE_VALUES)
        cache_row = int(index_table.nrows)
        values.append(feature_values)
        row = index_table.row
        row["entry_idx"] = int(entry_idx)
        row["cache_row"] = int(cache_row)
        row["n_atoms"] = int(n_atoms)
        row["n_features"] = int(n_features)
        row.append()
        index_table.flush()
        return cache_row

    def append_force_derivative_cache_entry(self, h5, entry_idx, n_atoms, local_derivatives,
                                            node_paths):
        """HDF5StructureDataset._append_force_derivative_cache_entry and _payload."""
        payload = build_force_derivative_payload(local_derivatives, self.descriptor.dtype)
        index_table = h5.get_node(node_paths["index"])
        cache_row = int(index_table.nrows)
        for key, _, _, _ in ARRAYS:
            h5.get_node(node_paths[key]).append(payload[key])
        row = index_table.row
        row["entry_idx"] = int(entry_idx)
        row["cache_row"] = int(cache_row)
        row["n_atoms"] = int(n_atoms)
        row["n_radial_edges"] = int(payload["radial_center"].size)
        row["n_angular_triplets"] = int(payload["angular_center"].size)
        row.append()
        index_table.flush()
        return cache_row


# -------------------- storage creation (build_database's) --------------------


def create_descriptor_manifest_storage(h5, descriptor):
    """HDF5StructureDataset._create_descriptor_manifest_storage."""
    group = h5.create_group("/", "descriptor_manifest",
                            "Persisted descriptor reconstruction manifest")
    manifest = descriptor_manifest_from_object(descriptor)
    attrs = group._v_attrs
    attrs.schema_version = manifest["schema_version"]
    attrs.manifest_format = manifest["manifest_format"]
    attrs.descriptor_class = manifest["descriptor_class"]
    attrs.config_json = manifest["config_json"]
    attrs.config_sha256 = manifest["config_sha256"]


def create_torch_cache_storage(h5, descriptor, persist_features, persist_force_derivatives):
    """HDF5StructureDataset._create_torch_cache_storage and the section creators."""
    cache_group = h5.create_group("/", "torch_cache",
                                  "Unified persisted torch-training cache payloads")
    metadata = descriptor_derivative_cache_metadata(descriptor)
    attrs = cache_group._v_attrs
    attrs.schema_version = TORCH_CACHE_SCHEMA_VERSION
    attrs.cache_format = TORCH_CACHE_FORMAT
    attrs.descriptor_compat_json = metadata["compat_json"]
    attrs.descriptor_compat_sha256 = metadata["compat_sha256"]
    attrs.storage_dtype = metadata["storage_dtype"]
    attrs.contains_features = bool(persist_features)
    attrs.contains_force_derivatives = bool(persist_force_derivatives)
    float_atom = tables_float_atom(descriptor.dtype)
    if persist_features:
        group = h5.create_group(GROUP_TORCH_CACHE, "features",
                                "Persisted raw descriptor feature payloads")
        h5.create_table(group, "index", description=FeatureIndexRow,
                        title="Per-entry raw feature cache index")
        h5.create_vlarray(group, "values", atom=float_atom,
                          title="Flattened raw feature tensors per cached entry")
    if persist_force_derivatives:
        group = h5.create_group(GROUP_TORCH_CACHE, "force_derivatives",
                                "Persisted sparse local derivative payloads")
        radial = h5.create_group(group, "radial", "Radial sparse local derivative blocks")
        angular = h5.create_group(group, "angular", "Angular sparse local derivative blocks")
        attrs = group._v_attrs
        attrs.schema_version = FORCE_DERIVATIVE_SCHEMA_VERSION
        attrs.payload_format = FORCE_DERIVATIVE_PAYLOAD_FORMAT
        attrs.descriptor_compat_json = metadata["compat_json"]
        attrs.descriptor_compat_sha256 = metadata["compat_sha256"]
        attrs.storage_dtype = metadata["storage_dtype"]
        attrs.n_radial_features = metadata["n_radial_features"]
        attrs.n_angular_features = metadata["n_angular_features"]
        attrs.multi = metadata["multi"]
        attrs.contains_features = False
        attrs.contains_positions = False
        h5.create_table(group, "index", description=ForceDerivativeIndexRow,
                        title="Per-entry sparse derivative cache index")
        for _, sub, leaf, is_index in ARRAYS:
            parent = radial if sub == "radial" else angular
            h5.create_vlarray(parent, leaf, atom=tables.Int64Atom() if is_index else float_atom,
                              title=f"Flattened {sub} {leaf} per cached entry")


# -------------------- JSON in and out --------------------


def encode(array):
    """An array as {"dtype", "shape", "hex"}; None stays None."""
    if array is None:
        return None
    array = np.ascontiguousarray(array)
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"dtype": array.dtype.name, "shape": list(array.shape), "hex": little.tobytes().hex()}


def decode(value):
    """The array of {"dtype", "shape", "hex"}; None stays None."""
    if value is None:
        return None
    dtype = np.dtype(value["dtype"]).newbyteorder("<")
    return np.frombuffer(bytes.fromhex(value["hex"]), dtype=dtype).reshape(value["shape"])


def descriptor_of(config):
    return None if config is None else PeerDescriptor(config)


def command_load(path, request):
    dataset = LoadedDataset(descriptor_of(request.get("descriptor")), path)
    try:
        out = {
            "n_entries": dataset.n_entries,
            "force_indices": dataset.force_indices,
            "manifest": dataset.descriptor_manifest_info,
            "descriptor": None if dataset.descriptor is None else dataset.descriptor.config(),
            "has_persisted_features": bool(dataset.feature_rows_by_entry),
            "has_persisted_force_derivatives": bool(dataset.force_derivative_rows_by_entry),
            "features": {},
            "derivatives": {},
        }
        for entry in request.get("entries", []):
            # As HDF5StructureDataset.materialize_sample asks: features through
            # _load_runtime_or_persisted_features (None without a feature cache), derivatives
            # only when the dataset has a derivative cache.
            features = None
            if dataset.feature_cache_info is not None:
                features = dataset.load_persisted_features(entry)
            out["features"][str(entry)] = encode(features)
            derivatives = None
            if dataset.force_derivative_cache_info is not None:
                derivatives = dataset.load_persisted_force_derivatives(entry)
            out["derivatives"][str(entry)] = None if derivatives is None else {
                name: encode(values) for name, values in derivatives.items()
            }
        return out
    finally:
        dataset.close()


def command_append(path, request):
    descriptor = descriptor_of(request["descriptor"])
    dataset = LoadedDataset(descriptor, path)
    node_paths = dataset.force_derivative_node_paths
    dataset.close()
    rows = {"features": [], "derivatives": []}
    with tables.open_file(path, mode="a") as h5:
        for item in request.get("features", []):
            rows["features"].append(dataset.append_feature_cache_entry(
                h5, item["entry_idx"], item["n_atoms"], decode(item["features"])))
        for item in request.get("derivatives", []):
            blocks = {"radial": {}, "angular": {}}
            for name, value in item["arrays"].items():
                group, leaf = name.split("/")
                blocks[group][leaf] = decode(value)
            rows["derivatives"].append(dataset.append_force_derivative_cache_entry(
                h5, item["entry_idx"], item["n_atoms"], blocks, node_paths))
    return rows


def command_create(path, request):
    descriptor = descriptor_of(request["descriptor"])
    filters = tables.Filters(complevel=5, complib="zlib")  # aenet's _FiltersConfig default
    with tables.open_file(path, mode="a", filters=filters) as h5:
        create_descriptor_manifest_storage(h5, descriptor)
        create_torch_cache_storage(h5, descriptor, bool(request.get("features")),
                                   bool(request.get("derivatives")))
        created = [node._v_pathname for node in h5.walk_nodes("/torch_cache")]
    return {"created": ["/descriptor_manifest"] + created}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("load", "append", "create"):
        sys.exit("usage: aenet_peer.py load|append|create FILE < request.json")
    command, path = sys.argv[1], sys.argv[2]
    request = json.load(sys.stdin)
    run = {"load": command_load, "append": command_append, "create": command_create}[command]
    try:
        out = run(path, request)
    except AenetError as exc:
        out = {"error": str(exc)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
