//! Telling the kernel which pages of a memory map a read is about to touch, so that cold reads
//! keep many disk reads in flight instead of one page fault at a time.
//!
//! A backend that serves rows out of a memory map pays, for a row that is not in the page cache,
//! one synchronous page fault: the thread stops until the disk returns that page. A batch of 1,024
//! such rows is 1,024 faults in a row, at the disk's queue-depth-1 rate, while the device serves
//! several times more reads per second when many are outstanding (issue 17: 14 k/s one at a time,
//! 72-81 k/s at depth 8-32 on the machine of the scale suite). The same holds for one `get` whose
//! bytes and checksum live in two files: two faults, one after the other.
//!
//! This module plans and issues the advice:
//! - [`PagePlan`] collects the byte ranges a read will touch, in any order and in any number of
//!   maps, and turns them into sorted, page-aligned, coalesced runs (ranges past a map's end are
//!   refused, never clamped);
//! - [`PagePlan::advise`] issues `madvise(MADV_WILLNEED)` once per run: the kernel starts reading
//!   every missing page of the run and returns without waiting, so one pass over a batch queues
//!   all of its reads, and the faults that follow wait for reads already in flight;
//! - [`ColdReadAdvisor`] decides when the advice is worth its system calls. A warm read must not
//!   pay one system call per row (warm `get_batch` serves 1-2 M rows/s, and a `madvise` of a
//!   resident page costs about as much as reading the row). It asks `mincore` about a few pages
//!   of each batch (a fixed sample of [`BATCH_SAMPLE`] runs) and advises the batch only when one
//!   of them is missing; a single `get` looks only every [`GET_PROBE_EVERY`]th call while the
//!   reads find their pages resident, and at every call, advising the row's pages when they are
//!   missing, once one was found missing, until [`WARM_STREAK`] probes in a row found them
//!   resident again. A single read a few pages after the previous one (a sequential scan, such as
//!   `validate` reading every key in order) is never advised: the kernel's read-around of the
//!   faulting map reads ahead in large requests.
//!
//! # Why `madvise(MADV_WILLNEED)`
//! Measured on the scale suite's machine (2 shared cores, a virtio disk with `read_ahead_kb` =
//! 8192), on a 1 GiB file with the page cache dropped before each line, random 4 KiB pages, two
//! runs (a scratch program; the figures are in issue 17 step 5's progress log):
//!
//! | strategy | pages/s |
//! |---|---|
//! | `pread`, one at a time (the QD1 reference) | 11.0-13.0 k |
//! | faulting the map, one page at a time (no advice) | 0.9-1.0 k |
//! | `madvise(MADV_WILLNEED)` per page of a batch of 1,024, then the faults | 52-70 k |
//! | the same, pages sorted and deduplicated first | 49-56 k |
//! | `posix_fadvise(POSIX_FADV_WILLNEED)` per page, then the faults | 54-57 k |
//! | 32 threads each `pread`ing 1/32 of a batch of 1,024 | 36-58 k |
//! | 32 threads `pread`ing 4,096 pages (the QD32 reference) | 35-55 k |
//!
//! - A fault on a map with the default advice reads around the faulting page (`read_ahead_kb`,
//!   here 8 MiB): a random row costs a 10x larger read than `pread` of its page. Advised pages are
//!   in the page cache (or being read) when the fault comes, so the fault reads nothing more.
//! - `madvise` queues each page's read and returns (the kernel's readahead submits it
//!   asynchronously), so one thread gets the device's queue depth: as fast as 32 `pread`
//!   threads, without threads on a 2-core machine shared with other work, without a copy of
//!   every row into a buffer, and without a hand-off per batch.
//! - `posix_fadvise` takes the same kernel path (`generic_fadvise`) at the same rate, but needs
//!   the file descriptor, which a map does not keep, and file offsets instead of the addresses
//!   the reader already has.
//! - Sorting costs nothing measurable either way; the plan sorts so that it can coalesce
//!   neighbouring rows into one call, and merges runs of one map at most [`MERGE_GAP_PAGES`]
//!   apart (measured there).
//! - io_uring was not tried: no io_uring crate is a dependency, and the advice already reaches
//!   the queue-depth-32 rate.
//!
//! # Residency and permissions
//! Since Linux 5.0 `mincore` reports a file page as resident only when it is mapped in this
//! process's page tables, or when the process owns the file or may write it. A reader of a cache
//! it neither owns nor may write sees pages other processes cached as missing until it touches
//! them once, so the advisor advises such batches (a few wasted system calls per row on a warm
//! cache another user's process read first); the results are the same either way. The advice is
//! only ever a hint: it never changes what a read returns, and a failed `madvise` or `mincore`
//! is ignored (the read then faults as it would have).
//!
//! On targets other than Linux the plan is built and checked the same way, and nothing is
//! advised.
//!
//! # Call pattern
//! A backend keeps one [`ColdReadAdvisor`] per handle (it is `Sync`: atomics only) and, for a
//! batch, adds every byte range the batch will read (each field's row, its checksum row) to a
//! [`PagePlan`] before reading any of them:
//!
//! ```
//! use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor, PagePlan};
//!
//! // Stand-ins for a backend's memory maps (a `Mmap`, or the `Bytes` that owns one).
//! let values = vec![0u8; 1 << 20];
//! let checksums = vec![0u8; 1 << 19];
//! let (row_bytes, sum_bytes) = (16, 8);
//! let rows = [9_000usize, 12, 60_000, 13];
//!
//! let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
//! let mut plan = PagePlan::with_capacity(2 * rows.len());
//! for &row in &rows {
//!     plan.add(&values, row * row_bytes..(row + 1) * row_bytes)?;
//!     plan.add(&checksums, row * sum_bytes..(row + 1) * sum_bytes)?;
//! }
//! // Probes a few pages; advises every run when one is missing.
//! let outcome = advisor.before_batch(&mut plan);
//! assert!(outcome.runs_advised <= plan.run_count());
//! // ...then read the rows, in any order: their pages are in the page cache or on their way.
//! # Ok::<(), stowage_core::Error>(())
//! ```
//!
//! A batch that finds its rows one by one is cheaper through
//! [`ColdReadAdvisor::before_batch_rows`], which builds the whole plan only when the sample's
//! pages are missing (stowage-memmap's `get_batch` does this):
//!
//! ```
//! # use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor};
//! # let values = vec![0u8; 1 << 20];
//! # let rows = [9_000usize, 12, 60_000, 13];
//! # let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
//! advisor.before_batch_rows(rows.len(), |i, plan| {
//!     // Every file row `rows[i]` is read from; a range the map cannot hold is the read's error.
//!     let _ = plan.add(&values, rows[i] * 16..rows[i] * 16 + 16);
//! });
//! ```
//!
//! For a single read, ask [`ColdReadAdvisor::get_wants_probe`] first (no system call, no
//! allocation), and only when it says yes build the plan of the row's ranges and call
//! [`ColdReadAdvisor::before_get`]:
//!
//! ```
//! # use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor, PagePlan};
//! # let (values, checksums) = (vec![0u8; 1 << 20], vec![0u8; 1 << 19]);
//! # let row = 777usize;
//! # let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
//! if advisor.get_wants_probe() {
//!     let mut plan = PagePlan::with_capacity(2);
//!     plan.add(&values, row * 16..row * 16 + 16)?;
//!     plan.add(&checksums, row * 8..row * 8 + 8)?;
//!     advisor.before_get(&mut plan);
//! }
//! # Ok::<(), stowage_core::Error>(())
//! ```
//!
//! # What it costs, and when no advice is faster
//! Measured with `cargo xtask bench --suite scale --sizes 100k,1m,10m --backends memmap` and
//! stowage-memmap's `warm_advice_cost` example (docs/benchmarks.md, scale section): warm `get`
//! and `get_batch` ran at 0.98x the rate with the advice off in the quietest runs (the probes'
//! system calls). At 10 M keys (160 MB files) cold batches ran 3x and cold gets 2x faster with
//! it. At 1 M keys (16 MB files) cold single gets ran faster without it: an unadvised fault's
//! 8 MiB read-around brings in half a file at once, so a small cache is soon all in memory, while
//! the advice reads only the pages asked for. The same read-around is what a cold page the sample
//! missed costs (the advisor then turns cold for single reads); a cache that fits in memory many
//! times over and is read once whole may prefer [`ColdReadAdvice::Never`].

