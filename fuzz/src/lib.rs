//! What the fuzz targets share: a scratch file per process for parsers that read from a path
//! (memory maps included), and a reader of little-endian fields from the front of an input.

use std::path::PathBuf;

/// A path for scratch file `name` of this process: on `/dev/shm` when it exists (writing each
/// input is then a memory copy), else in the temporary directory. Per process, so that parallel
/// fuzzing jobs do not share files.
pub fn scratch_path(name: &str) -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("stowage-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    dir.join(name)
}

/// Writes `bytes` to scratch file `name` (replacing it) and returns its path.
pub fn write_scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch_path(name);
    std::fs::write(&path, bytes).expect("writing the scratch file");
    path
}

/// Takes fixed-size little-endian fields off the front of a fuzz input; missing bytes read as 0.
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    /// Fields over `input`.
    pub fn new(input: &'a [u8]) -> Fields<'a> {
        Fields { rest: input }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.rest.len());
        out[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        out
    }

    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    /// The next `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    /// The next `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    /// The next `len` bytes (fewer at the end).
    pub fn bytes(&mut self, len: usize) -> &'a [u8] {
        let n = len.min(self.rest.len());
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        head
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// Everything left.
    pub fn rest(self) -> &'a [u8] {
        self.rest
    }
}
