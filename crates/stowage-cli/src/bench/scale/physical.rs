//! The machine's side of the scale suite: dropping the page cache for a cache's files, the cold
//! 4 KiB random `pread`s at queue depth 1 and 32 over those files, and the raw copy of rows out
//! of a warm map of the same size.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use memmap2::Mmap;

use super::order::Sampler;

/// Bytes per physical read (a page).
pub const PAGE: u64 = 4096;
/// Threads of the queue-depth-32 reference (one outstanding `pread` each).
pub const QUEUE_DEPTH: usize = 32;

/// How the page cache was dropped: the whole machine's (as root), or each file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CacheDrop {
    /// `echo 3 > /proc/sys/vm/drop_caches` (after `posix_fadvise` on every file).
    DropCaches,
    /// `posix_fadvise(POSIX_FADV_DONTNEED)` on every file of the cache only.
    Fadvise,
}

impl CacheDrop {
    /// The words the report uses.
    pub fn describe(self) -> &'static str {
        match self {
            CacheDrop::DropCaches => "`echo 3 > /proc/sys/vm/drop_caches` (as root)",
            CacheDrop::Fadvise => "`posix_fadvise(POSIX_FADV_DONTNEED)` on every file of the cache",
        }
    }
}

#[cfg(target_os = "linux")]
mod fadvise {
    /// `POSIX_FADV_DONTNEED` on Linux.
    pub const DONTNEED: i32 = 4;
    unsafe extern "C" {
        /// glibc's and musl's `posix_fadvise(int fd, off_t offset, off_t len, int advice)`.
        pub fn posix_fadvise(fd: i32, offset: i64, len: i64, advice: i32) -> i32;
    }
}

/// Drops `files`' pages from the page cache: their dirty pages written first (`fsync`), then
/// `posix_fadvise(DONTNEED)` on each, then, with `machine_wide`, the machine's whole page cache
/// when this process may (root: a side effect on everything else running, so only when asked).
/// No map of them may be open, or its pages stay.
///
/// Errors: a file cannot be opened or synced, or the kernel refuses the advice, as text naming
/// the file.
pub fn drop_page_cache(files: &[PathBuf], machine_wide: bool) -> Result<CacheDrop, String> {
    for path in files {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        file.sync_all().map_err(|e| format!("fsync {}: {e}", path.display()))?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is open for the duration of the call; the advice only
            // affects the page cache, never memory of this process.
            let code = unsafe { fadvise::posix_fadvise(file.as_raw_fd(), 0, 0, fadvise::DONTNEED) };
            if code != 0 {
                return Err(format!(
                    "posix_fadvise(DONTNEED) on {}: {}",
                    path.display(),
                    std::io::Error::from_raw_os_error(code)
                ));
            }
        }
    }
    if machine_wide && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok() {
        Ok(CacheDrop::DropCaches)
    } else if cfg!(target_os = "linux") {
        Ok(CacheDrop::Fadvise)
    } else {
        Err("dropping the page cache is only implemented on Linux".into())
    }
}

/// Every regular file below `dir`, with its size, in a stable order.
pub fn files_of(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(entry.path()),
                Ok(t) if t.is_file() => {
                    found.push((entry.path(), entry.metadata().map_or(0, |m| m.len())))
                }
                _ => {}
            }
        }
    }
    found.sort();
    found
}

/// Random 4 KiB reads over a set of files, each page equally likely (a file weighs its size).
struct Pages {
    files: Vec<(File, u64)>,
    /// Each file's first page number in the concatenation, and the total after the last.
    starts: Vec<u64>,
}

impl Pages {
    fn open(files: &[(PathBuf, u64)]) -> Result<Pages, String> {
        let mut opened = Vec::new();
        let mut starts = vec![0u64];
        for (path, len) in files.iter().filter(|(_, len)| *len > 0) {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            opened.push((file, *len));
            starts.push(starts.last().expect("starts with 0") + len.div_ceil(PAGE));
        }
        if opened.is_empty() {
            return Err("the cache has no bytes to read".into());
        }
        Ok(Pages { files: opened, starts })
    }

    fn total(&self) -> u64 {
        *self.starts.last().expect("starts with 0")
    }

