//! `stowage get`: one sample out of a cache, as files numpy and any tool can read.
//!
//! - `stowage get CACHE KEY --out DIR` writes each field of the sample under `KEY` into `DIR`:
//!   tensors as `<field>.npy`, bytes as `<field>.bin`, JSON as `<field>.json`; null fields are
//!   skipped with a note.
//! - `stowage get DIR --record RECORD --out FILE.npy` reads one sample straight from a NUMPY_10
//!   record string and a hangar-style data directory (`DIR/data/10/<uid>.npy`), verifying its
//!   checksum.

use std::io::Write;
use std::path::Path;

use stowage_core::file_safety::atomic_write;
use stowage_core::{Registry, Sample, Tensor, Value, shape};
use stowage_npy::read_hangar_record;

use crate::error::{CliError, Status, io_error};
use crate::npy_out::{has_no_numpy_dtype, numpy_loadable, write_npy};
use crate::open::open_reader;
use crate::out::note;

/// Writes every field of the sample stored under `key` in the cache at `path`, opened through
/// `registry`, into `out_dir` (created when missing; files already there are replaced); notes
/// (a null field, a bfloat16 tensor) go to `notes`. A missing key is an error naming the key and
/// the cache; so is a corrupted sample (naming its file) and a field name that is not a safe file
/// name.
pub fn by_key(
    registry: &Registry,
    path: &Path,
    key: &str,
    out_dir: &Path,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let (reader, _) = open_reader(registry, path, "get KEY")?;
    let sample = reader
        .get(key)?
        .ok_or_else(|| CliError::new(format!("key {key:?} not found in {}", path.display())))?;
    write_sample(&sample, out_dir, out, notes).map_err(|e| {
        CliError::new(format!("key {key:?} of {}: {}", path.display(), e.one_line()))
    })?;
    Ok(Status::Success)
}

/// Writes each field of `sample` into `dir` (created when missing) and prints each file written;
/// notes go to `notes`.
///
/// Every field name is checked with [`check_field_name`], and every tensor with
/// [`numpy_loadable`], before anything is created, so a hostile name never writes outside `dir`,
/// no `.npy` numpy cannot load is written, and nothing at all is written when one is refused.
pub fn write_sample(
    sample: &Sample,
    dir: &Path,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), CliError> {
    for (name, value) in sample.fields() {
        check_field_name(name)?;
        if let Value::Tensor(tensor) = value {
            numpy_loadable(tensor)
                .map_err(|why| CliError::new(format!("field {name:?}: {why}")))?;
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, &e))?;
    for (name, value) in sample.fields() {
        match value {
            Value::Tensor(tensor) => {
                let path = dir.join(format!("{name}.npy"));
                let descr = write_npy(&path, tensor)?;
                say!(out, "{}: {}", path.display(), describe(tensor, descr));
                if has_no_numpy_dtype(tensor.dtype()) {
                    note(
                        notes,
                        &format!(
                            "field {name:?} is {}, which numpy has no dtype for: {} holds its raw \
                         16-bit patterns as {descr} (uint16); reinterpret them with \
                         a.view(ml_dtypes.bfloat16) or \
                         torch.from_numpy(a.view('int16')).view(torch.bfloat16)",
                            tensor.dtype(),
                            path.display()
                        ),
                    );
                }
            }
            Value::Bytes(bytes) => {
                let path = dir.join(format!("{name}.bin"));
                atomic_write(&path, bytes)?;
                say!(out, "{}: {} of bytes", path.display(), crate::out::size(bytes.len() as u64));
            }
            Value::Json(text) => {
                let path = dir.join(format!("{name}.json"));
                atomic_write(&path, text.as_bytes())?;
                say!(out, "{}: JSON, {}", path.display(), crate::out::size(text.len() as u64));
            }
            Value::Null => note(notes, &format!("field {name:?} is null: nothing written for it")),
        }
    }
    Ok(())
}

/// `float32 (10, 10) as <f4`.
fn describe(tensor: &Tensor, descr: &str) -> String {
    format!("{} {} as {descr}", tensor.dtype(), shape::display(tensor.shape()))
}

