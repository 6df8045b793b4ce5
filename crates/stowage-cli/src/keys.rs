//! `stowage keys PATH`: every key, one per line, in first-put order.

use std::io::Write;
use std::path::Path;

use crate::detect::open_backend;
use crate::error::{CliError, Status};
use crate::out::display_key;

/// Prints every key on its own line, escaped only when needed (see [`display_key`]).
pub fn run(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let backend = open_backend(path, "keys")?;
    for key in backend.keys()? {
        say!(out, "{}", display_key(&key));
    }
    Ok(Status::Success)
}
