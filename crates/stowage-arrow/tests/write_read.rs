//! Segments stowage writes read back through the same reader as torchcachex's, for every element
//! type torchcachex writes plus what it cannot express (unsigned widths, bfloat16, JSON, null
//! blobs), in the dict and tensor structures.

use std::sync::Arc;

use stowage_arrow::CacheReader;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::encode::{FieldColumns, arrow_schema};
use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::test_support::segment_writer::{SegmentFormat, write_segment};
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Error, Sample, Tensor, Value};

fn dict_fields() -> Vec<FieldColumns> {
    let tensor =
        |name: &str, dtype| FieldColumns::Tensor { name: name.into(), dtype, null_column: false };
    vec![
        tensor("feat", DType::F32),
        tensor("label", DType::I64),
        tensor("mask", DType::Bool),
        tensor("half", DType::F16),
        tensor("count", DType::U32),
        tensor("brain", DType::BF16),
        FieldColumns::Blob {
            name: "meta".into(),
            encoding: stowage_arrow::BlobEncoding::Raw,
            null_column: false,
        },
        FieldColumns::Json { name: "info".into() },
    ]
}

fn dict_sample(i: usize) -> Sample {
    let feat: Vec<f32> = (0..6).map(|j| (i * 6 + j) as f32 - 0.5).collect();
    let half: Vec<stowage_core::half::f16> =
        (0..3).map(|j| stowage_core::half::f16::from_f32(i as f32 + j as f32 / 4.0)).collect();
    // Bit patterns float16 could not hold: bfloat16 keeps float32's exponent range.
    let brain = [1e30f32 * i as f32, -1e-30].map(stowage_core::half::bf16::from_f32);
    let mut sample = Sample::new()
        .with("feat", Tensor::from_slice(&[2, 3], &feat).unwrap())
        .with("label", Tensor::from_slice(&[], &[i as i64 - 3]).unwrap())
        .with(
            "mask",
            Tensor::from_bools(&[4], &[i.is_multiple_of(2), true, false, i.is_multiple_of(3)])
                .unwrap(),
        )
        .with("half", Tensor::from_slice(&[3], &half).unwrap())
        .with("count", Tensor::from_slice(&[2], &[u32::MAX - i as u32, 7]).unwrap())
        .with("brain", Tensor::from_slice(&[2], &brain).unwrap());
    sample.insert("meta", Value::Bytes(Bytes::from(format!("pickle-{i}").into_bytes())));
    sample.insert("info", Value::Json(format!(r#"{{"i": {i}}}"#)));
    sample
}

#[test]
fn dict_segments_round_trip_and_later_segments_win() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let fields = dict_fields();
    let schema = Arc::new(arrow_schema(OutputStructure::Dict, &fields));
    assert_eq!(
        schema.metadata()["tensor_keys"],
        r#"["feat", "label", "mask", "half", "count", "brain"]"#
    );
    let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
    let samples: Vec<Sample> = (0..5).map(dict_sample).collect();
    let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
    let format = SegmentFormat::new(layout.clone(), schema, fields);
    write_segment(&format, 0, &rows).unwrap();
    // Segment 1 overwrites k2; a null tensor becomes torchcachex's placeholder, a null blob and
    // a missing JSON value Arrow nulls: all read back as null, never as b"" or "".
    let mut partial = Sample::new();
    for (name, value) in dict_sample(20).fields().filter(|(name, _)| *name != "info") {
        partial.insert(name, value.clone());
    }
    partial.insert("label", Value::Null);
    partial.insert("meta", Value::Null);
    write_segment(&format, 1, &[("k2", &partial)]).unwrap();
    let err = write_segment(&format, 1, &rows).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");

    let reader = CacheReader::open(dir.path()).unwrap();
    assert_eq!(
        reader.output_structure().unwrap(),
        OutputStructure::Dict,
        "inferred without schema.json"
    );
    // Each segment has its key sidecar, and it finds every key of that segment.
    let segment =
        stowage_arrow::test_support::segment::Segment::open(0, &layout.segment(0)).unwrap();
    let segment_keys = segment.keys().unwrap();
    let sidecar_path = stowage_arrow::test_support::key_sidecar::sidecar_path(&layout.segment(0));
    let sidecar =
        stowage_arrow::test_support::key_sidecar::KeySidecar::open(&sidecar_path).unwrap();
    for (row, key) in segment_keys.iter().enumerate() {
        assert_eq!(sidecar.find(key, |r| segment_keys[r] == *key), Some(row), "{key}");
    }
    assert_eq!(reader.len(), 5);
    for (i, key) in keys.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(reader.get(key).unwrap().unwrap(), samples[i], "{key}");
    }
    let k2 = reader.get("k2").unwrap().unwrap();
    assert_eq!(reader.locate("k2").unwrap(), Some((1, 0)));
    assert_eq!(k2.get("feat"), partial.get("feat"));
    assert_eq!(k2.get("label"), Some(&Value::Null));
    assert_eq!(k2.get("meta"), Some(&Value::Null));
    assert_eq!(k2.get("info"), Some(&Value::Null));
    assert_eq!(k2.get("brain"), partial.get("brain"));
    let brain = k2.get("brain").and_then(Value::as_tensor).unwrap();
    assert_eq!(brain.dtype(), DType::BF16, "from the field metadata, not the uint16 column");
}

#[test]
fn tensor_structure_round_trips_with_torch_dtype_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let fields =
        vec![FieldColumns::Tensor { name: "tensor".into(), dtype: DType::F64, null_column: false }];
    let schema = Arc::new(arrow_schema(OutputStructure::Tensor, &fields));
    assert_eq!(schema.metadata()["torch_dtype"], "torch.float64");
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["key", "data", "shape"]);
    let samples: Vec<Sample> = (0..3)
        .map(|i| {
            Sample::new().with("tensor", Tensor::from_slice(&[i], &vec![i as f64; i]).unwrap())
        })
        .collect();
    let rows: Vec<(&str, &Sample)> = ["a", "b", "c"].into_iter().zip(&samples).collect();
    write_segment(&SegmentFormat::new(layout.clone(), schema, fields), 0, &rows).unwrap();
    let reader = CacheReader::open(dir.path()).unwrap();
    assert_eq!(reader.output_structure().unwrap(), OutputStructure::Tensor);
    for (key, sample) in rows {
        let got = reader.get(key).unwrap().unwrap();
        assert_eq!(&got, sample, "{key}");
    }
}

