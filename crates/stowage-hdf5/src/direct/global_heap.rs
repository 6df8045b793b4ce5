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
//!
//! [`lay_out`] places rows into collections the way libhdf5 does, for the direct writer.

use std::collections::HashMap;
use std::ops::{ControlFlow, Range};
use std::sync::{Arc, RwLock};

/// Bytes of a collection header and of an object header (8-byte length fields).
const HEADER: usize = 16;

/// Where the objects of one collection lie: `(index, byte range in the file)`, sorted by index.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Collection {
    objects: Vec<(u16, Range<usize>)>,
}

impl Collection {
    /// The byte range in the file of object `index`, if the collection holds it.
    pub(crate) fn object(&self, index: u32) -> Option<Range<usize>> {
        let index = u16::try_from(index).ok()?;
        let at = self.objects.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        Some(self.objects[at].1.clone())
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses the collection at byte `at` of `file`.
pub(crate) fn parse(file: &[u8], at: u64) -> Result<Collection, String> {
    let mut objects: Vec<(u16, Range<usize>)> = Vec::new();
    walk(file, at, |index, range| {
        objects.push((index, range));
        ControlFlow::Continue(())
    })?;
    objects.sort_unstable_by_key(|(index, _)| *index);
    if let Some(pair) = objects.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!(
            "global heap collection at byte {at} lists object {} twice",
            pair[0].0
        ));
    }
    Ok(Collection { objects })
}

/// Walks the collection at byte `at` of `file`, calling `visit` with each object's index and
/// file byte range (free space skipped) until it breaks; every header on the way is checked.
///
/// Walked exactly as libhdf5 walks it (`H5HG__cache_heap_deserialize`), so that a collection
/// accepted here is one libhdf5 parses without looping or reading past it: an object's header,
/// then its size rounded up to 8 (not its end); free space steps by its size.
fn walk(
    file: &[u8],
    at: u64,
    mut visit: impl FnMut(u16, Range<usize>) -> ControlFlow<()>,
) -> Result<(), String> {
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
    let mut p = HEADER;
    while p < body.len() {
        if body.len() - p < HEADER {
            break; // A tail too short for a header: free space.
        }
        let index = u16::from_le_bytes([body[p], body[p + 1]]);
        let object_size = u64_at(body, p + 8);
        let data = p + HEADER;
        let next = if index == 0 {
            // Free space: its size includes its header. Zero would make libhdf5 loop forever.
            usize::try_from(object_size)
                .ok()
                .filter(|&step| step > 0)
                .and_then(|step| p.checked_add(step))
                .filter(|&next| next <= body.len())
        } else {
            // The data must lie in the collection; its padding may end it.
            usize::try_from(object_size)
                .ok()
                .and_then(|n| data.checked_add(n))
                .filter(|&data_end| data_end <= body.len())
                .map(|_| (data + (object_size as usize).next_multiple_of(8)).min(body.len()))
        };
        let Some(next) = next else {
            return Err(format!(
                "global heap collection at byte {at}: {} of {object_size} bytes at byte {} runs \
                 past the collection's {} bytes",
                if index == 0 { "free space".to_owned() } else { format!("object {index}") },
                start + p,
                body.len()
            ));
        };
        if index != 0 {
            let range = start + data..start + data + object_size as usize;
            if visit(index, range).is_break() {
                return Ok(());
            }
        }
        p = next;
    }
    Ok(())
}

/// The file bytes of the whole collection at byte `at` of `file` (header included), once it
/// parses ([`parse`]): what a writer lists as a segment's data, not its metadata.
pub(crate) fn span(file: &[u8], at: u64) -> Result<Range<usize>, String> {
    parse(file, at)?;
    let start = at as usize; // In the file: parse checked it.
    Ok(start..start + u64_at(file, start + 8) as usize)
}

