//! The shared conformance suite, run against the Arrow segment backend with small segments and
//! an early merge, so that flushes write several segments, lookups go through both the merged
//! key index and the sidecars, and corruption cases touch every kind of file; then again with
//! segments written on a background thread; again with compressed segments written without
//! fsync (the options a throughput-first user picks); and again with one segment mapped at a
//! time, so that every case reading more than one segment closes and reopens segments.

use stowage_arrow::{ArrowFactory, ArrowOptions};

fn factory() -> ArrowFactory {
    ArrowFactory {
        options: ArrowOptions { flush_every: 16, merge_after: 2, ..ArrowOptions::default() },
    }
}

stowage_conformance::backend_conformance!(factory());

mod background_flush {
    use super::*;

    fn factory() -> ArrowFactory {
        let options = super::factory().options;
        ArrowFactory { options: ArrowOptions { background_flush: true, ..options } }
    }

    stowage_conformance::backend_conformance!(factory());
}

mod compressed_not_durable {
    use super::*;
    use stowage_arrow::Compression;

    fn factory() -> ArrowFactory {
        let options = super::factory().options;
        let compression = Some(Compression::Lz4);
        ArrowFactory { options: ArrowOptions { compression, durable: false, ..options } }
    }

    stowage_conformance::backend_conformance!(factory());
}

mod one_open_segment {
    use super::*;

    fn factory() -> ArrowFactory {
        let options = super::factory().options;
        ArrowFactory { options: ArrowOptions { max_open_segments: 1, ..options } }
    }

    stowage_conformance::backend_conformance!(factory());
}