use bytes::Bytes;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::{Error, Result};

/// Runs of a batch whose residency [`ColdReadAdvisor::before_batch`] asks `mincore` about, spread
/// evenly over the batch's sorted runs ([`ColdReadAdvisor::before_batch_rows`]: over the runs of
/// as many rows spread over the batch, and half as many while batches find their pages
/// resident). A call costs about 1 µs against the 200-1,000 µs a warm batch of 1,024 rows takes;
/// a batch with a fraction `f` of its runs missing goes unadvised with probability `(1 - f)^n`
/// for `n` probes (5 % at `f` = 0.3 and `n` = 8, 24 % at `n` = 4), and then costs its faults.
pub const BATCH_SAMPLE: usize = 8;

/// While single reads find their pages resident, one in this many (per thread) asks `mincore`
/// about one of its pages: on the scale suite's virtual machine a `mincore` of one page takes
/// 0.9-1.1 µs (a `madvise` 0.6 µs) and a warm `get` 0.15-1 µs: one in 64 cost 0.90x the warm
/// gets of a 100,000-row cache (`warm_advice_cost` in stowage-memmap's examples), one in 128
/// 0.84-0.97x (noisy); one in 256 is about 4 ns a get. A cache turning cold is noticed within
/// this many gets (each until then a fault with the kernel's read-around).
pub const GET_PROBE_EVERY: u32 = 256;

/// After a probe found a page missing, single reads probe every call until this many probes in a
/// row found their pages resident.
pub const WARM_STREAK: u32 = 64;

/// A single read whose first page lies at most this many pages after the previous probed read's
/// (on the same thread) is taken for part of a sequential scan and not advised: the kernel's
/// read-around of a faulting map (`read_ahead_kb`, 8 MiB on the scale suite's disk) serves a scan
/// in large requests, where advice would read it a page at a time.
pub const SEQUENTIAL_WINDOW: usize = 16;