/// The file byte range of object `index` of the collection at byte `at` of `file`, found by
/// walking the collection from its start to the object as [`parse`] walks it (every header on
/// the way checked the same way), without parsing the rest or keeping anything: a cold read of
/// one row touches the collection's pages up to its object, not every collection of its chunk.
/// Unlike [`parse`], an index listed twice is not an error (the first is returned): callers
/// check what they read against a checksum.
pub(crate) fn find(file: &[u8], at: u64, index: u32) -> Result<Range<usize>, String> {
    let wanted = u16::try_from(index).ok().filter(|&i| i != 0);
    let mut found = None;
    walk(file, at, |object, range| {
        if Some(object) == wanted {
            found = Some(range);
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    found.ok_or_else(|| format!("global heap collection at byte {at} holds no object {index}"))
}

/// The collections of one file read so far, each parsed once.
///
/// Collections may overlap in a hostile file (one inside another's data), so what is kept is
/// bounded by the file's size: past one kept object per 8 bytes of the file, the cache starts
/// over.
#[derive(Debug, Default)]
pub(crate) struct GlobalHeap {
    collections: RwLock<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    by_address: HashMap<u64, Arc<Collection>>,
    objects: usize,
}

impl GlobalHeap {
    /// The data of object `index` of the collection at byte `at` of `file` (the same bytes every
    /// call), or what is wrong with it.
    pub fn object<'f>(&self, file: &'f [u8], at: u64, index: u32) -> Result<&'f [u8], String> {
        let cached = self.collections.read().expect("never poisoned").by_address.get(&at).cloned();
        let collection = match cached {
            Some(collection) => collection,
            None => {
                let parsed = Arc::new(parse(file, at)?);
                let mut cache = self.collections.write().expect("never poisoned");
                if cache.objects + parsed.objects.len() > file.len() / 8 + 1024 {
                    *cache = Cache::default();
                }
                cache.objects += parsed.objects.len();
                cache.by_address.entry(at).or_insert(parsed).clone()
            }
        };
        collection
            .object(index)
            .map(|range| &file[range])
            .ok_or_else(|| format!("global heap collection at byte {at} holds no object {index}"))
    }
}

/// Size of the collections small objects share (libhdf5's `H5HG_MINSIZE`).
const SHARED_COLLECTION: usize = 4096;

/// Where a row lies in a batch of collections: the collection's offset from the batch's start and
/// the object's index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub collection: u64,
    pub index: u16,
}

/// One piece of a batch's bytes, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A collection or object header.
    Header([u8; HEADER]),
    /// The bytes of row `i` of the batch.
    Row(usize),
    /// Zero bytes (padding to 8, or a collection's free space after its free-space header).
    Zeros(usize),
}

/// Global heap collections holding a batch of rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Per row: where it is, or `None` for an empty row (stored as a nil descriptor, as libhdf5
    /// stores an empty sequence).
    pub rows: Vec<Option<Placed>>,
    /// The bytes to write, in order.
    pub pieces: Vec<Piece>,
    /// Their total size.
    pub bytes: u64,
}

fn header(first: [u8; 8], size: u64) -> Piece {
    let mut bytes = [0u8; HEADER];
    bytes[..8].copy_from_slice(&first);
    bytes[8..].copy_from_slice(&size.to_le_bytes());
    Piece::Header(bytes)
}

fn collection_header(size: usize) -> Piece {
    header(*b"GCOL\x01\0\0\0", size as u64)
}

fn object_header(index: u16, size: usize) -> Piece {
    let [a, b] = index.to_le_bytes();
    // Reference count 0 and 4 reserved bytes, as libhdf5 writes variable-length data.
    header([a, b, 0, 0, 0, 0, 0, 0], size as u64)
}

/// The shared collection being filled.
struct Open {
    start: usize,
    used: usize,
    next_index: u16,
}

/// Lays out rows of `sizes` bytes as libhdf5 would: each object takes a 16-byte header and its
/// bytes padded to 8; objects that fit share 4096-byte collections (their free space closed by a
/// free-space object; at most 170 objects, far below the `u16` index limit), a larger one gets a
/// collection of exactly its size. Collections follow each other in row order (unlike libhdf5,
/// a shared collection is not reopened after a larger row: a little free space is left).
pub(crate) fn lay_out(sizes: impl IntoIterator<Item = usize>) -> Layout {
    let mut layout = Layout::default();
    let mut open: Option<Open> = None;
    let mut end = 0usize;
    for (row, size) in sizes.into_iter().enumerate() {
        if size == 0 {
            layout.rows.push(None);
            continue;
        }
        let need = HEADER + size.next_multiple_of(8);
        if open.as_ref().is_some_and(|o| o.used + need > SHARED_COLLECTION) {
            close(&mut layout.pieces, open.take());
        }
        if open.is_none() {
            if HEADER + need > SHARED_COLLECTION {
                // A collection of its own, exactly full.
                layout.pieces.push(collection_header(HEADER + need));
                layout.rows.push(Some(Placed { collection: end as u64, index: 1 }));
                push_object(&mut layout.pieces, 1, row, size);
                end += HEADER + need;
                continue;
            }
            layout.pieces.push(collection_header(SHARED_COLLECTION));
            open = Some(Open { start: end, used: HEADER, next_index: 1 });
            end += SHARED_COLLECTION;
        }
        let shared = open.as_mut().expect("opened above");
        layout
            .rows
            .push(Some(Placed { collection: shared.start as u64, index: shared.next_index }));
        push_object(&mut layout.pieces, shared.next_index, row, size);
        shared.used += need;
        shared.next_index += 1;
    }
    close(&mut layout.pieces, open);
    layout.bytes = end as u64;
    layout
}

