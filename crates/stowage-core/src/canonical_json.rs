//! Python-compatible canonical JSON (filled in by the fingerprints work).
