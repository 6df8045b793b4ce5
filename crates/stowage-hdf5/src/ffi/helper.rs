//! A libhdf5 read tried first in a forked child process, where stowage cannot check the bytes
//! libhdf5 will follow beforehand: the global heap reference of a variable-length attribute value
//! (its stored bytes are in the object header, which only libhdf5 parses). If libhdf5 crashes or
//! hangs on them, only the child dies, and the caller gets an error naming what was read; if the
//! child finishes, the caller does the read itself.
//!
//! The child only runs the given libhdf5 calls and leaves with `_exit` (no destructors, no
//! `atexit` handlers: libhdf5's would flush the parent's files). The caller holds hdf5-metno's
//! lock ([`super::locked`]) across the fork, so no other thread is inside libhdf5 when the child
//! is made (the only lock the child then needs is that one, held by its own thread), and glibc
//! makes `malloc` usable in a child of a threaded process.

use std::time::{Duration, Instant};

use super::Failure;

unsafe extern "C" {
    fn fork() -> i32;
    fn close_range(first: u32, last: u32, flags: i32) -> i32;
    fn _exit(status: i32) -> !;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn pipe2(fds: *mut i32, flags: i32) -> i32;
    #[link_name = "read"]
    fn read_fd(fd: i32, buffer: *mut u8, count: usize) -> isize;
    fn write(fd: i32, buffer: *const u8, count: usize) -> isize;
    fn close(fd: i32) -> i32;
    fn kill(pid: i32, signal: i32) -> i32;
    #[cfg(test)]
    fn getpid() -> i32;
}

/// `waitpid`'s `WNOHANG`.
const WNOHANG: i32 = 1;
/// `pipe2`'s `O_CLOEXEC` (Linux).
const O_CLOEXEC: i32 = 0o2_000_000;
/// `SIGKILL`.
const SIGKILL: i32 = 9;
/// How long the child may take: an attribute read takes microseconds; libhdf5 loops forever on
/// some damaged global heaps.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a read tried in a child process did not finish there.
#[derive(Debug)]
pub(crate) enum ChildFailure {
    /// The child could not be started or waited for: the operating system refused (no
    /// descriptor, process or memory left). Says nothing about the file.
    Start(std::io::Error, Failure),
    /// libhdf5 crashed, hung or failed reading the file in the child: its bytes.
    Read(Failure),
}

impl From<ChildFailure> for Failure {
    fn from(failure: ChildFailure) -> Failure {
        match failure {
            ChildFailure::Start(_, failure) | ChildFailure::Read(failure) => failure,
        }
    }
}

