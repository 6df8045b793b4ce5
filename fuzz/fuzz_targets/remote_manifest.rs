//! stowage-remote's version manifest (`versions/<n>.json` on an object store): hostile bytes are
//! an error, never a panic; an accepted manifest has digests that decode and serializes to
//! bytes that parse back to the same manifest, byte for byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_remote::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = Manifest::parse("fuzz://versions/1", data) else { return };
    for part in &manifest.parts {
        part.commit.digest().expect("an accepted manifest's digests decode");
    }
    let bytes = manifest.to_bytes();
    let again = Manifest::parse("fuzz://versions/1", &bytes).expect("a written manifest parses");
    assert_eq!(again, manifest);
    assert_eq!(again.to_bytes(), bytes, "serialization is deterministic");
});
