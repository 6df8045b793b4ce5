//! `get_if_ready` answers only from segments already open and read without libhdf5, and then
//! exactly what `get` returns: the Python package keeps the GIL for such reads (a read that
//! may call libhdf5, whose process-wide lock another thread may hold, lets the GIL go first).

use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_hdf5::{Hdf5Backend, Hdf5Options};

fn sample(i: u32) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[3], &[i, i + 1, i + 2]).unwrap())
}

#[test]
fn answers_from_open_segments_only_and_agrees_with_get() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![3]));
    let mut writer = Hdf5Backend::create(dir.path(), &schema).unwrap();
    // Two segments: keys a* in the first, b* in the second.
    for (prefix, base) in [("a", 0), ("b", 100)] {
        for i in 0..5 {
            writer.put(&format!("{prefix}{i}"), &sample(base + i)).unwrap();
        }
        writer.flush().unwrap();
    }
    writer.put("pending", &sample(7)).unwrap();
    // The writer's unflushed put is in memory: ready.
    let pending = writer.get_if_ready("pending").expect("a pending put is ready").unwrap();
    assert_eq!(pending, Some(sample(7)));
    drop(writer);

    // One segment mapped at a time: reading one closes the other.
    let options = Hdf5Options { max_open_segments: 1, max_mapped_segments: 1 };
    let reader = Hdf5Backend::open_with(dir.path(), OpenMode::ReadOnly, &options).unwrap();
    assert!(reader.get_if_ready("a1").is_none(), "no segment is open yet");
    assert_eq!(reader.get("a1").unwrap(), Some(sample(1)));
    let ready = reader.get_if_ready("a3").expect("its segment is open and detached");
    assert_eq!(ready.unwrap(), Some(sample(3)));
    assert!(reader.get_if_ready("b2").is_none(), "the second segment is not open");
    assert_eq!(reader.get("b2").unwrap(), Some(sample(102)));
    assert!(reader.get_if_ready("a3").is_none(), "the first segment was closed for the second");
    assert_eq!(reader.get_if_ready("b4").expect("open").unwrap(), Some(sample(104)));
    // A key no run or tail holds needs no segment.
    assert_eq!(reader.get_if_ready("never-put").expect("no segment to read").unwrap(), None);
}
