//! `stowage keys PATH`: every key, one per line, in first-put order.

use std::io::Write;
use std::path::Path;

use stowage_core::Registry;

use crate::error::{CliError, Status};
use crate::open::open_reader;
use crate::out::display_key;

/// Prints every key of the cache at `path`, opened through `registry`, on its own line, escaped
/// only when needed (see [`display_key`]).
pub fn run(registry: &Registry, path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let (reader, _) = open_reader(registry, path, "keys")?;
    for key in reader.keys()? {
        say!(out, "{}", display_key(&key));
    }
    Ok(Status::Success)
}