/// Whether reads tell the kernel ahead of time which pages they will touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColdReadAdvice {
    /// Advise when a probe finds pages missing from the page cache (the default): cold reads
    /// overlap, warm reads pay a `mincore` per batch and one per [`GET_PROBE_EVERY`] gets.
    #[default]
    Adaptive,
    /// Advise every batch and every `get`, without probing: for data known to be cold.
    Always,
    /// Never advise (reads fault one page at a time, as without this module).
    Never,
}

/// Most threads [`each_on_threads`] uses: the device serves about 32 reads at once (the scale
/// suite's queue-depth-32 reference), and each thread mostly waits for one.
pub const OPEN_THREADS: usize = 32;

/// Fewest files to open for which a batch opens them on several threads ([`each_on_threads`])
/// rather than on its own.
pub const PARALLEL_OPENS: usize = 4;

/// Calls `work` on every item of `items`, on up to [`OPEN_THREADS`] threads (this one among
/// them), each taking the next item not taken: for opening the files a cold batch needs, whose
/// dependent reads (directory entry, inode, header) then wait together instead of one file after
/// another. A thread that cannot be started leaves its share to the others.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let sum = AtomicUsize::new(0);
/// stowage_core::cold_reads::each_on_threads(&[1, 2, 3, 4, 5], |&n| {
///     sum.fetch_add(n, Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), 15);
/// ```
pub fn each_on_threads<T: Sync>(items: &[T], work: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    let take = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            work(item);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..items.len().min(OPEN_THREADS) {
            if std::thread::Builder::new().spawn_scoped(scope, take).is_err() {
                break;
            }
        }
        take();
    });
}

/// The system page size (`sysconf(_SC_PAGESIZE)`, 4,096 where the system does not say).
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        #[cfg(unix)]
        {
            // SAFETY: sysconf reads a system constant; no memory is passed.
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if size > 0 && (size as usize).is_power_of_two() {
                return size as usize;
            }
        }
        4096
    })
}

/// Pages between two runs of the same map up to which the runs are read as one (16 KiB of 4 KiB
/// pages): one request of a few more pages costs less than two requests. Measured on 1,024
/// random pages per batch, page cache dropped: a 16 MiB file read 1.6-2.8x faster with gaps of
/// up to 4 pages merged than with none, a 160 MiB and a 1 GiB file at the same rate (within
/// noise); merging gaps of 64 pages was slower at every size.
pub const MERGE_GAP_PAGES: usize = 4;

/// The byte ranges a read will touch, as sorted, page-aligned, coalesced runs of addresses.
///
/// Ranges are added in any order, from any number of maps (each given as the whole mapped slice,
/// or any slice of it). The plan borrows the maps, so they stay mapped until the advice is
/// issued. Two ranges merge into one run when their pages overlap or touch, or when they lie in
/// the same map with at most [`MERGE_GAP_PAGES`] pages between them; pages of different maps
/// never merge over a gap (it may not be mapped).
///
/// ```
/// use stowage_core::cold_reads::{PagePlan, page_size};
/// let page = page_size();
/// let map = vec![0u8; 64 * page];
/// let mut plan = PagePlan::new();
/// plan.add(&map, 50 * page + 10..50 * page + 20)?; // page 50
/// plan.add(&map, 10..20)?; // page 0
/// plan.add(&map, page - 1..page + 1)?; // pages 0 and 1: merges with page 0
/// plan.add(&map, 20 * page..20 * page)?; // empty: nothing to read
/// plan.add(&map, 54 * page..54 * page + 1)?; // page 54: 3 pages after page 50, merged
/// assert!(plan.add(&map, 64 * page - 1..64 * page + 1).is_err()); // past the end
/// let pages: Vec<usize> = plan.runs().iter().map(|r| r.len() / page).collect();
/// assert_eq!(pages, [2, 5]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct PagePlan<'a> {
    /// Page-aligned address ranges, in insertion order until [`PagePlan::runs`] sorts and
    /// coalesces them.
    runs: Vec<Run>,
    /// Whether `runs` is sorted and coalesced.
    planned: bool,
    /// The shared maps of ranges added by [`PagePlan::add_shared`], kept mapped while the plan
    /// lives (a bounded set of open files may close theirs meanwhile).
    kept: Vec<Bytes>,
    maps: PhantomData<&'a [u8]>,
}

/// Pages `start..end` (addresses), every page of `floor..end` mapped: `floor` is where the map
/// of the run's range begins (its first page), so a gap before `start` down to `floor` may be
/// read with the run.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: usize,
    end: usize,
    floor: usize,
}

impl Run {
    /// Whether `next` (starting at or after `self.start`) is read with `self` as one run.
    fn takes(&self, next: &Run, gap: usize) -> bool {
        next.start <= self.end || (next.floor <= self.end && next.start - self.end <= gap)
    }

    fn absorb(&mut self, next: &Run) {
        self.start = self.start.min(next.start);
        self.end = self.end.max(next.end);
        self.floor = self.floor.min(next.floor);
    }
}

