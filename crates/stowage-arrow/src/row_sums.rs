//! `segment_<id>.sums`: one checksum per row of a segment, so that a get never returns a flipped
//! byte as data (torchcachex stores no checksums; it never sees this file).
//!
//! ```text
//! header (crate::framed): magic "STWSUMS2" | rows | writer session (0 when not recorded)
//! body: one u64 per row, xxh3 of the row's key and sample (see `of_sample`)
//! ```
//!
//! A row's checksum covers what a reader decodes: the key, then every field by name, sorted,
//! with its kind, and for a tensor its dtype, shape and the xxh3 of its bytes (version 2; version
//! 1, `STWSUMS1`, streamed the bytes themselves and is refused as damage). A writer hashes a sample in its
//! stored form (a field it lacks is stored, and read back, as null).

use std::path::{Path, PathBuf};

use stowage_core::prefetch::{PREFETCH_BLOCK, consume_prefetched, prefetch};
use stowage_core::{Result, Sample, Value};
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

use crate::framed::{self, Framed, HEADER};

const MAGIC: &[u8; 8] = b"STWSUMS2";

/// Checksum files of at most this many bytes (131,072 rows) are asked for whole when a reader
/// opens them cold (a flush of 2,048 rows writes 16 KiB): one request for the header and every
/// row's checksum, where the random reads of the map would make two dependent ones (the header,
/// then the row's page).
pub const READ_WHOLE: usize = 1 << 20;

/// The checksum file's path beside its segment: `segment_<id>.sums`.
pub fn sums_path(segment: &Path) -> PathBuf {
    segment.with_extension("sums")
}

/// The checksum of one row: its key and the fields of `sample`, by name.
///
/// ```
/// use stowage_core::{Sample, Tensor};
/// let a = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.0])?);
/// let b = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.5])?);
/// use stowage_arrow::test_support::row_sums::of_sample;
/// assert_ne!(of_sample("k", &a), of_sample("k", &b));
/// assert_ne!(of_sample("k", &a), of_sample("j", &a));
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub fn of_sample(key: &str, sample: &Sample) -> u64 {
    let mut hasher = Xxh3::new();
    field(&mut hasher, key.as_bytes());
    if sample.field_names().is_sorted() {
        sample.fields().for_each(|(name, value)| named_value(&mut hasher, name, value));
    } else {
        let mut fields: Vec<(&str, &Value)> = sample.fields().collect();
        fields.sort_unstable_by_key(|(name, _)| *name);
        fields.into_iter().for_each(|(name, value)| named_value(&mut hasher, name, value));
    }
    hasher.digest()
}

/// The checksum of a row as a reader decodes it back: exactly the fields `names` (sorted by
/// name), a field `sample` lacks as null. Equal to [`of_sample`] of that decoded sample, without
/// building it.
///
/// ```
/// use stowage_core::{Sample, Tensor, Value};
/// use stowage_arrow::test_support::row_sums::{of_sample, of_stored_row};
/// let put = Sample::new().with("x", Tensor::from_slice(&[1], &[1.5f32])?);
/// let read = put.clone().with("meta", Value::Null);
/// assert_eq!(of_stored_row("k", &["meta", "x"], &put), of_sample("k", &read));
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub fn of_stored_row(key: &str, names: &[&str], sample: &Sample) -> u64 {
    debug_assert!(names.is_sorted(), "stored field names must be sorted");
    let mut hasher = Xxh3::new();
    field(&mut hasher, key.as_bytes());
    for name in names {
        named_value(&mut hasher, name, sample.get(name).unwrap_or(&Value::Null));
    }
    hasher.digest()
}

/// A tensor's bytes enter the checksum as their own xxh3 digest: hashing them in one pass, in
/// place, is about twice as fast as streaming them (the streaming hasher copies its input through
/// a buffer), and a read's row is usually not in the CPU cache, so its lines are requested first.
fn tensor_digest(bytes: &[u8]) -> u64 {
    if bytes.len() <= PREFETCH_BLOCK {
        prefetch(bytes);
        return xxh3_64(bytes);
    }
    let mut hasher = Xxh3::new();
    consume_prefetched(bytes, |block| hasher.update(block));
    hasher.digest()
}

