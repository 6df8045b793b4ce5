//! Making `os.fork` safe while other threads read: no lock held across fork.
//!
//! A thread inside a backend call may hold a lock (hdf5's global library lock, a backend's
//! cache of open files). A child forked at that moment inherits the lock held by a thread it
//! does not have, and its first call on the same lock hangs for ever. So every backend call
//! passes this gate, and `os.register_at_fork` (in `stowage/__init__.py`) closes it before a
//! fork: [`_before_fork`] waits until no call is inside, and calls that arrive meanwhile wait
//! outside; [`_after_fork`] reopens it in the parent and in the child.
//!
//! A call that waits at the closed gate holding the GIL lets it go while it waits: `os.fork`
//! runs the before-fork hooks, then takes the import lock, and waits for that lock without the
//! GIL. A thread that took the GIL meanwhile and kept it while waiting at the gate would stop
//! the importing thread that holds the import lock, and so the fork, for ever.
//!
//! Two atomics, no lock: nothing here can be inherited in a held state. A call costs two atomic
//! additions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::pyfunction;

/// Whether a fork is under way (calls wait).
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Calls inside the gate.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// How long a waiting call or fork sleeps between looks (forks are rare and short).
const PAUSE: Duration = Duration::from_micros(50);

/// Runs `call` inside the gate: after any fork under way, never across one.
pub fn pass<R>(call: impl FnOnce() -> R) -> R {
    loop {
        while CLOSED.load(Ordering::Acquire) {
            pause_without_the_gil();
        }
        INSIDE.fetch_add(1, Ordering::AcqRel);
        if !CLOSED.load(Ordering::Acquire) {
            break;
        }
        // A fork closed the gate between the two looks: step back out and wait.
        INSIDE.fetch_sub(1, Ordering::AcqRel);
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            INSIDE.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let _leave = Leave;
    call()
}

unsafe extern "C" {
    // Whether this thread holds the GIL. Every CPython since 3.4 exports it, but it is outside
    // the limited API, so pyo3's abi3 build does not declare it; the gate needs it because a
    // call can reach it holding the GIL or not (a handle dropped by the garbage collector or
    // in a thread without the GIL).
    fn PyGILState_Check() -> std::ffi::c_int;
}

/// Sleeps for [`PAUSE`], without the GIL if this thread holds it.
fn pause_without_the_gil() {
    // SAFETY: `PyGILState_Check` only reads the thread state. When this thread holds the GIL,
    // it is released and taken back around a sleep that touches no Python object, as
    // `Py_BEGIN_ALLOW_THREADS` does; the caller's `Python` token is not used meanwhile.
    unsafe {
        if PyGILState_Check() == 1 {
            let state = pyo3::ffi::PyEval_SaveThread();
            std::thread::sleep(PAUSE);
            pyo3::ffi::PyEval_RestoreThread(state);
        } else {
            std::thread::sleep(PAUSE);
        }
    }
}

/// `os.register_at_fork(before=...)`: closes the gate and waits until no call is inside.
///
/// It keeps the GIL while it waits, on purpose: every call that can be inside runs without the
/// GIL (the ones that keep it cannot run while this thread has it), and leaves the gate before
/// it takes the GIL again; a call waiting at the closed gate lets the GIL go
/// (`pause_without_the_gil`).
#[pyfunction]
pub fn _before_fork() {
    CLOSED.store(true, Ordering::Release);
    while INSIDE.load(Ordering::Acquire) != 0 {
        std::thread::sleep(PAUSE);
    }
}

/// `os.register_at_fork(after_in_parent=..., after_in_child=...)`: reopens the gate. In the
/// child no other thread exists, so no call is inside.
#[pyfunction]
pub fn _after_fork() {
    CLOSED.store(false, Ordering::Release);
}

/// `os.register_at_fork(after_in_child=...)`: the child has no other thread, so no call is
/// inside, whatever a thread that was stepping back out at the fork left counted; then reopens.
#[pyfunction]
pub fn _after_fork_in_child() {
    INSIDE.store(0, Ordering::Release);
    CLOSED.store(false, Ordering::Release);
}
