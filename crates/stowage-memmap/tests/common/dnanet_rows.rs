//! DNANet-shaped rows shared by the memmap writer and realization tests.

use stowage_core::{Sample, Tensor, Value};

/// Dye rows (D) and scan points (L) of the test rows.
pub const D: usize = 3;
/// Scan points (L).
pub const L: usize = 8;

/// DNANet row `i` with `panel` as its panel JSON: annotation null every third row, alleles on
/// even rows.
pub fn dnanet_row(i: usize, panel: String) -> Sample {
    // Wrapping: rows past 32 would overflow i16 (the cold-read tests write 3,000).
    let data: Vec<i16> = (0..D * L).map(|j| ((i * 1000 + j) as i16).wrapping_sub(500)).collect();
    let scaler: Vec<f32> = (0..L).map(|j| i as f32 + j as f32 / 8.0).collect();
    let mut sample = Sample::new()
        .with("data", Tensor::from_slice(&[D, L], &data).unwrap())
        .with("scaler", Tensor::from_slice(&[L], &scaler).unwrap())
        .with("panel", Value::Json(panel))
        .with("meta_json", Value::Json(format!("{{\"i\": {i}}}")));
    if i.is_multiple_of(3) {
        sample.insert("annotation", Value::Null);
    } else {
        let annotation: Vec<i8> = (0..D * L).map(|j| ((i + j) % 7) as i8 - 3).collect();
        sample.insert("annotation", Tensor::from_slice(&[D, L], &annotation).unwrap());
    }
    let allele = if i.is_multiple_of(2) { Value::Json("[\"a\"]".into()) } else { Value::Null };
    sample.insert("allele", allele);
    sample
}

/// The key (source path) of row `i`.
pub fn key(i: usize) -> String {
    format!("/data/run{i:03}.hid")
}