impl<'a> PagePlan<'a> {
    /// An empty plan.
    pub fn new() -> PagePlan<'a> {
        PagePlan { runs: Vec::new(), planned: true, kept: Vec::new(), maps: PhantomData }
    }

    /// An empty plan with room for `ranges` ranges (a batch's rows times the files per row).
    pub fn with_capacity(ranges: usize) -> PagePlan<'a> {
        PagePlan {
            runs: Vec::with_capacity(ranges),
            planned: true,
            kept: Vec::new(),
            maps: PhantomData,
        }
    }

    /// Adds every byte of `bytes` (a whole map, or any slice of one): [`PagePlan::add`] of its
    /// full range, which cannot be out of range.
    ///
    /// ```
    /// use stowage_core::cold_reads::{PagePlan, page_size};
    /// let map = vec![0u8; 3 * page_size()];
    /// let mut plan = PagePlan::new();
    /// plan.add_whole(&map[10..]);
    /// assert!(!plan.is_empty());
    /// ```
    pub fn add_whole(&mut self, bytes: &'a [u8]) {
        self.add(bytes, 0..bytes.len()).expect("a slice's own range is inside it");
    }

    /// Adds the bytes `range` of `map` (offsets into `map`): the pages holding them. An empty
    /// range adds nothing.
    ///
    /// Errors: [`Error::InvalidArgument`] naming the range and the map's length when the range
    /// ends past the map or starts after its end (nothing is added).
    pub fn add(&mut self, map: &'a [u8], range: Range<usize>) -> Result<()> {
        self.add_range(map, range)
    }

    /// [`PagePlan::add`] of a shared map that need not outlive the plan: the plan keeps a
    /// reference to it, so its pages stay mapped until they are advised (a file closed by a
    /// bounded set of open files while a batch is planned stays mapped).
    ///
    /// ```
    /// use stowage_core::cold_reads::{PagePlan, page_size};
    /// let mut plan = PagePlan::new();
    /// {
    ///     let map = bytes::Bytes::from(vec![0u8; 4 * page_size()]);
    ///     plan.add_shared(&map, page_size()..page_size() + 1)?;
    /// } // dropped here, kept by the plan
    /// assert_eq!(plan.runs().len(), 1);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn add_shared(&mut self, map: &Bytes, range: Range<usize>) -> Result<()> {
        let empty = range.is_empty();
        self.add_range(map, range)?;
        if !empty && self.kept.last().is_none_or(|kept| kept.as_ptr() != map.as_ptr()) {
            self.kept.push(map.clone());
        }
        Ok(())
    }

    /// [`PagePlan::add`], for a map that the caller keeps mapped while the plan lives.
    fn add_range(&mut self, map: &[u8], range: Range<usize>) -> Result<()> {
        if range.start > range.end || range.end > map.len() {
            return Err(Error::invalid(format!(
                "byte range {}..{} is outside a map of {} bytes",
                range.start,
                range.end,
                map.len()
            )));
        }
        if range.is_empty() {
            return Ok(());
        }
        let page = page_size();
        let base = map.as_ptr() as usize;
        // Every page from the one holding the map's first byte to the one holding the range's
        // last byte holds a byte of `map`, so it is mapped for as long as `map` is borrowed.
        let run = Run {
            start: (base + range.start) & !(page - 1),
            end: (base + range.end).next_multiple_of(page),
            floor: base & !(page - 1),
        };
        let gap = MERGE_GAP_PAGES * page;
        if let Some(last) = self.runs.last_mut() {
            if last.start <= run.start && last.takes(&run, gap) {
                // After the previous range and close to it (rows added in storage order):
                // merged here, which keeps a sequential batch's plan short without sorting.
                last.absorb(&run);
                return Ok(());
            }
            if run.start < last.start {
                // Out of order: sorted and merged before use.
                self.planned = false;
            }
        }
        self.runs.push(run);
        Ok(())
    }

    /// Whether nothing was added (or only empty ranges).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Forgets every range, keeping the allocation (to plan the next batch).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.planned = true;
    }

    /// Sorts and coalesces the runs (once after ranges were added out of order).
    fn plan(&mut self) -> &[Run] {
        if !self.planned {
            let gap = MERGE_GAP_PAGES * page_size();
            self.runs.sort_unstable_by_key(|run| run.start);
            let mut merged = 0;
            for i in 1..self.runs.len() {
                let next = self.runs[i];
                if self.runs[merged].takes(&next, gap) {
                    self.runs[merged].absorb(&next);
                } else {
                    merged += 1;
                    self.runs[merged] = next;
                }
            }
            self.runs.truncate(merged + 1);
            self.planned = true;
        }
        &self.runs
    }

    /// The runs: page-aligned address ranges, sorted, none overlapping or touching another.
    pub fn runs(&mut self) -> Vec<Range<usize>> {
        self.plan().iter().map(|run| run.start..run.end).collect()
    }

    /// How many runs there are (system calls [`PagePlan::advise`] makes).
    pub fn run_count(&mut self) -> usize {
        self.plan().len()
    }

    /// Bytes the runs cover (whole pages).
    pub fn bytes(&mut self) -> usize {
        self.plan().iter().map(|run| run.end - run.start).sum()
    }

    /// Asks `mincore` whether the first page of up to `samples` runs, spread evenly over the
    /// sorted runs, is resident: the number of sampled runs whose page is missing (a failed
    /// call counts as missing). `samples` = 0 or a plan with no runs probes nothing.
    pub fn missing_in_sample(&mut self, samples: usize) -> usize {
        let runs = self.plan();
        let taken = samples.min(runs.len());
        (0..taken).filter(|&i| !page_resident(runs[i * runs.len() / taken].start)).count()
    }

    /// Issues `madvise(MADV_WILLNEED)` for every run: the kernel starts reading the missing
    /// pages and returns. Returns how many runs the kernel accepted (a refused run is skipped:
    /// the advice is a hint). Nothing happens on targets other than Linux (returns 0).
    pub fn advise(&mut self) -> usize {
        self.plan().iter().filter(|run| advise_willneed(run.start..run.end)).count()
    }
}

