//! `stowage explain PATH --config FILE [--sources GLOB]`: whether a cache is valid for a
//! configuration and source files, and if not, which config fields and which sources differ.
//!
//! - Memmap row caches (stowage's and DNANet's) record `fingerprint.json`: the config and a stamp
//!   per source. The current sources are stamped the way the stored ones were (modification time
//!   and size, or content hash, with paths relative to `--root` when the stored paths are
//!   relative) and compared by [`stowage_memmap::MemmapBackend::check_fingerprint`].
//! - aenet torch caches record a compatibility signature (`descriptor_compat_json` and its
//!   SHA-256): the config's descriptor settings are compared with it field by field. Sources are
//!   not part of it.
//! - The other formats record no fingerprint: `explain` says so and exits 3, never pretending.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use stowage_fingerprint::{FingerprintFile, SourceStamp, explain};
use stowage_hdf5::DescriptorCompat;
use stowage_memmap::{MemmapBackend, MemmapOptions};

use stowage_core::Registry;
use stowage_hdf5::AenetReader;

use crate::builtin::Builtin;
use crate::error::{CliError, Status, io_error};
use crate::locate::{DIRECTORY, Located, locate};

/// Reads and parses the JSON config file.
fn read_config(path: &Path) -> Result<Value, CliError> {
    let text = std::fs::read(path).map_err(|e| io_error(path, &e))?;
    serde_json::from_slice(&text)
        .map_err(|e| CliError::new(format!("{}: does not parse as JSON ({e})", path.display())))
}

/// Says whether the cache at `path` is valid for the config in `config` and the files matching
/// `sources`: status 0 (valid), 1 (stale: what differs is listed) or
/// [`Status::CannotTell`] (the format records no fingerprint, or the cache was never finalized).
/// The cache is recognized through `registry`; notes go to `notes`.
pub fn run(
    registry: &Registry,
    path: &Path,
    config: &Path,
    sources: Option<&str>,
    root: Option<&Path>,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let format = match locate(registry, path)? {
        Located::Cache(recognized) => recognized.format,
        Located::Directory(_) => &DIRECTORY,
    };
    let config_value = read_config(config)?;
    match Builtin::of(format) {
        Some(Builtin::StowageMemmap | Builtin::DnanetMemmap) => {
            memmap(path, &config_value, sources, root, out)
        }
        Some(Builtin::AenetHdf5) => aenet(path, &config_value, sources.is_some(), out, notes),
        _ => {
            say!(
                out,
                "{}: a {} records no fingerprint of the configuration or sources it was built \
                 from, so whether it is valid for {} cannot be told (memmap row caches and aenet \
                 torch caches record one)",
                path.display(),
                format.description,
                config.display()
            );
            Ok(Status::CannotTell)
        }
    }
}