/// Runs `read` (libhdf5 calls only; called under [`super::locked`]) in a child process first:
/// `Ok` when the child finished (whatever `read` found), an error naming `what` when libhdf5
/// crashed or hung in it. The child keeps only descriptor `keep` (the file `read` reads) and the
/// standard streams: a copy of any other would keep its file's lock (libhdf5's `flock`, or the
/// writers') alive after the parent closes it, for as long as the child lives. The parent waits
/// until the child has closed them before it returns, so that, the caller holding the HDF5 lock
/// throughout, no libhdf5 open or close of another thread meets a lock only the child's copies
/// still hold.
pub(crate) fn survives_in_child(
    what: &str,
    keep: Option<i32>,
    read: impl FnOnce(),
) -> Result<(), ChildFailure> {
    let start_failed = |step: &str| {
        let error = std::io::Error::last_os_error();
        let failure = Failure(format!(
            "{what}: could not start the process that tries libhdf5's read first ({step}: \
             {error})"
        ));
        ChildFailure::Start(error, failure)
    };
    // The child writes one byte here once it has closed the other descriptors.
    let mut closed = [-1i32; 2];
    // Close-on-exec: a process another thread spawns meanwhile must not hold the write end.
    // SAFETY: `closed` holds the two descriptors pipe2 writes.
    if unsafe { pipe2(closed.as_mut_ptr(), O_CLOEXEC) } != 0 {
        return Err(start_failed("pipe"));
    }
    let [closed_read, closed_write] = closed;
    // SAFETY: fork has no preconditions; see the module's comment for what the child runs.
    let pid = unsafe { fork() };
    if pid < 0 {
        // SAFETY: our own pipe's descriptors.
        unsafe {
            close(closed_read);
            close(closed_write);
        }
        return Err(start_failed("fork"));
    }
    if pid == 0 {
        let mut kept: Vec<u32> = [keep, Some(closed_write)]
            .into_iter()
            .flatten()
            .filter_map(|fd| u32::try_from(fd).ok())
            .filter(|&fd| fd >= 3)
            .collect();
        kept.sort_unstable();
        // SAFETY: closes only this child's copies of descriptors (errors leave them open: the
        // worst is a lock held a little longer), then tells the parent on its own pipe.
        unsafe {
            let mut next = 3u32;
            for fd in kept {
                if fd > next {
                    close_range(next, fd - 1, 0);
                }
                next = fd.saturating_add(1);
            }
            close_range(next, u32::MAX, 0);
            write(closed_write, [1u8].as_ptr(), 1);
            close(closed_write);
        }
        // A panic must not unwind into the parent's code, which the child holds a copy of.
        let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).is_ok();
        // SAFETY: leaves the child at once, running nothing of the parent's.
        unsafe { _exit(if finished { 0 } else { 70 }) };
    }
    // SAFETY: the parent's copy of the write end, then a one-byte read of the read end (0 bytes
    // when the child died before writing: it holds no descriptor then either).
    unsafe {
        close(closed_write);
        let mut byte = 0u8;
        while read_fd(closed_read, &raw mut byte, 1) < 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
        close(closed_read);
    }
    let started = Instant::now();
    let mut status = 0i32;
    loop {
        // SAFETY: `pid` is our own child; `status` is ours to write.
        let waited = unsafe { waitpid(pid, &raw mut status, WNOHANG) };
        if waited == pid {
            break;
        }
        if waited < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            let failure = Failure(format!("{what}: waiting for the read's process: {error}"));
            return Err(ChildFailure::Start(error, failure));
        }
        if started.elapsed() > TIMEOUT {
            // SAFETY: `pid` is our own child, not yet reaped.
            unsafe {
                kill(pid, SIGKILL);
                waitpid(pid, &raw mut status, 0);
            }
            return Err(ChildFailure::Read(Failure(format!(
                "{what}: libhdf5 was still reading after {} s (it loops on some damaged global \
                 heaps)",
                TIMEOUT.as_secs()
            ))));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let signal = status & 0x7F;
    if signal != 0 && signal != 0x7F {
        return Err(ChildFailure::Read(Failure(format!(
            "{what}: libhdf5 crashed on the file's bytes (signal {signal}, in a child process)"
        ))));
    }
    // The child leaves with 0 when `read` returned; anything else is a crash a sanitizer or a
    // panic turned into an exit status.
    let code = (status >> 8) & 0xFF;
    if code != 0 {
        return Err(ChildFailure::Read(Failure(format!(
            "{what}: the child process reading it failed (exit status {code}): the file's bytes \
             crash the reader"
        ))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_in_the_child_is_an_error_and_a_clean_read_is_not() {
        survives_in_child("nothing", None, || {}).unwrap();
        survives_in_child("nothing, keeping a descriptor", Some(5), || {}).unwrap();
        let crash = survives_in_child("a killed read", None, || {
            // SAFETY: the child signals itself: it dies at once, without a core dump.
            unsafe { kill(getpid(), SIGKILL) };
        });
        let error = match crash.unwrap_err() {
            ChildFailure::Read(failure) => failure.to_string(),
            other => panic!("a crash is the read's failure, not the start's: {other:?}"),
        };
        assert!(error.contains("a killed read") && error.contains("signal 9"), "{error}");
    }
}
