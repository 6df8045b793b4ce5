//! The conformance suite, run against the correct toy backend (`tests/toy`): every case must pass
//! (or print SKIPPED for an undeclared capability), including the crash case, which re-runs this
//! test binary as a child process.

mod toy;

stowage_conformance::backend_conformance!(toy::ToyFactory::correct());
