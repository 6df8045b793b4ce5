//! Caches stowage writes with the `dnanet` preset are read by plain numpy + pyarrow the way DNANet's
//! reader reads them: `shapes.json` gives `n` and each field's per-row shape and dtype,
//! `np.memmap(<field>.bin, mode="r", shape=(n, *shape))` gives every row, `index.parquet` gives
//! `row`, `path`, `has_annotation`, `panel_key`, `allele_key` and `meta_json`, and the string keys
//! of `panels.json` / `alleles.json` resolve to the JSON text that was put.

use stowage_core::{Backend, Sample, Tensor, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

const D: usize = 3;
const L: usize = 32;
const ROWS: usize = 12;

/// Row `i`'s panel JSON: three distinct panels (one with raw non-ASCII), null on rows 4 and 9.
fn panel(i: usize) -> Option<String> {
    match i % 5 {
        4 => None,
        k => Some(match k % 3 {
            0 => {
                r#"[{"name": "AMEL", "dye_row": 0, "alleles": [{"name": "X", "base_pair": 82.1}]}]"#
                    .to_owned()
            }
            1 => r#"[{"name": "D3S1358", "dye_row": 1, "kit": "Fusion 6C \u00e9"}]"#.to_owned(),
            _ => r#"{"name": "Penta É", "dye_row": 2, "note": "größe 漢字 🧬"}"#.to_owned(),
        }),
    }
}

/// Row `i` is annotated unless `i % 4 == 1` (rows 1, 5, 9), as DNANet's missing annotations.
fn annotated(i: usize) -> bool {
    i % 4 != 1
}

/// Row `i`'s allele annotation: null when the row has no annotation (as DNANet writes it), else
/// one of two repeated texts, or a third on row 10.
fn allele(i: usize) -> Option<String> {
    if !annotated(i) {
        return None;
    }
    Some(match i {
        10 => r#"[{"marker": "TH01", "alleles": ["9.3", "10"]}]"#.to_owned(),
        _ if i.is_multiple_of(2) => r#"[{"marker": "AMEL", "alleles": ["X", "Y"]}]"#.to_owned(),
        _ => r#"[{"marker": "AMEL", "alleles": ["X"]}]"#.to_owned(),
    })
}

/// Row `i`'s meta JSON: `\u` escapes (as Python's `json.dumps` writes them), raw UTF-8, or `{}`.
fn meta(i: usize) -> String {
    match i % 4 {
        0 => format!(r#"{{"sample_id": "4D2", "operator": "Zo\u00eb", "injection": {i}}}"#),
        1 => "{}".to_owned(),
        2 => format!(r#"{{"sample_id": "5É1", "operator": "Zoë 漢字 🧬", "injection": {i}}}"#),
        _ => format!(r#"{{"injection": {i}, "flags": ["no_ladder"], "rfu": 12.5, "notes": null}}"#),
    }
}

fn data(i: usize) -> Vec<i16> {
    let mut values: Vec<i16> =
        (0..D * L).map(|j| (i as i32 * 7919 + j as i32 * 1031 - 20000) as i16).collect();
    if i == 2 {
        values[..4].copy_from_slice(&[i16::MIN, i16::MAX, 0, -1]);
        values[D * L - 2..].copy_from_slice(&[i16::MAX, i16::MIN]);
    }
    if i == 7 {
        values.fill(i16::MIN);
    }
    values
}

fn annotation(i: usize) -> Vec<i8> {
    let mut values: Vec<i8> = (0..D * L).map(|j| ((i * 3 + j) % 11) as i8 - 5).collect();
    if i == 3 {
        values[..3].copy_from_slice(&[i8::MIN, i8::MAX, -1]);
    }
    values
}

/// Scaler bits: ordinary values, plus on row 6 a NaN with a payload, -0.0, infinities, the smallest
/// subnormal and the largest finite value.
fn scaler_bits(i: usize) -> Vec<u32> {
    let mut bits: Vec<u32> = (0..L).map(|j| (i as f32 * 0.37 + j as f32 / 3.0).to_bits()).collect();
    if i == 6 {
        bits[..7].copy_from_slice(&[
            0x7fc0_1234,
            (-0.0f32).to_bits(),
            f32::INFINITY.to_bits(),
            f32::NEG_INFINITY.to_bits(),
            1,
            f32::MAX.to_bits(),
            f32::MIN.to_bits(),
        ]);
    }
    bits
}

fn path(i: usize) -> String {
    format!("/srv/hid/casework_é/{i:02}_A{:02}_01.hid", i * 7 % 13)
}

fn json_value(text: Option<String>) -> Value {
    text.map_or(Value::Null, Value::Json)
}

fn row(i: usize) -> Sample {
    let scaler: Vec<f32> = scaler_bits(i).into_iter().map(f32::from_bits).collect();
    let annotation = if annotated(i) {
        Value::from(Tensor::from_slice(&[D, L], &annotation(i)).unwrap())
    } else {
        Value::Null
    };
    Sample::new()
        .with("data", Tensor::from_slice(&[D, L], &data(i)).unwrap())
        .with("annotation", annotation)
        .with("scaler", Tensor::from_slice(&[L], &scaler).unwrap())
        .with("panel", json_value(panel(i)))
        .with("allele", json_value(allele(i)))
        .with("meta_json", Value::Json(meta(i)))
}

/// What DNANet's reader must see for row `i`.
fn expected(i: usize) -> serde_json::Value {
    serde_json::json!({
        "path": path(i),
        "data": data(i),
        "has_annotation": annotated(i),
        "annotation": if annotated(i) { annotation(i) } else { vec![0; D * L] },
        "scaler_bits": scaler_bits(i),
        "panel": panel(i),
        "allele": allele(i),
        "meta_json": meta(i),
    })
}

/// DNANet's reader, in plain numpy + pyarrow, then a comparison with the expected rows.
const READER: &str = r#"
import json, os, re, sys
import numpy as np
import pyarrow.parquet as pq

root, expected = sys.argv[1], json.load(sys.stdin)
D, L = int(sys.argv[2]), int(sys.argv[3])
join = lambda name: os.path.join(root, name)

# Complete means _COMPLETE exists.
assert os.path.exists(join("_COMPLETE")), "no _COMPLETE"

# shapes.json: n, then per field its per-row shape and numpy dtype string.
with open(join("shapes.json"), encoding="utf-8") as f:
    shapes = json.load(f)
n = shapes["n"]
assert type(n) is int and n == len(expected), ("n", n, len(expected))
assert shapes["data"] == {"shape": [D, L], "dtype": "<i2"}, shapes["data"]
assert shapes["annotation"] == {"shape": [D, L], "dtype": "|i1"}, shapes["annotation"]
assert shapes["scaler"] == {"shape": [L], "dtype": "<f4"}, shapes["scaler"]
maps = {}
for field in ("data", "annotation", "scaler"):
    shape, dtype = tuple(shapes[field]["shape"]), np.dtype(shapes[field]["dtype"])
    size = os.path.getsize(join(field + ".bin"))
    assert size == n * int(np.prod(shape)) * dtype.itemsize, (field + ".bin size", size, n, shape)
    maps[field] = np.memmap(join(field + ".bin"), dtype=dtype, mode="r", shape=(n, *shape))

# index.parquet: the six columns, with their Arrow types; snappy-compressed.
table = pq.read_table(join("index.parquet"))
types = {"row": "int64", "path": "string", "has_annotation": "bool", "panel_key": "int32",
         "allele_key": "int32", "meta_json": "string"}
for name, arrow_type in types.items():
    assert str(table.schema.field(name).type) == arrow_type, (name, str(table.schema.field(name).type))
assert table.num_rows == n, ("index rows", table.num_rows, n)
metadata = pq.ParquetFile(join("index.parquet")).metadata
for g in range(metadata.num_row_groups):
    for c in range(metadata.num_columns):
        column = metadata.row_group(g).column(c)
        assert column.compression == "SNAPPY", (column.path_in_schema, column.compression)
index = {name: table.column(name).to_pylist() for name in types}

# Sidecars: decimal string keys 0..k-1 in first-seen row order, JSON text values.
sidecars = {}
for sidecar, field in (("panels.json", "panel"), ("alleles.json", "allele")):
    with open(join(sidecar), encoding="utf-8") as f:
        entries = json.load(f)
    assert list(entries) == [str(k) for k in range(len(entries))], (sidecar, list(entries))
    first_seen = []
    for want in expected:
        if want[field] is not None and want[field] not in first_seen:
            first_seen.append(want[field])
    assert list(entries.values()) == first_seen, (sidecar, entries, first_seen)
    sidecars[field] = entries

for i, want in enumerate(expected):
    assert index["row"][i] == i, ("row", i, index["row"][i])
    assert index["path"][i] == want["path"], ("path", i, index["path"][i], want["path"])
    has = index["has_annotation"][i]
    assert has is want["has_annotation"], ("has_annotation", i, has)
    data = np.array(maps["data"][i])
    assert data.tobytes() == np.array(want["data"], dtype="<i2").reshape(D, L).tobytes(), ("data", i)
    # DNANet reads the zero placeholder when has_annotation is false.
    annotation = np.array(maps["annotation"][i])
    want_annotation = np.array(want["annotation"], dtype="|i1").reshape(D, L)
    assert annotation.tobytes() == want_annotation.tobytes(), ("annotation", i)
    if not has:
        assert not annotation.any(), ("annotation placeholder not zero", i)
    scaler = np.array(maps["scaler"][i])
    assert scaler.view("<u4").tolist() == want["scaler_bits"], ("scaler", i)
    for field in ("panel", "allele"):
        key = index[field + "_key"][i]
        text = None if key is None else sidecars[field][str(key)]
        assert text == want[field], (field, i, key, text, want[field])
        if text is not None:
            json.loads(text)
    meta = index["meta_json"][i]
    assert meta == want["meta_json"], ("meta_json", i, meta, want["meta_json"])
    json.loads(meta)

with open(join("fingerprint.json"), encoding="utf-8") as f:
    fingerprint = json.load(f)
assert type(fingerprint["cache_version"]) is int and fingerprint["cache_version"] == 5, fingerprint
assert re.fullmatch("[0-9a-f]{64}", fingerprint["hash"]), fingerprint["hash"]
print(n)
"#;

#[test]
fn numpy_and_pyarrow_read_a_dnanet_cache_stowage_wrote() {
    let Some(python) = stowage_test_support::python::python_with(
        "numpy_and_pyarrow_read_a_dnanet_cache_stowage_wrote",
        &["numpy", "pyarrow", "pyarrow.parquet"],
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("aed9b48500e9acfd");
    let mut cache = MemmapBackend::create(&dir, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for i in 0..ROWS {
        cache.put(&path(i), &row(i)).unwrap();
        if i == 5 {
            cache.flush().unwrap();
        }
    }
    cache.finalize().unwrap();
    drop(cache);

    let expected: Vec<serde_json::Value> = (0..ROWS).map(expected).collect();
    let stdin = serde_json::to_vec(&expected).unwrap();
    let args = [dir.to_str().unwrap(), &D.to_string(), &L.to_string()];
    let out = stowage_test_support::python::run_script(
        python,
        READER,
        &args,
        &stdin,
        "numpy/pyarrow read",
    );
    assert_eq!(out, ROWS.to_string());
}
