//! Key index runs: on-disk hash tables that answer "where is the latest record of this key" for a
//! range of a backend's units, so that opening a cache costs a few header checks instead of a
//! replay of every key.
//!
//! A backend commits its data in *units* numbered increasingly (a segment, a range of log
//! records). A run covers the units `first..=through`: for every key those units hold, one slot
//! with the key's hash and a backend-defined `payload` that locates the key's latest entry (payload
//! 0 marks an empty slot, so backends store their locator plus one). A cache keeps a few runs, kept
//! the way a log-structured merge tree keeps its runs: every so often the backend turns its newest
//! units into a run, folding in the newest runs that are no larger than what it has gathered
//! ([`plan_merge`]). Run sizes then shrink geometrically from the oldest to the newest, a cache of
//! `n` keys has about `log2(n / keys per merge)` runs, and each key is copied that many times over
//! its life. A finished cache merges into one run.
//!
//! A slot holds only a hash: every candidate is confirmed by the backend (it reads the key stored
//! at the payload's location and compares), so a damaged or colliding slot can hide a key but
//! never return another key's entry. Runs are derived data: a backend can always rebuild them from
//! its units, and must when a run is missing or damaged.
//!
//! # Format
//!
//! ```text
//! header (80 bytes, little-endian u64 after the magic):
//!   magic "STWKRUN1" | version (1) | keys | capacity (a power of two) | first | through
//!   | new keys (keys no older run holds) | stamp (the backend's own u64)
//!   | body xxh3 | header xxh3 (of the 72 bytes before it)
//! body: capacity slots of 16 bytes: key hash u64 | payload u64 (0: empty)
//! ```
//!
//! Keys are placed by linear probing from `hash & (capacity - 1)`. Opening checks the header
//! (magic, version, checksum, sizes) and never reads the body; [`KeyRun::verify`] checks the body
//! against its checksum (one pass over the file), for `validate` and before a merge reads a run.
//!
//! ```
//! use stowage_core::key_runs::{KeyRun, RunSpec, build_run, key_hash};
//!
//! // A backend's entries: here, keys stored in a vector, the payload being position + 1.
//! let stored = ["a", "b", "a"]; // "a" was written twice: the later entry wins
//! let key_at = |payload: u64| stored[payload as usize - 1];
//! let fresh: Vec<(u64, u64)> =
//!     stored.iter().enumerate().map(|(i, k)| (key_hash(k.as_bytes()), i as u64 + 1)).collect();
//! let spec = RunSpec { first: 0, through: 2, stamp: 7 };
//! let bytes = build_run(&[], &fresh, spec, |a, b| key_at(a) == key_at(b), |_, _| false)?;
//!
//! let run = KeyRun::from_bytes("run_0_2.bin", bytes)?;
//! run.verify()?;
//! assert_eq!((run.keys(), run.new_keys(), run.stamp()), (2, 2, 7));
//! let find = |key: &str| run.find(key_hash(key.as_bytes()), |payload| key_at(payload) == key);
//! assert_eq!(find("a"), Some(3));
//! assert_eq!(find("b"), Some(2));
//! assert_eq!(find("c"), None);
//! # Ok::<(), stowage_core::Error>(())
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::{Error, Result};

/// The first 8 bytes of every run file.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MAGIC, RunSpec, SLOT_LEN, VERSION, build_run};
/// let bytes = build_run(&[], &[], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// assert_eq!((&bytes[..8], u64::from_le_bytes(bytes[8..16].try_into().unwrap())), (&MAGIC[..], VERSION));
/// assert_eq!((bytes.len() - HEADER_LEN) % SLOT_LEN, 0);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const MAGIC: [u8; 8] = *b"STWKRUN1";
/// The format version this module writes and reads.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MAGIC, RunSpec, SLOT_LEN, VERSION, build_run};
/// let bytes = build_run(&[], &[], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// assert_eq!((&bytes[..8], u64::from_le_bytes(bytes[8..16].try_into().unwrap())), (&MAGIC[..], VERSION));
/// assert_eq!((bytes.len() - HEADER_LEN) % SLOT_LEN, 0);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const VERSION: u64 = 1;
/// Bytes before the first slot.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MAGIC, RunSpec, SLOT_LEN, VERSION, build_run};
/// let bytes = build_run(&[], &[], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// assert_eq!((&bytes[..8], u64::from_le_bytes(bytes[8..16].try_into().unwrap())), (&MAGIC[..], VERSION));
/// assert_eq!((bytes.len() - HEADER_LEN) % SLOT_LEN, 0);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const HEADER_LEN: usize = 80;
/// Bytes per slot: key hash u64, payload u64.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MAGIC, RunSpec, SLOT_LEN, VERSION, build_run};
/// let bytes = build_run(&[], &[], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// assert_eq!((&bytes[..8], u64::from_le_bytes(bytes[8..16].try_into().unwrap())), (&MAGIC[..], VERSION));
/// assert_eq!((bytes.len() - HEADER_LEN) % SLOT_LEN, 0);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const SLOT_LEN: usize = 16;
/// The fewest slots a run has.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MIN_CAPACITY, SLOT_LEN, run_len};
/// assert_eq!(run_len(0, 0)?, HEADER_LEN + MIN_CAPACITY * SLOT_LEN);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const MIN_CAPACITY: usize = 16;
/// The seed of [`key_hash`]: part of the format, never to change within [`VERSION`] 1.
///
/// ```
/// use stowage_core::key_runs::{HASH_SEED, key_hash};
/// assert_eq!(key_hash(b"k"), xxhash_rust::xxh3::xxh3_64_with_seed(b"k", HASH_SEED));
/// ```
pub const HASH_SEED: u64 = 0x5354_574b_5255_4e31;

