//! The benchmark suites `cargo xtask bench` runs, as data: the criterion bench and what to read back
//! from it, the Python peer that reads the same data, the ratios the project aims for, and the text
//! the suite's section of `docs/benchmarks.md` opens with. A new suite is one more entry in
//! [`SUITES`]; the run loop, the table and the docs have no code path per suite.

use std::path::{Path, PathBuf};

/// One benchmark suite: a criterion bench target, its Python peer and its targets.
///
/// Contract with the criterion bench: it is run as `cargo bench -p <package> --bench
/// <bench_target> -- --noplot` with `STOWAGE_BENCH_DIR` set to [`Suite::bench_data`], leaves there
/// what the peer reads, and reports every id of `benchmark_ids` in the criterion group `group`, each
/// with a throughput in elements (rows) per iteration.
#[derive(Debug)]
pub struct Suite {
    /// The name `--suite` selects, and the name in the section's markers.
    pub name: &'static str,
    /// The heading of the section in `docs/benchmarks.md` (after `## `).
    pub heading: &'static str,
    /// The package that holds the bench target (`cargo bench -p <package>`).
    pub package: &'static str,
    /// The bench target (`--bench <bench_target>`).
    pub bench_target: &'static str,
    /// The bench target's source file, relative to the workspace root: without it the suite
    /// cannot run.
    pub bench_source: &'static str,
    /// The criterion group the benchmarks report in.
    pub group: &'static str,
    /// The benchmark ids the table reports, in table order.
    pub benchmark_ids: &'static [&'static str],
    /// Where the bench leaves its data, below `<target>/bench-data` (empty: that directory).
    pub bench_data_subdir: &'static str,
    /// The paragraph after the command line in the section: what the numbers measure.
    pub description: &'static str,
    /// The Python peer that reads the same data the way the original tool does.
    pub peer: Peer,
    /// Levels the bench leaves in `measurements.json`, in table order (after the benchmarks).
    pub levels: &'static [Level],
    /// The ratios and bounds the table evaluates, in table order.
    pub targets: &'static [Target],
    /// Whether the suite reads object storage: `cargo xtask bench` then starts moto's S3 server
    /// on loopback before the bench, hands its endpoint to the bench as
    /// `STOWAGE_BENCH_S3_ENDPOINT`, and stops it after the peer (which reads the same objects
    /// from it; the bench leaves the endpoint in its data).
    pub s3_server: bool,
    /// Whether this suite's section is the one once written between the unnamed markers
    /// `<!-- xtask-bench:begin -->` / `<!-- xtask-bench:end -->` (from before there were several
    /// suites); its first write replaces them with its own markers.
    pub owns_unnamed_markers: bool,
    /// What measures the suite: its criterion bench, or (no criterion bench) its peer script
    /// run on the release build of the `stowage` Python package.
    pub runner: Runner,
}

/// What measures a suite's rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// The criterion bench (`package`, `bench_target`, `bench_source`, `group`,
    /// `benchmark_ids`), then the peer with the system `python3` on the data the bench left.
    Criterion,
    /// No criterion bench: `cargo xtask bench` builds the `stowage` Python package in release
    /// into `<target>/py-venv` (`maturin develop --release`; `bench_source` is its
    /// `pyproject.toml`), then the peer script, run with the venv's interpreter, makes its own
    /// data and measures every rate, and every level (in its JSON line's `"levels"`, the shape
    /// of `measurements.json`). Its line is kept in the bench data for `--report-only`.
    PythonPackage,
}

/// A Python script run as `python3 <script> <bench data>` that prints one JSON line of rates.
#[derive(Debug)]
pub struct Peer {
    /// The script, relative to the workspace root.
    pub script: &'static str,
    /// The Python packages it imports (rows of the prerequisites table), installed when missing.
    pub packages: &'static [&'static str],
    /// Files below the bench data it reads; when one is missing the peer is not started.
    pub needs: &'static [&'static str],
    /// The rates it reports, in table order.
    pub rates: &'static [PeerRate],
}

/// One rate of a peer's JSON line.
#[derive(Debug)]
pub struct PeerRate {
    /// The rate's name in the table and in the targets.
    pub name: &'static str,
    /// The key of the rate, in rows per second, in the JSON line.
    pub key: &'static str,
    /// JSON pointer to the number of rows read for the rate (`/rows` or `/rows/<cache>`).
    pub rows_at: &'static str,
    /// JSON pointer to the seconds those reads took.
    pub seconds_at: &'static str,
    /// What one read does, for the line below the table:
    /// `` `<name>`: <description>, <rows> reads in <seconds> s.``
    pub description: &'static str,
}

/// What the project wants of its measurements: a ratio of two rates, or a bound on one.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// `numerator / denominator` (benchmark ids or peer rate names, in the same unit).
    Ratio {
        /// The rate on top.
        numerator: &'static str,
        /// The rate below.
        denominator: &'static str,
        /// The smallest ratio that passes, or none for a ratio the table only reports.
        minimum: Option<f64>,
    },
    /// An upper bound on one measurement: a benchmark's mean time per iteration, in
    /// milliseconds, or a level ([`Level`]) in its own unit.
    AtMost {
        /// The benchmark id or level name.
        name: &'static str,
        /// The largest value that passes.
        maximum: f64,
    },
}

impl Target {
    /// The measurements it reads.
    #[cfg(test)]
    pub fn names(&self) -> Vec<&'static str> {
        match *self {
            Target::Ratio { numerator, denominator, .. } => vec![numerator, denominator],
            Target::AtMost { name, .. } => vec![name],
        }
    }

    /// Whether it passes or fails (a report-only ratio does neither).
    pub fn is_goal(&self) -> bool {
        !matches!(self, Target::Ratio { minimum: None, .. })
    }
}

/// A target that passes when `numerator / denominator >= minimum`.
const fn at_least(numerator: &'static str, denominator: &'static str, minimum: f64) -> Target {
    Target::Ratio { numerator, denominator, minimum: Some(minimum) }
}

/// A ratio worth showing beside the targets that neither passes nor fails.
const fn report(numerator: &'static str, denominator: &'static str) -> Target {
    Target::Ratio { numerator, denominator, minimum: None }
}

/// A target that passes when the mean time per iteration of benchmark `name` (or level `name`)
/// is at most `maximum` (milliseconds, or the level's unit).
const fn at_most(name: &'static str, maximum: f64) -> Target {
    Target::AtMost { name, maximum }
}