/// One length-prefixed field of the checksum.
fn field(hasher: &mut Xxh3, bytes: &[u8]) {
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// A sample field's part of the checksum: its name, kind and content.
fn named_value(hasher: &mut Xxh3, name: &str, value: &Value) {
    field(hasher, name.as_bytes());
    match value {
        Value::Null => field(hasher, b"null"),
        Value::Tensor(tensor) => {
            field(hasher, tensor.dtype().torch_name().as_bytes());
            // The shape as one field of little-endian u64 dims, without collecting it.
            hasher.update(&(tensor.shape().len() as u64 * 8).to_le_bytes());
            for &dim in tensor.shape() {
                hasher.update(&(dim as u64).to_le_bytes());
            }
            field(hasher, &tensor_digest(tensor.bytes()).to_le_bytes());
        }
        Value::Bytes(bytes) => {
            field(hasher, b"bytes");
            field(hasher, &bytes[..]);
        }
        Value::Json(text) => {
            field(hasher, b"json");
            field(hasher, text.as_bytes());
        }
    }
}

/// The bytes of the checksum file of a segment whose rows have checksums `sums`, with no writer
/// session recorded.
#[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
pub fn encode(sums: &[u64]) -> Vec<u8> {
    encode_in_session(sums, 0)
}

/// [`encode`], recording the writer session that wrote the segment (`crate::ownership`).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("segment_000000.sums");
/// std::fs::write(&path, stowage_arrow::test_support::row_sums::encode_in_session(&[1, 2], 9))?;
/// let sums = stowage_arrow::test_support::row_sums::RowSums::open(&path)?;
/// assert_eq!((sums.rows(), sums.session()), (2, 9));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_in_session(sums: &[u64], session: u64) -> Vec<u8> {
    let body: Vec<u8> = sums.iter().flat_map(|s| s.to_le_bytes()).collect();
    framed::encode(MAGIC, &[sums.len() as u64, session], &body)
}

/// An open checksum file.
#[derive(Debug)]
pub struct RowSums {
    file: Framed,
    rows: usize,
}

impl RowSums {
    /// Maps `path` and checks its header and size.
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file;
    /// [`Error::Io`](stowage_core::Error::Io) (`NotFound` included).
    pub fn open(path: &Path) -> Result<RowSums> {
        RowSums::open_advised(path, |_| {})
    }

    /// [`RowSums::open`], calling `advise` with the whole map (mapped for random reads) before
    /// its header is read: a reader asks for a small file whole when it is cold (see
    /// [`READ_WHOLE`]).
    ///
    /// Errors: as [`RowSums::open`].
    pub fn open_advised(path: &Path, advise: impl FnOnce(&[u8])) -> Result<RowSums> {
        let file = Framed::open_advised(path, MAGIC, "checksum file", advise)?;
        let rows = file.field(0);
        let Some(rows) =
            usize::try_from(rows).ok().filter(|r| r.checked_mul(8) == Some(file.body().len()))
        else {
            return Err(
                file.corrupted(format!("{} bytes for {rows} rows", HEADER + file.body().len()))
            );
        };
        Ok(RowSums { file, rows })
    }

    /// Rows it covers.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The writer session recorded when it was written (0: none).
    pub fn session(&self) -> u64 {
        self.file.field(1)
    }

