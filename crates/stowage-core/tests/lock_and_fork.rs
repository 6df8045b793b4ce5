//! The writer lock and forked children: a child forked while the lock is held shares the lock's
//! open file. Dropping the lock in its owner must release it although the child still has the file
//! open; a child dropping its copy of the handle must not release its parent's lock.
//!
//! Each test forks with `libc::fork` (unix only); the child does nothing but drop or wait, then
//! `_exit`s, so it never runs the test harness.

#![cfg(unix)]

use std::time::Duration;
use stowage_core::Error;
use stowage_core::file_safety::WriterLock;

/// Forks; the child runs `child` and exits with the status it returns, never returning here.
fn fork(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `child` (a drop, a sleep) and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let status = child();
        // SAFETY: ends the child without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(status) };
    }
    pid
}

/// Waits for `pid` and returns its exit status.
fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 }
}

#[test]
fn dropping_the_lock_releases_it_while_a_forked_child_still_holds_the_file() {
    let cache = tempfile::tempdir().unwrap();
    let lock = WriterLock::acquire(cache.path()).unwrap();
    // The child keeps its copy of the lock's file open for up to 10 s, as a program spawned by a
    // sibling thread does until it execs, or a forked worker for its whole life.
    let child = fork(|| {
        std::thread::sleep(Duration::from_secs(10));
        0
    });
    drop(lock);
    let again = WriterLock::acquire(cache.path());
    // SAFETY: `child` is our child.
    unsafe { libc::kill(child, libc::SIGKILL) };
    wait(child);
    assert!(
        again.is_ok(),
        "the lock stayed held by the forked child's copy of its file: {:?}",
        again.err()
    );
}

#[test]
fn a_forked_child_dropping_its_copy_does_not_release_the_parents_lock() {
    let cache = tempfile::tempdir().unwrap();
    let lock = WriterLock::acquire(cache.path()).unwrap();
    let (path, parents) = (cache.path().to_path_buf(), &lock);
    let child = fork(move || {
        // SAFETY: the child's own bitwise copy of the parent's handle, dropped once, as a forked
        // worker's copy of a writer is when the worker exits normally.
        drop(unsafe { std::ptr::read(parents) });
        // Exit 0 only if the parent's lock still holds after this copy was dropped.
        match WriterLock::acquire(&path) {
            Err(Error::Locked { .. }) => 0,
            Ok(_) => 1,
            Err(_) => 2,
        }
    });
    assert_eq!(wait(child), 0, "the child's drop released (1) or broke (2) the parent's lock");
    assert!(matches!(WriterLock::acquire(cache.path()), Err(Error::Locked { .. })));
    drop(lock);
    WriterLock::acquire(cache.path()).unwrap();
}