/// A level the bench measures that criterion cannot hold (resident memory, say), read from
/// `measurements.json` in the bench data: `{"<name>": {"value": <number>, "unit": "MiB"}}`
/// (or `"ms"`, `"requests"`).
#[derive(Debug)]
pub struct Level {
    /// The level's name in the file and in the table.
    pub name: &'static str,
    /// What it measures, for the line below the table.
    pub description: &'static str,
}

impl Suite {
    /// The directory the bench leaves its data in and the peer reads: `bench_data_root` itself or
    /// the suite's subdirectory of it (no trailing separator, as the docs show the path).
    pub fn bench_data(&self, bench_data_root: &Path) -> PathBuf {
        if self.bench_data_subdir.is_empty() {
            bench_data_root.to_path_buf()
        } else {
            bench_data_root.join(self.bench_data_subdir)
        }
    }

    /// How many targets pass or fail (the report-only ratios do not count).
    pub fn goal_count(&self) -> usize {
        self.targets.iter().filter(|target| target.is_goal()).count()
    }
}

/// numpy10: stowage-npy against the reference loops and hangar's NUMPY_10 read path.
pub const NUMPY10: Suite = Suite {
    name: "numpy10",
    heading: "numpy10: stowage-npy against the reference loops and hangar's read path",
    package: "stowage-npy",
    bench_target: "numpy10",
    bench_source: "crates/stowage-npy/benches/numpy10.rs",
    group: "numpy10",
    benchmark_ids: &[
        "reference_raw_copy",
        "reference_copy_xxh64",
        "reference_xxh64_in_place",
        "reference_write_fsync",
        "get_checksum",
        "get_no_checksum",
        "get_record_checksum",
        "put_flush",
        "open",
        "reference_raw_copy_64x64",
        "reference_copy_xxh64_64x64",
        "reference_xxh64_in_place_64x64",
        "get_checksum_64x64",
        "get_no_checksum_64x64",
        "get_record_checksum_64x64",
    ],
    bench_data_subdir: "",
    description: "Maps warm: the bench touches every page before timing. Rows not in the CPU cache: \
                  every read benchmark walks the same shuffled epoch over all rows, 1000 new rows \
                  per iteration.",
    peer: Peer {
        script: "xtask/py/numpy10_peer.py",
        packages: &["numpy", "xxhash"],
        needs: &["records.txt"],
        rates: &[PeerRate {
            name: "python_slice_xxhash",
            key: "python_slice_xxhash_rows_per_s",
            rows_at: "/rows",
            seconds_at: "/seconds",
            description: "hangar's read of one random record, `np.ascontiguousarray(mm[idx, :d0, \
                          ...])` then `xxhash.xxh64_hexdigest(a.tobytes())`",
        }],
    },
    levels: &[],
    targets: &[
        at_least("get_checksum", "reference_copy_xxh64", 0.70),
        at_least("get_checksum", "python_slice_xxhash", 3.0),
        at_least("get_no_checksum", "reference_raw_copy", 0.50),
        at_least("put_flush", "reference_write_fsync", 0.50),
        at_least("get_checksum_64x64", "reference_copy_xxh64_64x64", 0.70),
        at_least("get_no_checksum_64x64", "reference_raw_copy_64x64", 0.50),
    ],
    s3_server: false,
    owns_unnamed_markers: true,
    runner: Runner::Criterion,
};

/// memmap: stowage-memmap against the reference loops and DNANet's memmap read path.
pub const MEMMAP: Suite = Suite {
    name: "memmap",
    heading: "memmap: stowage-memmap against the reference loops and DNANet's read path",
    package: "stowage-memmap",
    bench_target: "memmap_rows",
    bench_source: "crates/stowage-memmap/benches/memmap_rows.rs",
    group: "memmap",
    benchmark_ids: &[
        "reference_raw_copy",
        "reference_xxh64_in_place",
        "reference_xxh3_in_place",
        "get_checksum",
        "get_no_checksum",
        "get_row_checksum",
        "get_row_no_checksum",
        "reference_write_fsync",
        "put_flush",
        "open",
        "open_1k_rows",
        "first_get_after_open",
        "reference_raw_copy_dnanet",
        "reference_xxh64_in_place_dnanet",
        "reference_xxh3_in_place_dnanet",
        "get_checksum_dnanet",
        "get_no_checksum_dnanet",
        "reference_write_fsync_dnanet",
        "put_flush_dnanet",
    ],
    bench_data_subdir: "memmap",
    description: "Two caches in DNANet's memmap layout: `f32x512/`, 1,000,000 rows of one field \
                  float32[512] (ids without a suffix), and `dnanet/`, 100,000 rows of DNANet's \
                  shape, data int16 (6, 4096), annotation int8 (6, 4096) nullable and scaler \
                  float32 (4096,) (ids ending in `_dnanet`). Maps warm: the bench and the Python \
                  peer touch every page before timing. Rows not in the CPU cache: every read \
                  benchmark walks a shuffled epoch over all rows, as does the peer. \
                  `open / open_1k_rows` compares opening the 1,000,000-row cache with opening a \
                  1,000-row one (open time must not grow with the row count); \
                  `first_get_after_open` is an open and its first get.",
    peer: Peer {
        script: "xtask/py/memmap_peer.py",
        packages: &["numpy"],
        needs: &["f32x512/shapes.json", "dnanet/shapes.json"],
        rates: &[
            PeerRate {
                name: "python_memmap_copy",
                key: "python_memmap_copy_rows_per_s",
                rows_at: "/rows/f32x512",
                seconds_at: "/seconds/f32x512",
                description: "DNANet's read of one row of `f32x512/` in shuffled order, \
                              `np.array(mm[i])` for the `np.memmap` of every field's `.bin`",
            },
            PeerRate {
                name: "python_memmap_copy_dnanet",
                key: "python_memmap_copy_dnanet_rows_per_s",
                rows_at: "/rows/dnanet",
                seconds_at: "/seconds/dnanet",
                description: "the same read of one row of `dnanet/` (three fields)",
            },
        ],
    },
    levels: &[],
    targets: &[
        at_least("get_no_checksum", "reference_raw_copy", 0.70),
        at_least("get_checksum", "reference_raw_copy", 0.40),
        at_least("get_row_checksum", "reference_raw_copy", 0.40),
        at_least("get_no_checksum_dnanet", "reference_raw_copy_dnanet", 0.70),
        at_least("get_checksum_dnanet", "reference_raw_copy_dnanet", 0.40),
        // Like for like: Python's np.array(mm[i]) reads row i without checking anything.
        at_least("get_row_no_checksum", "python_memmap_copy", 5.0),
        report("get_no_checksum", "python_memmap_copy"),
        report("get_checksum", "python_memmap_copy"),
        report("get_checksum", "reference_xxh3_in_place"),
        at_least("put_flush", "reference_write_fsync", 0.50),
        at_least("put_flush_dnanet", "reference_write_fsync_dnanet", 0.50),
        at_least("open", "open_1k_rows", 0.50),
        report("get_checksum_dnanet", "python_memmap_copy_dnanet"),
        report("first_get_after_open", "open"),
    ],
    s3_server: false,
    owns_unnamed_markers: false,
    runner: Runner::Criterion,
};