    /// The stored checksum of row `row`.
    pub fn get(&self, row: usize) -> Option<u64> {
        let bytes = self.file.body().get(row.checked_mul(8)?..)?.get(..8)?;
        Some(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Asks the CPU to load the checksum of row `row` (a hint for batched reads).
    pub fn prefetch(&self, row: usize) {
        if let Some(sum) = self.file.body().get(row.saturating_mul(8)..) {
            stowage_core::prefetch::prefetch(&sum[..sum.len().min(8)]);
        }
    }

    /// Adds the stored checksum of row `row` to `plan` (a page a cold batch asks the kernel for).
    pub fn plan<'a>(&'a self, row: usize, plan: &mut stowage_core::cold_reads::PagePlan<'a>) {
        let body = self.file.body();
        let at = row.saturating_mul(8).min(body.len());
        let _ = plan.add(body, at..(at + 8).min(body.len()));
    }

    /// Checks the stored checksums against their own checksum.
    pub fn verify(&self) -> Result<()> {
        self.file.verify()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{Error, Tensor};

    /// The checksum as the module docs define it, built as one byte string and hashed at once:
    /// the streaming form (sorted in place or not, tensors larger than a prefetch block) must
    /// give the same value, or every stored checksum would stop matching.
    #[test]
    fn the_checksum_is_xxh3_of_the_length_prefixed_fields_sorted_by_name_tensors_by_digest() {
        let big: Vec<u16> = (0..5000).collect();
        let tensor = Tensor::from_slice(&[2, 2500], &big).unwrap();
        let sample = Sample::new()
            .with("z", Value::Json("{}".into()))
            .with("a", tensor.clone())
            .with("m", Value::Bytes(stowage_core::bytes::Bytes::from_static(b"raw")))
            .with("b", Value::Null);
        let mut bytes = Vec::new();
        let mut field = |part: &[u8]| {
            bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
            bytes.extend_from_slice(part);
        };
        field(b"key");
        field(b"a");
        field(b"torch.uint16");
        field(&[2u64, 2500].iter().flat_map(|d| d.to_le_bytes()).collect::<Vec<u8>>());
        field(&xxhash_rust::xxh3::xxh3_64(tensor.bytes()).to_le_bytes());
        field(b"b");
        field(b"null");
        field(b"m");
        field(b"bytes");
        field(b"raw");
        field(b"z");
        field(b"json");
        field(b"{}");
        let expected = xxhash_rust::xxh3::xxh3_64(&bytes);
        assert_eq!(of_sample("key", &sample), expected);
        let mut sorted = Sample::new();
        for name in ["a", "b", "m", "z"] {
            sorted.insert(name, sample.get(name).unwrap().clone());
        }
        assert_eq!(of_sample("key", &sorted), expected, "already sorted: the same value");
    }

    #[test]
    fn written_sums_read_back_and_damage_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("segment_000003.arrow");
        let path = sums_path(&segment);
        std::fs::write(&path, encode(&[7, 8, u64::MAX])).unwrap();
        assert!(path.ends_with("segment_000003.sums"));
        let sums = RowSums::open(&path).unwrap();
        sums.verify().unwrap();
        assert_eq!((sums.rows(), sums.get(2), sums.get(3)), (3, Some(u64::MAX), None));
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            let damaged = RowSums::open(&path).and_then(|s| s.verify());
            assert!(matches!(damaged, Err(Error::Corrupted { .. })), "byte {at}");
        }
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(RowSums::open(&path).is_err());
    }

    #[test]
    fn every_part_of_a_row_counts() {
        let base = Sample::new()
            .with("a", Tensor::from_slice(&[2], &[1i32, 2]).unwrap())
            .with("b", Value::Bytes(b"xy".to_vec().into()));
        let sum = of_sample("k", &base);
        let reshaped = base.clone().with("a", Tensor::from_slice(&[1, 2], &[1i32, 2]).unwrap());
        let retyped = base.clone().with("a", Tensor::from_slice(&[2], &[1u32, 2]).unwrap());
        let renamed = Sample::new()
            .with("c", Tensor::from_slice(&[2], &[1i32, 2]).unwrap())
            .with("b", Value::Bytes(b"xy".to_vec().into()));
        let nulled = base.clone().with("b", Value::Null);
        for other in [reshaped, retyped, renamed, nulled] {
            assert_ne!(of_sample("k", &other), sum);
        }
        let reordered = Sample::new()
            .with("b", Value::Bytes(b"xy".to_vec().into()))
            .with("a", Tensor::from_slice(&[2], &[1i32, 2]).unwrap());
        assert_eq!(of_sample("k", &reordered), sum, "fields count by name, not by order");
    }
}
