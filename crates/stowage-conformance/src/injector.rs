//! The Rust side of `faultinject/faultinject.c` (built by this crate's `build.rs`): where the
//! built interposer is, the environment that arms it for one child process, what its log says
//! happened, and [`Faultinject`], the suite's built-in [`FaultInjector`].
//!
//! The interposer replaces libc's `write`, `fsync` and friends in a child process (`LD_PRELOAD`)
//! and makes the calls on files below one directory fail with a chosen errno, at a chosen call
//! and until a stop file appears: a disk that fills up or reports `EIO`, without root. It sees
//! only what goes through libc; a backend that writes through `io_uring` or raw system calls
//! escapes it, and the cases then report that no fault fired (SKIPPED), never a pass.
//!
//! ```no_run
//! use stowage_conformance::injector::{EIO, FaultKind, Injection, InjectionLog, Op, library};
//! use std::path::PathBuf;
//! let injection = Injection {
//!     kind: FaultKind { op: Op::Fsync, errno: EIO, sticky: false, short: false },
//!     after: Some(2), // the third fsync below `dir` fails
//!     dir: PathBuf::from("/tmp/work/cache"), // canonical
//!     stop: PathBuf::from("/tmp/work/stop"),
//!     log: PathBuf::from("/tmp/work/faultinject.log"),
//! };
//! let library = library().expect("built on Linux");
//! std::process::Command::new("my-writer").envs(injection.env(&library)).status().unwrap();
//! println!("{:?}", InjectionLog::read(&injection.log).first_fired());
//! ```

use crate::faults::FaultInjector;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use stowage_core::file_safety::WriterLock;

/// Why [`library`] is `None`: the sentence the cases that need the interposer skip with.
pub const UNAVAILABLE: &str = "the faultinject LD_PRELOAD interposer \
                               (faultinject/faultinject.c) could not be built here (it needs \
                               Linux and a C compiler; see the stowage-conformance build \
                               warnings)";

/// The interposer's shared library, as `build.rs` built it; `None` where it could not be built.
pub fn library() -> Option<PathBuf> {
    let path = env!("STOWAGE_FAULTINJECT_LIBRARY");
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// The calls a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `write`, `pwrite`, `pwrite64`, `writev`, `pwritev`, `pwritev64`.
    Write,
    /// `fsync`, `fdatasync`.
    Fsync,
    /// `ftruncate`, `ftruncate64`, `truncate`, `truncate64`.
    Ftruncate,
    /// `fallocate`, `fallocate64`, `posix_fallocate`, `posix_fallocate64`.
    Fallocate,
    /// `rename`, `renameat`, `renameat2` (either name in the cache).
    Rename,
    /// `mkdir`, `mkdirat`.
    Mkdir,
    /// `open`, `open64`, `openat`, `openat64`, `creat`, `creat64` that may create a file.
    Open,
}

impl Op {
    /// The interposer's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Fsync => "fsync",
            Op::Ftruncate => "ftruncate",
            Op::Fallocate => "fallocate",
            Op::Rename => "rename",
            Op::Mkdir => "mkdir",
            Op::Open => "open",
        }
    }

    /// Whether every backend must make such a call when it writes (a writer that never writes
    /// nor fsyncs is broken); the others a backend may do without (arrow never mkdirs in an
    /// existing cache, none fallocates), and a kind whose dry run counts none of them is
    /// reported as not called, never as passed.
    pub fn always_called(self) -> bool {
        matches!(self, Op::Write | Op::Fsync)
    }
}

/// One kind of fault: which calls fail, with which errno, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultKind {
    /// The calls.
    pub op: Op,
    /// The errno (`ENOSPC` 28, `EIO` 5).
    pub errno: i32,
    /// Every later call fails too (a full disk stays full) until the stop file appears;
    /// otherwise only one call fails and a retry would succeed.
    pub sticky: bool,
    /// A failing write first writes half its bytes (a disk filling up mid-write).
    pub short: bool,
}

