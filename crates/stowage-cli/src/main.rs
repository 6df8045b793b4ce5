//! The `stowage` command (being built).
fn main() {}
