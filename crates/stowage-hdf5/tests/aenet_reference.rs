//! Every cache aenet itself wrote (`aenet-torch-cache` reference set: v2 with both sections,
//! derivatives only, features only in float32, a single-species file, and legacy v1) is read with
//! the arrays aenet's PyTables loader returns: same dtype, shape and bytes; entries without a
//! cached row return none; the plain dataset file holds no cache.

use std::path::Path;

use serde_json::Value;
use stowage_core::{DType, Tensor};
use stowage_hdf5::{CacheVersion, DescriptorCompat, LocalDerivatives, StorageDtype, TorchCache};

const FILES: [&str; 6] =
    ["plain", "v2_both_f64", "v2_deriv_f64", "v2_feat_f32", "v2_single_f32", "v1_legacy"];

fn npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = stowage_core::npy_header::parse(&bytes).unwrap();
    let data = bytes[header.data_offset..].to_vec();
    Tensor::new(header.dtype, header.shape, data).unwrap()
}

fn dtype_of(descr: &str) -> DType {
    DType::from_numpy_descr(descr).unwrap().0
}

fn derivative_array(d: &LocalDerivatives, name: &str) -> Tensor {
    let ints = |v: &Vec<i64>| Tensor::from_slice(&[v.len()], v).unwrap();
    let (r, a) = (&d.radial, &d.angular);
    let empty = |like: &Tensor| Tensor::zeros(like.dtype(), &[0]).unwrap();
    match name {
        "radial/center_idx" => ints(&r.center_idx),
        "radial/neighbor_idx" => ints(&r.neighbor_idx),
        "radial/dG_drij" => r.dg_drij.clone(),
        "radial/neighbor_typespin" => r.neighbor_typespin.clone().unwrap_or(empty(&r.dg_drij)),
        "angular/center_idx" => ints(&a.center_idx),
        "angular/neighbor_j_idx" => ints(&a.neighbor_j_idx),
        "angular/neighbor_k_idx" => ints(&a.neighbor_k_idx),
        "angular/grads_i" => a.grads_i.clone(),
        "angular/grads_j" => a.grads_j.clone(),
        "angular/grads_k" => a.grads_k.clone(),
        "angular/triplet_typespin" => a.triplet_typespin.clone().unwrap_or(empty(&a.grads_i)),
        other => panic!("unknown derivative array {other}"),
    }
}

fn cast(tensor: &Tensor, to: StorageDtype) -> Tensor {
    let values: Vec<f64> = match tensor.dtype() {
        DType::F32 => tensor.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        _ => tensor.to_vec::<f64>().unwrap(),
    };
    match to {
        StorageDtype::Float64 => Tensor::from_slice(tensor.shape(), &values).unwrap(),
        StorageDtype::Float32 => {
            let f32s: Vec<f32> = values.into_iter().map(|v| v as f32).collect();
            Tensor::from_slice(tensor.shape(), &f32s).unwrap()
        }
    }
}