/// `ENOSPC`.
pub const ENOSPC: i32 = 28;
/// `EIO`.
pub const EIO: i32 = 5;
/// `EMFILE` (the process ran out of file descriptors).
pub const EMFILE: i32 = 24;

impl FaultKind {
    /// The nine faults of stowage-reliability's resource-fault campaign, each the errno the call most plausibly fails with:
    ///
    /// - a disk that fills up in the middle of a write and stays full (ENOSPC);
    /// - a write that fails with EIO once;
    /// - an fsync that fails with EIO once (the retry would "succeed": the trap; the power-loss
    ///   model drops the pages it could not write);
    /// - an fsync that fails with ENOSPC and keeps failing (delayed allocation on a full disk);
    /// - an ftruncate that fails with EIO once (growing or cutting a file is a metadata write);
    /// - a fallocate that fails with ENOSPC until freed (what it exists to report);
    /// - a rename that fails with EIO once (a journal write of the directory failed);
    /// - a mkdir that fails with ENOSPC until freed (no room for the directory's block);
    /// - an open that would create a file failing with EMFILE once (out of descriptors: the
    ///   commonest transient failure of an open; ENOSPC and EACCES end the write the same way).
    pub fn all() -> [FaultKind; 9] {
        let kind = |op, errno, sticky| FaultKind { op, errno, sticky, short: false };
        [
            FaultKind { op: Op::Write, errno: ENOSPC, sticky: true, short: true },
            kind(Op::Write, EIO, false),
            kind(Op::Fsync, EIO, false),
            kind(Op::Fsync, ENOSPC, true),
            kind(Op::Ftruncate, EIO, false),
            kind(Op::Fallocate, ENOSPC, true),
            kind(Op::Rename, EIO, false),
            kind(Op::Mkdir, ENOSPC, true),
            kind(Op::Open, EMFILE, false),
        ]
    }

    /// `write ENOSPC (short, sticky)` and the like.
    pub fn label(&self) -> String {
        let errno = match self.errno {
            ENOSPC => "ENOSPC".to_string(),
            EIO => "EIO".to_string(),
            EMFILE => "EMFILE".to_string(),
            other => format!("errno {other}"),
        };
        let mut how = Vec::new();
        if self.short {
            how.push("half written first");
        }
        how.push(if self.sticky { "until freed" } else { "once" });
        format!("{} {errno} ({})", self.op.name(), how.join(", "))
    }
}

/// Everything the interposer needs for one child.
#[derive(Debug, Clone)]
pub struct Injection {
    /// The fault.
    pub kind: FaultKind,
    /// Matching calls that succeed before the first failure; `None` only counts.
    pub after: Option<u64>,
    /// Only files below this directory count.
    pub dir: PathBuf,
    /// Once this file exists nothing fails any more.
    pub stop: PathBuf,
    /// The interposer's log.
    pub log: PathBuf,
}

impl Injection {
    /// The child's environment: `LD_PRELOAD` and the interposer's variables.
    pub fn env(&self, library: &Path) -> Vec<(String, String)> {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        vec![
            ("LD_PRELOAD".into(), library.display().to_string()),
            ("FAULTINJECT_DIR".into(), self.dir.display().to_string()),
            ("FAULTINJECT_OP".into(), self.kind.op.name().into()),
            ("FAULTINJECT_ERRNO".into(), self.kind.errno.to_string()),
            ("FAULTINJECT_AFTER".into(), self.after.map_or("-1".into(), |n| n.to_string())),
            ("FAULTINJECT_STICKY".into(), flag(self.kind.sticky)),
            ("FAULTINJECT_SHORT".into(), flag(self.kind.short)),
            ("FAULTINJECT_STOP".into(), self.stop.display().to_string()),
            ("FAULTINJECT_LOG".into(), self.log.display().to_string()),
            // The writer lock's pid hint: its write is allowed to fail (by design, see WriterLock).
            ("FAULTINJECT_IGNORE".into(), WriterLock::FILE_NAME.into()),
        ]
    }
}

