//! Hostile aenet HDF5 files never take the command down: each reference file with one byte
//! changed at offsets spread over the whole file (object headers, B-trees, heaps, data) goes
//! through `keys`, `verify` and `get`; every run ends with a status (0 to 3), never a signal,
//! an abort or a panic. A review found a one-byte change making `keys` abort on a 4 PB
//! allocation, and two bytes making `verify` segfault inside libhdf5.

mod common;

use common::*;
use stowage_test_support::reference::reference_set;

#[test]
fn damaged_aenet_files_end_every_command_with_a_status() {
    let Some(set) = reference_set("aenet-torch-cache") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut runs = 0;
    let mut damaged_reports = 0;
    for name in ["v1_legacy.h5", "v2_both_f64.h5"] {
        let pristine = std::fs::read(set.join(name)).unwrap();
        let step = (pristine.len() / 24).max(1);
        for (n, offset) in (0..pristine.len()).step_by(step).enumerate() {
            let mut bytes = pristine.clone();
            bytes[offset] ^= if n % 2 == 0 { 0xff } else { 0x01 };
            let file = dir.path().join(format!("{name}-{offset}.h5"));
            std::fs::write(&file, &bytes).unwrap();
            for command in ["keys", "verify"] {
                let run = stowage(args(&[&command, &file]));
                assert!((0..=3).contains(&run.code), "{name} @{offset} {command}: {run:?}");
                damaged_reports += usize::from(command == "verify" && run.code == 1);
                runs += 1;
            }
            let out = dir.path().join("out");
            let run = stowage(args(&[&"get", &file, &"0", &"--out", &out]));
            assert!((0..=3).contains(&run.code), "{name} @{offset} get: {run:?}");
            runs += 1;
        }
    }
    assert!(runs >= 140, "{runs} runs");
    assert!(damaged_reports > 0, "some damage is reported as problems (exit 1)");
}