/// arrow: stowage-arrow against the reference loops and torchcachex's read and write paths, and
/// its key index at 10 thousand to 10 million keys.
pub const ARROW: Suite = Suite {
    name: "arrow",
    heading: "arrow: stowage-arrow against the reference loops and torchcachex's read and write paths",
    package: "stowage-arrow",
    bench_target: "arrow_segments",
    bench_source: "crates/stowage-arrow/benches/arrow_segments/main.rs",
    group: "arrow",
    benchmark_ids: &[
        "reference_raw_copy",
        "reference_xxh3_in_place",
        "get_batch",
        "get_batch_no_checksum",
        "get",
        "get_no_checksum",
        "reference_write_fsync",
        "put_flush",
        "put_flush_no_fsync",
        "open",
        "flush_2048_10k",
        "flush_2048_1m",
        "flush_2048_10m",
        "merge_10k",
        "merge_1m",
        "merge_10m",
        "open_10k",
        "open_1m",
        "open_10m",
    ],
    bench_data_subdir: "arrow",
    description: "`f32x512/`: 100,000 samples of float32[512] in torchcachex's `tensor` structure, \
                  written with the default options (a segment per 2,048 samples, 49 segments, \
                  the key index merged as the writer does). Maps warm: the bench and the peer \
                  touch every page before timing. Rows not in the CPU cache: every read benchmark \
                  walks one shuffled epoch over all samples, 1,000 keys per iteration (one \
                  `get_batch`, or 1,000 `get`s); the references copy or hash the same samples' \
                  bytes in place in the same order, with their addresses known in advance. \
                  `put_flush*` put 2,048 samples and flush into a new cache, with fsync (the \
                  default) and without (torchcachex's durability); `reference_write_fsync` writes \
                  the same bytes to a new file and fdatasyncs it. The `_10k`/`_1m`/`_10m` ids run \
                  on caches of float32[4] samples with 10 thousand, 1 million and 10 million keys: \
                  one durable flush of 2,048 new samples, the background merge the writer starts \
                  after 32 more segments of 2,048 keys (per key), and a read-only open (per \
                  open).",
    peer: Peer {
        script: "xtask/py/arrow_peer.py",
        packages: &["numpy", "pyarrow"],
        needs: &["f32x512/stowage.log"],
        rates: &[
            PeerRate {
                name: "python_get_batch",
                key: "python_get_batch_rows_per_s",
                rows_at: "/rows/get_batch",
                seconds_at: "/seconds/get_batch",
                description: "torchcachex's `get_batch` of 1,000 random keys on an LRU miss: \
                              keys grouped by segment, each segment `pa.memory_map` + \
                              `ipc.open_file` + `read_all` + `take`, columns `to_numpy`, each \
                              sample rebuilt as a writable array of its shape",
            },
            PeerRate {
                name: "python_put_flush",
                key: "python_put_flush_rows_per_s",
                rows_at: "/rows/put_flush",
                seconds_at: "/seconds/put_flush",
                description: "torchcachex's put of 2,048 samples (`.flatten().tolist()`) and \
                              flush: `RecordBatch.from_pydict`, `ipc.new_file` to `.tmp`, rename, \
                              the whole key index re-pickled to `index.pkl`; no fsync",
            },
        ],
    },
    levels: &[
        Level {
            name: "open_rss_10k",
            description: "resident memory an open of the 10-thousand-key cache adds before the \
                          first get",
        },
        Level { name: "open_rss_1m", description: "the same at 1 million keys" },
        Level { name: "open_rss_10m", description: "the same at 10 million keys" },
    ],
    targets: &[
        at_least("get_batch", "python_get_batch", 20.0),
        at_least("get_batch", "reference_raw_copy", 0.30),
        report("get_batch_no_checksum", "reference_raw_copy"),
        report("get_batch", "reference_xxh3_in_place"),
        report("get", "reference_raw_copy"),
        at_least("put_flush_no_fsync", "python_put_flush", 10.0),
        at_least("put_flush", "reference_write_fsync", 0.50),
        // The 10M flush within 1.25x of the 10k flush's time: rates at least 1 / 1.25 apart.
        at_least("flush_2048_10m", "flush_2048_10k", 0.80),
        report("flush_2048_1m", "flush_2048_10k"),
        report("merge_10m", "merge_10k"),
        at_most("open_10m", 100.0),
        at_most("open_rss_10m", 100.0),
    ],
    s3_server: false,
    owns_unnamed_markers: false,
    runner: Runner::Criterion,
};

