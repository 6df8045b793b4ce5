//! The machine's side of the scale suite: dropping the page cache for a cache's files, the cold
//! 4 KiB random `pread`s at queue depth 1 and 32 over those files, the raw copy of rows out
//! of a warm map of the same size, and the dependent random loads over a warm map of a cache's
//! size (what a lookup's chain of memory misses costs).

use std::collections::HashMap;
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

/// The pages of a set of files, numbered through their concatenation: a random page is each
/// page equally likely (a file weighs its size).
struct Pages<'f> {
    /// The files with bytes, with their sizes.
    files: Vec<&'f (PathBuf, u64)>,
    /// Each file's first page number in the concatenation, and the total after the last.
    starts: Vec<u64>,
}

impl<'f> Pages<'f> {
    fn of(files: &'f [(PathBuf, u64)]) -> Result<Pages<'f>, String> {
        let files: Vec<&(PathBuf, u64)> = files.iter().filter(|(_, len)| *len > 0).collect();
        if files.is_empty() {
            return Err("the cache has no bytes to read".into());
        }
        let mut starts = vec![0u64];
        for (_, len) in &files {
            starts.push(starts.last().expect("starts with 0") + len.div_ceil(PAGE));
        }
        Ok(Pages { files, starts })
    }

    fn total(&self) -> u64 {
        *self.starts.last().expect("starts with 0")
    }

    /// The file (an index into `files`) holding page `page`, and the page's offset in it.
    fn locate(&self, page: u64) -> (usize, u64) {
        let file = self.starts.partition_point(|&start| start <= page) - 1;
        (file, (page - self.starts[file]) * PAGE)
    }
}

/// Random 4 KiB `pread`s of the cache's `files` with the page cache dropped just before (as
/// [`drop_page_cache`] with `machine_wide`): `reads` of them, one at a time from one thread
/// (`depth` 1), or spread over `depth` threads each with one outstanding read. Reads per second.
///
/// The pages are drawn first and only the files they fall in are opened, before the timer: a
/// cache of 100,000 segments has more files than a process may hold open.
///
/// Errors: a file cannot be opened or read, the reads need more descriptors than `ulimit -n`
/// allows, or the page cache cannot be dropped, as text.
pub fn cold_preads(
    files: &[(PathBuf, u64)],
    reads: usize,
    depth: usize,
    seed: u64,
    machine_wide: bool,
) -> Result<f64, String> {
    let pages = Pages::of(files)?;
    let per_thread = reads.div_ceil(depth.max(1));
    let plans: Vec<Vec<(usize, u64)>> = (0..depth.max(1) as u64)
        .map(|thread| {
            Sampler::new(seed + thread, pages.total() as usize)
                .take(per_thread)
                .map(|page| pages.locate(page as u64))
                .collect()
        })
        .collect();
    let mut needed: Vec<usize> = plans.iter().flatten().map(|&(file, _)| file).collect();
    needed.sort_unstable();
    needed.dedup();
    if let Some(limit) = stowage_core::process_limits::open_file_limit()
        && needed.len() + 64 > limit
    {
        return Err(format!(
            "the reference's {reads} reads fall in {} files, more than `ulimit -n` ({limit}) \
             allows open at once (with 64 spare): raise it",
            needed.len()
        ));
    }
    let mut open: HashMap<usize, File> = HashMap::with_capacity(needed.len());
    for file in needed {
        let path = &pages.files[file].0;
        open.insert(file, File::open(path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let paths: Vec<PathBuf> = files.iter().map(|(path, _)| path.clone()).collect();
    drop_page_cache(&paths, machine_wide)?;
    let started = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|plan| {
                let open = &open;
                scope.spawn(move || {
                    let mut buffer = vec![0u8; PAGE as usize];
                    for &(file, offset) in plan {
                        open[&file]
                            .read_at(&mut buffer, offset)
                            .map_err(|e| format!("pread: {e}"))?;
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

/// Most bytes the dependent-load reference maps: beyond a few GiB every load misses the caches
/// and the TLB alike, so a larger map would measure the same latency.
pub const DEPENDENT_LOAD_MAX_BYTES: u64 = 4 << 30;

/// The dependent-load reference: an anonymous map of `bytes` (at most
/// [`DEPENDENT_LOAD_MAX_BYTES`]), in 4 KiB pages (transparent huge pages declined, as for a
/// file's map), every page written first (warm), then `loads` random 8-byte loads each of whose
/// addresses is computed from the value the previous one read: the loads cannot overlap, as the
/// probes of a lookup (a slot, then the key it points at, then the row) cannot. Loads per second.
///
/// A warm `get` that costs `k` such misses runs at most at this rate / `k`; at a small size the
/// map fits the CPU's caches and the loads are fast, at a large one each goes to memory.
///
/// Errors: the map cannot be made, as text.
pub fn warm_dependent_loads(bytes: u64, loads: usize, seed: u64) -> Result<f64, String> {
    let words = (bytes.clamp(4096, DEPENDENT_LOAD_MAX_BYTES) / 8) as usize;
    let mut map = memmap2::MmapMut::map_anon(words * 8)
        .map_err(|e| format!("anonymous map of {} bytes: {e}", words * 8))?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::NoHugePage);
    let mut state = seed;
    for word in map.chunks_exact_mut(8) {
        state = mix(state);
        word.copy_from_slice(&state.to_le_bytes());
    }
    let word_at = |i: usize| u64::from_le_bytes(map[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    // The next index from the loaded value: a multiply-shift onto `0..words` (no division).
    let next =
        |value: u64, step: u64| ((u128::from(mix(value ^ step)) * words as u128) >> 64) as usize;
    let mut at = next(seed, 0);
    let started = Instant::now();
    for step in 0..loads as u64 {
        at = next(word_at(at), step);
    }
    let seconds = started.elapsed().as_secs_f64();
    black_box(at);
    Ok(loads as f64 / seconds.max(1e-9))
}

/// splitmix64's finalizer: a cheap, well-spread 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
        let pages = Pages::of(&files).unwrap();
        assert_eq!(pages.total(), 4);
        let read = |page: u64| {
            let (file, offset) = pages.locate(page);
            let mut buffer = vec![0u8; 4096];
            let n = File::open(&pages.files[file].0).unwrap().read_at(&mut buffer, offset).unwrap();
            (n, buffer[0])
        };
        assert_eq!(read(2), (10, 1));
        assert_eq!(read(3), (100, 2));
        assert!(cold_preads(&files, 64, 4, 1, false).unwrap() > 0.0);
    }

    /// Dependent loads over a map larger than the CPU's caches are slower than over one that
    /// fits them (the reference measures memory latency, not a loop's arithmetic).
    #[test]
    fn dependent_loads_slow_down_once_the_map_outgrows_the_caches() {
        let small = warm_dependent_loads(16 << 10, 200_000, 7).unwrap();
        let large = warm_dependent_loads(256 << 20, 200_000, 7).unwrap();
        assert!(small > 0.0 && large > 0.0);
        assert!(large < small, "{large} loads/s over 256 MiB, {small} over 16 KiB");
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
