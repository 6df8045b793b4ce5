//! `stowage keys PATH`: every key, one per line, in first-put order.

use std::io::Write;
use std::path::Path;

use crate::error::{CliError, Status};
use crate::open::open_source;
use crate::out::display_key;

/// Prints every key on its own line, escaped only when needed (see [`display_key`]).
pub fn run(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let source = open_source(path, "keys")?;
    for key in source.keys()? {
        say!(out, "{}", display_key(&key));
    }
    Ok(Status::Success)
}