/// Whether the page at `address` (page-aligned, inside a live map) is in the page cache (or, for
/// a file the process may neither write nor owns, mapped in its page tables: `mincore(2)`).
#[cfg(target_os = "linux")]
fn page_resident(address: usize) -> bool {
    let mut resident = 0u8;
    // SAFETY: `address` is page-aligned and its page holds a byte of a map the plan borrows, so
    // the one-page range is mapped; mincore writes one byte per page, into `resident`.
    let code = unsafe { libc::mincore(address as *mut libc::c_void, 1, &mut resident) };
    code == 0 && resident & 1 == 1
}

#[cfg(not(target_os = "linux"))]
fn page_resident(_address: usize) -> bool {
    true
}

/// `madvise(MADV_WILLNEED)` on `run`; whether the kernel accepted it.
#[cfg(target_os = "linux")]
fn advise_willneed(run: Range<usize>) -> bool {
    // SAFETY: the run is page-aligned and every page of it holds a byte of a map the plan
    // borrows, so it is mapped. MADV_WILLNEED only starts reads into the page cache: it changes
    // neither the mapping nor any byte of memory.
    let code =
        unsafe { libc::madvise(run.start as *mut libc::c_void, run.len(), libc::MADV_WILLNEED) };
    code == 0
}

#[cfg(not(target_os = "linux"))]
fn advise_willneed(_run: Range<usize>) -> bool {
    false
}

/// What one call of the advisor did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdviceOutcome {
    /// Pages asked about with `mincore`.
    pub probed: usize,
    /// Of those, pages found missing from the page cache.
    pub missing: usize,
    /// Runs advised with `madvise(MADV_WILLNEED)` (0: the read goes ahead without advice).
    pub runs_advised: usize,
}

/// Decides, read by read, whether to advise the kernel ([`ColdReadAdvice`]), and does it. One per
/// open handle; shared between threads (its state is two atomics, and a per-thread counter).
///
/// See the [module documentation](self) for the rule and the call pattern.
#[derive(Debug)]
pub struct ColdReadAdvisor {
    policy: ColdReadAdvice,
    /// A probe found a page missing, and fewer than [`WARM_STREAK`] probes since found every
    /// page resident: single reads probe every call.
    cold: AtomicBool,
    /// Probes in a row that found every page resident, while `cold`.
    streak: AtomicU32,
}

