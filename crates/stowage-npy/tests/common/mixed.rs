//! Helpers of the mixed-writer tests: expected values, and snapshots of another writer's files.

#![allow(dead_code)] // each test file uses part of it

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use stowage_core::npy_header;
use stowage_core::{DType, Tensor};

/// An expected-values `.npy` (numpy.save, format 1.0, C order), read with stowage's header parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl Expected {
    pub fn read(path: &Path) -> Expected {
        let file = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let h = npy_header::parse(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!h.fortran_order && h.byte_order == stowage_core::ByteOrder::Little);
        let bytes = file[h.data_offset..].to_vec();
        assert_eq!(bytes.len(), h.data_len().unwrap(), "{}", path.display());
        Expected { dtype: h.dtype, shape: h.shape, bytes }
    }

    pub fn of(tensor: &Tensor) -> Expected {
        Expected {
            dtype: tensor.dtype(),
            shape: tensor.shape().to_vec(),
            bytes: tensor.bytes().to_vec(),
        }
    }

    pub fn assert_read(&self, got: &Tensor, what: &str) {
        assert_eq!(got.dtype(), self.dtype, "{what}: dtype");
        assert_eq!(got.shape(), self.shape.as_slice(), "{what}: shape");
        assert_eq!(got.bytes(), self.bytes.as_slice(), "{what}: bytes");
    }
}

/// The bytes of each file, by path: what must stay byte-identical.
pub fn snapshot(paths: &[PathBuf]) -> BTreeMap<PathBuf, Vec<u8>> {
    paths
        .iter()
        .map(|p| (p.clone(), std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))))
        .collect()
}

/// Every file in `snapshot` still holds exactly its bytes.
pub fn assert_unchanged(snapshot: &BTreeMap<PathBuf, Vec<u8>>, after: &str) {
    for (path, bytes) in snapshot {
        let now = std::fs::read(path)
            .unwrap_or_else(|e| panic!("after {after}: {} is gone: {e}", path.display()));
        assert!(now == *bytes, "after {after}: {} changed", path.display());
    }
}

/// The uids of the `.npy` files in `dir` (a data or marker directory), sorted.
pub fn uids_in(dir: &Path) -> Vec<String> {
    let mut uids: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter_map(|n| n.strip_suffix(".npy").map(str::to_owned))
            .collect(),
        Err(_) => Vec::new(),
    };
    uids.sort();
    uids
}
