//! HDF5 global heap collections, parsed from the file's bytes: where each variable-length row's
//! values lie.
//!
//! A collection (file format spec, "Global Heap") is: `GCOL`, version 1, 3 reserved bytes, the
//! collection size (a length field, including this header); then objects, each a `u16` index
//! (0 = free space), a `u16` reference count, 4 reserved bytes, the object size (a length field)
//! and the data, padded to a multiple of 8. The free-space object's size counts its own header;
//! a tail too short for an object header is free space too. Only 8-byte length fields are
//! handled (the reader falls back to libhdf5 for other files).
//!
//! The bytes are untrusted: every size is checked against the collection and the file, and a
//! collection libhdf5 would loop on or read past (an object running past the collection's end, a
//! zero-sized step) is an error here.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, RwLock};

/// Bytes of a collection header and of an object header (8-byte length fields).
const HEADER: usize = 16;

/// Where the objects of one collection lie: `(index, byte range in the file)`, sorted by index.
#[derive(Debug, PartialEq, Eq)]
struct Collection {
    objects: Vec<(u16, Range<usize>)>,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses the collection at byte `at` of `file`.
fn parse(file: &[u8], at: u64) -> Result<Collection, String> {
    let start = usize::try_from(at).ok().filter(|&s| s.saturating_add(HEADER) <= file.len());
    let Some(start) = start else {
        return Err(format!(
            "global heap collection at byte {at} lies past the file's end ({} bytes)",
            file.len()
        ));
    };
    let header = &file[start..start + HEADER];
    if &header[..4] != b"GCOL" || header[4] != 1 {
        return Err(format!("no global heap collection (GCOL version 1) at byte {at}"));
    }
    let size = u64_at(header, 8);
    let end = usize::try_from(size)
        .ok()
        .and_then(|size| start.checked_add(size))
        .filter(|&end| end <= file.len() && end >= start + HEADER);
    let Some(end) = end else {
        return Err(format!(
            "global heap collection at byte {at} claims {size} bytes; the file holds {}",
            file.len()
        ));
    };
    let body = &file[start..end];
    let mut objects: Vec<(u16, Range<usize>)> = Vec::new();
    let mut p = HEADER;
    while body.len().saturating_sub(p) >= HEADER {
        let index = u16::from_le_bytes([body[p], body[p + 1]]);
        let object_size = u64_at(body, p + 8);
        if index == 0 {
            // Free space: its size includes its header. Zero would never advance.
            match usize::try_from(object_size) {
                Ok(0) => break,
                Ok(step) => p = p.saturating_add(step),
                Err(_) => break,
            }
            continue;
        }
        let data = p + HEADER;
        let data_end = usize::try_from(object_size)
            .ok()
            .and_then(|n| data.checked_add(n))
            .filter(|&e| e <= body.len())
            .ok_or_else(|| {
                format!(
                    "global heap collection at byte {at}: object {index} of {object_size} bytes \
                     runs past the collection's {} bytes",
                    body.len()
                )
            })?;
        objects.push((index, start + data..start + data_end));
        // The next header is 8-aligned relative to the collection.
        p = data_end.next_multiple_of(8);
    }
    objects.sort_unstable_by_key(|(index, _)| *index);
    if let Some(pair) = objects.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!(
            "global heap collection at byte {at} lists object {} twice",
            pair[0].0
        ));
    }
    Ok(Collection { objects })
}

/// The collections of one file read so far, each parsed once.
#[derive(Debug, Default)]
pub(crate) struct GlobalHeap {
    collections: RwLock<HashMap<u64, Arc<Collection>>>,
}