#[test]
fn a_value_that_does_not_fit_its_column_is_refused_naming_key_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let fields = dict_fields();
    let schema = Arc::new(arrow_schema(OutputStructure::Dict, &fields));
    let mut wrong = dict_sample(0);
    wrong.insert("feat", Tensor::from_slice(&[1], &[1i32]).unwrap());
    let err = write_segment(
        &SegmentFormat::new(Layout::new(dir.path()), schema, fields.clone()),
        0,
        &[("bad", &wrong)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"bad\"") && err.to_string().contains("\"feat\""), "{err}");
    assert!(Layout::new(dir.path()).list_segments().unwrap().is_empty(), "nothing written");
}

/// Keys found through a key index run (older segments) and the newer segments' sidecars give
/// the same winners as reading every segment in order; a damaged run, or one whose last
/// segment is gone, is ignored.
#[test]
fn merged_and_recent_indexes_agree_with_reading_every_segment_in_order() {
    use std::collections::HashMap;
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let fields =
        vec![FieldColumns::Tensor { name: "tensor".into(), dtype: DType::I32, null_column: false }];
    let schema = Arc::new(arrow_schema(OutputStructure::Tensor, &fields));
    let format = SegmentFormat::new(layout.clone(), schema, fields);
    let mut oracle: HashMap<String, (u64, usize, i32)> = HashMap::new();
    // Five segments of 40 rows; keys repeat across segments and within segment 3.
    for segment in 0..5u64 {
        let keys: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    "k{}",
                    (segment as usize * 17 + i * 3 + usize::from(segment == 3 && i > 30)) % 90
                )
            })
            .collect();
        let samples: Vec<Sample> = (0..40)
            .map(|i| {
                let v = segment as i32 * 1000 + i;
                Sample::new().with("tensor", Tensor::from_slice(&[1], &[v]).unwrap())
            })
            .collect();
        for (row, key) in keys.iter().enumerate() {
            oracle.insert(key.clone(), (segment, row, segment as i32 * 1000 + row as i32));
        }
        let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
        write_segment(&format, segment, &rows).unwrap();
        if segment == 2 {
            let run =
                stowage_arrow::test_support::merged_index::merge_segments(&layout, 2).unwrap();
            assert_eq!((run.first, run.through), (0, 2));
            assert_eq!(run.keys as usize, oracle.len(), "distinct keys of segments 0..=2");
            assert_eq!(run.new_keys, run.keys, "no run before it");
        }
    }
    let check = |reader: &CacheReader| {
        assert_eq!(reader.len(), oracle.len());
        for (key, &(segment, row, value)) in &oracle {
            assert_eq!(reader.locate(key).unwrap(), Some((segment, row)), "{key}");
            let got = reader.get(key).unwrap().unwrap();
            assert_eq!(got.tensor("tensor").unwrap().bytes(), &value.to_le_bytes(), "{key}");
        }
        assert_eq!(reader.get("k1000").unwrap(), None);
        let mut keys = reader.keys().unwrap();
        keys.sort();
        let mut want: Vec<&String> = oracle.keys().collect();
        want.sort();
        assert_eq!(keys.iter().collect::<Vec<_>>(), want);
    };
    let run = layout.index_run(0, 2);
    let reader = CacheReader::open(dir.path()).unwrap();
    assert_eq!((reader.runs_through(), reader.unmerged_segments()), (Some(2), 2));
    check(&reader);
    // A run with a damaged header is ignored: every segment is then read through its
    // sidecar.
    let mut bytes = std::fs::read(&run).unwrap();
    bytes[40] ^= 1;
    std::fs::write(&run, &bytes).unwrap();
    let reader = CacheReader::open(dir.path()).unwrap();
    assert_eq!((reader.runs_through(), reader.unmerged_segments()), (None, 5));
    check(&reader);
}

