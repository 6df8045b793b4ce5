//! Writes `fuzz/corpus/<target>/seed-<name>` for every fuzz target: real files from the caches
//! each backend writes for the corruption campaign (`stowage-reliability`) and, when
//! `STOWAGE_REFERENCE_DIR` names the reference caches the original tools wrote, from those too,
//! each in the input layout its target expects. Existing seeds are replaced; what libFuzzer added
//! to the corpus is left alone. Nothing of the corpus is committed: `cargo xtask reliability
//! --campaign fuzz` runs this before fuzzing.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml -p stowage-fuzz-seed-corpus
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use stowage_conformance::cases::put_generated;
use stowage_core::BackendFactory;
use stowage_reliability::backends::select;
use stowage_reliability::corruption::pristine::{Pristine, schema_for};

fn main() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("fuzz/").to_path_buf();
    let reference = std::env::var_os("STOWAGE_REFERENCE_DIR").map(PathBuf::from);
    let work = tempfile::tempdir().expect("temporary directory");
    let mut seeds = Seeds { corpus: fuzz.join("corpus"), written: 0 };
    seeds.clear();
    match &reference {
        Some(reference) => {
            assert!(
                reference.is_dir(),
                "STOWAGE_REFERENCE_DIR={}: not a directory",
                reference.display()
            );
            from_reference(&mut seeds, reference);
        }
        None => {
            println!("STOWAGE_REFERENCE_DIR is not set: no seeds from the original tools' caches")
        }
    }
    from_backends(&mut seeds, work.path());
    attributes(&mut seeds);
    pickles(&mut seeds);
    remote_manifests(&mut seeds);
    println!("wrote {} seeds under {}", seeds.written, seeds.corpus.display());
}

/// Writes seeds into `corpus/<target>/`.
struct Seeds {
    corpus: PathBuf,
    written: usize,
}

impl Seeds {
    /// Removes the old seeds (files named `seed-*`), keeping what fuzzing found.
    fn clear(&self) {
        let Ok(targets) = fs::read_dir(&self.corpus) else { return };
        for target in targets.flatten() {
            for file in fs::read_dir(target.path()).into_iter().flatten().flatten() {
                if file.file_name().to_string_lossy().starts_with("seed-") {
                    fs::remove_file(file.path()).expect("removing an old seed");
                }
            }
        }
    }

    fn add(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.corpus.join(target);
        fs::create_dir_all(&dir).expect("creating the corpus directory");
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' })
            .collect();
        fs::write(dir.join(format!("seed-{name}")), bytes).expect("writing a seed");
        self.written += 1;
    }

    fn add_file(&mut self, target: &str, name: &str, path: &Path) {
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        self.add(target, name, &bytes);
    }

    /// Seeds of `append_log` (the file) and of `log_records` (its records, each a `u16` length
    /// and its bytes; longer ones cut) from the append log at `path`.
    fn add_log(&mut self, name: &str, path: &Path) {
        self.add_file("append_log", name, path);
        let recovered = stowage_core::file_safety::AppendLog::read_all(path).expect("a log");
        let mut input = Vec::new();
        for record in &recovered.records {
            let record = &record[..record.len().min(usize::from(u16::MAX))];
            input.extend_from_slice(&(record.len() as u16).to_le_bytes());
            input.extend_from_slice(record);
        }
        self.add("log_records", name, &input);
    }

    /// Seeds of both global heap and chunk targets from the HDF5 file at `path`.
    fn add_hdf5(&mut self, name: &str, path: &Path) {
        let bytes = fs::read(path).expect("reading an HDF5 file");
        let gcol = bytes.windows(4).position(|w| w == b"GCOL").unwrap_or(0) as u64;
        let mut heap = gcol.to_le_bytes().to_vec();
        heap.extend_from_slice(&1u32.to_le_bytes());
        heap.extend_from_slice(&bytes);
        self.add("hdf5_global_heap", name, &heap);
        for (i, chunk) in vlen_chunks(path, &bytes).into_iter().enumerate().take(2) {
            self.add("hdf5_chunk_filters", &format!("{name}-{i}"), &chunk);
        }
    }
}

/// Files under `dir` (recursively) whose names end with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A seed name for `path`: its last two components.
fn short(path: &Path) -> String {
    let parts: Vec<String> =
        path.iter().rev().take(2).map(|p| p.to_string_lossy().into_owned()).collect();
    format!("{}-{}", parts.get(1).cloned().unwrap_or_default(), parts[0])
}