/// The hash a run stores for `key`: xxh3-64 with the fixed seed [`HASH_SEED`]. Stable across
/// processes, machines and versions of this crate (the format depends on it).
///
/// ```
/// use stowage_core::key_runs::key_hash;
/// assert_eq!(key_hash(b"sample-0"), key_hash(b"sample-0"));
/// assert_ne!(key_hash(b"sample-0"), key_hash(b"sample-1"));
/// ```
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, HASH_SEED)
}

/// What a new run covers, written into its header.
///
/// ```
/// let spec = stowage_core::key_runs::RunSpec { first: 0, through: 9, stamp: 0 };
/// assert!(spec.first <= spec.through);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSpec {
    /// The first unit the run covers.
    pub first: u64,
    /// The last unit the run covers (inclusive).
    pub through: u64,
    /// Anything the backend wants to vouch for with the header's checksum (for example a
    /// checksum of the data the run was built from).
    pub stamp: u64,
}

/// A run's header fields.
///
/// ```
/// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
/// let bytes = build_run(&[], &[(5, 1)], RunSpec { first: 3, through: 4, stamp: 9 }, |_, _| false, |_, _| false)?;
/// let header = KeyRun::from_bytes("r", bytes)?.header();
/// assert_eq!((header.keys, header.first, header.through, header.stamp), (1, 3, 4, 9));
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHeader {
    /// Distinct keys in the run.
    pub keys: u64,
    /// Slots in the run (a power of two).
    pub capacity: u64,
    /// The first unit covered.
    pub first: u64,
    /// The last unit covered (inclusive).
    pub through: u64,
    /// Keys of the run that no older run holds: a cache's distinct keys are the sum over its runs.
    pub new_keys: u64,
    /// The backend's stamp ([`RunSpec::stamp`]).
    pub stamp: u64,
    /// xxh3 of the body, checked by [`KeyRun::verify`].
    pub body_checksum: u64,
    /// xxh3 of the header's first 72 bytes: names this exact run (a backend records it beside
    /// the run's name, so that a different file under the same name is noticed at open).
    pub header_checksum: u64,
}

/// An open run: its bytes (a read-only map of the file, in a backend) and its checked header.
///
/// ```
/// use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
/// let bytes = build_run(&[], &[(42, 7)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// let run = KeyRun::from_bytes("index/run.bin", bytes)?;
/// assert_eq!(run.find(42, |payload| payload == 7), Some(7));
/// assert_eq!(run.find(42, |_| false), None); // an unconfirmed candidate is never returned
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub struct KeyRun {
    path: PathBuf,
    bytes: Box<dyn AsRef<[u8]> + Send + Sync>,
    header: RunHeader,
    mask: usize,
}

impl fmt::Debug for KeyRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRun").field("path", &self.path).field("header", &self.header).finish()
    }
}

impl KeyRun {
    /// Checks the header of `bytes`, the contents of the run file at `path` (named in errors), and
    /// keeps them. Reads the 80 header bytes only: constant time whatever the run's size.
    ///
    /// ```
    /// use stowage_core::{Error, key_runs::KeyRun};
    /// let err = KeyRun::from_bytes("index/run.bin", vec![0u8; 10]).unwrap_err();
    /// assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("index/run.bin"));
    /// ```
    ///
    /// Errors: [`Error::Corrupted`] naming `path` and what is wrong, for any bytes that are not a
    /// whole run of this version (never a panic).
    pub fn from_bytes(
        path: impl Into<PathBuf>,
        bytes: impl AsRef<[u8]> + Send + Sync + 'static,
    ) -> Result<KeyRun> {
        let path = path.into();
        let header =
            parse_header(bytes.as_ref()).map_err(|detail| Error::corrupted(&path, detail))?;
        let mask = header.capacity as usize - 1;
        Ok(KeyRun { path, bytes: Box::new(bytes), header, mask })
    }

