//! The backend list every campaign runs over: each creates and reopens a cache, and a selection
//! by name keeps report order and refuses unknown names.

use stowage_core::{DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

#[test]
fn every_backend_creates_and_reopens_a_cache() {
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let sample = Sample::new().with("x", Tensor::from_slice(&[4], &[1f32, 2.0, 3.0, 4.0]).unwrap());
    for subject in stowage_reliability::backends::all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let mut cache = subject.factory.create(&path, &schema).unwrap();
        cache.put("k", &sample).unwrap();
        cache.finalize().unwrap();
        drop(cache);
        let reader = subject.factory.open(&path, OpenMode::ReadOnly).unwrap();
        assert_eq!(reader.get("k").unwrap().as_ref(), Some(&sample), "{}", subject.name);
    }
}

#[test]
fn a_selection_keeps_report_order_and_refuses_unknown_names() {
    use stowage_reliability::backends::select;
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let chosen: Vec<&str> =
        select(&names(&["hdf5", "npy"])).unwrap().iter().map(|s| s.name).collect();
    assert_eq!(chosen, ["npy", "hdf5"]);
    assert_eq!(select(&[]).unwrap().len(), 5);
    let err = select(&names(&["zarr"])).unwrap_err();
    assert!(err.contains("unknown backend \"zarr\"") && err.contains("example-journal"), "{err}");
}
