//! A chunk's filter pipeline, undone on read and applied on write: the shuffle and deflate
//! filters aenet's PyTables writer and stowage's writers apply to every variable-length dataset
//! (Fletcher32 is refused on those by libhdf5). A pipeline with any other filter is not handled
//! here; its datasets are read and written through libhdf5.
//!
//! libhdf5 stores shuffle on a variable-length dataset without its element size and skips it for
//! every chunk (the chunk's filter mask says so); a chunk that claims it anyway is refused, as
//! libhdf5 refuses it.
//!
//! Deflate is HDF5's zlib stream (header and Adler-32 checked by `flate2`), written at the
//! pipeline's level. On read the output is bounded by the chunk's size, so a damaged or hostile
//! stream cannot make the reader allocate more.

use std::io::Write;

use flate2::{Compression, Decompress, FlushDecompress, Status};

use crate::ffi::storage::{FILTER_DEFLATE, FILTER_SHUFFLE, Filter};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The element size, when the pipeline stores one.
    Shuffle { element_size: Option<usize> },
    /// The level, when the pipeline stores one (needed to write).
    Deflate { level: Option<u32> },
}

/// The filters of one dataset, in the order they were applied on write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pipeline {
    steps: Vec<Step>,
}

impl Pipeline {
    /// The pipeline of `filters`, or `None` when one of them is not shuffle or deflate.
    pub fn new(filters: &[Filter]) -> Option<Pipeline> {
        let steps = filters
            .iter()
            .map(|filter| match filter.id {
                FILTER_SHUFFLE => Some(Step::Shuffle {
                    element_size: filter.client_data.first().map(|&size| size as usize),
                }),
                FILTER_DEFLATE => {
                    Some(Step::Deflate { level: filter.client_data.first().copied() })
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Pipeline { steps })
    }

    /// The chunk's bytes before filtering: the filters not skipped by `filter_mask` (bit `i` for
    /// filter `i`) undone in reverse order. The result must be exactly `expected` bytes.
    pub fn decode(
        &self,
        stored: &[u8],
        filter_mask: u32,
        expected: usize,
    ) -> Result<Vec<u8>, String> {
        let mut bytes = stored.to_vec();
        for (i, step) in self.steps.iter().enumerate().rev() {
            if i < 32 && filter_mask & (1 << i) != 0 {
                continue;
            }
            bytes = match *step {
                Step::Deflate { .. } => inflate(&bytes, expected)?,
                Step::Shuffle { element_size: Some(size) } => unshuffle(&bytes, size),
                Step::Shuffle { element_size: None } => {
                    return Err("chunk is shuffled but the pipeline has no element size".into());
                }
            };
        }
        if bytes.len() != expected {
            return Err(format!(
                "chunk holds {} bytes after its filters, expected {expected}",
                bytes.len()
            ));
        }
        Ok(bytes)
    }
}

impl Pipeline {
    /// Whether [`Pipeline::encode`] can write chunks (deflate's level is known).
    pub fn can_encode(&self) -> bool {
        self.steps.iter().all(|step| !matches!(step, Step::Deflate { level: None }))
    }

    /// A chunk's stored bytes and filter mask for `raw`, as libhdf5 would write them: a shuffle
    /// without element size is skipped (its mask bit set), as libhdf5 skips it.
    pub fn encode(&self, raw: &[u8]) -> Result<(Vec<u8>, u32), String> {
        let mut bytes = raw.to_vec();
        let mut mask = 0u32;
        for (i, step) in self.steps.iter().enumerate() {
            bytes = match *step {
                Step::Shuffle { element_size: Some(size) } => shuffle(&bytes, size),
                Step::Shuffle { element_size: None } if i < 32 => {
                    mask |= 1 << i;
                    continue;
                }
                Step::Deflate { level: Some(level) } => deflate(&bytes, level)?,
                _ => return Err(format!("filter {i} of the pipeline cannot be written here")),
            };
        }
        Ok((bytes, mask))
    }
}

/// A zlib stream of `bytes` at `level`.
fn deflate(bytes: &[u8], level: u32) -> Result<Vec<u8>, String> {
    let mut encoder = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        Compression::new(level.min(9)),
    );
    encoder.write_all(bytes).and_then(|()| encoder.finish()).map_err(|e| format!("deflate: {e}"))
}

/// HDF5's shuffle: the elements' first bytes, then their second bytes, ...; a tail shorter than
/// one element is stored as is.
fn shuffle(input: &[u8], element_size: usize) -> Vec<u8> {
    let elements = input.len() / element_size.max(1);
    if element_size <= 1 || elements <= 1 {
        return input.to_vec();
    }
    let mut output = Vec::with_capacity(input.len());
    for byte in 0..element_size {
        output.extend((0..elements).map(|e| input[e * element_size + byte]));
    }
    output.extend_from_slice(&input[elements * element_size..]);
    output
}

/// The most bytes one byte of a deflate stream inflates to (zlib's limit is 1032:1): what the
/// output of a stream is bounded by before it is decoded.
pub(crate) const MAX_INFLATE_RATIO: usize = 1032;

/// Inflates a zlib stream that must end within `limit` bytes of output. The output grows as the
/// stream produces it, so a stream that claims a large chunk but holds little costs little.
fn inflate(input: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let bound = input.len().saturating_mul(MAX_INFLATE_RATIO).saturating_add(64).min(limit);
    let mut output = Vec::with_capacity(bound.min(input.len().saturating_mul(4) + 4096));
    let mut stream = Decompress::new(true);
    loop {
        let consumed = stream.total_in() as usize;
        let produced = output.len();
        // Not `Finish`: miniz (flate2's backend) fails a `Finish` call for good when the
        // output does not fit in one go.
        let status = stream
            .decompress_vec(&input[consumed..], &mut output, FlushDecompress::None)
            .map_err(|e| format!("deflate stream: {e}"))?;
        match status {
            Status::StreamEnd => return Ok(output),
            // Out of room: grow (doubling) up to the bound, or give up at it.
            _ if output.len() == output.capacity() && output.len() < bound => {
                output.reserve_exact(output.len().max(4096).min(bound - output.len()));
            }
            // Room left, input left and progress made: go on.
            Status::Ok
                if output.len() < output.capacity()
                    && (stream.total_in() as usize) < input.len()
                    && (stream.total_in() as usize, output.len()) != (consumed, produced) => {}
            Status::Ok | Status::BufError => {
                return Err(format!(
                    "deflate stream is truncated or inflates past the chunk's {limit} bytes"
                ));
            }
        }
    }
}

/// Undoes HDF5's shuffle: the stored bytes are the elements' first bytes, then their second
/// bytes, ...; a tail shorter than one element is stored as is.
fn unshuffle(input: &[u8], element_size: usize) -> Vec<u8> {
    let elements = input.len() / element_size.max(1);
    if element_size <= 1 || elements <= 1 {
        return input.to_vec();
    }
    let mut output = vec![0u8; input.len()];
    for (byte, plane) in input[..elements * element_size].chunks_exact(elements).enumerate() {
        for (element, &value) in plane.iter().enumerate() {
            output[element * element_size + byte] = value;
        }
    }
    let tail = elements * element_size;
    output[tail..].copy_from_slice(&input[tail..]);
    output
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use super::*;

    /// What libhdf5 stores for `raw` through shuffle (of `element_size`) then deflate.
    pub fn shuffle_deflate(raw: &[u8], element_size: usize) -> Vec<u8> {
        let elements = raw.len() / element_size;
        let mut shuffled = Vec::with_capacity(raw.len());
        for byte in 0..element_size {
            shuffled.extend((0..elements).map(|e| raw[e * element_size + byte]));
        }
        shuffled.extend_from_slice(&raw[elements * element_size..]);
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        encoder.write_all(&shuffled).unwrap();
        encoder.finish().unwrap()
    }

    fn pipeline() -> Pipeline {
        Pipeline::new(&[
            Filter { id: FILTER_SHUFFLE, client_data: vec![16] },
            Filter { id: FILTER_DEFLATE, client_data: vec![5] },
        ])
        .unwrap()
    }

    #[test]
    fn shuffle_then_deflate_is_undone() {
        let raw: Vec<u8> = (0..16 * 40 + 3).map(|i| (i * 7 % 251) as u8).collect();
        let stored = shuffle_deflate(&raw, 16);
        assert_eq!(pipeline().decode(&stored, 0, raw.len()).unwrap(), raw);
        // Deflate skipped for this chunk (bit 1): only the shuffle is undone.
        let shuffled = {
            let mut z = Decompress::new(true);
            let mut out = Vec::with_capacity(raw.len());
            z.decompress_vec(&stored, &mut out, FlushDecompress::Finish).unwrap();
            out
        };
        assert_eq!(pipeline().decode(&shuffled, 0b10, raw.len()).unwrap(), raw);
        assert_eq!(unshuffle(&raw[..5], 16), &raw[..5], "shorter than one element");
    }

    #[test]
    fn encoded_chunks_decode_back() {
        let raw: Vec<u8> = (0..16 * 100).map(|i| (i * 13 % 256) as u8).collect();
        let (stored, mask) = pipeline().encode(&raw).unwrap();
        assert_eq!(mask, 0);
        assert_eq!(pipeline().decode(&stored, mask, raw.len()).unwrap(), raw);
        // libhdf5's VLEN pipeline: shuffle without element size (skipped), deflate 5.
        let vlen = Pipeline::new(&[
            Filter { id: FILTER_SHUFFLE, client_data: vec![] },
            Filter { id: FILTER_DEFLATE, client_data: vec![5] },
        ])
        .unwrap();
        let (stored, mask) = vlen.encode(&raw).unwrap();
        assert_eq!(mask, 0b01);
        assert_eq!(vlen.decode(&stored, mask, raw.len()).unwrap(), raw);
        let levelless = Pipeline::new(&[Filter { id: FILTER_DEFLATE, client_data: vec![] }]);
        assert!(!levelless.as_ref().unwrap().can_encode());
        assert!(levelless.unwrap().encode(&raw).is_err());
        assert!(vlen.can_encode());
    }

    #[test]
    fn other_filters_are_not_handled() {
        let fletcher = Filter { id: 3, client_data: vec![] };
        assert!(Pipeline::new(&[fletcher]).is_none());
        let sizeless = Pipeline::new(&[Filter { id: FILTER_SHUFFLE, client_data: vec![] }]);
        let sizeless = sizeless.unwrap();
        assert_eq!(sizeless.decode(b"abcd", 0b1, 4).unwrap(), b"abcd", "skipped by the mask");
        assert!(sizeless.decode(b"abcd", 0, 4).unwrap_err().contains("no element size"));
        assert_eq!(Pipeline::new(&[]).unwrap().decode(b"abc", 0, 3).unwrap(), b"abc");
    }

    #[test]
    fn chunks_larger_than_the_first_buffer_inflate_whole() {
        // 128 KiB of descriptors from a few hundred stored bytes: the output grows many times.
        let raw: Vec<u8> =
            (0..16 * 8192).map(|i| if i % 16 < 4 { (i % 7) as u8 } else { 0 }).collect();
        let stored = shuffle_deflate(&raw, 16);
        assert!(stored.len() * 4 + 4096 < raw.len());
        assert_eq!(pipeline().decode(&stored, 0, raw.len()).unwrap(), raw);
        assert!(
            pipeline().decode(&stored, 0, raw.len() - 1).unwrap_err().contains("past the chunk")
        );
        assert!(pipeline().decode(&stored[..stored.len() - 8], 0, raw.len()).is_err());
    }

    #[test]
    fn damaged_streams_are_errors() {
        let raw = vec![9u8; 16 * 64];
        let stored = shuffle_deflate(&raw, 16);
        let p = pipeline();
        assert!(p.decode(&stored, 0, raw.len() - 16).unwrap_err().contains("past the chunk"));
        assert!(p.decode(&stored, 0, raw.len() + 16).unwrap_err().contains("expected"));
        assert!(p.decode(&stored[..stored.len() / 2], 0, raw.len()).is_err());
        let mut refused = 0;
        for at in 0..stored.len() {
            let mut bad = stored.clone();
            bad[at] ^= 0x5A;
            // Never a panic nor a chunk of another size; the Adler-32 catches data changes.
            match p.decode(&bad, 0, raw.len()) {
                Ok(decoded) => assert_eq!(decoded.len(), raw.len(), "byte {at}"),
                Err(_) => refused += 1,
            }
        }
        assert!(refused + 2 >= stored.len(), "{refused} of {} flips refused", stored.len());
    }
}