    /// The header fields.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// assert_eq!(run.header().capacity, 16);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn header(&self) -> RunHeader {
        self.header
    }

    /// Distinct keys in the run.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// let bytes = build_run(&[], &[(1, 1), (2, 2)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
    /// assert_eq!(KeyRun::from_bytes("r", bytes)?.keys(), 2);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn keys(&self) -> u64 {
        self.header.keys
    }

    /// Keys no older run holds (see [`RunHeader::new_keys`]).
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// // The older runs hold hash 1's key already.
    /// let bytes = build_run(&[], &[(1, 1), (2, 2)], RunSpec { first: 5, through: 5, stamp: 0 }, |_, _| false, |hash, _| hash == 1)?;
    /// assert_eq!(KeyRun::from_bytes("r", bytes)?.new_keys(), 1);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn new_keys(&self) -> u64 {
        self.header.new_keys
    }

    /// The first unit covered.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 4, through: 8, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// assert_eq!((run.first(), run.through()), (4, 8));
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn first(&self) -> u64 {
        self.header.first
    }

    /// The last unit covered (inclusive).
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 4, through: 8, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// assert_eq!(run.through(), 8);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn through(&self) -> u64 {
        self.header.through
    }

    /// The backend's stamp.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 77 }, |_, _| false, |_, _| false)?)?;
    /// assert_eq!(run.stamp(), 77);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn stamp(&self) -> u64 {
        self.header.stamp
    }

    /// The file, as named at open.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// # let run = KeyRun::from_bytes("index/r.bin", build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// assert_eq!(run.path(), std::path::Path::new("index/r.bin"));
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn body(&self) -> &[u8] {
        &self.bytes.as_ref().as_ref()[HEADER_LEN..]
    }

    /// Slot `i`: (hash, payload).
    #[inline]
    fn slot(&self, i: usize) -> (u64, u64) {
        let at = i * SLOT_LEN;
        let body = self.body();
        (read_u64(body, at), read_u64(body, at + 8))
    }

    /// The payload of the key whose hash is `hash`: each occupied slot along the probe sequence
    /// with that hash is offered to `confirm` (the backend reads the key at that payload's
    /// location and compares); the first confirmed payload is returned. Stops at an empty slot,
    /// and after `capacity` slots in a damaged table without one.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// // Two keys whose hashes collide (both 9): told apart by `confirm`.
    /// let bytes = build_run(&[], &[(9, 1), (9, 2)], RunSpec { first: 0, through: 0, stamp: 0 }, |a, b| a == b, |_, _| false)?;
    /// let run = KeyRun::from_bytes("r", bytes)?;
    /// assert_eq!(run.find(9, |payload| payload == 2), Some(2));
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn find(&self, hash: u64, mut confirm: impl FnMut(u64) -> bool) -> Option<u64> {
        let mut i = hash as usize & self.mask;
        for _ in 0..=self.mask {
            let (slot_hash, payload) = self.slot(i);
            if payload == 0 {
                return None;
            }
            if slot_hash == hash && confirm(payload) {
                return Some(payload);
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Asks the CPU to load the slot a lookup of `hash` reads first (a hint for batched lookups:
    /// prefetch every key's slot, then find each).
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run, key_hash};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// run.prefetch(key_hash(b"k"));
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn prefetch(&self, hash: u64) {
        let at = (hash as usize & self.mask) * SLOT_LEN;
        if let Some(slot) = self.body().get(at..at + SLOT_LEN) {
            crate::prefetch::prefetch(slot);
        }
    }

    /// Every occupied slot, (hash, payload), in table order.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// let bytes = build_run(&[], &[(1, 10), (2, 20)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
    /// let mut slots: Vec<(u64, u64)> = KeyRun::from_bytes("r", bytes)?.slots().collect();
    /// slots.sort();
    /// assert_eq!(slots, [(1, 10), (2, 20)]);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn slots(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.body().chunks_exact(SLOT_LEN).filter_map(|slot| {
            let payload = read_u64(slot, 8);
            (payload != 0).then(|| (read_u64(slot, 0), payload))
        })
    }

    /// Checks the slots against the header's body checksum and that the table holds exactly the
    /// header's key count (reads the whole file).
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// let mut bytes = build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
    /// *bytes.last_mut().unwrap() ^= 1;
    /// let run = KeyRun::from_bytes("r", bytes)?; // the header alone is intact
    /// assert!(run.verify().is_err());
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Corrupted`] naming the file and both checksums.
    pub fn verify(&self) -> Result<()> {
        let actual = xxh3_64(self.body());
        if actual != self.header.body_checksum {
            return Err(Error::corrupted(
                &self.path,
                format!(
                    "key index run: slots checksum {actual:#018x} != recorded {:#018x}",
                    self.header.body_checksum
                ),
            ));
        }
        let occupied = self.slots().count() as u64;
        if occupied != self.header.keys {
            return Err(Error::corrupted(
                &self.path,
                format!(
                    "key index run: {occupied} occupied slots, the header counts {}",
                    self.header.keys
                ),
            ));
        }
        Ok(())
    }
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and checks a run's header; the detail of what is wrong otherwise.
fn parse_header(bytes: &[u8]) -> std::result::Result<RunHeader, String> {
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC {
        return Err(format!(
            "not a key index run ({} bytes, no {} magic in a {HEADER_LEN}-byte header)",
            bytes.len(),
            MAGIC.escape_ascii()
        ));
    }
    let field = |i: usize| read_u64(bytes, 8 + 8 * i);
    let stored = field(8);
    let actual = xxh3_64(&bytes[..HEADER_LEN - 8]);
    if stored != actual {
        return Err(format!(
            "key index run: header checksum {actual:#018x} != recorded {stored:#018x}"
        ));
    }
    let version = field(0);
    if version != VERSION {
        return Err(format!(
            "key index run of format version {version}, this version reads {VERSION}"
        ));
    }
    let header = RunHeader {
        keys: field(1),
        capacity: field(2),
        first: field(3),
        through: field(4),
        new_keys: field(5),
        stamp: field(6),
        body_checksum: field(7),
        header_checksum: stored,
    };
    let capacity = usize::try_from(header.capacity)
        .ok()
        .filter(|c| c.is_power_of_two() && *c >= MIN_CAPACITY && header.keys < *c as u64);
    let body_len = bytes.len() - HEADER_LEN;
    if capacity.and_then(|c| c.checked_mul(SLOT_LEN)) != Some(body_len) {
        return Err(format!(
            "key index run: {} bytes for {} keys in {} slots of {SLOT_LEN} bytes plus a \
             {HEADER_LEN}-byte header",
            bytes.len(),
            header.keys,
            header.capacity
        ));
    }
    if header.first > header.through || header.new_keys > header.keys {
        return Err(format!(
            "key index run: units {} to {}, {} of its {} keys new",
            header.first, header.through, header.new_keys, header.keys
        ));
    }
    Ok(header)
}

/// Builds the bytes of a run (header included) from `inputs`, runs over consecutive unit ranges
/// oldest first, and `fresh` (hash, payload) entries of the units after them, in write order.
///
/// - A later entry of a key replaces an earlier one: a newer input's slot replaces an older
///   input's, a fresh entry replaces every input's, a later fresh entry an earlier one.
/// - `same_key(a, b)` tells whether the entries at payloads `a` and `b`, whose hashes match, hold
///   the same key (an overwrite) or two keys (a collision). It is called only on matching hashes.
/// - `in_older(hash, payload)` tells whether a run older than the inputs holds the key of a fresh
///   entry that neither the inputs nor an earlier fresh entry hold: the run's
///   [`new_keys`](RunHeader::new_keys) counts the keys it answers for first. With no older runs,
///   pass `|_, _| false`.
/// - Every input is [verified](KeyRun::verify) first: a damaged run is never copied forward.
///
/// Costs one pass over the inputs' slots and `fresh`, plus `same_key` per hash match; memory is
/// the new table (16 bytes per slot at a load of at most 3/4).
///
/// ```
/// use stowage_core::key_runs::{KeyRun, RunSpec, build_run, plan_merge};
/// let spec = |first, through| RunSpec { first, through, stamp: 0 };
/// let older = KeyRun::from_bytes("a", build_run(&[], &[(1, 1), (2, 2)], spec(0, 0), |a, b| a == b, |_, _| false)?)?;
/// // Unit 1 overwrites hash 2's key (payload 3 holds the same key as payload 2) and adds one.
/// let same_key = |a: u64, b: u64| (a == 2 || a == 3) && (b == 2 || b == 3);
/// let newer = build_run(&[&older], &[(2, 3), (4, 4)], spec(0, 1), same_key, |_, _| false)?;
/// let run = KeyRun::from_bytes("b", newer)?;
/// assert_eq!((run.keys(), run.new_keys()), (3, 3));
/// assert_eq!(run.find(2, |p| same_key(p, 2)), Some(3));
/// assert_eq!(plan_merge(&[older.keys()], 2), 1);
/// # Ok::<(), stowage_core::Error>(())
/// ```
///
/// Errors: [`Error::InvalidArgument`] when a fresh payload is 0, the units do not follow each
/// other (`first > through`) or the table would not fit in memory; [`Error::Corrupted`] naming a
/// damaged input.
pub fn build_run(
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    spec: RunSpec,
    same_key: impl FnMut(u64, u64) -> bool,
    in_older: impl FnMut(u64, u64) -> bool,
) -> Result<Vec<u8>> {
    let input_keys = inputs.iter().map(|run| run.keys()).sum();
    let mut bytes = vec![0u8; run_len(input_keys, fresh.len())?];
    build_run_into(&mut bytes, inputs, fresh, spec, same_key, in_older)?;
    Ok(bytes)
}