thread_local! {
    /// Single reads on this thread since the last probe, while warm.
    static GETS_SINCE_PROBE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The first address of the last single read this thread probed (sequential detection).
    static LAST_GET: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl ColdReadAdvisor {
    /// An advisor following `policy`. It starts out cold: the first reads of a handle probe.
    pub fn new(policy: ColdReadAdvice) -> ColdReadAdvisor {
        ColdReadAdvisor { policy, cold: AtomicBool::new(true), streak: AtomicU32::new(0) }
    }

    /// The policy it follows.
    pub fn policy(&self) -> ColdReadAdvice {
        self.policy
    }

    /// Whether the next single read should build its plan and call
    /// [`ColdReadAdvisor::before_get`]: always with [`ColdReadAdvice::Always`], never with
    /// [`ColdReadAdvice::Never`], and when adaptive, at every call while reads are cold and at
    /// one call in [`GET_PROBE_EVERY`] (per thread) while they are warm. No system call.
    #[inline]
    pub fn get_wants_probe(&self) -> bool {
        match self.policy {
            ColdReadAdvice::Always => true,
            ColdReadAdvice::Never => false,
            ColdReadAdvice::Adaptive if self.cold.load(Ordering::Relaxed) => true,
            ColdReadAdvice::Adaptive => GETS_SINCE_PROBE.with(|count| {
                let next = count.get() + 1;
                let due = next >= GET_PROBE_EVERY;
                count.set(if due { 0 } else { next });
                due
            }),
        }
    }

    /// Before a single read whose ranges are in `plan` (after
    /// [`ColdReadAdvisor::get_wants_probe`] said yes): with [`ColdReadAdvice::Adaptive`], asks
    /// `mincore` about the first page of every run and advises every run when one is missing
    /// (the row's bytes and its checksum in two files: both reads start together), unless the
    /// read's first page is at most [`SEQUENTIAL_WINDOW`] pages after the previous probed read's
    /// on this thread (a sequential scan, left to the kernel's read-around); with
    /// [`ColdReadAdvice::Always`], advises without asking.
    pub fn before_get(&self, plan: &mut PagePlan<'_>) -> AdviceOutcome {
        match self.policy {
            ColdReadAdvice::Never => AdviceOutcome::default(),
            ColdReadAdvice::Always => {
                AdviceOutcome { runs_advised: plan.advise(), ..Default::default() }
            }
            ColdReadAdvice::Adaptive => {
                let first = plan.plan().first().map_or(0, |run| run.start);
                let previous = LAST_GET.with(|last| last.replace(first));
                if first >= previous && first - previous <= SEQUENTIAL_WINDOW * page_size() {
                    // A sequential scan: the kernel's own read-around of a faulting map reads
                    // ahead in large requests, where advising page by page would read one page
                    // at a time.
                    return AdviceOutcome::default();
                }
                // While warm, one page tells (a `mincore` costs about a warm read); while cold,
                // every run is looked at.
                let probed = if self.is_cold() { plan.run_count() } else { 1 };
                let missing = plan.missing_in_sample(probed);
                self.learn(missing);
                let runs_advised = if missing > 0 { plan.advise() } else { 0 };
                AdviceOutcome { probed, missing, runs_advised }
            }
        }
    }

    /// Before a batch whose ranges are in `plan`: with [`ColdReadAdvice::Adaptive`], asks
    /// `mincore` about [`BATCH_SAMPLE`] runs spread over the plan and advises every run when one
    /// is missing; with [`ColdReadAdvice::Always`], advises without asking.
    pub fn before_batch(&self, plan: &mut PagePlan<'_>) -> AdviceOutcome {
        match self.policy {
            ColdReadAdvice::Never => AdviceOutcome::default(),
            ColdReadAdvice::Always => {
                AdviceOutcome { runs_advised: plan.advise(), ..Default::default() }
            }
            ColdReadAdvice::Adaptive => {
                let probed = BATCH_SAMPLE.min(plan.run_count());
                let missing = plan.missing_in_sample(probed);
                self.learn(missing);
                let runs_advised = if missing > 0 { plan.advise() } else { 0 };
                AdviceOutcome { probed, missing, runs_advised }
            }
        }
    }

    /// Before a batch of `rows` rows whose ranges `add(i, plan)` adds to a plan (row `i` of the
    /// batch, `0..rows`), building the whole plan only when it is advised: with
    /// [`ColdReadAdvice::Adaptive`], first a plan of [`BATCH_SAMPLE`] rows spread over the batch,
    /// every run of which is probed with `mincore`; when a page is missing, the plan of every
    /// row, advised. A warm batch so costs a few range additions and at most
    /// `BATCH_SAMPLE` x (files per row) `mincore` calls, whatever its size. With
    /// [`ColdReadAdvice::Always`] the whole plan is built and advised at once.
    ///
    /// ```
    /// use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor};
    /// let map = vec![0u8; 1 << 16];
    /// let rows = [3usize, 700, 12, 4000];
    /// let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
    /// advisor.before_batch_rows(rows.len(), |i, plan| {
    ///     let _ = plan.add(&map, rows[i] * 16..rows[i] * 16 + 16);
    /// });
    /// ```
    pub fn before_batch_rows<'a>(
        &self,
        rows: usize,
        mut add: impl FnMut(usize, &mut PagePlan<'a>),
    ) -> AdviceOutcome {
        let whole = |add: &mut dyn FnMut(usize, &mut PagePlan<'a>)| {
            let mut plan = PagePlan::with_capacity(2 * rows);
            (0..rows).for_each(|i| add(i, &mut plan));
            plan.advise()
        };
        match self.policy {
            ColdReadAdvice::Never => AdviceOutcome::default(),
            ColdReadAdvice::Always => {
                AdviceOutcome { runs_advised: whole(&mut add), ..Default::default() }
            }
            ColdReadAdvice::Adaptive => {
                // While warm, half the sample: a probe costs about a microsecond.
                let samples = if self.is_cold() { BATCH_SAMPLE } else { BATCH_SAMPLE / 2 };
                let taken = samples.min(rows);
                let mut sample = PagePlan::with_capacity(2 * taken);
                (0..taken).for_each(|j| add(j * rows / taken, &mut sample));
                let probed = samples.min(sample.run_count());
                let missing = sample.missing_in_sample(probed);
                self.learn(missing);
                let runs_advised = if missing > 0 { whole(&mut add) } else { 0 };
                AdviceOutcome { probed, missing, runs_advised }
            }
        }
    }

    /// Whether single reads currently probe every call (a recent probe found a page missing).
    pub fn is_cold(&self) -> bool {
        self.cold.load(Ordering::Relaxed)
    }

    /// Updates the cold/warm state from a probe that found `missing` pages missing.
    fn learn(&self, missing: usize) {
        if missing > 0 {
            self.streak.store(0, Ordering::Relaxed);
            self.cold.store(true, Ordering::Relaxed);
        } else if self.cold.load(Ordering::Relaxed)
            && self.streak.fetch_add(1, Ordering::Relaxed) + 1 >= WARM_STREAK
        {
            self.cold.store(false, Ordering::Relaxed);
            self.streak.store(0, Ordering::Relaxed);
        }
    }
}

impl Default for ColdReadAdvisor {
    fn default() -> Self {
        ColdReadAdvisor::new(ColdReadAdvice::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages_of(plan: &mut PagePlan<'_>, map: &[u8]) -> Vec<Range<usize>> {
        let page = page_size();
        let base = map.as_ptr() as usize & !(page - 1);
        plan.runs().iter().map(|r| (r.start - base) / page..(r.end - base) / page).collect()
    }

    /// A page-aligned map of `pages` pages (a real anonymous mapping would do as well; a Vec of
    /// pages plus one, sliced at a page boundary, is page-aligned and needs no unsafe).
    fn aligned(buffer: &[u8], pages: usize) -> &[u8] {
        let page = page_size();
        let skip = (buffer.as_ptr() as usize).next_multiple_of(page) - buffer.as_ptr() as usize;
        &buffer[skip..skip + pages * page]
    }

    #[test]
    fn ranges_are_sorted_aligned_and_coalesced() {
        let page = page_size();
        let buffer = vec![1u8; 65 * page];
        let map = aligned(&buffer, 64);
        let mut plan = PagePlan::new();
        for range in [
            30 * page + 5..30 * page + 21,    // page 30
            10 * page..10 * page + 1,         // page 10
            11 * page - 8..11 * page + 8,     // pages 10-11, over a boundary
            50 * page..52 * page,             // pages 50-51
            52 * page..52 * page + 1,         // page 52, touching 51
            30 * page + 100..30 * page + 200, // page 30 again
            0..1,                             // page 0
            34 * page..34 * page + 1,         // page 34: 3 pages after 30, merged
            40 * page..40 * page + 1,         // page 40: 5 pages after 34, not merged
        ] {
            plan.add(map, range).unwrap();
        }
        assert_eq!(pages_of(&mut plan, map), [0..1, 10..12, 30..35, 40..41, 50..53]);
        assert_eq!(plan.bytes(), 12 * page);
        for run in plan.runs() {
            assert_eq!(run.start % page, 0);
            assert_eq!(run.end % page, 0);
        }
        // A range reaching back over earlier runs merges them all.
        plan.add(map, 8 * page..45 * page).unwrap();
        assert_eq!(pages_of(&mut plan, map), [0..1, 8..45, 50..53]);
        assert_eq!(plan.run_count(), 3);
        plan.clear();
        assert!(plan.is_empty());
    }

    #[test]
    fn runs_of_different_maps_never_merge_over_a_gap() {
        let page = page_size();
        let buffer = vec![1u8; 21 * page];
        let whole = aligned(&buffer, 20);
        let (first, second) = (&whole[..8 * page], &whole[10 * page..]);
        let mut plan = PagePlan::new();
        plan.add(first, 7 * page..7 * page + 1).unwrap();
        plan.add(second, 0..1).unwrap();
        assert_eq!(pages_of(&mut plan, whole), [7..8, 10..11]);
        // The same two pages of one map merge over the 2-page gap.
        let mut plan = PagePlan::new();
        plan.add(whole, 10 * page..10 * page + 1).unwrap();
        plan.add(whole, 7 * page..7 * page + 1).unwrap();
        assert_eq!(pages_of(&mut plan, whole), vec![(7..11)]);
    }

    #[test]
    fn sequential_rows_merge_as_they_are_added() {
        let page = page_size();
        let buffer = vec![0u8; 5 * page];
        let map = aligned(&buffer, 4);
        let mut plan = PagePlan::with_capacity(4 * page / 16);
        for row in 0..4 * page / 16 {
            plan.add(map, row * 16..row * 16 + 16).unwrap();
        }
        assert_eq!(plan.runs.len(), 1, "merged while adding");
        assert_eq!(pages_of(&mut plan, map), vec![(0..4)]);
    }

    #[test]
    fn empty_and_out_of_range_ranges() {
        let buffer = vec![0u8; 100];
        let mut plan = PagePlan::new();
        plan.add(&buffer, 50..50).unwrap();
        plan.add(&buffer, 100..100).unwrap();
        assert!(plan.is_empty());
        let err = plan.add(&buffer, 90..101).unwrap_err().to_string();
        assert!(err.contains("90..101") && err.contains("100 bytes"), "{err}");
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 60..50;
        assert!(plan.add(&buffer, reversed).is_err());
        assert!(plan.add(&buffer, 101..101).is_err());
        assert!(plan.is_empty());
        assert_eq!(plan.advise(), 0);
        assert_eq!(plan.missing_in_sample(8), 0);
        let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
        assert_eq!(advisor.before_batch(&mut plan), AdviceOutcome::default());
    }

    #[test]
    fn ranges_from_several_maps_and_a_huge_batch() {
        let page = page_size();
        let a = vec![0u8; 64 * page];
        let b = vec![0u8; 64 * page];
        let mut plan = PagePlan::with_capacity(200_000);
        // 100,000 rows of 16 bytes in each map, in a scrambled order.
        for i in 0..100_000usize {
            let row = (i * 7919) % (64 * page / 16);
            plan.add(&a, row * 16..row * 16 + 16).unwrap();
            plan.add(&b, row * 16..row * 16 + 16).unwrap();
        }
        let runs = plan.runs().to_vec();
        // Each map is covered whole: one run per map (two if they happen to be adjacent: one).
        assert!(runs.len() <= 2, "{runs:?}");
        assert_eq!(plan.bytes(), runs.iter().map(|r| r.len()).sum::<usize>());
        assert!(plan.bytes() >= 128 * page && plan.bytes() <= 130 * page);
        assert!(runs.windows(2).all(|w| w[0].end < w[1].start));
        plan.clear();
        assert!(plan.is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn resident_pages_are_not_advised_and_missing_ones_are() {
        let page = page_size();
        let touched = vec![1u8; 9 * page];
        let map = aligned(&touched, 8);
        let mut plan = PagePlan::new();
        for p in 0..8 {
            plan.add(map, p * page..p * page + 1).unwrap();
        }
        // A heap buffer written just now is resident.
        assert_eq!(plan.missing_in_sample(8), 0);
        let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
        let outcome = advisor.before_batch(&mut plan);
        assert_eq!(outcome, AdviceOutcome { probed: 1, missing: 0, runs_advised: 0 });
        // Always advises without probing (madvise accepts anonymous memory).
        let always = ColdReadAdvisor::new(ColdReadAdvice::Always);
        assert_eq!(always.before_batch(&mut plan).runs_advised, 1);
        let never = ColdReadAdvisor::new(ColdReadAdvice::Never);
        assert_eq!(never.before_batch(&mut plan), AdviceOutcome::default());

        // A file's pages after POSIX_FADV_DONTNEED are missing (when the kernel drops them).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold.bin");
        std::fs::write(&path, vec![7u8; 64 * page]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open; the advice affects only the page cache.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let len = 64 * page;
        // SAFETY: a read-only private map of a file this test wrote and does not change.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(address, libc::MAP_FAILED);
        {
            // SAFETY: the map is `len` readable bytes, unmapped only after this block.
            let mapped = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
            let mut plan = PagePlan::new();
            for p in (0..64).step_by(8) {
                plan.add(mapped, p * page + 3..p * page + 19).unwrap();
            }
            let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
            let outcome = advisor.before_batch(&mut plan);
            if outcome.missing > 0 {
                assert_eq!(outcome.runs_advised, 8);
                assert!(advisor.is_cold());
            }
            assert!(mapped.iter().step_by(page).all(|&b| b == 7));
        }
        // SAFETY: unmaps the map made above, no longer borrowed.
        unsafe { libc::munmap(address, len) };
    }

    #[test]
    fn single_reads_probe_rarely_while_warm() {
        let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
        assert!(advisor.get_wants_probe(), "a new handle starts cold");
        let page = page_size();
        let buffer = vec![1u8; 40 * page];
        // Two rows far apart, read in turn: never a sequential scan.
        let mut low = PagePlan::new();
        low.add(&buffer, 0..16).unwrap();
        let mut high = PagePlan::new();
        high.add(&buffer, 39 * page..39 * page + 16).unwrap();
        for i in 0..WARM_STREAK {
            assert!(advisor.get_wants_probe());
            let plan = if i % 2 == 0 { &mut low } else { &mut high };
            let outcome = advisor.before_get(plan);
            assert_eq!((outcome.probed, outcome.missing, outcome.runs_advised), (1, 0, 0));
        }
        assert!(!advisor.is_cold());
        let wanted = (0..10 * GET_PROBE_EVERY).filter(|_| advisor.get_wants_probe()).count();
        assert_eq!(wanted, 10);
        // A probe that finds a page missing turns it cold again.
        advisor.learn(1);
        assert!(advisor.is_cold() && advisor.get_wants_probe());
        assert!(ColdReadAdvisor::new(ColdReadAdvice::Always).get_wants_probe());
        assert!(!ColdReadAdvisor::new(ColdReadAdvice::Never).get_wants_probe());
    }

    #[test]
    fn a_sequential_scan_is_left_to_the_kernel() {
        let page = page_size();
        let buffer = vec![1u8; 64 * page];
        let advisor = ColdReadAdvisor::new(ColdReadAdvice::Adaptive);
        let probes: Vec<usize> = (0..8)
            .map(|p| {
                let mut plan = PagePlan::new();
                plan.add(&buffer, 40 * page - p * 5 * page..40 * page - p * 5 * page + 16).unwrap();
                advisor.before_get(&mut plan).probed
            })
            .collect();
        assert_eq!(probes, [1; 8], "backwards: probed every time");
        let probes: Vec<usize> = (0..8)
            .map(|p| {
                let mut plan = PagePlan::new();
                plan.add(&buffer, p * page..p * page + 16).unwrap();
                advisor.before_get(&mut plan).probed
            })
            .collect();
        assert_eq!(probes, [1, 0, 0, 0, 0, 0, 0, 0], "forwards: only the first");
    }
}
