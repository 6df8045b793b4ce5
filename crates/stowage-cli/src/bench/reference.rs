//! The physical references: the same tensor bytes as the workload, written to one flat file with
//! an fdatasync every flush's worth of rows (the machine's durable write bandwidth), then copied
//! out of a warm memory map in the order the backends are read (the machine's read limit). Every
//! backend figure is also reported as a fraction of these.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use memmap2::Mmap;
use serde::Serialize;

use super::workload::Workload;

/// What the references measured.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// Rows per second written with an fdatasync every `flush_every` rows.
    pub write_fsync_rows_per_s: f64,
    /// Bytes per second of the same.
    pub write_fsync_bytes_per_s: f64,
    /// Rows per second copied out of a warm map, in the read order.
    pub raw_copy_rows_per_s: f64,
    /// The tensor bytes of all rows.
    pub bytes: u64,
}

/// Measures the references for `workload` in `dir` (the flat file is removed afterwards);
/// `order` is the read order the backends use.
///
/// Errors: the flat file cannot be written or mapped, as text naming it.
pub fn measure(
    workload: &Workload,
    dir: &Path,
    flush_every: usize,
    order: &[usize],
) -> Result<Reference, String> {
    let path = dir.join(format!("{}.reference.bin", workload.name));
    let failed = |e: std::io::Error| format!("{}: {e}", path.display());
    let rows: Vec<Vec<u8>> = (0..workload.rows).map(|i| workload.tensor_bytes(i)).collect();
    let bytes: u64 = rows.iter().map(|row| row.len() as u64).sum();
    let started = Instant::now();
    let mut file = std::fs::File::create(&path).map_err(failed)?;
    for chunk in rows.chunks(flush_every.max(1)) {
        for row in chunk {
            file.write_all(row).map_err(failed)?;
        }
        file.sync_data().map_err(failed)?;
    }
    let write_seconds = started.elapsed().as_secs_f64();
    drop(file);
    let mut offsets = Vec::with_capacity(rows.len() + 1);
    offsets.push(0usize);
    for row in &rows {
        offsets.push(offsets.last().expect("starts with 0") + row.len());
    }
    drop(rows);
    let file = std::fs::File::open(&path).map_err(failed)?;
    // SAFETY: the file was written above and is not modified or truncated while mapped; it is
    // removed only after the map is dropped.
    let map = unsafe { Mmap::map(&file) }.map_err(failed)?;
    black_box(map.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>());
    let largest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let mut buffer = vec![0u8; largest];
    let started = Instant::now();
    for &i in order {
        let row = &map[offsets[i]..offsets[i + 1]];
        buffer[..row.len()].copy_from_slice(row);
        black_box(&buffer);
    }
    let copy_seconds = started.elapsed().as_secs_f64();
    drop(map);
    let _ = std::fs::remove_file(&path);
    Ok(Reference {
        write_fsync_rows_per_s: workload.rows as f64 / write_seconds,
        write_fsync_bytes_per_s: bytes as f64 / write_seconds,
        raw_copy_rows_per_s: order.len() as f64 / copy_seconds.max(1e-9),
        bytes,
    })
}