/// The bytes a run built from inputs holding `input_keys` keys and `fresh` entries takes: what
/// [`build_run_into`] needs.
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MIN_CAPACITY, SLOT_LEN, run_len};
/// assert_eq!(run_len(0, 3)?, HEADER_LEN + MIN_CAPACITY * SLOT_LEN);
/// // 1,000 keys: 1,334 slots at a load of at most 3/4, rounded up to 2,048.
/// assert_eq!(run_len(600, 400)?, HEADER_LEN + 2048 * SLOT_LEN);
/// # Ok::<(), stowage_core::Error>(())
/// ```
///
/// Errors: [`Error::InvalidArgument`] when the table would not fit in memory.
pub fn run_len(input_keys: u64, fresh: usize) -> Result<usize> {
    Ok(HEADER_LEN + capacity_for(input_keys, fresh)? * SLOT_LEN)
}

fn capacity_for(input_keys: u64, fresh: usize) -> Result<usize> {
    let wanted = (u128::from(input_keys) + fresh as u128) * 4 / 3 + 1;
    Ok(usize::try_from(wanted)
        .ok()
        .and_then(usize::checked_next_power_of_two)
        .filter(|c| c.checked_mul(SLOT_LEN).is_some_and(|b| b <= isize::MAX as usize - HEADER_LEN))
        .ok_or_else(|| Error::invalid(format!("a key index run of {wanted} slots")))?
        .max(MIN_CAPACITY))
}

