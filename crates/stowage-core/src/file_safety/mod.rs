//! Atomic replace, writer lock, checksummed log (filled in by the file-safety work).