/// hdf5: stowage-hdf5 against a raw copy of the same bytes and aenet's PyTables loads and writes.
pub const HDF5: Suite = Suite {
    name: "hdf5",
    heading: "hdf5: stowage-hdf5 against aenet's PyTables loads and writes",
    package: "stowage-hdf5",
    bench_target: "hdf5_cache",
    bench_source: "crates/stowage-hdf5/benches/hdf5_cache.rs",
    group: "hdf5",
    benchmark_ids: &["load_features", "load_entry", "reference_read_copy", "build_cache"],
    bench_data_subdir: "hdf5",
    description: "One aenet dataset file with a v2 `/torch_cache`: 10,000 entries of 20-200 atoms, \
                  F = 64 float64 features per atom; every 10th entry has force derivatives (30 \
                  radial edges and 10 angular triplets per atom, 4 radial and 4 angular features, \
                  two species). `load_features` reads one random entry's features, \
                  `load_entry` one random entry with forces (features and derivatives), \
                  `reference_read_copy` copies the same feature bytes out of a warm map of a flat \
                  file, `build_cache` writes the first 1,000 entries into a new dataset file and \
                  publishes it (per entry).",
    peer: Peer {
        script: "xtask/py/hdf5_peer.py",
        packages: &["numpy", "tables"],
        needs: &["dataset.h5", "workload.json"],
        rates: &[
            PeerRate {
                name: "pytables_load_features",
                key: "pytables_load_features_rows_per_s",
                rows_at: "/rows/features",
                seconds_at: "/seconds/features",
                description: "aenet's feature load of one random entry, `index[entry]` then \
                              `values[cache_row].reshape(n_atoms, n_features)`",
            },
            PeerRate {
                name: "pytables_load_entry",
                key: "pytables_load_entry_rows_per_s",
                rows_at: "/rows/entry",
                seconds_at: "/seconds/entry",
                description: "aenet's feature and derivative load of one random entry with \
                              forces (index row, then the 11 VLEN rows reshaped)",
            },
            PeerRate {
                name: "pytables_build",
                key: "pytables_build_rows_per_s",
                rows_at: "/rows/build",
                seconds_at: "/seconds/build",
                description: "aenet's PyTables writer building the same 1,000 entries' \
                              payloads into a new file under a temporary name and renaming it \
                              (no fsync), repeated",
            },
            PeerRate {
                name: "pytables_build_fsync",
                key: "pytables_build_fsync_rows_per_s",
                rows_at: "/rows/build_fsync",
                seconds_at: "/seconds/build_fsync",
                description: "the same build with the file and its directory fsynced around the \
                              rename: the durability `build_cache` pays for",
            },
        ],
    },
    levels: &[],
    targets: &[
        at_least("load_features", "pytables_load_features", 3.0),
        at_least("load_entry", "pytables_load_entry", 3.0),
        at_least("build_cache", "pytables_build", 2.0),
        report("build_cache", "pytables_build_fsync"),
        report("load_features", "reference_read_copy"),
    ],
    s3_server: false,
    owns_unnamed_markers: false,
    runner: Runner::Criterion,
};

/// remote: stowage-remote on moto's S3 server against object_store's own requests for the same
/// bytes, boto3's range GETs, and the fastest local backend's warm get.
pub const REMOTE: Suite = Suite {
    name: "remote",
    heading: "remote: stowage-remote on a loopback S3 server against object_store's own requests",
    package: "stowage-remote",
    bench_target: "remote",
    bench_source: "crates/stowage-remote/benches/remote.rs",
    group: "remote",
    benchmark_ids: &[
        "reference_range_get",
        "get_cold",
        "reference_get_ranges",
        "store_get_ranges",
        "get_batch",
        "local_get",
        "get_warm",
        "open",
        "open_10m",
    ],
    bench_data_subdir: "remote",
    description: "`s3://stowage-bench/f32x512` on moto 5.2.1's S3 server on 127.0.0.1 (started by \
                  the xtask for the bench and the peer: same data, same server process): 16,384 \
                  samples of float32[512] in 4 parts of 4,096. Every read benchmark walks one \
                  shuffled epoch, the same keys in the same order for stowage and its reference. \
                  `get_cold`: `get` with the parts' row tables in the node cache and no record \
                  cached (one range GET per key, checked and decoded), 64 keys per iteration; \
                  `reference_range_get`: object_store's own `get_range` of the same records' bytes \
                  on the same runtime. `get_cold_p50` / `reference_range_get_p50`: medians of \
                  400 single requests of each, timed alternately; the target `get p50 <= 1.2x the \
                  raw range GET's` is the ratio `reference_range_get_p50 / get_cold_p50 >= 0.83`. \
                  The batch and warm targets, rates of at least 0.8x and 0.9x, are likewise \
                  ratios of median times of rounds run alternately on the same keys (a load on \
                  this shared 2-core machine strikes both sides alike); the criterion means are \
                  reported beside them. \
                  `get_batch`: one `get_batch` of 1,024 keys; `reference_get_ranges`: \
                  object_store's `get_ranges` per rows object with exactly the ranges `get_batch` \
                  asks for, every object's in flight at once as `get_batch` sends every part's \
                  records in one round (both coalesce ranges closer than 1 MiB); \
                  `store_get_ranges`: the same requests through the cache's \
                  `RemoteStore::get_ranges_of` (retries, length checks), which \
                  splits `get_batch`'s time between the store and the lookup, checksums and \
                  decoding. `get_warm`: `get` with \
                  `cache_rows` (the rows objects' node-cache copies warm), against `local_get`: \
                  stowage-memmap's `get` (checksums on, maps warm) of the same samples, the \
                  fastest warm local get of the backends in this file (memmap 1.06 M rows/s, \
                  npy 0.91 M, arrow 0.68 M), 1,000 keys per iteration. `open`: a read-only open \
                  of the S3 cache; `open_10m`: of a `file://` cache of 10,000,000 float32[1] keys \
                  (same layout and requests as on S3; written once to the bench data and kept, as \
                  writing it through moto would take too long; `STOWAGE_BENCH_REMOTE_OPEN_KEYS` \
                  changes the count), whose requests (`open_requests_10m`, counted by \
                  `FaultyStore`'s log) and added resident memory (`open_rss_10m`, VmHWM after the \
                  open minus VmRSS before) are levels. Not compared: litdata 0.2.76 and \
                  mosaicml-streaming 0.13.0 both require torch (torch 2.15.0 and its CUDA wheels, \
                  about 3 GB), so neither peer is installed.",
    peer: Peer {
        script: "xtask/py/remote_peer.py",
        packages: &["boto3"],
        needs: &["ranges.json"],
        rates: &[PeerRate {
            name: "boto3_range_get",
            key: "boto3_range_get_rows_per_s",
            rows_at: "/rows",
            seconds_at: "/seconds",
            description: "a plain boto3 `get_object(Range=...)` and `Body.read()` of one key's \
                          record, the same 1,000 keys and byte ranges in `get_cold`'s order, on the \
                          same server",
        }],
    },
    levels: &[
        Level {
            name: "reference_range_get_p50",
            description: "median of 400 single object_store range GETs",
        },
        Level { name: "get_cold_p50", description: "median of 400 single cold `get`s" },
        Level {
            name: "reference_get_ranges_p50",
            description: "median time of 40 `reference_get_ranges` batches of 1,024 keys",
        },
        Level {
            name: "get_batch_p50",
            description: "median time of 40 `get_batch`es of the same keys, alternating with \
                          them",
        },
        Level {
            name: "local_get_p50",
            description: "median time of 300 rounds of 1,000 `local_get`s",
        },
        Level {
            name: "get_warm_p50",
            description: "median time of 300 rounds of 1,000 warm gets of the same keys, \
                          alternating with them",
        },
        Level {
            name: "open_requests",
            description: "requests a read-only open of the S3 cache makes",
        },
        Level {
            name: "open_requests_10m",
            description: "requests a read-only open of the 10-million-key cache makes",
        },
        Level {
            name: "open_rss_10m",
            description: "resident memory that open adds (peak during the open minus before)",
        },
    ],
    targets: &[
        // get p50 <= 1.2x the raw range GET's p50: raw / get >= 1 / 1.2.
        at_least("reference_range_get_p50", "get_cold_p50", 1.0 / 1.2),
        report("get_cold", "reference_range_get"),
        // get_batch >= 0.8x get_ranges in rate: its median time at most 1 / 0.8 of theirs.
        at_least("reference_get_ranges_p50", "get_batch_p50", 0.80),
        report("get_batch", "reference_get_ranges"),
        report("store_get_ranges", "reference_get_ranges"),
        // Warm get >= 0.9x the local get in rate, from medians of alternating rounds.
        at_least("local_get_p50", "get_warm_p50", 0.90),
        report("get_warm", "local_get"),
        report("get_cold", "boto3_range_get"),
        at_most("open_requests_10m", 4.0),
        // Under 100 MB: 95.4 MiB.
        at_most("open_rss_10m", 95.0),
    ],
    s3_server: true,
    owns_unnamed_markers: false,
    runner: Runner::Criterion,
};

