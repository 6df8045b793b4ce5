//! The conformance suite, run against the correct toy backend (`tests/toy`): every case must pass
//! (or print SKIPPED for an undeclared capability), including the crash cases, which re-run this
//! test binary as a child process, and the failed-flush case, whose syncs the toy's own injector
//! makes fail.

mod toy;

stowage_conformance::backend_conformance!(toy::ToyFactory::correct(), faults = toy::ToyInjector);
