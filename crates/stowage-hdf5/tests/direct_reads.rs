//! The direct reader (chunks and global heap decoded by stowage from a map of the file) returns
//! exactly what libhdf5's own variable-length read returns, for every aenet reference file and
//! for files stowage writes (with its direct writer: libhdf5 reads them back the same); damaged
//! heap bytes and chunks are `Error::Corrupted` naming the file and the entry, never a panic or a
//! crash.

mod common;

use std::path::Path;

use common::{compat, derivatives, features};
use stowage_core::{Error, Tensor};
use stowage_hdf5::test_support::ffi::storage;
use stowage_hdf5::{CacheSections, ReadPath, StorageDtype, TorchCache, TorchCacheWriter};

const DTYPES: [StorageDtype; 2] = [StorageDtype::Float32, StorageDtype::Float64];

/// Opens `path` both ways and compares every entry at both dtypes; returns the arrays compared.
fn same_both_ways(path: &Path) -> usize {
    let direct = TorchCache::open_with(path, ReadPath::Direct).unwrap().expect("a cache");
    let libhdf5 = TorchCache::open_with(path, ReadPath::Libhdf5).unwrap().expect("a cache");
    assert!(direct.reads_directly(), "{}: some dataset is left to libhdf5", path.display());
    assert!(!libhdf5.reads_directly());
    assert_eq!(direct.feature_entries(), libhdf5.feature_entries());
    assert_eq!(direct.derivative_entries(), libhdf5.derivative_entries());
    let mut compared = 0;
    for dtype in DTYPES {
        for entry in direct.feature_entries() {
            let got = direct.features_as(entry, dtype).unwrap();
            assert_eq!(got, libhdf5.features_as(entry, dtype).unwrap(), "entry {entry}");
            compared += 1;
        }
        for entry in direct.derivative_entries() {
            let got = direct.derivatives_as(entry, dtype).unwrap();
            assert_eq!(got, libhdf5.derivatives_as(entry, dtype).unwrap(), "entry {entry}");
            compared += 11;
        }
    }
    compared
}

#[test]
fn every_reference_file_reads_the_same_as_through_libhdf5() {
    let Some(set) = stowage_test_support::reference::reference_set("aenet-torch-cache") else {
        return;
    };
    let files = ["v2_both_f64", "v2_deriv_f64", "v2_feat_f32", "v2_single_f32", "v1_legacy"];
    let compared: usize = files.iter().map(|f| same_both_ways(&set.join(format!("{f}.h5")))).sum();
    // (3+3+1 feature matrices, 11 arrays for each of 2+2+1+2 derivative entries) x 2 dtypes.
    assert_eq!(compared, 2 * (3 + 3 + 1 + 11 * (2 + 2 + 1 + 2)));
}

/// Writes `entries` entries (features for all, derivatives for every third) at `storage`.
fn write_cache(path: &Path, storage: StorageDtype, entries: i64) {
    let mut writer =
        TorchCacheWriter::create(path, &compat(), storage, CacheSections::default()).unwrap();
    for i in 0..entries {
        writer.add_features(i, &features(i % 3)).unwrap();
        if i % 3 != 1 {
            writer.add_derivatives(i, &derivatives(i % 3)).unwrap();
        }
    }
    writer.finish().unwrap();
}

#[test]
fn stowage_written_files_read_the_same_as_through_libhdf5() {
    let dir = tempfile::tempdir().unwrap();
    for storage in DTYPES {
        let path = dir.path().join(format!("{}.h5", storage.name()));
        write_cache(&path, storage, 3);
        assert_eq!(same_both_ways(&path), 2 * (3 + 11 * 2));
    }
    // One species: the typespin rows are empty (nil descriptors, no heap object).
    let path = dir.path().join("single.h5");
    let mut single = compat();
    single.species = vec!["A".into()];
    let mut writer =
        TorchCacheWriter::create(&path, &single, StorageDtype::Float32, CacheSections::default())
            .unwrap();
    for i in 0..3 {
        let mut d = derivatives(i);
        (d.radial.neighbor_typespin, d.angular.triplet_typespin) = (None, None);
        writer.add_derivatives(i, &d).unwrap();
    }
    writer.finish().unwrap();
    assert_eq!(same_both_ways(&path), 2 * 11 * 3);
    // Past one chunk (8192 rows): the second chunk of every dataset is decoded too.
    let path = dir.path().join("two_chunks.h5");
    write_cache(&path, StorageDtype::Float64, 8200);
    let direct = TorchCache::open(&path).unwrap().unwrap();
    let libhdf5 = TorchCache::open_with(&path, ReadPath::Libhdf5).unwrap().unwrap();
    for entry in [0, 8191, 8192, 8199] {
        assert_eq!(direct.features(entry).unwrap(), libhdf5.features(entry).unwrap());
        assert_eq!(direct.derivatives(entry).unwrap(), libhdf5.derivatives(entry).unwrap());
    }
}