fn from_reference(seeds: &mut Seeds, reference: &Path) {
    let hangar = reference.join("hangar-numpy10");
    for path in files(&hangar.join("repo/data"), ".npy").iter().take(6) {
        seeds.add_file("npy_header", &format!("hangar-{}", short(path)), path);
    }
    for path in files(&reference.join("dnanet-memmap/expected"), ".npy").iter().take(2) {
        seeds.add_file("npy_header", &format!("expected-{}", short(path)), path);
    }
    let records: serde_json::Value =
        serde_json::from_slice(&fs::read(hangar.join("records.json")).expect("records.json"))
            .expect("records.json parses");
    let mut columns_seen = std::collections::BTreeSet::new();
    for entry in records.as_array().expect("a list of records") {
        let column = entry["column"].as_str().unwrap_or_default();
        if !columns_seen.insert(column.to_string()) {
            continue;
        }
        let mut input = entry["record"].as_str().expect("record string").as_bytes().to_vec();
        input.push(b'\n');
        input.extend(
            fs::read(hangar.join(entry["data_file"].as_str().expect("data_file"))).unwrap(),
        );
        seeds.add("numpy10_record", &format!("hangar-{column}"), &input);
    }

    let dnanet = reference.join("dnanet-memmap/cache_root");
    for path in files(&dnanet, "manifest.jsonl") {
        seeds.add_file("memmap_manifest", &format!("dnanet-{}", short(&path)), &path);
    }
    for path in files(&dnanet, "shapes.json") {
        seeds.add_file("memmap_shapes_json", &format!("dnanet-{}", short(&path)), &path);
    }
    for suffix in ["panels.json", "alleles.json"] {
        for path in files(&dnanet, suffix).iter().take(1) {
            let mut input = vec![0u8];
            input.extend(fs::read(path).unwrap());
            seeds.add("memmap_sidecar", &format!("dnanet-{}", short(path)), &input);
        }
    }

    let torchcachex = reference.join("torchcachex/caches");
    for path in files(&torchcachex, "schema.json") {
        seeds.add_file("arrow_schema_json", &format!("torchcachex-{}", short(&path)), &path);
    }
    for path in files(&torchcachex, "segment_000000.arrow").iter().take(5) {
        let name = path.parent().and_then(Path::parent).map(short).unwrap_or_default();
        seeds.add_file("arrow_segment", &format!("torchcachex-{name}"), path);
    }

    for path in files(&reference.join("aenet-torch-cache"), ".h5").iter().take(3) {
        seeds.add_hdf5(&format!("aenet-{}", short(path)), path);
    }
    // Every file aenet wrote, whole: the foreign files `stowage keys`, `get` and `verify` read.
    for path in files(&reference.join("aenet-torch-cache"), ".h5") {
        seeds.add_file("hdf5_foreign_file", &format!("aenet-{}", short(&path)), &path);
    }
}

/// The pristine cache of the corruption campaign for backend `name` (finalized, several files of
/// each kind, with the settings of `stowage_reliability::backends::all`), built under `work`.
fn pristine(name: &str, work: &Path) -> PathBuf {
    let subject = select(&[name.to_string()]).expect("a backend of the campaigns").remove(0);
    let dir = work.join(name);
    Pristine::build(&*subject.factory, &dir).expect("building a cache");
    dir
}