/// A flipped byte inside a stored tensor is caught by the row checksums (switchable), and a
/// damaged checksum file is an error, never a silent pass.
#[test]
fn a_flipped_value_byte_is_refused_by_the_row_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let fields =
        vec![FieldColumns::Tensor { name: "tensor".into(), dtype: DType::F64, null_column: false }];
    let schema = Arc::new(arrow_schema(OutputStructure::Tensor, &fields));
    let marker = 1234.5678f64;
    let samples: Vec<Sample> = [1.0, marker, 3.0]
        .iter()
        .map(|&v| Sample::new().with("tensor", Tensor::from_slice(&[1], &[v]).unwrap()))
        .collect();
    let rows: Vec<(&str, &Sample)> = ["a", "b", "c"].into_iter().zip(&samples).collect();
    let path =
        write_segment(&SegmentFormat::new(layout.clone(), schema, fields), 0, &rows).unwrap();
    assert_eq!(
        CacheReader::open(dir.path()).unwrap().get("b").unwrap().as_ref(),
        Some(&samples[1])
    );

    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(8).position(|w| w == marker.to_le_bytes()).expect("value stored as is");
    bytes[at + 3] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let reader = CacheReader::open(dir.path()).unwrap();
    let err = reader.get("b").unwrap_err();
    assert!(matches!(&err, Error::Corrupted { key: Some(key), .. } if key == "b"), "{err}");
    assert!(
        err.to_string().contains("\"b\"") && err.to_string().contains("segment_000000.sums"),
        "{err}"
    );
    assert_eq!(reader.get("a").unwrap().as_ref(), Some(&samples[0]), "other rows still read");
    let unchecked = CacheReader::open(dir.path()).unwrap().with_checksums(false);
    assert_ne!(
        unchecked.get("b").unwrap().as_ref(),
        Some(&samples[1]),
        "verification is switchable"
    );

    let sums = stowage_arrow::test_support::row_sums::sums_path(&path);
    let mut damaged = std::fs::read(&sums).unwrap();
    damaged[2] ^= 1;
    std::fs::write(&sums, &damaged).unwrap();
    let err = CacheReader::open(dir.path()).unwrap().get("a").unwrap_err();
    assert!(err.to_string().contains("segment_000000.sums"), "{err}");
    assert!(matches!(&err, Error::Corrupted { key: Some(key), .. } if key == "a"), "{err}");
}

