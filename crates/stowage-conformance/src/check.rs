//! Small assertion helpers that turn failed checks into [`Failure`] values instead of panics.

use crate::Failure;
use stowage_core::{Error, Result};

/// Fails the case unless `cond` holds, with a [`Failure`] saying what was being done, what was
/// expected and what happened (each anything `Display`), and optionally the clause it checks.
///
/// ```
/// use stowage_conformance::{ensure, Failure};
/// fn check(len: usize) -> Result<(), Failure> {
///     ensure!(len == 2, "len() after two puts", expected: 2, got: len,
///             clause: "len.counts-distinct-keys");
///     Ok(())
/// }
/// let failure = check(3).unwrap_err();
/// assert_eq!((failure.expected.as_str(), failure.got.as_str()), ("2", "3"));
/// assert_eq!(failure.clause, Some("len.counts-distinct-keys"));
/// ```
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $context:expr, expected: $expected:expr, got: $got:expr
     $(, clause: $clause:expr)? $(,)?) => {
        if !$cond {
            return Err($crate::Failure::new($context, $expected, $got)$(.clause($clause))?);
        }
    };
}

/// Turns a stowage error into a failure that says what was being done.
pub fn ok<T>(what: &str, result: Result<T>) -> Result<T, Failure> {
    result.map_err(|e| Failure::new(what, "success", format!("an error: {e}")))
}

/// Expects an error matching `pred`; otherwise fails naming the expected kind and what happened.
pub fn expect_err<T: std::fmt::Debug>(
    what: &str,
    expected: &str,
    result: Result<T>,
    pred: impl Fn(&Error) -> bool,
) -> Result<(), Failure> {
    match result {
        Err(e) if pred(&e) => Ok(()),
        Err(e) => Err(Failure::new(what, expected, format!("a different error: {e}"))),
        Ok(v) => Err(Failure::new(what, expected, format!("Ok({v:?})"))),
    }
}

/// Whether `e` is `Error::Unsupported`; when it is, it must name `backend`
/// (`errors.unsupported-names-backend`), or the check fails.
pub fn is_unsupported_from(backend: &str, what: &str, e: &Error) -> Result<bool, Failure> {
    match e {
        Error::Unsupported { backend: named, .. } if *named == backend => Ok(true),
        Error::Unsupported { backend: named, .. } => Err(Failure::new(
            what,
            format!("Error::Unsupported naming the backend {backend:?} (the factory's name)"),
            format!("Error::Unsupported naming {named:?}: {e}"),
        )
        .clause("errors.unsupported-names-backend")),
        _ => Ok(false),
    }
}

/// Expects `Error::Unsupported` naming `backend` (the factory's name).
pub fn expect_unsupported<T: std::fmt::Debug>(
    backend: &str,
    what: &str,
    result: Result<T>,
) -> Result<(), Failure> {
    let expected = "Error::Unsupported";
    match result {
        Err(e) if is_unsupported_from(backend, what, &e)? => Ok(()),
        Err(e) => Err(Failure::new(what, expected, format!("a different error: {e}"))),
        Ok(v) => Err(Failure::new(what, expected, format!("Ok({v:?})"))),
    }
}