fn from_backends(seeds: &mut Seeds, work: &Path) {
    let dir = pristine("npy", work);
    for path in files(&dir, ".npy").iter().take(3) {
        seeds.add_file("npy_header", &format!("stowage-{}", short(path)), path);
    }
    seeds.add_log("npy-records.log", &dir.join("records.log"));
    for path in files(&dir.join("index"), ".bin").iter().take(2) {
        seeds.add_file("key_runs", &format!("stowage-npy-{}", short(path)), path);
    }

    let dir = pristine("memmap", work);
    seeds.add_file("memmap_shapes_json", "stowage-shapes.json", &dir.join("shapes.json"));
    // A finalized cache's key index run (stowage_index/, version 2: slots in hash order).
    seeds.add_file("key_runs", "stowage-memmap-run.bin", &dir.join("stowage_index/run.bin"));
    let mut meta = vec![1u8];
    meta.extend(fs::read(dir.join("stowage.json")).unwrap());
    seeds.add("memmap_sidecar", "stowage-stowage.json", &meta);
    for path in files(&dir, "meta.json") {
        let mut input = vec![0u8];
        input.extend(fs::read(&path).unwrap());
        seeds.add("memmap_sidecar", "stowage-meta.json", &input);
    }
    // An unfinished cache keeps its rows in manifest.jsonl.
    let memmap = stowage_memmap::MemmapFactory::default();
    let dir = work.join("memmap-unfinished");
    let schema = schema_for(&memmap.capabilities());
    let mut cache = memmap.create(&dir, &schema).expect("creating a cache");
    put_generated(&mut *cache, &schema, 0..12).expect("putting samples");
    cache.flush().expect("flushing");
    drop(cache);
    seeds.add_file("memmap_manifest", "stowage-manifest.jsonl", &dir.join("manifest.jsonl"));

    let dir = pristine("arrow", work);
    seeds.add_file("arrow_schema_json", "stowage-schema.json", &dir.join("schema.json"));
    seeds.add_log("arrow-stowage.log", &dir.join("stowage.log"));
    for (target, suffix) in [
        ("arrow_segment", ".arrow"),
        ("arrow_key_sidecar", ".keys"),
        ("arrow_row_sums", ".sums"),
        ("arrow_merged_index", ".bin"),
    ] {
        for path in files(&dir, suffix).iter().take(2) {
            seeds.add_file(target, &format!("stowage-{}", short(path)), path);
        }
    }

    let dir = pristine("hdf5", work);
    seeds.add_log("hdf5-stowage.log", &dir.join("stowage.log"));
    for path in files(&dir.join("index"), ".bin").iter().take(2) {
        seeds.add_file("key_runs", &format!("stowage-hdf5-{}", short(path)), path);
    }
    for path in files(&dir, ".h5").iter().take(1) {
        seeds.add_hdf5(&format!("stowage-{}", short(path)), path);
    }

    // An aenet cache stowage wrote: features, and its row checksums in
    // /torch_cache/stowage_checksums, which the foreign-file reader parses too.
    let path = work.join("aenet-stowage.h5");
    let compat = stowage_hdf5::DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
    let (dtype, sections) =
        (stowage_hdf5::StorageDtype::Float64, stowage_hdf5::CacheSections::default());
    let mut writer = stowage_hdf5::TorchCacheWriter::create(&path, &compat, dtype, sections)
        .expect("creating an aenet cache");
    for entry in 0..3 {
        let values = vec![0.25 * entry as f64; 12];
        let features = stowage_core::Tensor::from_slice(&[2, 6], &values).expect("a tensor");
        writer.add_features(entry, &features).expect("adding features");
    }
    writer.finish().expect("writing the aenet cache");
    seeds.add_file("hdf5_foreign_file", "stowage-aenet.h5", &path);

    let dir = pristine("example-journal", work);
    seeds.add_log("journal.log", &dir.join("journal.log"));
}

/// Inputs of `hdf5_chunk_filters` from the first chunk of each variable-length dataset of the
/// HDF5 file at `path` (whose bytes are `bytes`), in that target's layout.
fn vlen_chunks(path: &Path, bytes: &[u8]) -> Vec<Vec<u8>> {
    use stowage_hdf5::fuzzing::{FILTER_DEFLATE, FILTER_SHUFFLE, chunk_location, vlen_storage};
    let file = hdf5::File::open(path).expect("opening an HDF5 file");
    let mut datasets = Vec::new();
    let mut groups = vec![file.as_group().expect("root group")];
    while let Some(group) = groups.pop() {
        datasets.extend(group.datasets().unwrap_or_default());
        groups.extend(group.groups().unwrap_or_default());
    }
    let mut inputs = Vec::new();
    for dataset in datasets {
        let Ok(Some(storage)) = vlen_storage(dataset.id()) else { continue };
        let Ok(Some(chunk)) = chunk_location(dataset.id(), 0) else { continue };
        let ids: Vec<i32> = storage.filters.iter().map(|f| f.id).collect();
        // The target's pipelines: 0 deflate, 1 shuffle (no size) + deflate, 4 none.
        let selector: u8 = match ids[..] {
            [id] if id == FILTER_DEFLATE => 0,
            [shuffle, deflate] if shuffle == FILTER_SHUFFLE && deflate == FILTER_DEFLATE => 1,
            [] => 4,
            _ => continue,
        };
        let element = storage.element.map_or(1, |e| e.size());
        let (start, end) = (chunk.address as usize, (chunk.address + chunk.size) as usize);
        let Some(stored) = bytes.get(start..end) else { continue };
        let mut input = vec![selector];
        input.extend_from_slice(&chunk.filter_mask.to_le_bytes());
        input.extend_from_slice(&(storage.chunk_rows.min(4095) as u16).to_le_bytes());
        input.push(element.trailing_zeros() as u8);
        input.extend_from_slice(&(stored.len() as u32).to_le_bytes());
        input.extend_from_slice(stored);
        input.extend_from_slice(bytes);
        inputs.push(input);
    }
    inputs
}