/// Refuses a field name that is not a safe file name on its own: empty, `.` or `..`, containing a
/// path separator (`/` or `\`), a NUL or another control character.
pub fn check_field_name(name: &str) -> Result<(), CliError> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name == "." || name == ".." {
        Some("it is a directory name")
    } else if name.contains(['/', '\\']) {
        Some("it contains a path separator")
    } else if name.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    };
    match why {
        Some(why) => Err(CliError::new(format!(
            "field name {name:?} cannot be used as a file name ({why}); nothing was written"
        ))),
        None => Ok(()),
    }
}

/// Reads the sample `record` addresses in the hangar-style data directory `dir`, verifying its
/// checksum, and writes it to `out_file` as `.npy`. A corrupted sample is an error naming the
/// file, the record and both digests; nothing is written then.
pub fn by_record(
    dir: &Path,
    record: &str,
    out_file: &Path,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let why = "--record reads data/10/<uid>.npy from a local directory";
    crate::locate::local_only(dir, "get", why)?;
    let meta = std::fs::metadata(dir).map_err(|e| io_error(dir, &e))?;
    if !meta.is_dir() {
        return Err(CliError::new(format!(
            "{} is a file; --record reads from a directory holding data/10/<uid>.npy",
            dir.display()
        )));
    }
    if out_file.is_dir() {
        return Err(CliError::new(format!(
            "{} is a directory; with --record, --out names the .npy file to write",
            out_file.display()
        )));
    }
    let tensor = read_hangar_record(dir, record, true)?;
    numpy_loadable(&tensor).map_err(|why| CliError::new(format!("record {record:?}: {why}")))?;
    let descr = write_npy(out_file, &tensor)?;
    say!(out, "{}: {}", out_file.display(), describe(&tensor, descr));
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::DType;

    #[test]
    fn unsafe_field_names_are_refused() {
        for name in ["", ".", "..", "a/b", "../x", "/abs", "a\\b", "nul\0", "new\nline"] {
            let err = check_field_name(name).expect_err(name);
            assert!(err.one_line().contains("cannot be used as a file name"), "{err}");
            assert!(!err.one_line().contains('\n'));
        }
        for name in ["x", "x.y", "..hidden", "a..b", "ünï code", "-dash"] {
            check_field_name(name).unwrap();
        }
    }

    #[test]
    fn every_value_kind_is_written_and_nulls_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("new/nested");
        let sample = Sample::new()
            .with("t", Tensor::from_slice(&[2], &[1i32, 2]).unwrap())
            .with("raw", Value::Bytes(vec![0u8, 255, 10].into()))
            .with("meta", Value::Json(r#"{"id": 7}"#.into()))
            .with("gone", Value::Null);
        let mut printed = Vec::new();
        let mut notes = Vec::new();
        write_sample(&sample, &out_dir, &mut printed, &mut notes).unwrap();
        let notes = String::from_utf8(notes).unwrap();
        assert_eq!(notes, "stowage: note: field \"gone\" is null: nothing written for it\n");
        let printed = String::from_utf8(printed).unwrap();
        assert_eq!(printed.lines().count(), 3, "{printed}");
        assert!(printed.contains("t.npy: int32 (2,) as <i4"), "{printed}");
        assert_eq!(std::fs::read(out_dir.join("raw.bin")).unwrap(), [0, 255, 10]);
        assert_eq!(std::fs::read_to_string(out_dir.join("meta.json")).unwrap(), r#"{"id": 7}"#);
        assert!(!out_dir.join("gone.npy").exists());
        let npy = std::fs::read(out_dir.join("t.npy")).unwrap();
        let header = stowage_core::npy_header::parse(&npy).unwrap();
        assert_eq!((header.dtype, header.shape.as_slice()), (DType::I32, &[2][..]));
        assert_eq!(&npy[header.data_offset..], &[1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn a_hostile_field_name_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        let sample =
            Sample::new().with("fine", Tensor::scalar(1u8)).with("../escape", Tensor::scalar(2u8));
        let err = write_sample(&sample, &out_dir, &mut Vec::new(), &mut Vec::new()).unwrap_err();
        assert!(err.one_line().contains("\"../escape\""), "{err}");
        assert!(!out_dir.exists());
        assert!(!dir.path().join("escape.npy").exists());
    }
}