/// [`build_run`] into `out`, exactly [`run_len`] bytes whose contents are overwritten (a map of
/// the file being written, so that a large run costs page cache, not heap).
///
/// ```
/// use stowage_core::key_runs::{KeyRun, RunSpec, build_run, build_run_into, run_len};
/// let spec = RunSpec { first: 0, through: 0, stamp: 0 };
/// let mut out = vec![0u8; run_len(0, 1)?];
/// build_run_into(&mut out, &[], &[(5, 1)], spec, |_, _| false, |_, _| false)?;
/// assert_eq!(out, build_run(&[], &[(5, 1)], spec, |_, _| false, |_, _| false)?);
/// # Ok::<(), stowage_core::Error>(())
/// ```
///
/// Errors: as [`build_run`]; [`Error::InvalidArgument`] when `out` is not [`run_len`] bytes
/// long.
pub fn build_run_into(
    out: &mut [u8],
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    spec: RunSpec,
    mut same_key: impl FnMut(u64, u64) -> bool,
    mut in_older: impl FnMut(u64, u64) -> bool,
) -> Result<()> {
    if spec.first > spec.through {
        return Err(Error::invalid(format!(
            "a key index run covers units {} to {}: the first is after the last",
            spec.first, spec.through
        )));
    }
    if fresh.iter().any(|&(_, payload)| payload == 0) {
        return Err(Error::invalid("a key index run's payload 0 marks an empty slot"));
    }
    for run in inputs {
        run.verify()?;
    }
    let input_keys: u64 = inputs.iter().map(|run| run.keys()).sum();
    let capacity = capacity_for(input_keys, fresh.len())?;
    if out.len() != HEADER_LEN + capacity * SLOT_LEN {
        return Err(Error::invalid(format!(
            "a key index run of {capacity} slots needs {} bytes, got {}",
            HEADER_LEN + capacity * SLOT_LEN,
            out.len()
        )));
    }
    out.fill(0);
    let mut table = Table { bytes: out, mask: capacity - 1 };
    let mut keys = 0u64;
    let mut new_keys: u64 = inputs.iter().map(|run| run.new_keys()).sum();
    for (position, run) in inputs.iter().enumerate() {
        for (hash, payload) in run.slots() {
            // The oldest input holds each key once: none of its slots can replace another.
            let i = if position == 0 {
                table.probe(hash, |_| false)
            } else {
                table.probe(hash, |slot| same_key(slot, payload))
            };
            // Each input counted as new only the keys no run before it holds: the counts add.
            keys += u64::from(table.is_empty(i));
            table.set(i, hash, payload);
        }
    }
    for &(hash, payload) in fresh {
        let i = table.probe(hash, |slot| same_key(slot, payload));
        if table.is_empty(i) {
            keys += 1;
            new_keys += u64::from(!in_older(hash, payload));
        }
        table.set(i, hash, payload);
    }
    let bytes = table.bytes;
    let body_checksum = xxh3_64(&bytes[HEADER_LEN..]);
    bytes[..8].copy_from_slice(&MAGIC);
    let fields = [
        VERSION,
        keys,
        capacity as u64,
        spec.first,
        spec.through,
        new_keys,
        spec.stamp,
        body_checksum,
    ];
    for (i, value) in fields.iter().enumerate() {
        bytes[8 + 8 * i..16 + 8 * i].copy_from_slice(&value.to_le_bytes());
    }
    let header_checksum = xxh3_64(&bytes[..HEADER_LEN - 8]);
    bytes[HEADER_LEN - 8..HEADER_LEN].copy_from_slice(&header_checksum.to_le_bytes());
    Ok(())
}