    /// Reads page `page` of the concatenation into `buffer`.
    fn read(&self, page: u64, buffer: &mut [u8]) -> std::io::Result<usize> {
        let file = self.starts.partition_point(|&start| start <= page) - 1;
        let (handle, _) = &self.files[file];
        handle.read_at(buffer, (page - self.starts[file]) * PAGE)
    }
}

/// Random 4 KiB `pread`s of the cache's `files` with the page cache dropped just before (as
/// [`drop_page_cache`] with `machine_wide`): `reads` of them, one at a time from one thread
/// (`depth` 1), or spread over `depth` threads each with one outstanding read. Reads per second.
///
/// Errors: a file cannot be opened or read, or the page cache cannot be dropped, as text.
pub fn cold_preads(
    files: &[(PathBuf, u64)],
    reads: usize,
    depth: usize,
    seed: u64,
    machine_wide: bool,
) -> Result<f64, String> {
    let pages = Pages::open(files)?;
    let paths: Vec<PathBuf> = files.iter().map(|(path, _)| path.clone()).collect();
    drop_page_cache(&paths, machine_wide)?;
    let per_thread = reads.div_ceil(depth.max(1));
    let started = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..depth.max(1) as u64)
            .map(|thread| {
                let pages = &pages;
                scope.spawn(move || {
                    let mut buffer = vec![0u8; PAGE as usize];
                    for page in Sampler::new(seed + thread, pages.total() as usize).take(per_thread)
                    {
                        pages.read(page as u64, &mut buffer).map_err(|e| format!("pread: {e}"))?;
                        black_box(&buffer);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a reader panicked".into())))
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok((per_thread * depth.max(1)) as f64 / seconds.max(1e-9))
}

/// The raw-copy reference: `rows` rows of `row_bytes` written (from `row(i)`, streaming) to one
/// flat file at `path`, mapped and every page touched, then the rows of `order` copied out one by
/// one. Rows per second; the file is removed afterwards.
///
/// Errors: the file cannot be written or mapped, as text naming it.
pub fn warm_raw_copy(
    path: &Path,
    rows: usize,
    row_bytes: usize,
    row: impl Fn(usize) -> Vec<u8>,
    order: Sampler,
) -> Result<f64, String> {
    let failed = |e: std::io::Error| format!("{}: {e}", path.display());
    let result = (|| {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(failed)?);
        for i in 0..rows {
            out.write_all(&row(i)).map_err(failed)?;
        }
        out.into_inner().map_err(|e| failed(e.into_error()))?.sync_data().map_err(failed)?;
        let file = File::open(path).map_err(failed)?;
        // SAFETY: the file was written above and is neither modified nor truncated while mapped;
        // it is removed only after the map is dropped.
        let map = unsafe { Mmap::map(&file) }.map_err(failed)?;
        black_box(map.iter().step_by(PAGE as usize).map(|&b| u64::from(b)).sum::<u64>());
        let mut buffer = vec![0u8; row_bytes];
        let reads = order.len();
        let started = Instant::now();
        for i in order {
            buffer.copy_from_slice(&map[i * row_bytes..(i + 1) * row_bytes]);
            black_box(&buffer);
        }
        Ok(reads as f64 / started.elapsed().as_secs_f64().max(1e-9))
    })();
    let _ = std::fs::remove_file(path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page of every file can be drawn, and a page reads the right file's bytes.
    #[test]
    fn pages_map_to_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, vec![1u8; 4096 * 2 + 10]).unwrap();
        std::fs::write(&b, vec![2u8; 100]).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let files = files_of(dir.path());
        assert_eq!(files.len(), 3);
        let pages = Pages::open(&files).unwrap();
        assert_eq!(pages.total(), 4);
        let mut buffer = vec![0u8; 4096];
        assert_eq!(pages.read(2, &mut buffer).unwrap(), 10);
        assert_eq!(buffer[0], 1);
        assert_eq!(pages.read(3, &mut buffer).unwrap(), 100);
        assert_eq!(buffer[0], 2);
        assert!(cold_preads(&files, 64, 4, 1, false).unwrap() > 0.0);
    }

    /// The raw copy reads back what it wrote, and leaves no file behind.
    #[test]
    fn raw_copy_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flat.bin");
        let rate = warm_raw_copy(
            &path,
            1000,
            16,
            |i| vec![i as u8; 16],
            Sampler::new(3, 1000).take_n(500),
        )
        .unwrap();
        assert!(rate > 0.0);
        assert!(!path.exists());
    }
}
