//! The frame of stowage-arrow's own files (key sidecars, the merged index, row checksums): one
//! checked header, then the body, mapped read-only.
//!
//! ```text
//! header (64 bytes, little-endian): magic (8) | up to 5 u64 fields, zero-padded (40) |
//!   body xxh3 u64 | header xxh3 u64 (of the 56 bytes before it)
//! body: the format's own bytes
//! ```
//!
//! Opening checks the magic and the header checksum, so every header byte is covered; the body
//! checksum is checked on demand ([`Framed::verify`]), since it means reading the whole file.

use std::path::{Path, PathBuf};

use memmap2::Mmap;
use stowage_core::{Error, IoResultExt, Result};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes before the body.
pub(crate) const HEADER: usize = 64;
/// How many u64 fields a header holds.
const MAX_FIELDS: usize = 5;

/// A whole file: the header with `magic` and `fields`, then `body`.
pub(crate) fn encode(magic: &[u8; 8], fields: &[u64], body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER + body.len()];
    out[HEADER..].copy_from_slice(body);
    write_header(magic, fields, &mut out);
    out
}

/// Writes the header with `magic` and `fields` over the first [`HEADER`] bytes of `file`, whose
/// body (the rest) is already in place: [`encode`] without a copy of the body.
pub(crate) fn write_header(magic: &[u8; 8], fields: &[u64], file: &mut [u8]) {
    assert!(fields.len() <= MAX_FIELDS, "a header holds {MAX_FIELDS} fields");
    let body_sum = xxh3_64(&file[HEADER..]);
    let header = &mut file[..HEADER];
    header.fill(0);
    header[..8].copy_from_slice(magic);
    for (i, field) in fields.iter().enumerate() {
        header[8 + 8 * i..16 + 8 * i].copy_from_slice(&field.to_le_bytes());
    }
    header[HEADER - 16..HEADER - 8].copy_from_slice(&body_sum.to_le_bytes());
    let header_sum = xxh3_64(&header[..HEADER - 8]);
    header[HEADER - 8..].copy_from_slice(&header_sum.to_le_bytes());
}

/// An open file whose header checked out.
#[derive(Debug)]
pub(crate) struct Framed {
    path: PathBuf,
    map: Mmap,
}

impl Framed {
    /// Maps `path` and checks its header; `what` names the format in errors.
    ///
    /// Errors: [`Error::Corrupted`] naming the file; [`Error::Io`] (`NotFound` included).
    pub(crate) fn open(path: &Path, magic: &[u8; 8], what: &str) -> Result<Framed> {
        Framed::open_advised(path, magic, what, |_| {})
    }

    /// [`Framed::open`], calling `advise` with the whole map before its header is read (to ask
    /// the kernel for pages with `madvise(MADV_WILLNEED)`, say).
    pub(crate) fn open_advised(
        path: &Path,
        magic: &[u8; 8],
        what: &str,
        advise: impl FnOnce(&[u8]),
    ) -> Result<Framed> {
        let file = std::fs::File::open(path).at(path)?;
        // SAFETY: these files are written whole under a temporary name and renamed into place,
        // never modified afterwards; the map is read-only.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        // Read at random (a hash table's slot, a row's checksum): a fault reads its page, not
        // the kernel's read-around (8 MiB on some disks) of a sequential reader.
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
        advise(&map);
        Framed::check(map, path, magic, what)
    }

    /// Checks the header of `map`, the bytes of the file at `path`.
    pub(crate) fn check(map: Mmap, path: &Path, magic: &[u8; 8], what: &str) -> Result<Framed> {
        if map.len() < HEADER || &map[..8] != magic {
            let shown = String::from_utf8_lossy(magic);
            return Err(Error::corrupted(
                path,
                format!("not a {what} ({} bytes, no {shown} magic)", map.len()),
            ));
        }
        let stored = u64::from_le_bytes(map[HEADER - 8..HEADER].try_into().expect("8 bytes"));
        if stored != xxh3_64(&map[..HEADER - 8]) {
            return Err(Error::corrupted(path, "header checksum mismatch"));
        }
        Ok(Framed { path: path.to_path_buf(), map })
    }

    /// Header field `i`.
    pub(crate) fn field(&self, i: usize) -> u64 {
        let at = 8 + 8 * i;
        u64::from_le_bytes(self.map[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The bytes after the header.
    pub(crate) fn body(&self) -> &[u8] {
        &self.map[HEADER..]
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Checks the body against its checksum (reads the whole file).
    ///
    /// Errors: [`Error::Corrupted`] naming the file.
    pub(crate) fn verify(&self) -> Result<()> {
        // Read whole, in order: asked for at once (the map is advised for random reads).
        let mut plan = stowage_core::cold_reads::PagePlan::new();
        plan.add_whole(&self.map);
        plan.advise();
        let stored = u64::from_le_bytes(self.map[HEADER - 16..HEADER - 8].try_into().expect("8"));
        if stored != xxh3_64(self.body()) {
            return Err(Error::corrupted(&self.path, "body checksum mismatch"));
        }
        Ok(())
    }

    /// `Corrupted` naming this file.
    pub(crate) fn corrupted(&self, detail: String) -> Error {
        Error::corrupted(&self.path, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_covered_by_one_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let good = encode(b"TESTFMT1", &[7, u64::MAX], b"body bytes");
        std::fs::write(&path, &good).unwrap();
        let framed = Framed::open(&path, b"TESTFMT1", "test file").unwrap();
        framed.verify().unwrap();
        assert_eq!(
            (framed.field(0), framed.field(1), framed.body()),
            (7, u64::MAX, &b"body bytes"[..])
        );
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            let result = Framed::open(&path, b"TESTFMT1", "test file").and_then(|f| f.verify());
            assert!(matches!(result, Err(Error::Corrupted { .. })), "byte {at}");
        }
        std::fs::write(&path, &good[..HEADER - 1]).unwrap();
        let err = Framed::open(&path, b"TESTFMT1", "test file").unwrap_err();
        assert!(err.to_string().contains("not a test file"), "{err}");
    }
}
