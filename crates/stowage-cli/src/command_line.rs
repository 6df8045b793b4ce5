//! The command line: the subcommands and their arguments (clap), the help texts, and clap's
//! errors folded into one line. The registered formats and backends are filled in at run time
//! ([`command`]), so a `stowage` built with a third party's backend lists it too.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{ArgGroup, Args, CommandFactory, Parser, Subcommand};
use stowage_core::Registry;

use crate::bench;

const EXIT_STATUS: &str = "\
Exit status:
  0  success (explain: the cache is valid for the config and sources)
  1  verify found problems; convert --verify found mismatches; explain: the cache is stale;
     bench: a backend failed to write, verify or read its workload
  2  error: bad arguments, a path that cannot be read or is not a cache, a missing key,
     corrupted data that get refuses to return, a field convert cannot translate
  3  cannot tell: explain: the format records no fingerprint; verify: no problem found, but
     the cache holds data another writer added that stowage's checksums do not cover";

const MAIN_EXAMPLES: &str = "\
Examples:
  stowage inspect ./cache
  stowage verify ./cache
  stowage adopt ./cache
  stowage keys ./cache | head
  stowage get ./cache sample-0 --out ./sample-0
  stowage get ./hangar-repo --record '10:4ujrcb35:fd40def8890c87db:3:10 10' --out fx013.npy
  stowage convert ./torchcachex-cache ./memmap --to memmap --verify
  stowage bench --backends arrow,memmap
  stowage explain ./cache --config config.json --sources '/data/*.hid'";

/// The parsed command line. Its help lists the registered formats and `--to` takes the
/// registered backends' names: both are filled in from the registry ([`command`]).
#[derive(Debug, Parser)]
#[command(
    name = "stowage",
    version,
    about = "Inspect, verify, list, extract, convert and explain ML sample caches"
)]
pub struct Cli {
    /// The subcommand and its arguments.
    #[command(subcommand)]
    pub command: Command,
}

const INSPECT_HELP: &str = "\
Examples:
  stowage inspect ./cache
  stowage inspect ./cache_root        (every memmap cache in it)

