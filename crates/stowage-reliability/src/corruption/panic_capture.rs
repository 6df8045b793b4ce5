//! Turning a backend's panic into a trial result: the message and location are kept for the
//! report instead of being printed, and the campaign goes on with the next trial.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Set while [`catching`] runs on this thread: the hook then records instead of printing.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
    /// The last panic's message and location on this thread.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, a panic hook that records panics of threads inside [`catching`]
/// and hands every other panic (a failing test's assertion) to the hook that was there before.
fn install_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CAPTURING.with(Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-text panic payload)".into());
                LAST.with(|last| {
                    *last.borrow_mut() = Some(format!("panicked{location}: {message}"))
                });
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it (on this thread) becomes `Err` with its message and location.
///
/// ```
/// use stowage_reliability::corruption::panic_capture::catching;
/// assert_eq!(catching(|| 7), Ok(7));
/// let err = catching(|| -> u8 { panic!("bad length {}", 3) }).unwrap_err();
/// assert!(err.starts_with("panicked at ") && err.ends_with(": bad length 3"), "{err}");
/// ```
pub fn catching<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let was = CAPTURING.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(was));
    result.map_err(|_| {
        LAST.with(|last| last.borrow_mut().take()).unwrap_or_else(|| "panicked".into())
    })
}