/// A table being filled, in the bytes of the whole run (header first).
struct Table<'a> {
    bytes: &'a mut [u8],
    mask: usize,
}

impl Table<'_> {
    fn at(i: usize) -> usize {
        HEADER_LEN + i * SLOT_LEN
    }

    fn is_empty(&self, i: usize) -> bool {
        read_u64(self.bytes, Self::at(i) + 8) == 0
    }

    /// The slot for `hash`: the first empty one along its probe sequence, or an occupied one
    /// with the same hash whose payload `is_it` accepts.
    fn probe(&self, hash: u64, mut is_it: impl FnMut(u64) -> bool) -> usize {
        let mut i = hash as usize & self.mask;
        while !self.is_empty(i) {
            let at = Self::at(i);
            if read_u64(self.bytes, at) == hash && is_it(read_u64(self.bytes, at + 8)) {
                return i;
            }
            i = (i + 1) & self.mask;
        }
        i
    }

    fn set(&mut self, i: usize, hash: u64, payload: u64) {
        let at = Self::at(i);
        self.bytes[at..at + 8].copy_from_slice(&hash.to_le_bytes());
        self.bytes[at + 8..at + 16].copy_from_slice(&payload.to_le_bytes());
    }
}

/// Which of `run_keys` (the key counts of a cache's runs, oldest first) the next merge folds in
/// with `fresh_keys` new entries: the newest runs, as long as each is no larger than everything
/// gathered so far (fresh entries and the runs already taken), so that runs halve in size from
/// the oldest to the newest and each key is copied O(log n) times. Returns how many of the newest
/// runs to take.
///
/// ```
/// use stowage_core::key_runs::plan_merge;
/// // 65,536 new keys: the equal-sized newest run is taken, then the one of 131,072 too;
/// // the oldest (1M keys) stays.
/// assert_eq!(plan_merge(&[1_000_000, 131_072, 65_536], 65_536), 2);
/// assert_eq!(plan_merge(&[1_000_000, 262_144], 65_536), 0);
/// ```
pub fn plan_merge(run_keys: &[u64], fresh_keys: u64) -> usize {
    let mut gathered = fresh_keys;
    let mut taken = 0;
    for &keys in run_keys.iter().rev() {
        if keys > gathered {
            break;
        }
        gathered += keys;
        taken += 1;
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(first: u64, through: u64) -> RunSpec {
        RunSpec { first, through, stamp: 0 }
    }

    /// Keys by payload (payload = position + 1) and the fresh entries of `keys`.
    struct Stored(Vec<String>);

    impl Stored {
        fn new(keys: impl IntoIterator<Item = String>) -> Stored {
            Stored(keys.into_iter().collect())
        }
        fn key(&self, payload: u64) -> Option<&str> {
            self.0.get((payload as usize).checked_sub(1)?).map(String::as_str)
        }
        fn same(&self, a: u64, b: u64) -> bool {
            self.key(a).is_some_and(|k| self.key(b) == Some(k))
        }
        /// Entries of positions `range`.
        fn fresh(&self, range: std::ops::Range<usize>) -> Vec<(u64, u64)> {
            range.map(|i| (key_hash(self.0[i].as_bytes()), i as u64 + 1)).collect()
        }
        fn find(&self, run: &KeyRun, key: &str) -> Option<u64> {
            run.find(key_hash(key.as_bytes()), |p| self.key(p) == Some(key))
        }
    }

    #[test]
    fn golden_bytes_of_a_small_run() {
        // Hashes chosen by hand so the slots are predictable: 1 and 17 collide in slot 1.
        let bytes = build_run(
            &[],
            &[(1, 5), (17, 6), (3, 7)],
            RunSpec { first: 2, through: 4, stamp: 9 },
            |_, _| false,
            |h, _| h == 3,
        )
        .unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + 16 * SLOT_LEN);
        let mut body = vec![0u8; 16 * SLOT_LEN];
        for (slot, hash, payload) in [(1usize, 1u64, 5u64), (2, 17, 6), (3, 3, 7)] {
            body[slot * 16..slot * 16 + 8].copy_from_slice(&hash.to_le_bytes());
            body[slot * 16 + 8..slot * 16 + 16].copy_from_slice(&payload.to_le_bytes());
        }
        assert_eq!(&bytes[HEADER_LEN..], &body[..]);
        let header: Vec<u64> = bytes[8..HEADER_LEN]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(&bytes[..8], b"STWKRUN1");
        // version, keys, capacity, first, through, new keys, stamp
        assert_eq!(header[..7], [1, 3, 16, 2, 4, 2, 9]);
        assert_eq!(header[7], xxh3_64(&body));
        assert_eq!(header[8], xxh3_64(&bytes[..72]));
        // The exact bytes, pinned: any change to the format shows here.
        assert_eq!(format!("{:016x}", xxh3_64(&bytes)), GOLDEN_RUN_XXH3);
        let run = KeyRun::from_bytes("golden", bytes).unwrap();
        run.verify().unwrap();
        assert_eq!(run.find(17, |p| p == 6), Some(6));
        assert_eq!(run.find(17, |p| p == 5), None, "slot 1's hash is 1, not 17");
    }

    /// xxh3 of the whole golden run above.
    const GOLDEN_RUN_XXH3: &str = "606aa43b5e1c59a6";

    #[test]
    fn later_entries_win_and_candidates_are_confirmed() {
        let stored =
            Stored::new((0..100).map(|i| format!("k{i}")).chain((0..50).map(|i| format!("k{i}"))));
        let bytes = build_run(
            &[],
            &stored.fresh(0..150),
            spec(0, 2),
            |a, b| stored.same(a, b),
            |_, _| false,
        )
        .unwrap();
        let run = KeyRun::from_bytes("run", bytes).unwrap();
        run.verify().unwrap();
        assert_eq!((run.keys(), run.new_keys()), (100, 100));
        assert_eq!(stored.find(&run, "k7"), Some(108));
        assert_eq!(stored.find(&run, "k70"), Some(71));
        assert_eq!(stored.find(&run, "k999"), None);
        assert_eq!(run.find(key_hash(b"k7"), |_| false), None);
    }

    #[test]
    fn merging_runs_keeps_the_newest_slot_and_counts_new_keys() {
        // Positions 0..1000 (run A: k0..k999), 1000..1002 (run B: k5, k2000), 1002..1004 fresh
        // (k5, k1000). k2000 is also in a run older than A.
        let stored = Stored::new(
            (0..1000)
                .map(|i| format!("k{i}"))
                .chain(["k5", "k2000", "k5", "k1000"].map(String::from)),
        );
        let same = |a, b| stored.same(a, b);
        let a = build_run(&[], &stored.fresh(0..1000), spec(0, 1), same, |_, _| false).unwrap();
        let a = KeyRun::from_bytes("a", a).unwrap();
        let before_b = |h: u64, _| h == key_hash(b"k2000") || h == key_hash(b"k5");
        let b = build_run(&[], &stored.fresh(1000..1002), spec(2, 2), same, before_b).unwrap();
        let b = KeyRun::from_bytes("b", b).unwrap();
        assert_eq!((b.keys(), b.new_keys()), (2, 0), "both are in older runs");
        let before_a = |h: u64, _| h == key_hash(b"k2000");
        let merged =
            build_run(&[&a, &b], &stored.fresh(1002..1004), spec(0, 3), same, before_a).unwrap();
        let merged = KeyRun::from_bytes("m", merged).unwrap();
        merged.verify().unwrap();
        assert_eq!(
            (merged.keys(), merged.new_keys(), merged.first(), merged.through()),
            (1002, 1001, 0, 3)
        );
        assert_eq!(stored.find(&merged, "k5"), Some(1003));
        assert_eq!(stored.find(&merged, "k2000"), Some(1002));
        assert_eq!(stored.find(&merged, "k1000"), Some(1004));
        assert_eq!(stored.find(&merged, "k777"), Some(778));
        // With `same` never true (every hash match a collision) both slots stay apart.
        let apart =
            build_run(&[&a], &stored.fresh(1002..1003), spec(0, 1), |_, _| false, |_, _| false);
        assert_eq!(KeyRun::from_bytes("d", apart.unwrap()).unwrap().keys(), 1001);
    }

    #[test]
    fn a_damaged_input_is_never_merged() {
        let mut bytes =
            build_run(&[], &[(1, 1), (2, 2)], spec(0, 0), |_, _| false, |_, _| false).unwrap();
        let at = bytes.len() - 1;
        bytes[at] ^= 1;
        let run = KeyRun::from_bytes("damaged.bin", bytes).unwrap();
        let err = build_run(&[&run], &[], spec(0, 1), |_, _| false, |_, _| false).unwrap_err();
        assert!(
            matches!(err, Error::Corrupted { .. }) && err.to_string().contains("damaged.bin"),
            "{err}"
        );
    }

    #[test]
    fn bad_arguments_are_refused() {
        let none = |_, _| false;
        assert!(build_run(&[], &[(1, 0)], spec(0, 0), none, none).is_err(), "payload 0");
        assert!(build_run(&[], &[], spec(2, 1), none, none).is_err(), "first after through");
        let mut short = vec![0u8; run_len(0, 1).unwrap() - 16];
        assert!(build_run_into(&mut short, &[], &[(1, 1)], spec(0, 0), none, none).is_err());
        let mut dirty = vec![0xffu8; run_len(0, 1).unwrap()];
        build_run_into(&mut dirty, &[], &[(1, 1)], spec(0, 0), none, none).unwrap();
        assert_eq!(dirty, build_run(&[], &[(1, 1)], spec(0, 0), none, none).unwrap());
        let empty =
            KeyRun::from_bytes("e", build_run(&[], &[], spec(0, 0), none, none).unwrap()).unwrap();
        assert_eq!((empty.keys(), empty.header().capacity), (0, MIN_CAPACITY as u64));
        assert_eq!(empty.find(5, |_| true), None);
    }

    #[test]
    fn merges_take_the_newest_runs_no_larger_than_what_they_gathered() {
        assert_eq!(plan_merge(&[], 10), 0);
        assert_eq!(plan_merge(&[10], 10), 1);
        assert_eq!(plan_merge(&[11], 10), 0);
        assert_eq!(plan_merge(&[40, 20, 10], 10), 3);
        assert_eq!(plan_merge(&[100, 20, 10], 10), 2);
        let mut runs: Vec<u64> = Vec::new();
        for _ in 0..64 {
            let taken = plan_merge(&runs, 10);
            let merged = 10 + runs.drain(runs.len() - taken..).sum::<u64>();
            runs.push(merged);
            assert!(runs.windows(2).all(|w| w[0] > w[1]), "{runs:?}");
            assert!(runs.len() <= 7, "{runs:?}");
        }
        assert_eq!(runs, [640]);
    }

    #[test]
    fn damaged_tables_are_refused_or_never_misdirect() {
        let stored = Stored::new((0..300).map(|i| format!("k{i}")));
        let good = build_run(
            &[],
            &stored.fresh(0..300),
            spec(0, 0),
            |a, b| stored.same(a, b),
            |_, _| false,
        )
        .unwrap();
        for len in [0, 8, HEADER_LEN - 1, HEADER_LEN, good.len() - 1, good.len() + 16] {
            let mut cut = good.clone();
            cut.resize(len, 0);
            let err = KeyRun::from_bytes("cut.bin", cut).unwrap_err();
            assert!(
                matches!(err, Error::Corrupted { .. }) && err.to_string().contains("cut.bin"),
                "{len}: {err}"
            );
        }
        for at in (0..HEADER_LEN).chain((HEADER_LEN..good.len()).step_by(5)) {
            for flip in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                let Ok(run) = KeyRun::from_bytes("bad.bin", bad) else {
                    assert!(at < HEADER_LEN, "a body byte never fails the header check: {at}");
                    continue;
                };
                assert!(at >= HEADER_LEN, "every header byte is checked: {at}");
                assert!(run.verify().is_err(), "byte {at}");
                for (i, key) in stored.0.iter().enumerate() {
                    if let Some(found) = stored.find(&run, key) {
                        assert_eq!(found, i as u64 + 1, "{key}");
                    }
                }
            }
        }
    }

    /// Hostile headers that pass the checksum (a writer's bug, or an attacker) are refused too.
    #[test]
    fn hostile_headers_with_valid_checksums_are_corrupted() {
        let good = build_run(&[], &[(1, 1)], spec(0, 0), |_, _| false, |_, _| false).unwrap();
        let with = |field: usize, value: u64| {
            let mut bytes = good.clone();
            bytes[8 + 8 * field..16 + 8 * field].copy_from_slice(&value.to_le_bytes());
            let sum = xxh3_64(&bytes[..HEADER_LEN - 8]);
            bytes[HEADER_LEN - 8..HEADER_LEN].copy_from_slice(&sum.to_le_bytes());
            KeyRun::from_bytes("h", bytes)
        };
        assert!(with(0, 1).is_ok(), "unchanged");
        for (field, value) in [
            (0, 2),
            (1, 16),
            (1, u64::MAX),
            (2, 32),
            (2, 15),
            (2, 0),
            (2, u64::MAX),
            (3, 5),
            (5, 2),
        ] {
            assert!(
                matches!(with(field, value), Err(Error::Corrupted { .. })),
                "field {field} = {value}"
            );
        }
    }

    #[test]
    fn a_full_damaged_table_ends_every_probe() {
        // Every slot occupied (impossible for a writer): a miss still ends after capacity slots.
        let mut bytes = build_run(&[], &[(1, 1)], spec(0, 0), |_, _| false, |_, _| false).unwrap();
        for i in 0..MIN_CAPACITY {
            let at = HEADER_LEN + i * SLOT_LEN;
            bytes[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&9u64.to_le_bytes());
        }
        let run = KeyRun::from_bytes("full", bytes).unwrap();
        assert_eq!(run.find(7, |_| false), None);
        assert_eq!(run.find(3, |_| true), None);
    }
}