Prints the cache's format and version, whether it is finalized, the number of keys, the schema
(each field's name, dtype and shape rule), the size of every file and the total, and the result
of a structure check: clean, or N problems. For a bare hangar data directory it lists each
collection file with its dtype, shape, marker state (committed, staged, unmarked) and size.
Exits 0 whenever the cache could be read, even when it has problems: judging is verify's job.

For a memmap row cache (stowage's or DNANet's) it prints what DNANet's own inspection tool
prints (complete marker, rows, file sizes in MB, index columns and their string RAM, sidecar
sizes, projected in-memory realization), then stowage's lines: other files, an unfinished
cache's committed rows and torn tail, and the integrity check. For a directory of memmap
caches it reports each key directory. When a file cannot be read, the report is printed and
the command fails with one line naming the file.";

const VERIFY_HELP: &str = "\
Example:
  stowage verify ./cache && echo intact

Opens the cache read-only, checks its structure and recomputes every sample's checksum. Prints
each problem on its own line (file: key: detail), then each file holding data that another
writer (the original tool) added and stowage's checksums do not cover, with what to do next,
then a summary line:
  N samples, M files checked: clean                           (exit 0)
  N samples, M files checked: K problems                      (exit 1)
  N samples, M files checked: no problem, U samples unchecked (exit 3)
A cache that cannot be opened at all is an error (exit 2) naming the file. For a bare hangar
data directory it checks each collection file's header and size, and that every marker has
its data file (without records there are no checksums to check).";

const COMPACT_HELP: &str = "\
Example:
  stowage compact ./cache; stowage compact ./cache --below 1GiB

Every flush of an Arrow cache commits a segment, so a cache written in small flushes holds many
small segments (4,883 at 10 million keys with the default flushes): gets then reopen segments
beyond the bounded set kept open, and a cold get reads a whole small segment. compact takes the
writer lock and rewrites every stowage segment smaller than --below (at least two) into segments
of up to 256 MiB, keeping each key's winning row and dropping shadowed ones; the key index is
merged again. Readers in other processes go on reading: replaced segments' files stay until the
next compaction deletes them. Segments torchcachex added are never rewritten. Other kinds of
cache are refused (exit 2).";

const ADOPT_HELP: &str = "\
Example:
  stowage verify ./cache; stowage adopt ./cache && stowage verify ./cache

The original tools go on writing caches stowage wrote: torchcachex appends segments, DNANet
resumes and finalizes, aenet appends rows. stowage reads that data, but its checksums do not
cover it, so verify lists it as unchecked (exit 3). adopt takes the cache's writer lock and
computes those checksums from the bytes as they are now, in stowage's own files; the other
writer's files are not changed. Prints what it adopted, or that there was nothing to adopt.
A cache torchcachex or DNANet wrote alone is adopted whole: stowage's files (commit log,
checksums) start beside the original tool's, which still reads the cache. hangar's collection
files cannot be adopted (their records are in hangar's database): read them with
`stowage get DIR --record REC`.";

const KEYS_HELP: &str = "\
Example:
  stowage keys ./cache > keys.txt

Keys are printed in the order they were first stored. A key is printed as it is, unless it
contains a control character (newline, tab, escape...) or starts with a double quote: then it
is printed escaped and quoted as Rust's {:?} prints a string (\"line\\nbreak\"). So every key
is exactly one line, and a line starting with \" is always an escaped key.";

const GET_HELP: &str = "\
Examples:
  stowage get ./cache sample-0 --out ./sample-0
  stowage get --out ./odd ./cache -- -key-starting-with-a-dash
  stowage get ./hangar-repo --record '10:4ujrcb35:fd40def8890c87db:3:10 10' --out fx013.npy

With KEY, creates DIR if needed and writes each field of the sample:
  tensor fields  DIR/FIELD.npy   numpy format 1.0, C order, the tensor's own shape
                                 (bfloat16, which numpy lacks, as <u2, with a note)
  bytes fields   DIR/FIELD.bin
  JSON fields    DIR/FIELD.json
  null fields    skipped, with a note
Files already there are replaced. A field name that is not a safe file name (empty, . or ..,
a path separator or a control character) is refused, and then nothing is written.

With --record, reads the sample a NUMPY_10 record string addresses in PATH/data/10/UID.npy
(PATH is a hangar data directory, or a stowage NUMPY_10 cache), verifies its xxh64 checksum
and writes it to FILE.npy. A corrupted sample is an error naming the file, the record and both
digests, and nothing is written.";

const CONVERT_HELP: &str = "\
Examples:
  stowage convert ./torchcachex-cache ./as-memmap --to memmap --verify
  stowage convert ./dataset.h5 ./features --to arrow

Reads every key of SRC in its order and puts it into DST, a new cache of the chosen backend,
flushing every --flush-every samples, then finalizes DST and prints the number of samples and
the throughput. The schema is translated: a field DST's backend cannot hold as SRC declares it
(ragged shapes into memmap, nulls into NUMPY_10) is narrowed to what SRC really holds (one
fixed shape, a maximum shape, no nulls), found by reading SRC once; a field that still does not
fit is refused, naming it and the reason, before anything is written.

Interrupted (even by kill -9, at any point)? Run the same command again: DST records the source
it is converted from (.stowage.convert.json), so it is opened for appending, the keys it has
committed are skipped, it is finalized, and the result is the same as an uninterrupted run.
Another source into the same DST is refused unless --merge is given: then DST's samples win
for the keys it already holds, and the run says how many of those differ from SRC's.
SRC and DST may be URLs (s3://bucket/cache) of a scheme a registered backend serves; --to must
name a backend serving DST's scheme, and nothing is created on the local file system. A DST at
a URL keeps no record of its source: run again, it is resumed from whatever keys it holds.
With STOWAGE_PHASE_TRACE=FILE, each step's start (create, copy, flush, finalize) is appended
to FILE, for the crash campaign that kills convert inside each step.
--verify then reads every sample back from DST and compares its digest with SRC's, listing each
key that differs.";

const BENCH_HELP: &str = "\
Examples:
  stowage bench
  stowage bench --rows 20000 --shape 64,64 --dtype uint8 --backends arrow,npy
  stowage bench --workload flat --workload dnanet --workload aenet --peers --format markdown

Writes the same generated samples into a new cache of every backend (a durable flush every
2,048 samples, then finalize), checks each cache (validate at full level, then every sample
read back equal) and only then times it: write rate, open time, random get rate with p50/p99
latency with and without checksum checks, batched get rate, bytes on disk per sample and the
peak resident memory of the run. Beside them, the physical references on the same bytes in the
same run: writing them to one file with an fdatasync every 2,048 samples, and copying them out
of a warm memory map in the read order; each backend figure also shows as a fraction of its
reference. Reads walk one shuffled epoch over the samples (at most 200,000), the same order for
every backend, reference and peer. A backend that cannot hold a workload's schema is listed
with the reason, not measured. --peers runs each original tool's read path in Python on the
same files (hangar's slice + xxh64, DNANet's np.memmap rows, torchcachex's pyarrow get_batch,
h5py slices of whole segments). Progress goes to stderr, the report to stdout. Exits 1 when a
backend failed to write, verify or read its workload.

--scale measures how each backend grows instead (stowage bench --scale --sizes 100k,1m): at
each size, a cache of that many float32[4] keys per backend, written with a durable flush
every 2,048 rows, resumed, finalized and opened: open time and the memory it adds (read-only
and resumed), first get, write rate, random gets warm and cold (page cache dropped) one at a
time and in batches of 1,024, bytes per key, beside the raw copy out of a warm map of the same
rows and cold 4 KiB preads of the cache's files at queue depth 1 and 32, then issue 17's
targets as PASS or FAIL. It first writes a 20,000-key probe cache per backend and refuses to
start when the largest cache (x1.5) and --keep-free GB do not fit on the disk. The full run
(100k,1m,10m for every backend, 100m for memmap and arrow) needs about 19 GB beside
--keep-free (arrow at 100m: about 125 bytes per key, x1.5). Exits 1 when a backend failed at
some size.";

const EXPLAIN_HELP: &str = "\
Examples:
  stowage explain ./cache_root/aed9b48500e9acfd --config config.json --sources '/srv/hid/rnd/*.hid'
  stowage explain ./dataset.h5 --config descriptor.json

Memmap row caches (DNANet's and stowage's) record fingerprint.json: the config and a stamp of
every source file. The files matching --sources are stamped the same way (modification time and
size, or content hash) and both are compared: each config field that differs (stored -> current)
and each source added, removed or changed is listed. aenet torch caches record the descriptor
settings they depend on (descriptor_compat_json): the config's species, orders and cutoffs are
compared with them field by field. The other formats record no fingerprint: explain says so and
exits 3.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what kind of cache PATH is: format, state, keys, schema, files and sizes, checksums,
    /// dedup, memory, integrity; for a directory, every cache below it
    #[command(after_help = format!("{INSPECT_HELP}\n\n{EXIT_STATUS}"))]
    Inspect {
        /// The cache's path or URL (a directory, an aenet HDF5 file, or a URL a registered
        /// backend serves), or a directory holding caches
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,

        /// Print the same as one JSON document (an array when PATH holds several caches)
        #[arg(long)]
        json: bool,
    },

    /// Check the structure and every sample checksum (or a seeded sample); list each problem
    #[command(after_help = format!("{VERIFY_HELP}\n\n{EXIT_STATUS}"))]
    Verify {
        /// The cache's path or URL (a directory, an aenet HDF5 file, or a URL a registered
        /// backend serves)
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,

        /// Check only this fraction of the keys' samples, chosen by a seeded hash (0 < F <= 1);
        /// the structure is always checked whole
        #[arg(long, value_name = "FRACTION", value_parser = parse_fraction)]
        sample: Option<f64>,

        /// Seed of --sample: the same seed checks the same keys
        #[arg(long, value_name = "N", default_value_t = 0)]
        seed: u64,

        /// Threads checking files at once (default: the available cores); the output is the
        /// same for any number
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
        jobs: Option<u32>,
    },

    /// Checksum the data another writer (the original tool) added, so verify checks it
    #[command(after_help = format!("{ADOPT_HELP}\n\n{EXIT_STATUS}"))]
    Adopt {
        /// The cache's path (a directory, or an aenet HDF5 file; a cache at a URL has no other
        /// writer's files to adopt)
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,
    },

    /// Rewrite a stowage Arrow cache's small segments into few large ones
    #[command(after_help = format!("{COMPACT_HELP}\n\n{EXIT_STATUS}"))]
    Compact {
        /// The stowage Arrow cache's path (a local directory: a URL is refused)
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,

        /// Rewrite the segments smaller than this (bytes, or with KiB, MiB, GiB)
        #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
        below: u64,
    },

    /// Print every key, one per line
    #[command(after_help = format!("{KEYS_HELP}\n\n{EXIT_STATUS}"))]
    Keys {
        /// The cache's path or URL (a URL a registered backend serves)
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,
    },

    /// Write one sample as .npy files (by key from a cache, or by NUMPY_10 record)
    Get(GetArgs),

    /// Copy every sample of a cache into a new cache of another backend (resumable)
    #[command(after_help = format!("{CONVERT_HELP}\n\n{EXIT_STATUS}"))]
    Convert {
        /// The cache to read: its path or URL (any kind with keys)
        #[arg(value_parser = parse_cache_path)]
        src: PathBuf,

        /// The cache to write, by path or URL: a new or empty directory, or one an interrupted
        /// convert left; a URL of a scheme the --to backend serves
        #[arg(value_parser = parse_cache_path)]
        dst: PathBuf,

        /// The backend to write: a registered backend's name
        #[arg(long, value_name = "NAME")]
        to: String,

        /// Read every converted sample back and compare its digest with the source's
        #[arg(long)]
        verify: bool,

        /// Add SRC's keys to a DST converted from another source (or written by another
        /// program); DST's samples win for the keys it already holds
        #[arg(long)]
        merge: bool,

        /// Samples between two durable flushes (what an interruption can lose)
        #[arg(long, value_name = "N", default_value_t = 1024,
              value_parser = clap::value_parser!(u32).range(1..))]
        flush_every: u32,
    },

    /// Write the same generated workload into every backend, verify it, and measure it beside
    /// the machine's physical limits
    #[command(after_help = format!("{BENCH_HELP}\n\n{EXIT_STATUS}"))]
    Bench(BenchArgs),

    /// Tell whether a cache is valid for a configuration and source files, and what differs
    #[command(after_help = format!("{EXPLAIN_HELP}\n\n{EXIT_STATUS}"))]
    Explain {
        /// The cache's path or URL (a directory, an aenet HDF5 file, or a URL a registered
        /// backend serves)
        #[arg(value_parser = parse_cache_path)]
        path: PathBuf,

        /// The configuration, a JSON file: the config payload DNANet fingerprints, or aenet's
        /// descriptor settings
        #[arg(long, value_name = "FILE")]
        config: PathBuf,

        /// The source files, as a glob (`*` and `?` in a name, `**` for any directories)
        #[arg(long, value_name = "GLOB")]
        sources: Option<String>,

        /// Where relative source paths of a content-hash fingerprint start (default: the glob's
        /// directory before its first wildcard)
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
}