/// A stowage-written cache of the 3 reference entries and the byte offsets of its global heap
/// collections.
fn written(dir: &Path) -> (std::path::PathBuf, Vec<u8>, Vec<usize>) {
    let path = dir.join("dataset.h5");
    write_cache(&path, StorageDtype::Float64, 3);
    let bytes = std::fs::read(&path).unwrap();
    let collections: Vec<usize> =
        bytes.windows(5).enumerate().filter(|(_, w)| w == b"GCOL\x01").map(|(at, _)| at).collect();
    assert!(!collections.is_empty());
    (path, bytes, collections)
}

/// Every entry's features and derivatives of the file at `path`, or the first error.
fn read_everything(path: &Path) -> stowage_core::Result<Vec<Option<Tensor>>> {
    let cache = TorchCache::open(path)?.expect("a cache");
    let mut out = Vec::new();
    for entry in 0..3 {
        out.push(cache.features(entry)?);
        if let Some(d) = cache.derivatives(entry)? {
            out.extend([Some(d.radial.dg_drij), Some(d.angular.grads_k)]);
        }
    }
    Ok(out)
}

fn assert_corrupted_naming_the_entry(error: &Error, path: &Path) {
    assert!(matches!(error, Error::Corrupted { .. }), "{error}");
    let text = error.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("of entry"), "{text}");
}

#[test]
fn damaged_global_heap_bytes_are_corruption_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, collections) = written(dir.path());
    let intact = read_everything(&path).unwrap();
    // The signature, the collection size and the first object's size of each collection.
    for &at in &collections {
        for (offset, value) in [(0, b'X'), (13, 0xFF), (15, 0x7F), (16 + 15, 0x40)] {
            let mut bad = bytes.clone();
            bad[at + offset] = value;
            std::fs::write(&path, &bad).unwrap();
            match read_everything(&path) {
                Err(error) => assert_corrupted_naming_the_entry(&error, &path),
                Ok(values) => {
                    panic!("byte {} set to {value} went unnoticed: {values:?}", at + offset)
                }
            }
        }
    }
    // Every header byte of every collection (its header and its first object's): a value, or
    // corruption; the data bytes themselves carry no checksum in aenet's format.
    let mut refused = 0;
    for &at in &collections {
        for offset in 0..32 {
            let mut bad = bytes.clone();
            bad[at + offset] ^= 0xA5;
            std::fs::write(&path, &bad).unwrap();
            match read_everything(&path) {
                Ok(values) => assert_eq!(values.len(), intact.len()),
                Err(error) => {
                    assert_corrupted_naming_the_entry(&error, &path);
                    refused += 1;
                }
            }
        }
    }
    assert!(refused > 0);
}

#[test]
fn damaged_chunks_are_corruption_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, _) = written(dir.path());
    let location = {
        let file = hdf5::File::open(&path).unwrap();
        let values = file.dataset("torch_cache/features/values").unwrap();
        storage::chunk_location(values.id(), 0).unwrap().expect("a written chunk")
    };
    let (start, size) = (location.address as usize, location.size as usize);
    for at in [start, start + size / 2, start + size - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0xFF;
        std::fs::write(&path, &bad).unwrap();
        let cache = TorchCache::open(&path).unwrap().unwrap();
        let error = cache.features(0).unwrap_err();
        assert_corrupted_naming_the_entry(&error, &path);
        assert!(error.to_string().contains("torch_cache/features/values"), "{error}");
    }
}
