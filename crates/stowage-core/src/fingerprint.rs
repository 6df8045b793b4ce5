//! Cache keys and fingerprints (filled in by the fingerprints work).