/// Arguments of `stowage bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Samples per workload (default: 100,000 flat, 5,000 DNANet rows, 10,000 aenet entries)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub rows: Option<u64>,

    /// The flat workload's tensor shape, dimensions separated by commas
    #[arg(long, value_name = "D,D,...", default_value = "512", value_delimiter = ',')]
    pub shape: Vec<usize>,

    /// The flat workload's element type (float32, int16, uint8, bfloat16, ...)
    #[arg(long, value_name = "NAME", default_value = "float32", value_parser = parse_dtype)]
    pub dtype: stowage_core::DType,

    /// Which workloads: flat (one tensor of --dtype and --shape), dnanet (DNANet's rows),
    /// aenet (ragged atoms x 64 float64); repeatable (default: flat)
    #[arg(long, value_enum)]
    pub workload: Vec<WorkloadName>,

    /// The backends, separated by commas (default: npy,memmap,arrow,hdf5)
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_backend)]
    pub backends: Vec<bench::subject::Kind>,

    /// Also run each original tool's read path in Python on the same files (python3 with numpy,
    /// xxhash, pyarrow, h5py); a peer that cannot run is reported, not fatal
    #[arg(long)]
    pub peers: bool,

    /// The output: an aligned table, markdown tables, or JSON
    #[arg(long, value_enum, default_value = "table")]
    pub format: BenchFormat,

    /// Where the caches are written, a local directory (default: a new directory in the
    /// system's temporary directory, removed afterwards)
    #[arg(long, value_name = "DIR", value_parser = parse_output_path)]
    pub dir: Option<PathBuf>,

    /// Keep the caches after measuring them
    #[arg(long)]
    pub keep: bool,

    /// The scale mode: every backend at each of --sizes keys of a 16-byte row (float32[4]):
    /// open time and memory, first get, write rate, random gets warm and cold beside the
    /// physical references, bytes per key, and issue 17's targets as PASS or FAIL
    #[arg(long, conflicts_with_all = ["rows", "shape", "dtype", "workload", "peers"])]
    pub scale: bool,

    /// With --scale: the key counts, separated by commas (default: 100k,1m,10m,100m; above
    /// 10m only memmap and arrow run)
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "scale",
          value_parser = bench::scale::parse_size)]
    pub sizes: Vec<usize>,

    /// With --scale: GB the disk must still have free after the largest cache; the run refuses
    /// to start otherwise
    #[arg(long, value_name = "GB", default_value_t = 15, requires = "scale")]
    pub keep_free: u64,

    /// With --scale: before each cold measurement also drop the whole machine's page cache
    /// (`echo 3 > /proc/sys/vm/drop_caches`, root only), not only the cache's own files'
    #[arg(long, requires = "scale")]
    pub drop_caches: bool,
}

