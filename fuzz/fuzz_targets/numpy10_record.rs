//! NUMPY_10 record strings (`Numpy10Record::parse`), then the sample a record addresses read
//! from a hostile collection file (`CollectionFile::read_record`, checksum verified), as
//! `read_hangar_record` does. Input: the record, a newline, the collection file's bytes. A record
//! that parses is printed back to exactly its input (hangar's canonical form).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_npy::Numpy10Record;
use stowage_npy::fuzzing::CollectionFile;

fuzz_target!(|data: &[u8]| {
    let (line, file) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(line) else { return };
    let Ok(record) = Numpy10Record::parse(text) else { return };
    assert_eq!(record.to_string(), text, "a parsed record prints back as its input");
    if file.is_empty() {
        return;
    }
    let path = stowage_fuzz::write_scratch("collection.npy", file);
    if let Ok(collection) = CollectionFile::open(&path) {
        let _ = collection.read_record(&record, true);
        let _ = collection.read_record(&record, false);
    }
});