fn memmap(
    path: &Path,
    config: &Value,
    sources: Option<&str>,
    root: Option<&Path>,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let cache = MemmapBackend::open_read_only(path, MemmapOptions::default())?;
    let file = cache.layout().fingerprint();
    if !file.exists() {
        say!(
            out,
            "{}: no fingerprint.json (the cache was never finalized), so whether it is valid \
             cannot be told",
            path.display()
        );
        return Ok(Status::CannotTell);
    }
    let stored = FingerprintFile::read(&file)?;
    let paths = match sources {
        Some(pattern) => glob(pattern)?,
        None => Vec::new(),
    };
    let by_content = stored.sources.iter().any(|s| matches!(s, SourceStamp::ContentHash { .. }));
    let relative = stored.sources.iter().any(|s| !s.path().starts_with('/'));
    let root = match (root, sources) {
        (Some(root), _) => Some(root.to_path_buf()),
        (None, Some(pattern)) if relative => Some(literal_prefix(pattern)),
        _ => None,
    };
    let stamps = paths
        .iter()
        .map(|p| match (by_content, relative) {
            (true, true) => SourceStamp::from_contents(p, root.as_deref()),
            (true, false) => SourceStamp::from_contents(p, None),
            (false, _) => SourceStamp::from_metadata(p),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let explanation = cache.check_fingerprint(config, &stamps)?;
    say!(out, "{}: {}", path.display(), explanation.to_string().replace('\n', "\n  "));
    Ok(if explanation.is_fresh() { Status::Success } else { Status::ProblemsFound })
}

/// The config fields of aenet's compatibility signature.
const COMPAT_FIELDS: [&str; 7] = [
    "descriptor_class",
    "species",
    "rad_order",
    "rad_cutoff",
    "ang_order",
    "ang_cutoff",
    "min_cutoff",
];

/// The descriptor settings of `config` (the fields of `descriptor_compat_json`; `multi` follows
/// from the species, `descriptor_class` defaults to aenet's Chebyshev descriptor).
fn compat_of(config: &Value) -> Result<DescriptorCompat, CliError> {
    let missing = |name: &str, what: &str| {
        CliError::new(format!("config field {name:?} is missing or not {what}"))
    };
    let number = |name: &str| {
        config.get(name).and_then(Value::as_f64).ok_or_else(|| missing(name, "a number"))
    };
    let order = |name: &str| {
        config
            .get(name)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| missing(name, "a non-negative integer"))
    };
    let species: Vec<String> = config
        .get("species")
        .and_then(Value::as_array)
        .and_then(|list| list.iter().map(|s| s.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| missing("species", "a list of strings"))?;
    let class = match config.get("descriptor_class") {
        None => stowage_hdf5::CHEBYSHEV_DESCRIPTOR.to_owned(),
        Some(v) => v.as_str().ok_or_else(|| missing("descriptor_class", "a string"))?.to_owned(),
    };
    Ok(DescriptorCompat {
        descriptor_class: class,
        species,
        rad_order: order("rad_order")?,
        rad_cutoff: number("rad_cutoff")?,
        ang_order: order("ang_order")?,
        ang_cutoff: number("ang_cutoff")?,
        min_cutoff: number("min_cutoff")?,
    })
}

fn aenet(
    path: &Path,
    config: &Value,
    sources: bool,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let source = AenetReader::open(path)?;
    let signature = source.cache().signature();
    let compat = compat_of(config)?;
    let current: Value = serde_json::from_str(&compat.json()).expect("compat JSON parses");
    let stored: Value = serde_json::from_str(&signature.compat_json).map_err(|e| {
        CliError::new(format!(
            "{}: descriptor_compat_json does not parse as JSON ({e})",
            path.display()
        ))
    })?;
    let ignored: Vec<&str> = config
        .as_object()
        .map(|o| {
            o.keys()
                .map(String::as_str)
                .filter(|k| !COMPAT_FIELDS.contains(k) && *k != "multi")
                .collect()
        })
        .unwrap_or_default();
    if !ignored.is_empty() {
        crate::out::note(
            notes,
            &format!(
                "not part of aenet's compatibility signature, so not compared: {}",
                ignored.join(", ")
            ),
        );
    }
    if sources {
        crate::out::note(
            notes,
            "aenet's compatibility signature covers the descriptor settings only: --sources is not compared",
        );
    }
    let sha = compat.sha256();
    if sha == signature.compat_sha256 {
        say!(
            out,
            "{}: compatible: descriptor_compat_sha256 {sha} matches the config",
            path.display()
        );
        return Ok(Status::Success);
    }
    say!(
        out,
        "{}: incompatible: stored descriptor_compat_sha256 {}, the config gives {sha}",
        path.display(),
        signature.compat_sha256
    );
    // The core's field-by-field comparison, on the two signatures (no sources).
    let changes =
        explain(&FingerprintFile::new(0, stored, Vec::new()), &current, &[]).config_changes;
    if changes.is_empty() {
        say!(
            out,
            "  no field differs: the stored signature does not hash to its own sha256 (edited?)"
        );
    } else {
        say!(out, "  config differences (stored -> current):");
        for change in changes {
            say!(out, "    {change}");
        }
    }
    say!(out, "  rebuild the torch cache with aenet for these settings, or use matching settings");
    Ok(Status::ProblemsFound)
}

/// The directory part of `pattern` before its first wildcard (`/data/rnd` of `/data/rnd/*.hid`).
fn literal_prefix(pattern: &str) -> PathBuf {
    let mut prefix = PathBuf::new();
    for part in Path::new(pattern).components() {
        let text = part.as_os_str().to_string_lossy();
        if text.contains(['*', '?', '[']) {
            break;
        }
        prefix.push(part);
    }
    if prefix.as_os_str().is_empty() || prefix == Path::new(pattern) {
        prefix = Path::new(pattern).parent().map(Path::to_path_buf).unwrap_or_default();
    }
    prefix
}

/// The files matching `pattern`, sorted: `*` and `?` within one path component, `**` for any
/// number of directories. Links to directories are not followed.
pub fn glob(pattern: &str) -> Result<Vec<PathBuf>, CliError> {
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let start = if absolute { PathBuf::from("/") } else { PathBuf::from(".") };
    let mut found = Vec::new();
    walk_glob(&start, &parts, &mut found);
    if !absolute {
        found = found
            .into_iter()
            .map(|p| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p))
            .collect();
    }
    found.sort();
    found.dedup();
    if found.is_empty() {
        return Err(CliError::new(format!("--sources {pattern:?} matches no file")));
    }
    Ok(found)
}

fn walk_glob(dir: &Path, parts: &[&str], found: &mut Vec<PathBuf>) {
    let Some((first, rest)) = parts.split_first() else {
        if dir.is_file() {
            found.push(dir.to_path_buf());
        }
        return;
    };
    if *first == "**" {
        walk_glob(dir, rest, found);
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk_glob(&entry.path(), parts, found);
            }
        }
        return;
    }
    if !first.contains(['*', '?']) {
        walk_glob(&dir.join(first), rest, found);
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if matches(first.as_bytes(), entry.file_name().to_string_lossy().as_bytes()) {
            walk_glob(&entry.path(), rest, found);
        }
    }
}

/// Whether `name` matches `pattern` (`*`: any run of characters, `?`: one character).
fn matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.split_first(), name.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => {
            matches(rest, name)
                || name.split_first().is_some_and(|(_, tail)| matches(pattern, tail))
        }
        (Some((b'?', rest)), Some((_, tail))) => matches(rest, tail),
        (Some((p, rest)), Some((n, tail))) if p == n => matches(rest, tail),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_patterns_match_within_and_across_directories() {
        assert!(matches(b"*.hid", b"a.hid"));
        assert!(matches(b"a?c*", b"abcdef"));
        assert!(!matches(b"*.hid", b"a.hid.bak"));
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("x/y")).unwrap();
        for file in ["a.hid", "b.txt", "x/c.hid", "x/y/d.hid"] {
            std::fs::write(root.join(file), b"").unwrap();
        }
        let base = root.display().to_string();
        assert_eq!(glob(&format!("{base}/*.hid")).unwrap(), [root.join("a.hid")]);
        assert_eq!(
            glob(&format!("{base}/**/*.hid")).unwrap(),
            [root.join("a.hid"), root.join("x/c.hid"), root.join("x/y/d.hid")]
        );
        assert_eq!(literal_prefix(&format!("{base}/**/*.hid")), root);
        assert!(glob(&format!("{base}/*.none")).is_err());
    }
}