/// A workload of `stowage bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadName {
    Flat,
    Dnanet,
    Aenet,
}

/// How `stowage bench` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchFormat {
    Table,
    Markdown,
    Json,
}

/// Arguments of `stowage get`.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("sample").required(true).args(["key", "record"])),
    override_usage = "stowage get PATH KEY --out DIR\n       stowage get PATH --record RECORD --out FILE.npy",
    after_help = format!("{GET_HELP}\n\n{EXIT_STATUS}"),
)]
pub struct GetArgs {
    /// The cache's path or URL (with KEY), or a local directory holding data/10/UID.npy (with
    /// --record)
    #[arg(value_parser = parse_cache_path)]
    pub path: PathBuf,

    /// The key of the sample to write
    pub key: Option<String>,

    /// A NUMPY_10 record string, 10:UID:XXH64:SLOT:SHAPE, instead of a key
    #[arg(long, value_name = "RECORD", conflicts_with = "key")]
    pub record: Option<String>,

    /// Where to write: a local directory (with KEY) or the .npy file (with --record)
    #[arg(long, short, value_name = "DIR|FILE.npy", value_parser = parse_output_path)]
    pub out: PathBuf,
}

/// The command line of a `stowage` reading `registry`'s formats: the main help lists them, and
/// `convert --to` takes exactly the registered backends' names.
pub fn command(registry: &Registry) -> clap::Command {
    let formats: Vec<String> = registry
        .formats()
        .map(|format| format!("  {} ({}): {}", format.description, format.id, format.signature))
        .collect();
    let main_help = format!(
        "{MAIN_EXAMPLES}\n\nCaches it reads, each recognized by:\n{}\n  {} ({}): {} (inspect \
         walks them)\n\n{}\n\n{EXIT_STATUS}",
        formats.join("\n"),
        crate::locate::DIRECTORY.description,
        crate::locate::DIRECTORY.id,
        crate::locate::DIRECTORY.signature,
        urls_help(registry)
    );
    let names = crate::convert::target_names(registry);
    Cli::command().after_help(main_help).mut_subcommand("convert", |convert| {
        convert.mut_arg("to", |to| to.value_parser(PossibleValuesParser::new(names)))
    })
}