/// What the interposer's log says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InjectionLog {
    /// The interposer was loaded into the child (never a silent pass with an inert preload).
    pub loaded: bool,
    /// Each injected failure: the call (`write`, `fdatasync`, `write-half`), its number among the
    /// matching calls, and the file.
    pub fired: Vec<(String, u64, String)>,
    /// Matching calls in the whole run, when the child exited normally.
    pub calls: Option<u64>,
}

impl InjectionLog {
    /// Reads the log at `path` (missing: nothing happened).
    pub fn read(path: &Path) -> InjectionLog {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut log = InjectionLog::default();
        for line in text.lines() {
            let words: Vec<&str> = line.splitn(4, ' ').collect();
            match words[..] {
                ["loaded", _] => log.loaded = true,
                ["fired", call, n, file] => {
                    log.fired.push((call.into(), n.parse().unwrap_or(u64::MAX), file.into()))
                }
                ["calls", n, "fired", _] => log.calls = n.parse().ok(),
                _ => {}
            }
        }
        log
    }

    /// The first injected failure, as `fdatasync #3 on <file>`.
    pub fn first_fired(&self) -> Option<String> {
        self.fired.first().map(|(call, n, file)| format!("{call} #{n} on {file}"))
    }
}

/// The suite's built-in [`FaultInjector`]: the `faultinject` interposer, loaded into the writer
/// child with `LD_PRELOAD`, makes every `fsync` and `fdatasync` below the cache fail with `EIO`
/// (sticky, until the stop file exists). The writer lock's file is left alone: its pid hint may
/// fail to be written by design ([`WriterLock`]).
///
/// [`crate::backend_conformance!`] uses it unless given `faults = ...`; where the interposer
/// could not be built, [`FaultInjector::unavailable`] says so and the failed-flush case reports
/// SKIPPED.
///
/// ```
/// use stowage_conformance::{FaultInjector, injector::Faultinject};
/// let dir = std::env::temp_dir().join("cache");
/// let stop = std::env::temp_dir().join("stop");
/// if Faultinject.unavailable().is_none() {
///     let env = Faultinject.fail_syncs(&dir, 3, &stop);
///     assert!(env.iter().any(|(k, v)| k == "FAULTINJECT_AFTER" && v == "3"));
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Faultinject;

impl FaultInjector for Faultinject {
    fn name(&self) -> &str {
        "faultinject (LD_PRELOAD)"
    }

    fn unavailable(&self) -> Option<String> {
        library().is_none().then(|| UNAVAILABLE.to_owned())
    }

    fn fail_syncs(&self, dir: &Path, after: u64, stop: &Path) -> Vec<(OsString, OsString)> {
        let Some(library) = library() else { return Vec::new() };
        let dir = canonical(dir);
        let injection = Injection {
            kind: FaultKind { op: Op::Fsync, errno: EIO, sticky: true, short: false },
            after: Some(after),
            // Outside the cache: the log's own writes must not count.
            log: dir.with_extension("faultinject.log"),
            dir,
            stop: stop.to_path_buf(),
        };
        preload_env(injection.env(&library))
    }
}

/// `env` (an [`Injection::env`] or a [`crate::durable_image::DurableImage::env`]) as a child's
/// environment, with any `LD_PRELOAD` the parent runs under kept after the interposers.
pub fn preload_env(env: Vec<(String, String)>) -> Vec<(OsString, OsString)> {
    env.into_iter()
        .map(|(name, value)| {
            let mut value = OsString::from(value);
            if name == "LD_PRELOAD"
                && let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty())
            {
                value.push(":");
                value.push(existing);
            }
            (OsString::from(name), value)
        })
        .collect()
}

/// `path` with its directory resolved as the kernel names it (the interposers compare the names
/// of open files with it); `path` itself need not exist yet.
pub fn canonical(path: &Path) -> PathBuf {
    if let Ok(resolved) = path.canonicalize() {
        return resolved;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => canonical(parent).join(name),
        _ => path.to_path_buf(),
    }
}