fn check_file(set: &Path, name: &str) -> usize {
    let expected: Value = serde_json::from_slice(
        &std::fs::read(set.join("expected").join(format!("{name}.json"))).unwrap(),
    )
    .unwrap();
    let arrays = set.join("expected").join(name);
    let opened = TorchCache::open(set.join(format!("{name}.h5"))).unwrap();
    let Some(cache) = opened else {
        assert!(
            expected["version"].is_null(),
            "{name}: no cache found, expected {}",
            expected["version"]
        );
        return 0;
    };
    let version = match cache.version() {
        CacheVersion::V2 => 2,
        CacheVersion::V1Legacy => 1,
    };
    assert_eq!(expected["version"], version, "{name}");
    let attrs = if version == 2 { &expected["root_attrs"] } else { &expected["derivative_attrs"] };
    let signature = cache.signature();
    assert_eq!(attrs["descriptor_compat_json"], signature.compat_json.as_str(), "{name}");
    assert_eq!(attrs["descriptor_compat_sha256"], signature.compat_sha256.as_str(), "{name}");
    assert_eq!(attrs["storage_dtype"], signature.storage_dtype.name(), "{name}");
    if version == 2 {
        assert_eq!(attrs["contains_features"], cache.has_features(), "{name}");
        assert_eq!(attrs["contains_force_derivatives"], cache.has_derivatives(), "{name}");
    }
    // The reference descriptor: species A,B (or A alone), rad_order 1, ang_order 0.
    let multi = signature.compat_json.contains(r#""multi":true"#);
    let species: &[&str] = if multi { &["A", "B"] } else { &["A"] };
    cache.check_compatible(&DescriptorCompat::chebyshev(species, 1, 2.0, 0, 2.0, 0.1)).unwrap();
    let other = DescriptorCompat::chebyshev(species, 2, 2.0, 0, 2.0, 0.1);
    let refused = cache.check_compatible(&other).unwrap_err().to_string();
    assert!(
        refused.contains(
            "incompatible persisted cache; rebuild with matching species/order/cutoff settings"
        ),
        "{refused}"
    );

    let mut checked = 0;
    let feature_rows = expected["features"].as_array().cloned().unwrap_or_default();
    assert_eq!(cache.feature_entries().len(), feature_rows.len(), "{name}");
    for row in &feature_rows {
        let entry = row["entry_idx"].as_i64().unwrap();
        let got = cache.features(entry).unwrap().expect("cached features");
        let want = npy(&arrays.join(format!("features_entry{entry}.npy")));
        assert_eq!(got.dtype(), dtype_of(row["dtype"].as_str().unwrap()), "{name} entry {entry}");
        assert_eq!(got, want, "{name} features of entry {entry}");
        let other = match signature.storage_dtype {
            StorageDtype::Float32 => StorageDtype::Float64,
            StorageDtype::Float64 => StorageDtype::Float32,
        };
        assert_eq!(cache.features_as(entry, other).unwrap().unwrap(), cast(&want, other));
        checked += 1;
    }
    let derivative_rows = expected["derivatives"].as_array().cloned().unwrap_or_default();
    assert_eq!(cache.derivative_entries().len(), derivative_rows.len(), "{name}");
    if let Some(section) = expected.get("derivative_attrs") {
        let layout = cache.derivative_layout().expect("derivative section");
        assert_eq!(section["n_radial_features"], layout.n_radial_features, "{name}");
        assert_eq!(section["n_angular_features"], layout.n_angular_features, "{name}");
        assert_eq!(section["multi"], layout.multi, "{name}");
    }
    for row in &derivative_rows {
        let entry = row["entry_idx"].as_i64().unwrap();
        let got = cache.derivatives(entry).unwrap().expect("cached derivatives");
        assert_eq!(row["n_atoms"], got.n_atoms, "{name} entry {entry}");
        for (array, spec) in row["arrays"].as_object().unwrap() {
            let want = npy(&arrays.join(spec["file"].as_str().unwrap()));
            let got = derivative_array(&got, array);
            assert_eq!(got, want, "{name} entry {entry} {array}");
            checked += 1;
        }
    }
    // Entries without a cached row: 1 has no forces; 99 does not exist.
    assert!(cache.derivatives(1).unwrap().is_none(), "{name}: entry 1 has no forces");
    assert!(cache.features(99).unwrap().is_none(), "{name}");
    assert!(cache.derivatives(99).unwrap().is_none(), "{name}");
    checked
}

#[test]
fn every_reference_cache_reads_with_the_expected_arrays() {
    let Some(set) = stowage_test_support::reference::reference_set("aenet-torch-cache") else {
        return;
    };
    let checked: usize = FILES.iter().map(|name| check_file(&set, name)).sum();
    // 3+3+1 feature matrices, 11 arrays for each of 2+2+1+2 derivative entries.
    assert_eq!(checked, 3 + 3 + 1 + 11 * (2 + 2 + 1 + 2));
}
