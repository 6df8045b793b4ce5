//! The shared conformance suite against the journal backend: the three lines a backend author
//! adds (a dev-dependency on `stowage-conformance`, this file, one macro call).

stowage_conformance::backend_conformance!(stowage_example::JournalFactory);