impl GlobalHeap {
    /// The data of object `index` of the collection at byte `at` of `file` (the same bytes every
    /// call), or what is wrong with it.
    pub fn object<'f>(&self, file: &'f [u8], at: u64, index: u32) -> Result<&'f [u8], String> {
        let cached = self.collections.read().expect("never poisoned").get(&at).cloned();
        let collection = match cached {
            Some(collection) => collection,
            None => {
                let parsed = Arc::new(parse(file, at)?);
                let mut collections = self.collections.write().expect("never poisoned");
                collections.entry(at).or_insert(parsed).clone()
            }
        };
        let found = u16::try_from(index).ok().and_then(|index| {
            let at = collection.objects.binary_search_by_key(&index, |(i, _)| *i).ok()?;
            Some(collection.objects[at].1.clone())
        });
        found
            .map(|range| &file[range])
            .ok_or_else(|| format!("global heap collection at byte {at} holds no object {index}"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A collection of `objects` (index, data) as libhdf5 lays it out, `total` bytes with a
    /// free-space object filling the rest (or exactly fitting when `total` is `None`).
    pub fn collection(objects: &[(u16, &[u8])], total: Option<usize>) -> Vec<u8> {
        let mut bytes = b"GCOL\x01\0\0\0".to_vec();
        bytes.extend_from_slice(&[0; 8]);
        for (index, data) in objects {
            bytes.extend_from_slice(&index.to_le_bytes());
            bytes.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
            bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
            bytes.extend_from_slice(data);
            bytes.resize(bytes.len().next_multiple_of(8), 0);
        }
        if let Some(total) = total {
            let free = total - bytes.len();
            if free >= HEADER {
                bytes.extend_from_slice(&[0; 8]);
                bytes.extend_from_slice(&(free as u64).to_le_bytes());
            }
            bytes.resize(total, 0);
        }
        let size = bytes.len() as u64;
        bytes[8..16].copy_from_slice(&size.to_le_bytes());
        bytes
    }

    #[test]
    fn objects_are_found_by_index_and_cached() {
        let mut file = vec![0xAA; 8];
        file.extend(collection(&[(1, b"abc"), (2, b""), (3, &[7; 16])], Some(4096)));
        file.extend(collection(&[(1, b"second")], None));
        let heap = GlobalHeap::default();
        assert_eq!(heap.object(&file, 8, 1).unwrap(), b"abc");
        assert_eq!(heap.object(&file, 8, 2).unwrap(), b"");
        assert_eq!(heap.object(&file, 8, 3).unwrap(), &[7; 16]);
        assert_eq!(heap.object(&file, 8 + 4096, 1).unwrap(), b"second");
        assert_eq!(heap.collections.read().unwrap().len(), 2);
        let missing = heap.object(&file, 8, 4).unwrap_err();
        assert!(missing.contains("holds no object 4"), "{missing}");
        assert!(heap.object(&file, 8, 70_000).is_err());
    }

    #[test]
    fn damaged_collections_are_errors_never_panics() {
        let good = collection(&[(1, b"abcdefgh"), (2, b"xy")], Some(64));
        let heap = || GlobalHeap::default();
        // Every single-byte change and every truncation of the header region gives a value or
        // an error, never a panic or a read outside the file.
        for at in 0..good.len() {
            for value in [0x00, 0xFF, 0x80, 0x01] {
                let mut bad = good.clone();
                bad[at] = value;
                for index in 0..4 {
                    let _ = heap().object(&bad, 0, index);
                }
            }
            let _ = heap().object(&good[..at], 0, 1);
        }
        let mut signature = good.clone();
        signature[0] = b'X';
        assert!(heap().object(&signature, 0, 1).unwrap_err().contains("no global heap"));
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(heap().object(&huge, 0, 1).unwrap_err().contains("claims"));
        let mut past = good.clone();
        past[16 + 8..16 + 16].copy_from_slice(&1000u64.to_le_bytes());
        assert!(heap().object(&past, 0, 1).unwrap_err().contains("runs past"));
        let mut twice = good.clone();
        twice[40] = 1; // object 2's index becomes 1
        assert!(heap().object(&twice, 0, 1).unwrap_err().contains("twice"));
        assert!(heap().object(&good, u64::MAX, 1).unwrap_err().contains("past the file's end"));
    }
}