/// python: the `stowage` Python package against its own Rust reads on the same handle, a raw copy
/// of rows of the same file, and each original tool's Python read path on the same files.
pub const PYTHON: Suite = Suite {
    name: "python",
    heading: "python: the stowage package against its Rust reads and the original tools' Python read paths",
    package: "stowage-py",
    bench_target: "",
    bench_source: "crates/stowage-py/pyproject.toml",
    group: "",
    benchmark_ids: &[],
    bench_data_subdir: "python",
    description: "One process (xtask/py/python_bench.py, run with the venv's interpreter on a \
                  copy of the release build in `target/bench-data/python/package`, which no later \
                  `maturin develop`, such as `cargo xtask test`'s debug one, can rewrite under \
                  it) makes four caches with `stowage.create(path, backend=..., schema={\"x\": \
                  (\"float32\", [512])})`, `memmap/`, `arrow/`, `npy/` and `hdf5/`, 131,072 rows \
                  each (256 MiB of row bytes per cache, 2.4x this machine's 105 MiB L3), then \
                  measures everything side by side. Maps warm: every key of every cache is read \
                  once through `get_batch` before timing (and through \
                  `CacheDataset.__getitems__`, whose own handle maps the files again), and the \
                  peers and the reference touch every page they map; nothing is dropped from the \
                  page cache, so no read goes to disk. Rows not in the CPU cache: keys come from \
                  shuffled epochs over all rows, and each measurement of a round reads keys of \
                  its own (the next ones of the epoch), so none finds rows or index entries that \
                  another one has just brought into the cache. Values read back through every API and every \
                  peer are compared with what was put before timing; checksums are on (the \
                  default). Every measurement runs in rounds that alternate it with the others, a \
                  different one first each round (the machine's 2 cores are \
                  shared: a neighbour's load strikes every side of a round alike); a rate is rows \
                  per round over the median round's seconds, the line under the table gives the \
                  totals. Targets: Python overhead per `get` at most 1 µs over the Rust `get` \
                  (`*_get_overhead`); `get_batch_into` at least 0.9x Rust `get_batch`; \
                  `CacheDataset.__getitems__` within 1.2x of `get_batch_into` (rate ratio >= \
                  0.83); at least 5x torchcachex's `get_batch`, 2x DNANet's per-row `np.memmap` \
                  copy, 10x PyTables' and h5py's per-entry reads and 2x hangar's slice + xxh64, \
                  stowage reading the same samples as checked numpy arrays (`get`, or `get_batch` \
                  against torchcachex's batch read). Rows marked diagnostic split the gaps: see \
                  Reading the python numbers below.",
    peer: Peer {
        script: "xtask/py/python_bench.py",
        packages: &["numpy", "pyarrow", "tables", "h5py", "xxhash", "stowage"],
        needs: &[],
        rates: &[
            PeerRate {
                name: "memmap_rust_get",
                key: "memmap_rust_get_rows_per_s",
                rows_at: "/rows/memmap_rust_get",
                seconds_at: "/seconds/memmap_rust_get",
                description: "Rust `Reader::get` of each key on the same open handle \
                              (`stowage._stowage._time_rust_gets`, its own clock, no Python in \
                              the loop), 1,024 keys per round",
            },
            PeerRate {
                name: "memmap_py_get",
                key: "memmap_py_get_rows_per_s",
                rows_at: "/rows/memmap_py_get",
                seconds_at: "/seconds/memmap_py_get",
                description: "a Python `for` loop of `cache.get(key)`, 1,024 keys per round: a \
                              dict with a read-only numpy array, checksum checked",
            },
            PeerRate {
                name: "dnanet_memmap_copy",
                key: "dnanet_memmap_copy_rows_per_s",
                rows_at: "/rows/dnanet_memmap_copy",
                seconds_at: "/seconds/dnanet_memmap_copy",
                description: "DNANet's read of rows of the same cache (keys mapped to rows through \
                              `index.parquet` before timing), `np.array(mm[row])` of the \
                              `np.memmap` of each field's `.bin` (xtask/py/memmap_peer.py's maps, \
                              pages touched), 1,024 keys in every get round",
            },
            PeerRate {
                name: "memmap_rust_get_batch",
                key: "memmap_rust_get_batch_rows_per_s",
                rows_at: "/rows/memmap_rust_get_batch",
                seconds_at: "/seconds/memmap_rust_get_batch",
                description: "Rust `get_batch` of each batch of 256 keys \
                              (`_time_rust_get_batches`, its own clock), 8 batches per round",
            },
            PeerRate {
                name: "memmap_rust_get_batch_call",
                key: "memmap_rust_get_batch_call_rows_per_s",
                rows_at: "/rows/memmap_rust_get_batch_call",
                seconds_at: "/seconds/memmap_rust_get_batch_call",
                description: "diagnostic: the same `_time_rust_get_batches` call timed from \
                              Python, so with the conversion of its 2,048 keys to Rust strings",
            },
            PeerRate {
                name: "memmap_py_get_batch_into",
                key: "memmap_py_get_batch_into_rows_per_s",
                rows_at: "/rows/memmap_py_get_batch_into",
                seconds_at: "/seconds/memmap_py_get_batch_into",
                description: "`cache.get_batch_into(keys, {\"x\": out})` of 8 batches of 256 keys into \
                              one preallocated float32 (256, 512) array, reused batch after batch",
            },
            PeerRate {
                name: "memmap_py_get_batch_into_new",
                key: "memmap_py_get_batch_into_new_rows_per_s",
                rows_at: "/rows/memmap_py_get_batch_into_new",
                seconds_at: "/seconds/memmap_py_get_batch_into_new",
                description: "diagnostic: `get_batch_into` of 8 batches of 256 keys into a new \
                              `np.empty((256, 512), np.float32)` each batch, as `__getitems__` \
                              does, without its Python code",
            },
            PeerRate {
                name: "memmap_py_getitems",
                key: "memmap_py_getitems_rows_per_s",
                rows_at: "/rows/memmap_py_getitems",
                seconds_at: "/seconds/memmap_py_getitems",
                description: "`stowage.torch.CacheDataset.__getitems__(indices)` of 8 batches \
                              of 256 indices (the DataLoader's call: a new stacked array per batch, \
                              filled by `get_batch_into`; each batch dropped before the next, as \
                              a training loop drops it)",
            },
            PeerRate {
                name: "memmap_py_get_batch",
                key: "memmap_py_get_batch_rows_per_s",
                rows_at: "/rows/memmap_py_get_batch",
                seconds_at: "/seconds/memmap_py_get_batch",
                description: "`cache.get_batch(keys)` of 8 batches of 256 keys (new stacked arrays, \
                              each batch dropped before the next)",
            },
            PeerRate {
                name: "reference_take_rows",
                key: "reference_take_rows_rows_per_s",
                rows_at: "/rows/reference_take_rows",
                seconds_at: "/seconds/reference_take_rows",
                description: "the physical reference: `np.take(mm, rows, axis=0, out=out)` of 8 \
                              batches of 256 rows from a `np.memmap` of memmap's `x.bin` into \
                              the same preallocated array (a raw copy of rows of the same file, \
                              nothing checked), in every memmap batch round",
            },
            PeerRate {
                name: "arrow_rust_get",
                key: "arrow_rust_get_rows_per_s",
                rows_at: "/rows/arrow_rust_get",
                seconds_at: "/seconds/arrow_rust_get",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_py_get",
                key: "arrow_py_get_rows_per_s",
                rows_at: "/rows/arrow_py_get",
                seconds_at: "/seconds/arrow_py_get",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_rust_get_batch",
                key: "arrow_rust_get_batch_rows_per_s",
                rows_at: "/rows/arrow_rust_get_batch",
                seconds_at: "/seconds/arrow_rust_get_batch",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_rust_get_batch_call",
                key: "arrow_rust_get_batch_call_rows_per_s",
                rows_at: "/rows/arrow_rust_get_batch_call",
                seconds_at: "/seconds/arrow_rust_get_batch_call",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_py_get_batch_into",
                key: "arrow_py_get_batch_into_rows_per_s",
                rows_at: "/rows/arrow_py_get_batch_into",
                seconds_at: "/seconds/arrow_py_get_batch_into",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_py_get_batch_into_new",
                key: "arrow_py_get_batch_into_new_rows_per_s",
                rows_at: "/rows/arrow_py_get_batch_into_new",
                seconds_at: "/seconds/arrow_py_get_batch_into_new",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_py_getitems",
                key: "arrow_py_getitems_rows_per_s",
                rows_at: "/rows/arrow_py_getitems",
                seconds_at: "/seconds/arrow_py_getitems",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "arrow_py_get_batch",
                key: "arrow_py_get_batch_rows_per_s",
                rows_at: "/rows/arrow_py_get_batch",
                seconds_at: "/seconds/arrow_py_get_batch",
                description: "the same on the arrow cache",
            },
            PeerRate {
                name: "torchcachex_get_batch",
                key: "torchcachex_get_batch_rows_per_s",
                rows_at: "/rows/torchcachex_get_batch",
                seconds_at: "/seconds/torchcachex_get_batch",
                description: "torchcachex's `get_batch` of one batch of 256 keys in every arrow \
                              batch round, on an LRU miss: xtask/py/torchcachex_peer.py's \
                              `ArrowIPCCacheBackend` over the same segments (index rebuilt from \
                              them before timing), grouped by segment, `pa.memory_map` + \
                              `ipc.open_file` + `read_all` + `take`, `to_numpy`, each sample \
                              rebuilt as a writable array",
            },
            PeerRate {
                name: "npy_rust_get",
                key: "npy_rust_get_rows_per_s",
                rows_at: "/rows/npy_rust_get",
                seconds_at: "/seconds/npy_rust_get",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_py_get",
                key: "npy_py_get_rows_per_s",
                rows_at: "/rows/npy_py_get",
                seconds_at: "/seconds/npy_py_get",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "hangar_slice_xxh64",
                key: "hangar_slice_xxh64_rows_per_s",
                rows_at: "/rows/hangar_slice_xxh64",
                seconds_at: "/seconds/hangar_slice_xxh64",
                description: "hangar's read of keys of the same cache, given their NUMPY_10 records (from \
                              `records.log`), `np.ascontiguousarray(mm[idx, :512])` and \
                              `xxhash.xxh64_hexdigest(a.tobytes())` compared, maps of \
                              xtask/py/numpy10_peer.py (pages touched), 1,024 keys in every get \
                              round",
            },
            PeerRate {
                name: "npy_rust_get_batch",
                key: "npy_rust_get_batch_rows_per_s",
                rows_at: "/rows/npy_rust_get_batch",
                seconds_at: "/seconds/npy_rust_get_batch",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_rust_get_batch_call",
                key: "npy_rust_get_batch_call_rows_per_s",
                rows_at: "/rows/npy_rust_get_batch_call",
                seconds_at: "/seconds/npy_rust_get_batch_call",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_py_get_batch_into",
                key: "npy_py_get_batch_into_rows_per_s",
                rows_at: "/rows/npy_py_get_batch_into",
                seconds_at: "/seconds/npy_py_get_batch_into",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_py_get_batch_into_new",
                key: "npy_py_get_batch_into_new_rows_per_s",
                rows_at: "/rows/npy_py_get_batch_into_new",
                seconds_at: "/seconds/npy_py_get_batch_into_new",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_py_getitems",
                key: "npy_py_getitems_rows_per_s",
                rows_at: "/rows/npy_py_getitems",
                seconds_at: "/seconds/npy_py_getitems",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "npy_py_get_batch",
                key: "npy_py_get_batch_rows_per_s",
                rows_at: "/rows/npy_py_get_batch",
                seconds_at: "/seconds/npy_py_get_batch",
                description: "the same on the npy cache",
            },
            PeerRate {
                name: "hdf5_rust_get",
                key: "hdf5_rust_get_rows_per_s",
                rows_at: "/rows/hdf5_rust_get",
                seconds_at: "/seconds/hdf5_rust_get",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_py_get",
                key: "hdf5_py_get_rows_per_s",
                rows_at: "/rows/hdf5_py_get",
                seconds_at: "/seconds/hdf5_py_get",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "pytables_per_entry",
                key: "pytables_per_entry_rows_per_s",
                rows_at: "/rows/pytables_per_entry",
                seconds_at: "/seconds/pytables_per_entry",
                description: "aenet's read path on the same segment files through PyTables (its \
                              library): the key's index row (`cache_row`), its shapes row, then \
                              its VLEN values row reshaped; 128 keys in every get round, key to \
                              (segment, row) mapped before timing",
            },
            PeerRate {
                name: "h5py_per_entry",
                key: "h5py_per_entry_rows_per_s",
                rows_at: "/rows/h5py_per_entry",
                seconds_at: "/seconds/h5py_per_entry",
                description: "the same per-entry read through h5py",
            },
            PeerRate {
                name: "hdf5_rust_get_batch",
                key: "hdf5_rust_get_batch_rows_per_s",
                rows_at: "/rows/hdf5_rust_get_batch",
                seconds_at: "/seconds/hdf5_rust_get_batch",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_rust_get_batch_call",
                key: "hdf5_rust_get_batch_call_rows_per_s",
                rows_at: "/rows/hdf5_rust_get_batch_call",
                seconds_at: "/seconds/hdf5_rust_get_batch_call",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_py_get_batch_into",
                key: "hdf5_py_get_batch_into_rows_per_s",
                rows_at: "/rows/hdf5_py_get_batch_into",
                seconds_at: "/seconds/hdf5_py_get_batch_into",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_py_get_batch_into_new",
                key: "hdf5_py_get_batch_into_new_rows_per_s",
                rows_at: "/rows/hdf5_py_get_batch_into_new",
                seconds_at: "/seconds/hdf5_py_get_batch_into_new",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_py_getitems",
                key: "hdf5_py_getitems_rows_per_s",
                rows_at: "/rows/hdf5_py_getitems",
                seconds_at: "/seconds/hdf5_py_getitems",
                description: "the same on the hdf5 cache",
            },
            PeerRate {
                name: "hdf5_py_get_batch",
                key: "hdf5_py_get_batch_rows_per_s",
                rows_at: "/rows/hdf5_py_get_batch",
                seconds_at: "/seconds/hdf5_py_get_batch",
                description: "the same on the hdf5 cache",
            },
        ],
    },
    levels: &[
        Level {
            name: "memmap_get_overhead",
            description: "Python overhead per `get`: the median over get rounds of \
                          (`memmap_py_get` seconds - `memmap_rust_get` seconds) / 1,024 keys, \
                          wall clock",
        },
        Level {
            name: "memmap_get_overhead_cpu",
            description: "diagnostic: the same difference in the thread's CPU time \
                          (`time.thread_time()` around both; what the time this thread waited for \
                          one of the shared cores does not inflate)",
        },
        Level {
            name: "memmap_key_conversion",
            description: "diagnostic: per key, the `_time_rust_gets` call's wall time minus its \
                          own clock: converting the Python `str` key to a Rust string (part of \
                          every `get`'s overhead)",
        },
        Level { name: "arrow_get_overhead", description: "the same on the arrow cache" },
        Level { name: "arrow_get_overhead_cpu", description: "the same on the arrow cache" },
        Level { name: "arrow_key_conversion", description: "the same on the arrow cache" },
        Level { name: "npy_get_overhead", description: "the same on the npy cache" },
        Level { name: "npy_get_overhead_cpu", description: "the same on the npy cache" },
        Level { name: "npy_key_conversion", description: "the same on the npy cache" },
        Level { name: "hdf5_get_overhead", description: "the same on the hdf5 cache" },
        Level { name: "hdf5_get_overhead_cpu", description: "the same on the hdf5 cache" },
        Level { name: "hdf5_key_conversion", description: "the same on the hdf5 cache" },
    ],
    targets: &[
        at_most("memmap_get_overhead", 1.0),
        at_least("memmap_py_get_batch_into", "memmap_rust_get_batch", 0.90),
        // Within 1.2x of get_batch_into: rates at least 1 / 1.2 apart.
        at_least("memmap_py_getitems", "memmap_py_get_batch_into", 1.0 / 1.2),
        report("memmap_py_get", "memmap_rust_get"),
        report("memmap_py_get_batch_into", "memmap_rust_get_batch_call"),
        report("memmap_py_getitems", "memmap_py_get_batch_into_new"),
        report("memmap_py_get_batch_into", "reference_take_rows"),
        at_most("arrow_get_overhead", 1.0),
        at_least("arrow_py_get_batch_into", "arrow_rust_get_batch", 0.90),
        // Within 1.2x of get_batch_into: rates at least 1 / 1.2 apart.
        at_least("arrow_py_getitems", "arrow_py_get_batch_into", 1.0 / 1.2),
        report("arrow_py_get", "arrow_rust_get"),
        report("arrow_py_get_batch_into", "arrow_rust_get_batch_call"),
        report("arrow_py_getitems", "arrow_py_get_batch_into_new"),
        report("arrow_py_get_batch_into", "reference_take_rows"),
        at_most("npy_get_overhead", 1.0),
        at_least("npy_py_get_batch_into", "npy_rust_get_batch", 0.90),
        // Within 1.2x of get_batch_into: rates at least 1 / 1.2 apart.
        at_least("npy_py_getitems", "npy_py_get_batch_into", 1.0 / 1.2),
        report("npy_py_get", "npy_rust_get"),
        report("npy_py_get_batch_into", "npy_rust_get_batch_call"),
        report("npy_py_getitems", "npy_py_get_batch_into_new"),
        report("npy_py_get_batch_into", "reference_take_rows"),
        at_most("hdf5_get_overhead", 1.0),
        at_least("hdf5_py_get_batch_into", "hdf5_rust_get_batch", 0.90),
        // Within 1.2x of get_batch_into: rates at least 1 / 1.2 apart.
        at_least("hdf5_py_getitems", "hdf5_py_get_batch_into", 1.0 / 1.2),
        report("hdf5_py_get", "hdf5_rust_get"),
        report("hdf5_py_get_batch_into", "hdf5_rust_get_batch_call"),
        report("hdf5_py_getitems", "hdf5_py_get_batch_into_new"),
        report("hdf5_py_get_batch_into", "reference_take_rows"),
        at_least("arrow_py_get_batch", "torchcachex_get_batch", 5.0),
        at_least("memmap_py_get", "dnanet_memmap_copy", 2.0),
        at_least("hdf5_py_get", "pytables_per_entry", 10.0),
        at_least("hdf5_py_get", "h5py_per_entry", 10.0),
        at_least("npy_py_get", "hangar_slice_xxh64", 2.0),
    ],
    s3_server: false,
    owns_unnamed_markers: false,
    runner: Runner::PythonPackage,
};

