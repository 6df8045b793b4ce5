//! The async runtime object_store's futures run on: one per process, made on first use.
//!
//! A training job forks its DataLoader workers after it opened the cache. A forked child has a
//! copy of the parent's runtime but none of its threads, and shares its epoll instance with the
//! parent, so the runtime must never be used, nor dropped (dropping joins threads that do not
//! exist), in the child. Each runtime is tagged with the process id that made it; a process that
//! finds another process's runtime makes its own and leaks the copy it inherited.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use stowage_core::{Error, Result};
use tokio::runtime::Runtime;

/// The runtime this process made, with the process id it was made in.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// The worker threads of a runtime: the requests of one blocking call run on them, while the
/// calling thread waits. Four keep a batch's requests in flight without taking many threads from
/// the training process.
const WORKER_THREADS: usize = 4;

/// Runs `future` to completion on this process's runtime and returns its output.
///
/// Errors: [`Error::InvalidArgument`] when called from inside an async runtime (a blocking call
/// there would stall that runtime's thread, and tokio refuses it with a panic); call the blocking
/// API from a plain thread (`tokio::task::spawn_blocking`) instead.
///
/// ```
/// let four = stowage_remote::runtime::block_on(async { 2 + 2 }).unwrap();
/// assert_eq!(four, 4);
/// ```
pub fn block_on<F: Future>(future: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "stowage-remote's blocking calls cannot run inside an async runtime; call them from \
             a plain thread (e.g. tokio::task::spawn_blocking)",
        ));
    }
    Ok(current()?.block_on(future))
}

/// This process's runtime, made when there is none or the one there was made before a fork.
fn current() -> Result<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((made_in, runtime)) = *slot
        && made_in == pid
    {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("stowage-remote")
        .enable_all()
        .build()
        .map_err(|e| Error::io("stowage-remote runtime", e))?;
    // Leaked on purpose: a runtime lives as long as its process, and an inherited one must not
    // be dropped (see the module docs).
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    *slot = Some((pid, runtime));
    Ok(runtime)
}

/// The process id the current runtime was made in, if one was made (for the fork tests).
pub fn made_in() -> Option<u32> {
    RUNTIME.lock().unwrap_or_else(PoisonError::into_inner).map(|(pid, _)| pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_call_inside_a_runtime_is_an_error_not_a_panic() {
        let inner = block_on(async { block_on(async { 1 }) }).unwrap();
        let err = inner.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert_eq!(made_in(), Some(std::process::id()));
    }
}