/// Which URLs a cache argument takes: each registered backend serving URL schemes, with its
/// schemes; or that none does, so every cache is a local path.
fn urls_help(registry: &Registry) -> String {
    let serving: Vec<String> = registry
        .factories()
        .filter(|factory| !factory.url_schemes().is_empty())
        .map(|factory| {
            let schemes: Vec<String> =
                factory.url_schemes().iter().map(|s| format!("{s}://")).collect();
            format!("  {}: {}", factory.name(), schemes.join(", "))
        })
        .collect();
    if serving.is_empty() {
        "Caches at URLs: none (no registered backend serves a URL scheme): every cache is a local \
         path"
            .to_owned()
    } else {
        format!(
            "Caches at URLs (a cache argument takes a URL of these schemes; adopt and compact \
             take local paths only):\n{}",
            serving.join("\n")
        )
    }
}

pub fn parse_dtype(text: &str) -> Result<stowage_core::DType, String> {
    stowage_core::DType::from_name(text).map_err(|e| e.to_string())
}

pub fn parse_backend(text: &str) -> Result<bench::subject::Kind, String> {
    bench::subject::Kind::from_name(text)
}

/// The cores this process may use (1 when the system does not say).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A cache's path or URL, as given. Whether a URL's scheme is served is known only to the
/// registry, which every command asks before it touches anything
/// ([`stowage_core::Registry::recognize`], [`stowage_core::location::check_served`]).
pub fn parse_cache_path(text: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(text))
}