/// Every suite, in the order `cargo xtask bench` runs them and their sections appear.
pub const SUITES: &[Suite] = &[NUMPY10, MEMMAP, ARROW, HDF5, REMOTE, PYTHON];

/// The suite called `name`, or an error listing the known names.
pub fn find(name: &str) -> Result<&'static Suite, String> {
    SUITES
        .iter()
        .find(|suite| suite.name == name)
        .ok_or_else(|| format!("unknown suite `{name}`; the suites are {}", names()))
}

/// The names of the suites, in order, for messages: `numpy10, memmap, arrow, hdf5, remote`.
pub fn names() -> String {
    SUITES.iter().map(|suite| suite.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target naming a rate no benchmark or peer reports would always show `missing`.
    #[test]
    fn every_target_names_a_rate_of_its_suite() {
        for suite in SUITES {
            let rates: Vec<&str> = suite
                .benchmark_ids
                .iter()
                .copied()
                .chain(suite.peer.rates.iter().map(|rate| rate.name))
                .chain(suite.levels.iter().map(|level| level.name))
                .collect();
            for target in suite.targets {
                for name in target.names() {
                    assert!(
                        rates.contains(&name),
                        "{}: target names unknown rate {name}",
                        suite.name
                    );
                }
            }
        }
    }

    /// Two rows of one name would make the table's ratios ambiguous; two suites of one name, the
    /// section markers.
    #[test]
    fn names_are_unique() {
        let mut suites: Vec<&str> = SUITES.iter().map(|suite| suite.name).collect();
        suites.sort_unstable();
        suites.dedup();
        assert_eq!(suites.len(), SUITES.len());
        for suite in SUITES {
            let mut rates: Vec<&str> = suite.benchmark_ids.to_vec();
            rates.extend(suite.peer.rates.iter().map(|rate| rate.name));
            rates.extend(suite.levels.iter().map(|level| level.name));
            let count = rates.len();
            rates.sort_unstable();
            rates.dedup();
            assert_eq!(rates.len(), count, "{}", suite.name);
        }
    }

    /// The peer scripts ship with xtask; a typo would only show when the benchmark has run.
    #[test]
    fn every_peer_script_exists_and_one_suite_owns_the_unnamed_markers() {
        for suite in SUITES {
            assert!(crate::workspace_root().join(suite.peer.script).is_file(), "{}", suite.name);
            for rate in suite.peer.rates {
                assert!(rate.key.starts_with(rate.name), "{}", rate.key);
                assert!(rate.rows_at.starts_with('/') && rate.seconds_at.starts_with('/'));
            }
        }
        assert_eq!(SUITES.iter().filter(|suite| suite.owns_unnamed_markers).count(), 1);
    }

    /// `--suite` names and report-only ratios.
    #[test]
    fn suites_are_found_by_name_and_report_only_ratios_are_not_goals() {
        assert_eq!(find("memmap").unwrap().package, "stowage-memmap");
        assert_eq!(find("numpy10").unwrap().bench_target, "numpy10");
        assert_eq!(find("hdf5").unwrap().package, "stowage-hdf5");
        assert_eq!(
            find("zarr").unwrap_err(),
            "unknown suite `zarr`; the suites are numpy10, memmap, arrow, hdf5, remote, python"
        );
        assert_eq!(find("remote").unwrap().package, "stowage-remote");
        assert!(REMOTE.s3_server && SUITES.iter().filter(|suite| suite.s3_server).count() == 1);
        assert_eq!(REMOTE.goal_count(), 5);
        assert_eq!(NUMPY10.goal_count(), 6);
        assert_eq!(MEMMAP.goal_count(), 9);
        assert_eq!(MEMMAP.targets.len(), 14);
        assert_eq!(ARROW.goal_count(), 7);
        assert_eq!(PYTHON.goal_count(), 17);
        let python: Vec<&Suite> =
            SUITES.iter().filter(|suite| suite.runner == Runner::PythonPackage).collect();
        assert_eq!(python.len(), 1);
        assert!(python[0].benchmark_ids.is_empty() && python[0].peer.needs.is_empty());
        assert!(crate::workspace_root().join(python[0].bench_source).is_file());
    }

    /// numpy10's data stays where it always was; memmap's goes to its own subdirectory.
    #[test]
    fn bench_data_is_the_root_or_a_subdirectory() {
        let root = Path::new("target/bench-data");
        assert_eq!(NUMPY10.bench_data(root).display().to_string(), "target/bench-data");
        assert_eq!(MEMMAP.bench_data(root).display().to_string(), "target/bench-data/memmap");
    }
}
