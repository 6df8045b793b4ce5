//! A writer killed inside `atomic_write` of `_COMPLETE` (finalize) or `stowage.json` (create)
//! leaves its temporary; the next writer removes it, and nothing another program named.

use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

#[test]
fn the_next_writer_removes_a_killed_finalize_s_temporary_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    let mut cache = NpyBackend::create(&path, &schema, NpyOptions::default()).unwrap();
    cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[2], &[1u8, 2]).unwrap())).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let killed = ["._COMPLETE.tmp-999999-2", ".stowage.json.tmp-999999-0"];
    for name in killed {
        std::fs::write(path.join(name), b"half").unwrap();
    }
    std::fs::write(path.join(".notes.txt.tmp-999999-1"), b"another program's").unwrap();

    let mut cache = NpyBackend::open_append(&path, NpyOptions::default()).unwrap();
    for name in killed {
        assert!(!path.join(name).exists(), "{name} removed");
    }
    assert!(path.join(".notes.txt.tmp-999999-1").exists(), "not stowage's: kept");
    cache.finalize().unwrap();
    assert_eq!(cache.len(), 1);
}
