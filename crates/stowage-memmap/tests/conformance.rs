//! The shared conformance suite, run against the memmap row backend.

use stowage_memmap::MemmapFactory;

stowage_conformance::backend_conformance!(MemmapFactory::default());
