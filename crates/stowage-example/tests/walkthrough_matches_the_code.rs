//! `docs/writing-a-backend.md` quotes this crate: every Rust block in it must appear verbatim in
//! one of the crate's files, and the dev-dependency it shows must be the one this crate has, so
//! the walk-through cannot drift from the code that passes the suite.

use std::path::Path;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bodies of the ```` ```rust ```` blocks of `markdown`.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```rust") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_rust_block_of_the_walkthrough_is_in_the_crate() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = read(&crate_dir.join("../../docs/writing-a-backend.md"));
    let sources: Vec<String> =
        ["src/backend.rs", "src/error.rs", "src/factory.rs", "tests/conformance.rs"]
            .iter()
            .map(|file| read(&crate_dir.join(file)))
            .collect();
    let blocks = rust_blocks(&doc);
    assert_eq!(
        blocks.len(),
        5,
        "the capabilities, the writer, the error mapping, the factory and the three lines"
    );
    for block in &blocks {
        assert!(
            sources.iter().any(|source| source.contains(block.as_str())),
            "this block of docs/writing-a-backend.md is not in the crate:\n{block}"
        );
    }
    let manifest = read(&crate_dir.join("Cargo.toml"));
    assert!(manifest.contains("[dev-dependencies]\nstowage-conformance"));
    assert!(doc.contains("[dev-dependencies]\nstowage-conformance = \"0.1\""));
}
