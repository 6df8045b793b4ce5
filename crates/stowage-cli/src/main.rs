//! The `stowage` command: [`stowage_cli::run`] on the four built-in backends
//! ([`stowage_cli::default_registry`]). A `stowage` that also reads a third party's caches is
//! this file with one more factory registered (see the crate's README).

use std::process::ExitCode;

fn main() -> ExitCode {
    let registry = stowage_cli::default_registry();
    let args = std::env::args_os().collect();
    let status = stowage_cli::run(&registry, args, &mut std::io::stdout(), &mut std::io::stderr());
    ExitCode::from(status)
}
