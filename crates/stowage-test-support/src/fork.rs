//! Forked children for the tests of what must survive a fork (a DataLoader worker) or a
//! `kill -9` (a rank that dies mid-download): the child runs a closure and exits with its code.
//!
//! A test binary that forks should hold that one test only, so that no other test's threads are
//! running (and holding a lock the child would need) at the fork.

/// How a forked child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (`SIGKILL`, or `SIGALRM` when its time ran out).
    Signaled(i32),
}

/// Forks a child that runs `work` and exits with the code it returns (101 when it panics, and
/// `SIGALRM` ends it after `timeout_secs`, so that a hang fails the test instead of stalling
/// it). Returns the child's pid.
///
/// # Panics
/// When `fork` fails.
///
/// ```no_run
/// use stowage_test_support::fork::{Ended, fork_child, wait_child};
/// let child = fork_child(30, || 7);
/// assert_eq!(wait_child(child), Ended::Exited(7));
/// ```
pub fn fork_child(timeout_secs: u32, work: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs `work` and `_exit`s; callers keep other threads out of the binary.
    match unsafe { libc::fork() } {
        -1 => panic!("fork failed: {}", std::io::Error::last_os_error()),
        0 => {
            // SAFETY: plain libc calls in the child.
            unsafe { libc::alarm(timeout_secs) };
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or(101);
            // SAFETY: ends the child without running the parent's destructors or test harness.
            unsafe { libc::_exit(code) }
        }
        child => child,
    }
}

/// Waits for `child` (made by [`fork_child`]) and says how it ended.
///
/// # Panics
/// When `waitpid` fails.
pub fn wait_child(child: libc::pid_t) -> Ended {
    let mut status = 0;
    // SAFETY: waits for a child of this process.
    let waited = unsafe { libc::waitpid(child, &raw mut status, 0) };
    assert_eq!(waited, child, "waitpid({child}): {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(status) {
        Ended::Exited(libc::WEXITSTATUS(status))
    } else {
        Ended::Signaled(libc::WTERMSIG(status))
    }
}

/// Sends `SIGKILL` to `child`: a death that runs no destructor and releases only what the
/// kernel releases (descriptors, and with them `flock`s).
pub fn kill_child(child: libc::pid_t) {
    // SAFETY: signals a child of this process.
    assert_eq!(unsafe { libc::kill(child, libc::SIGKILL) }, 0, "kill -9 {child}");
}
