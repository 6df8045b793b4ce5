//! A v2 cache stowage writes into an aenet dataset file is loaded by PyTables the way aenet's
//! reader loads it (attributes as `str`/`bool`/`int`, index rows by name, VLEN rows reshaped by
//! the index counts) with the same values, the dataset's `/entries` intact; h5py reads it too.

mod common;

use common::{compat, derivatives, features, write_aenet_file};
use stowage_core::Tensor;

const READER: &str = r#"
import json, sys
import numpy as np
import tables, h5py

path, want = sys.argv[1], json.load(sys.stdin)
checked = 0
with tables.open_file(path, "r") as f:
    root = f.get_node("/torch_cache")._v_attrs
    for name, kind in [("cache_format", str), ("descriptor_compat_json", str),
                       ("descriptor_compat_sha256", str), ("storage_dtype", str)]:
        assert isinstance(root[name], kind), (name, type(root[name]))
    assert root.cache_format == "aenet.torch_training.cache.v2"
    assert int(root.schema_version) == 2, root.schema_version
    assert root.descriptor_compat_json == want["json"], root.descriptor_compat_json
    assert root.descriptor_compat_sha256 == want["sha256"]
    assert root.storage_dtype == "float64"
    for flag in ("contains_features", "contains_force_derivatives"):
        assert isinstance(root[flag], (bool, np.bool_)), (flag, type(root[flag]))
        assert bool(root[flag]) is True, flag
    features = f.get_node("/torch_cache/features")
    for entry in want["features"]:
        row = features.index[entry["cache_row"]]
        assert int(row["entry_idx"]) == entry["entry_idx"], row
        values = np.asarray(features.values[int(row["cache_row"])])
        assert values.dtype == np.float64, values.dtype
        values = values.reshape(int(row["n_atoms"]), int(row["n_features"]))
        assert values.tolist() == entry["values"], (entry["entry_idx"], values)
        checked += 1
    deriv = f.get_node("/torch_cache/force_derivatives")
    attrs = deriv._v_attrs
    assert attrs.payload_format == "aenet.torch_training.local_derivatives.v1"
    assert int(attrs.n_radial_features) == 2 and int(attrs.n_angular_features) == 1
    assert bool(attrs.multi) is True and bool(attrs.contains_positions) is False
    for entry in want["derivatives"]:
        row = deriv.index[entry["cache_row"]]
        assert int(row["entry_idx"]) == entry["entry_idx"], row
        r, e, t = int(row["cache_row"]), int(row["n_radial_edges"]), int(row["n_angular_triplets"])
        shapes = {"radial/dG_drij": (e, 2, 3), "angular/grads_i": (t, 1, 3),
                  "angular/grads_j": (t, 1, 3), "angular/grads_k": (t, 1, 3)}
        for name, values in entry["arrays"].items():
            group, leaf = name.split("/")
            got = np.asarray(getattr(getattr(deriv, group), leaf)[r])
            if name in shapes:
                got = got.reshape(shapes[name])
            assert got.tolist() == values, (entry["entry_idx"], name, got)
            checked += 1
    assert f.root.entries.structures.nrows == 3
    assert f.root._v_attrs.energy_filter_semantics == "referenced_energy_per_atom"
with h5py.File(path, "r") as h:
    cache = h["torch_cache"]
    fmt = cache.attrs["cache_format"]
    assert (fmt.decode() if isinstance(fmt, bytes) else fmt) == "aenet.torch_training.cache.v2"
    for entry in want["features"]:
        got = h["torch_cache/features/values"][entry["cache_row"]]
        assert got.tolist() == [v for row in entry["values"] for v in row]
        checked += 1
print(checked)
"#;

fn nested(tensor: &Tensor) -> serde_json::Value {
    let values = tensor.to_vec::<f64>().unwrap();
    let shape = tensor.shape();
    let inner: usize = shape[1..].iter().product();
    match shape.len() {
        1 => serde_json::json!(values),
        2 => serde_json::json!(values.chunks(inner.max(1)).collect::<Vec<_>>()),
        _ => {
            let last = shape[2];
            let rows: Vec<Vec<&[f64]>> =
                values.chunks(inner.max(1)).map(|m| m.chunks(last).collect()).collect();
            serde_json::json!(rows)
        }
    }
}

#[test]
fn pytables_loads_a_cache_stowage_wrote_the_way_aenet_does() {
    let Some(python) = stowage_test_support::python::python_with(
        "pytables_loads_a_cache_stowage_wrote_the_way_aenet_does",
        &["numpy", "tables", "h5py"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());

    let feature_rows: Vec<_> = (0..3)
        .map(
            |i| serde_json::json!({"entry_idx": i, "cache_row": i, "values": nested(&features(i))}),
        )
        .collect();
    let derivative_rows: Vec<_> = [0i64, 2]
        .into_iter()
        .enumerate()
        .map(|(row, i)| {
            let d = derivatives(i);
            let (r, a) = (&d.radial, &d.angular);
            serde_json::json!({"entry_idx": i, "cache_row": row, "arrays": {
                "radial/center_idx": r.center_idx, "radial/neighbor_idx": r.neighbor_idx,
                "radial/dG_drij": nested(&r.dg_drij),
                "radial/neighbor_typespin": nested(r.neighbor_typespin.as_ref().unwrap()),
                "angular/center_idx": a.center_idx, "angular/neighbor_j_idx": a.neighbor_j_idx,
                "angular/neighbor_k_idx": a.neighbor_k_idx,
                "angular/grads_i": nested(&a.grads_i), "angular/grads_j": nested(&a.grads_j),
                "angular/grads_k": nested(&a.grads_k),
                "angular/triplet_typespin": nested(a.triplet_typespin.as_ref().unwrap()),
            }})
        })
        .collect();
    let want = serde_json::json!({
        "json": compat().json(), "sha256": compat().sha256(),
        "features": feature_rows, "derivatives": derivative_rows,
    });
    let out = stowage_test_support::python::run_script(
        python,
        READER,
        &[path.to_str().unwrap()],
        &serde_json::to_vec(&want).unwrap(),
        "PyTables and h5py reading a stowage-written torch cache",
    );
    // 3 feature matrices, 11 arrays of 2 derivative entries, 3 feature rows through h5py.
    assert_eq!(out, (3 + 22 + 3).to_string());
}
