//! Small assertion helpers that turn failures into messages instead of panics.

use stowage_core::{Error, Result};

/// Fails the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Turns a stowage error into a case failure that says what was being done.
pub fn ok<T>(what: &str, result: Result<T>) -> Result<T, String> {
    result.map_err(|e| format!("{what}: unexpected error: {e}"))
}

/// Expects an error matching `pred`; otherwise fails naming the expected kind and what happened.
pub fn expect_err<T: std::fmt::Debug>(
    what: &str,
    expected: &str,
    result: Result<T>,
    pred: impl Fn(&Error) -> bool,
) -> Result<(), String> {
    match result {
        Err(e) if pred(&e) => Ok(()),
        Err(e) => Err(format!("{what}: expected {expected}, got a different error: {e}")),
        Ok(v) => Err(format!("{what}: expected {expected}, got Ok({v:?})")),
    }
}

/// `Error::Unsupported` from the backend under test.
pub fn is_unsupported(e: &Error) -> bool {
    matches!(e, Error::Unsupported { .. })
}