/// `validate` is clean on a cache stowage wrote and names the file and key of each kind of
/// damage: a flipped value byte, a damaged key sidecar, a damaged key index run.
#[test]
fn validate_reports_each_damage_with_its_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let fields =
        vec![FieldColumns::Tensor { name: "tensor".into(), dtype: DType::F64, null_column: false }];
    let schema = Arc::new(arrow_schema(OutputStructure::Tensor, &fields));
    let format = SegmentFormat::new(layout.clone(), schema, fields);
    let marker = 4321.875f64;
    for segment in 0..3u64 {
        let samples: Vec<Sample> = (0..20)
            .map(|i| {
                let v = if segment == 1 && i == 5 { marker } else { (segment * 100 + i) as f64 };
                Sample::new().with("tensor", Tensor::from_slice(&[1], &[v]).unwrap())
            })
            .collect();
        let keys: Vec<String> = (0..20).map(|i| format!("s{segment}-{i}")).collect();
        let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
        write_segment(&format, segment, &rows).unwrap();
    }
    stowage_arrow::test_support::merged_index::merge_segments(&layout, 1).unwrap();
    let report = CacheReader::open(dir.path()).unwrap().validate().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.samples_checked, 60);

    let segment = layout.segment(1);
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(8).position(|w| w == marker.to_le_bytes()).unwrap();
    bytes[at] ^= 1;
    std::fs::write(&segment, &bytes).unwrap();
    let sidecar = stowage_arrow::test_support::key_sidecar::sidecar_path(&layout.segment(2));
    let mut damaged = std::fs::read(&sidecar).unwrap();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    std::fs::write(&sidecar, &damaged).unwrap();
    let merged_path = layout.index_run(0, 1);
    let mut merged = std::fs::read(&merged_path).unwrap();
    let last = merged.len() - 1;
    merged[last] ^= 1;
    std::fs::write(&merged_path, &merged).unwrap();

    let report = CacheReader::open(dir.path()).unwrap().validate().unwrap();
    let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.key.as_deref() == Some("s1-5")
                && p.path.as_deref() == Some(segment.as_path())),
        "{text:#?}"
    );
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(sidecar.as_path())),
        "{text:#?}"
    );
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(merged_path.as_path())),
        "{text:#?}"
    );
}

/// Compressed segments (LZ4, ZSTD) read back equal, through decompression, and are smaller than
/// the uncompressed one when the values compress.
#[test]
fn compressed_segments_read_back_and_are_smaller() {
    use stowage_arrow::Compression;
    let fields =
        vec![FieldColumns::Tensor { name: "tensor".into(), dtype: DType::F32, null_column: false }];
    let schema = Arc::new(arrow_schema(OutputStructure::Tensor, &fields));
    let samples: Vec<Sample> = (0..64)
        .map(|i| {
            let values: Vec<f32> = (0..256).map(|j| ((i + j) % 8) as f32).collect();
            Sample::new().with("tensor", Tensor::from_slice(&[16, 16], &values).unwrap())
        })
        .collect();
    let keys: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
    let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
    let mut sizes = Vec::new();
    for compression in [None, Some(Compression::Lz4), Some(Compression::Zstd)] {
        let dir = tempfile::tempdir().unwrap();
        let mut format =
            SegmentFormat::new(Layout::new(dir.path()), schema.clone(), fields.clone());
        format.compression = compression;
        format.durable = compression.is_none(); // both paths publish complete files
        let path = write_segment(&format, 0, &rows).unwrap();
        sizes.push(std::fs::metadata(&path).unwrap().len());
        let reader = CacheReader::open(dir.path()).unwrap();
        for (key, sample) in &rows {
            assert_eq!(&reader.get(key).unwrap().unwrap(), *sample, "{key} {compression:?}");
        }
        let damage = reader.validate().unwrap();
        assert!(damage.is_clean(), "{compression:?}: {damage:?}");
    }
    assert!(sizes[1] < sizes[0] / 2 && sizes[2] < sizes[0] / 2, "{sizes:?}");
}