/// Inputs of `hdf5_attributes` for the attribute values the readers meet: selector, variant,
/// shape, bytes (see the target).
fn attributes(seeds: &mut Seeds) {
    let text = |size: u8, value: &str| [&[0u8, size - 1, 0][..], value.as_bytes()].concat();
    seeds.add("hdf5_attributes", "fixed-float32", &text(7, "float32"));
    seeds.add(
        "hdf5_attributes",
        "fixed-spacepad",
        &[&[0u8, 128 + 15, 0][..], b"float64   "].concat(),
    );
    seeds.add("hdf5_attributes", "vlen-format", &[&[1u8, 0, 0][..], b"torch_cache_v2"].concat());
    seeds.add("hdf5_attributes", "bitfield", &[2, 0, 0, 1]);
    seeds.add("hdf5_attributes", "enum-bool", &[3, 0, 0, 1]);
    seeds.add("hdf5_attributes", "int64", &[&[4u8, 6, 0][..], &2i64.to_le_bytes()].concat());
    seeds.add("hdf5_attributes", "float64", &[&[5u8, 3, 0][..], &1.5f64.to_le_bytes()].concat());
    seeds.add("hdf5_attributes", "array", &[4, 4, 2, 1, 0, 0, 0, 2, 0, 0, 0]);
}

/// Seeds of `arrow_pickled_bytes`: stowage's own pickles of bytes (short, framed) and CPython's
/// pickles of None, a str and an object, which a torchcachex blob column may hold.
fn pickles(seeds: &mut Seeds) {
    use stowage_arrow::fuzzing::blob_encoding::pickle_bytes;
    seeds.add("arrow_pickled_bytes", "bytes-empty", &pickle_bytes(b""));
    seeds.add("arrow_pickled_bytes", "bytes-short", &pickle_bytes(b"abc"));
    seeds.add("arrow_pickled_bytes", "bytes-long", &pickle_bytes(&[7u8; 300]));
    seeds.add("arrow_pickled_bytes", "none", b"\x80\x04N.");
    // pickle.dumps("abc") and pickle.dumps(collections.OrderedDict()), protocol 4.
    seeds.add("arrow_pickled_bytes", "str", b"\x80\x04\x95\x07\0\0\0\0\0\0\0\x8c\x03abc\x94.");
    seeds.add(
        "arrow_pickled_bytes",
        "object",
        b"\x80\x04\x95\x22\0\0\0\0\0\0\0\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94.",
    );
}

/// Manifests of stowage-remote: an empty version and one with parts from two ranks.
fn remote_manifests(seeds: &mut Seeds) {
    use stowage_remote::manifest::{Manifest, ObjectRef, PartRef};
    let empty = Manifest::empty("arrow");
    seeds.add("remote_manifest", "empty.json", &empty.to_bytes());
    let mut manifest = Manifest::empty("npy");
    manifest.version = 3;
    for (rank, seq) in [("rank-0", 1), ("rank-0", 2), ("rank-1", 1)] {
        let name = format!("commits/{rank}/{seq:020}.json");
        let commit = ObjectRef::of(&name, name.as_bytes());
        let data = format!("ranks/{rank}/objects/{seq}");
        let objects = vec![ObjectRef::of(&data, data.as_bytes())];
        manifest.parts.push(PartRef { rank: rank.into(), seq, commit, rows: 4, objects });
    }
    manifest.watermarks = [("rank-0".to_owned(), 2), ("rank-1".to_owned(), 1)].into();
    manifest.rows = 12;
    seeds.add("remote_manifest", "parts.json", &manifest.to_bytes());
}