/// A local path the command writes files into (`get --out`, `bench --dir`): a URL is refused,
/// since `s3://bucket/x` would otherwise create the local directory `s3:`.
pub fn parse_output_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    match stowage_core::location::url_scheme(&path) {
        None => Ok(path),
        Some(scheme) => Err(format!(
            "{text} is a URL ({scheme}://): this writes local files, so give a local path (for \
             a local path that looks like a URL, write it as ./{text})"
        )),
    }
}

/// A fraction in (0, 1], for `--sample`.
pub fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        Ok(f) => Err(format!("{f} is not in (0, 1]: give the fraction of keys to check, as 0.1")),
        Err(e) => Err(format!("{text:?} is not a number ({e})")),
    }
}

/// A byte count: digits, optionally followed by `KiB`, `MiB` or `GiB` (`64MiB`, `1GiB`, `4096`).
///
/// Errors: anything else, or a count that overflows.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, factor) = [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)]
        .into_iter()
        .find_map(|(unit, factor)| trimmed.strip_suffix(unit).map(|d| (d.trim(), factor)))
        .unwrap_or((trimmed, 1));
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size: give bytes, or e.g. 512KiB, 64MiB, 1GiB"))?;
    number.checked_mul(factor).ok_or_else(|| format!("{text:?} is too large"))
}

/// clap's multi-line error text as one line: the message, its continuation lines (such as the
/// missing argument names) and any tip, then the usage.
pub fn clap_error_line(text: &str) -> String {
    let mut message = Vec::new();
    let mut usage: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage:") {
            usage.push(u.trim());
        } else if line.starts_with("For more information") {
            break;
        } else if !usage.is_empty() {
            usage.push(line); // a second usage form
        } else if let Some(tip) = line.strip_prefix("tip:") {
            message.push(format!("(tip: {})", tip.trim()));
        } else {
            message.push(line.strip_prefix("error:").unwrap_or(line).trim().to_owned());
        }
    }
    let mut line = message.join(" ");
    if !usage.is_empty() {
        line.push_str(&format!(" (usage: {}; see --help)", usage.join(" | ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let text = "error: the following required arguments were not provided:\n  <PATH>\n\n\
                    Usage: stowage inspect <PATH>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_error_line(text),
            "the following required arguments were not provided: <PATH> (usage: stowage inspect \
             <PATH>; see --help)"
        );
        let two_forms = "error: the following required arguments were not provided:\n  --out <DIR>\n\n\
                         Usage: stowage get PATH KEY --out DIR\n       stowage get PATH --record R\n\n\
                         For more information, try '--help'.\n";
        assert_eq!(
            clap_error_line(two_forms),
            "the following required arguments were not provided: --out <DIR> (usage: stowage get \
             PATH KEY --out DIR | stowage get PATH --record R; see --help)"
        );
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        command(&crate::default_registry()).debug_assert();
    }

    #[test]
    fn the_help_lists_the_registered_formats_and_backends() {
        let registry = crate::default_registry();
        let help = command(&registry).render_long_help().to_string();
        for format in registry.formats() {
            assert!(help.contains(format.description), "{help}");
        }
        let mut convert = command(&registry);
        let convert = convert.find_subcommand_mut("convert").unwrap();
        let help = convert.render_long_help().to_string();
        assert!(help.contains("npy, memmap") || help.contains("memmap, arrow"), "{help}");
        let parsed = command(&registry)
            .try_get_matches_from(["stowage", "convert", "a", "b", "--to", "nope"]);
        let e = parsed.unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("arrow"), "{e}");
    }
}