/// Ends a shared collection: its free space as a free-space object (whose size counts its own
/// header), or plain zeros when too short for a header.
fn close(pieces: &mut Vec<Piece>, open: Option<Open>) {
    let Some(open) = open else { return };
    let free = SHARED_COLLECTION - open.used;
    if free >= HEADER {
        pieces.push(object_header(0, free));
        pieces.push(Piece::Zeros(free - HEADER));
    } else if free > 0 {
        pieces.push(Piece::Zeros(free));
    }
}

fn push_object(pieces: &mut Vec<Piece>, index: u16, row: usize, size: usize) {
    pieces.push(object_header(index, size));
    pieces.push(Piece::Row(row));
    let padding = size.next_multiple_of(8) - size;
    if padding > 0 {
        pieces.push(Piece::Zeros(padding));
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
        assert_eq!(heap.collections.read().unwrap().by_address.len(), 2);
        let missing = heap.object(&file, 8, 4).unwrap_err();
        assert!(missing.contains("holds no object 4"), "{missing}");
        assert!(heap.object(&file, 8, 70_000).is_err());
    }

    /// `find` walks to the object `parse` lists, and `span` is the whole collection; on damage
    /// both `find` and `parse` fail or `find` returns a range inside the collection, never a
    /// panic or a read outside the file.
    #[test]
    fn find_agrees_with_parse_and_damage_is_an_error() {
        let mut file = vec![0xAA; 8];
        file.extend(collection(&[(1, b"abc"), (2, b""), (3, &[7; 16])], Some(4096)));
        file.extend(collection(&[(1, b"second")], None));
        let parsed = parse(&file, 8).unwrap();
        for index in 1..=3 {
            assert_eq!(find(&file, 8, index).unwrap(), parsed.object(index).unwrap());
        }
        assert_eq!(&file[find(&file, 8 + 4096, 1).unwrap()], b"second");
        assert_eq!(span(&file, 8).unwrap(), 8..8 + 4096);
        assert!(find(&file, 8, 4).unwrap_err().contains("holds no object 4"));
        assert!(find(&file, 8, 0).is_err(), "index 0 is free space, never an object");
        assert!(find(&file, 8, 70_000).is_err());
        let good = collection(&[(1, b"abcdefgh"), (2, b"xy")], Some(64));
        for at in 0..good.len() {
            for value in [0x00, 0xFF, 0x80, 0x01] {
                let mut bad = good.clone();
                bad[at] = value;
                for index in 0..4 {
                    if let Ok(range) = find(&bad, 0, index) {
                        assert!(range.end <= bad.len());
                    }
                }
            }
            let _ = find(&good[..at], 0, 1);
        }
        let mut past = good.clone();
        past[16 + 8..16 + 16].copy_from_slice(&1000u64.to_le_bytes());
        assert!(find(&past, 0, 2).unwrap_err().contains("runs past"));
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

    /// The bytes of `layout` for `rows`.
    pub fn bytes_of(layout: &Layout, rows: &[&[u8]]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for piece in &layout.pieces {
            match piece {
                Piece::Header(header) => bytes.extend_from_slice(header),
                Piece::Row(i) => bytes.extend_from_slice(rows[*i]),
                Piece::Zeros(n) => bytes.resize(bytes.len() + n, 0),
            }
        }
        bytes
    }

    #[test]
    fn laid_out_rows_parse_back() {
        let big = vec![3u8; 5000];
        let medium = vec![4u8; 2000];
        let rows: Vec<&[u8]> = vec![b"abc", b"", &big, &[1; 8], &medium, &medium, b"z", b""];
        let layout = lay_out(rows.iter().map(|r| r.len()));
        let file = bytes_of(&layout, &rows);
        assert_eq!(file.len() as u64, layout.bytes);
        let heap = GlobalHeap::default();
        for (row, placed) in rows.iter().zip(&layout.rows) {
            match placed {
                None => assert!(row.is_empty()),
                Some(p) => {
                    assert_eq!(heap.object(&file, p.collection, u32::from(p.index)).unwrap(), *row)
                }
            }
        }
        // "abc" alone (the 5000-byte row, which gets a collection of its own, closes it); the
        // other four fill the next shared collection exactly (24 + 2016 + 2016 + 24 bytes).
        let collections: Vec<u64> = layout.rows.iter().flatten().map(|p| p.collection).collect();
        assert_eq!(collections, [0, 4096, 9128, 9128, 9128, 9128]);
        assert_eq!(layout.bytes, 9128 + 4096);
        assert!(heap.collections.read().unwrap().by_address.keys().all(|&at| {
            let size = u64_at(&file, at as usize + 8);
            size >= SHARED_COLLECTION as u64 && at + size <= file.len() as u64
        }));
        assert_eq!(lay_out([0, 0]), Layout { rows: vec![None, None], ..Layout::default() });
    }
}
