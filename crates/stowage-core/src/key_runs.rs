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
//!   magic "STWKRUN1" | version (2; 1 is still read) | keys | capacity (a power of two) | first | through
//!   | new keys (keys no older run holds) | stamp (the backend's own u64)
//!   | body xxh3 | header xxh3 (of the 72 bytes before it)
//! body: capacity slots of 16 bytes: key hash u64 | payload u64 (0: empty)
//! ```
//!
//! Keys are placed by linear probing from their *home* slot. In version 2 the home slot is the
//! hash's top bits (`hash >> (64 - log2(capacity))`), so slot order is hash order at every
//! capacity: a run is built by placing its entries in hash order, each at its home slot or just
//! after the previous entry (the few that run past the last slot wrap to the first empty slots
//! at the front, after everything else is placed). A merge is then one streaming pass: each input
//! is read in hash order (its slots in position order, its wrapped entries last), merged with the
//! fresh entries sorted by hash, and the output written front to back through a small buffer
//! ([`write_run_file`]: the merge's own heap is a few entries per input, whatever the run's
//! size). stowage-npy, stowage-memmap, stowage-arrow and stowage-hdf5 keep their key indexes in
//! these runs. Version 1 (home
//! slot `hash & (capacity - 1)`) is still read: its runs are found with their own home slot, and
//! a merge sorts a version 1 input's slots first (a one-time cost after an upgrade).
//!
//! Opening checks the header (magic, version, checksum, sizes) and never reads the body;
//! [`KeyRun::verify`] checks the body against its checksum and, in version 2, that every slot is
//! where a hash-order build places it (one pass over the file), for `validate` and before a merge
//! reads a run.
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

use std::convert::Infallible;
use std::fmt;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{Xxh3, xxh3_64, xxh3_64_with_seed};

use crate::{Error, IoResultExt, Result};

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
/// The format version this module writes (it reads [`OLDEST_VERSION`] to this one).
///
/// ```
/// use stowage_core::key_runs::{HEADER_LEN, MAGIC, RunSpec, SLOT_LEN, VERSION, build_run};
/// let bytes = build_run(&[], &[], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
/// assert_eq!((&bytes[..8], u64::from_le_bytes(bytes[8..16].try_into().unwrap())), (&MAGIC[..], VERSION));
/// assert_eq!((bytes.len() - HEADER_LEN) % SLOT_LEN, 0);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub const VERSION: u64 = 2;
/// The oldest format version this module reads: version 1, whose home slot is the hash's low
/// bits (`hash & (capacity - 1)`) instead of its top bits.
///
/// ```
/// use stowage_core::key_runs::{OLDEST_VERSION, VERSION};
/// assert!((OLDEST_VERSION..=VERSION).contains(&1));
/// ```
pub const OLDEST_VERSION: u64 = 1;
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
/// The seed of [`key_hash`]: part of the format, the same in versions 1 and 2.
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
    version: u64,
    mask: usize,
    /// `64 - log2(capacity)`: a version 2 home slot is `hash >> shift`.
    shift: u32,
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
        let (version, header) =
            parse_header(bytes.as_ref()).map_err(|detail| Error::corrupted(&path, detail))?;
        let mask = header.capacity as usize - 1;
        let shift = 64 - header.capacity.trailing_zeros();
        Ok(KeyRun { path, bytes: Box::new(bytes), header, version, mask, shift })
    }

    /// The run's format version: [`VERSION`] for runs this module builds, [`OLDEST_VERSION`]
    /// for runs an earlier version of it built.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, VERSION, build_run};
    /// let bytes = build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?;
    /// assert_eq!(KeyRun::from_bytes("r", bytes)?.version(), VERSION);
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The slot a lookup of `hash` starts at.
    #[inline]
    fn home(&self, hash: u64) -> usize {
        if self.version == 1 { hash as usize & self.mask } else { home_slot(hash, self.shift) }
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
        let Ok(found) = self.try_find(hash, |payload| Ok::<bool, Infallible>(confirm(payload)));
        found
    }

    /// As [`KeyRun::find`], with a `confirm` that can fail (the key at a candidate's location
    /// does not read): the probe stops at the first error and returns it, so a lookup never
    /// mistakes an unreadable candidate for "not this key" and reports a present key absent.
    ///
    /// ```
    /// # use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
    /// let bytes = build_run(&[], &[(9, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |a, b| a == b, |_, _| false)?;
    /// let run = KeyRun::from_bytes("r", bytes)?;
    /// assert_eq!(run.try_find(9, |payload| Ok::<_, String>(payload == 1)), Ok(Some(1)));
    /// assert_eq!(run.try_find(9, |_| Err("segment 3 does not read".to_owned())), Err("segment 3 does not read".to_owned()));
    /// assert_eq!(run.try_find(8, |_| Err("never asked".to_owned())), Ok(None));
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn try_find<E>(
        &self,
        hash: u64,
        mut confirm: impl FnMut(u64) -> std::result::Result<bool, E>,
    ) -> std::result::Result<Option<u64>, E> {
        let mut i = self.home(hash);
        for _ in 0..=self.mask {
            let (slot_hash, payload) = self.slot(i);
            if payload == 0 {
                return Ok(None);
            }
            if slot_hash == hash && confirm(payload)? {
                return Ok(Some(payload));
            }
            i = (i + 1) & self.mask;
        }
        Ok(None)
    }

    /// The whole run's bytes (header included) and the range of them holding the slot a lookup
    /// of `hash` reads first: for planning the pages a batch of lookups will touch
    /// ([`crate::cold_reads::PagePlan`]).
    ///
    /// ```
    /// # use stowage_core::key_runs::{HEADER_LEN, KeyRun, RunSpec, SLOT_LEN, build_run, key_hash};
    /// # let run = KeyRun::from_bytes("r", build_run(&[], &[(1, 1)], RunSpec { first: 0, through: 0, stamp: 0 }, |_, _| false, |_, _| false)?)?;
    /// let (bytes, slot) = run.home_slot(key_hash(b"k"));
    /// assert_eq!(slot.len(), SLOT_LEN);
    /// assert!(slot.start >= HEADER_LEN && slot.end <= bytes.len());
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn home_slot(&self, hash: u64) -> (&[u8], std::ops::Range<usize>) {
        let start = HEADER_LEN + self.home(hash) * SLOT_LEN;
        (self.bytes.as_ref().as_ref(), start..start + SLOT_LEN)
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
        let at = self.home(hash) * SLOT_LEN;
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

    /// Checks the slots against the header's body checksum, that the table holds exactly the
    /// header's key count and, in version 2, that every slot is where a hash-order build places
    /// it (so that a merge can read the run in hash order). Reads the whole file.
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
        self.check_placement().map_err(|detail| Error::corrupted(&self.path, detail))
    }

    /// Version 2: that every slot is where a hash-order build puts it: in hash order (the wrapped
    /// entries at the front last), each at its home slot or right after a slot of its cluster,
    /// wrapped ones only in the front cluster of a table whose last slot is occupied.
    fn check_placement(&self) -> std::result::Result<(), String> {
        if self.version == 1 {
            return Ok(());
        }
        let capacity = self.mask + 1;
        let front = (0..capacity).find(|&i| self.slot(i).1 == 0).unwrap_or(capacity);
        let last_occupied = self.slot(self.mask).1 != 0;
        let (mut wrapped_first, mut wrapped_last, mut placed_last) = (None, None, None);
        let mut previous_placed = false;
        for (i, slot) in self.body().chunks_exact(SLOT_LEN).enumerate() {
            let (hash, payload) = (read_u64(slot, 0), read_u64(slot, 8));
            if payload == 0 {
                previous_placed = false;
                continue;
            }
            let home = home_slot(hash, self.shift);
            let misplaced = if home > i {
                // Wrapped: only in the front cluster, after a chain that reached the last slot.
                let ok = i < front && last_occupied && wrapped_last.is_none_or(|h| h <= hash);
                wrapped_first.get_or_insert(hash);
                wrapped_last = Some(hash);
                previous_placed = false;
                !ok
            } else {
                let ok = (home == i || previous_placed) && placed_last.is_none_or(|h| h <= hash);
                placed_last = Some(hash);
                previous_placed = true;
                !ok
            };
            if misplaced {
                return Err(format!(
                    "key index run: slot {i} (hash {hash:#018x}, home slot {home}) is not where a \
                     hash-order build places it"
                ));
            }
        }
        match (placed_last, wrapped_first) {
            (Some(placed), Some(wrapped)) if wrapped < placed => Err(format!(
                "key index run: a wrapped slot's hash {wrapped:#018x} is below the last slot's \
                 {placed:#018x}"
            )),
            _ => Ok(()),
        }
    }
}

/// A version 2 home slot: the hash's top bits.
#[inline]
fn home_slot(hash: u64, shift: u32) -> usize {
    (hash >> shift) as usize
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses and checks a run's header: its version and fields; the detail of what is wrong
/// otherwise.
fn parse_header(bytes: &[u8]) -> std::result::Result<(u64, RunHeader), String> {
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
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(format!(
            "key index run of format version {version}, this version reads {OLDEST_VERSION} to \
             {VERSION}"
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
    Ok((version, header))
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
/// Costs one sequential pass over the inputs' slots, a sort of `fresh` by hash and one
/// sequential pass writing the new table, plus `same_key` per hash match: a streaming k-way merge
/// (the inputs are read in hash order, see the [module docs](self)). Memory is the new table
/// (16 bytes per slot at a load of at most 3/4; [`build_run_into`] writes it into the caller's
/// buffer instead), a sorted copy of `fresh`, and a few entries per input (a version 1 input is
/// sorted into a copy of its slots first).
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
    same_key: impl FnMut(u64, u64) -> bool,
    in_older: impl FnMut(u64, u64) -> bool,
) -> Result<()> {
    let capacity = check_build(inputs, fresh, spec)?;
    if out.len() != HEADER_LEN + capacity * SLOT_LEN {
        return Err(Error::invalid(format!(
            "a key index run of {capacity} slots needs {} bytes, got {}",
            HEADER_LEN + capacity * SLOT_LEN,
            out.len()
        )));
    }
    let (header, body) = out.split_at_mut(HEADER_LEN);
    let sink = SliceSink { body, at: 0 };
    let (merged, sink) = merge(sink, capacity, inputs, fresh, same_key, in_older)?;
    let body = sink.body;
    let mut i = 0;
    for &(hash, payload) in &merged.wrapped {
        // The first empty slots from the front: at least one slot stays empty (load < 1).
        while i < capacity && read_u64(body, i * SLOT_LEN + 8) != 0 {
            i += 1;
        }
        if i == capacity {
            return Err(Error::invalid("a key index run with more keys than slots"));
        }
        write_slot(&mut body[i * SLOT_LEN..(i + 1) * SLOT_LEN], hash, payload);
        i += 1;
    }
    let fields = merged.header_fields(capacity, spec, xxh3_64(body));
    header.copy_from_slice(&header_bytes(fields));
    Ok(())
}

/// [`build_run`] streamed into `file` (a new, empty file, or one whose contents are all
/// overwritten), at offset 0: the slots are written front to back through a 1 MiB buffer, then
/// the few entries that wrap to the front and the header are written in place, the body's
/// checksum computed by reading it back. The heap this takes is the buffer, a sorted copy of
/// `fresh` and a few entries per input, whatever the run's size: what a backend uses for a large
/// merge. Returns the header written; `path` names the file in errors. The caller makes the
/// file durable (and names it) afterwards.
///
/// ```
/// use std::io::Cursor;
/// use stowage_core::key_runs::{KeyRun, RunSpec, build_run, build_run_to};
/// let spec = RunSpec { first: 0, through: 0, stamp: 0 };
/// let mut file = Cursor::new(Vec::new());
/// let header = build_run_to(&mut file, "index/run.bin", &[], &[(5, 1)], spec, |_, _| false, |_, _| false)?;
/// assert_eq!(file.get_ref(), &build_run(&[], &[(5, 1)], spec, |_, _| false, |_, _| false)?);
/// assert_eq!(KeyRun::from_bytes("r", file.into_inner())?.header(), header);
/// # Ok::<(), stowage_core::Error>(())
/// ```
///
/// Errors: as [`build_run`]; [`Error::Io`] naming `path` when the file cannot be written or
/// read back.
pub fn build_run_to<F: Read + Write + Seek>(
    file: &mut F,
    path: impl AsRef<Path>,
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    spec: RunSpec,
    same_key: impl FnMut(u64, u64) -> bool,
    in_older: impl FnMut(u64, u64) -> bool,
) -> Result<RunHeader> {
    let path = path.as_ref();
    let capacity = check_build(inputs, fresh, spec)?;
    file.seek(SeekFrom::Start(HEADER_LEN as u64)).at(path)?;
    let sink = StreamSink { out: BufWriter::with_capacity(STREAM_BUFFER, &mut *file), path };
    let (merged, sink) = merge(sink, capacity, inputs, fresh, same_key, in_older)?;
    // The file again, every slot written to it.
    let file = sink.out.into_inner().map_err(|e| e.into_error()).at(path)?;
    let mut chunk = vec![0u8; STREAM_BUFFER];
    if !merged.wrapped.is_empty() {
        // The first empty slots from the front, read back.
        let mut empty = Vec::with_capacity(merged.wrapped.len());
        file.seek(SeekFrom::Start(HEADER_LEN as u64)).at(path)?;
        let mut at = 0;
        while empty.len() < merged.wrapped.len() && at < capacity {
            let slots = (chunk.len() / SLOT_LEN).min(capacity - at);
            file.read_exact(&mut chunk[..slots * SLOT_LEN]).at(path)?;
            for (i, slot) in chunk[..slots * SLOT_LEN].chunks_exact(SLOT_LEN).enumerate() {
                if read_u64(slot, 8) == 0 && empty.len() < merged.wrapped.len() {
                    empty.push(at + i);
                }
            }
            at += slots;
        }
        for (&i, &(hash, payload)) in empty.iter().zip(&merged.wrapped) {
            let mut slot = [0u8; SLOT_LEN];
            write_slot(&mut slot, hash, payload);
            file.seek(SeekFrom::Start((HEADER_LEN + i * SLOT_LEN) as u64)).at(path)?;
            file.write_all(&slot).at(path)?;
        }
    }
    let mut hasher = Xxh3::new();
    file.seek(SeekFrom::Start(HEADER_LEN as u64)).at(path)?;
    let mut left = capacity * SLOT_LEN;
    while left > 0 {
        let n = left.min(chunk.len());
        file.read_exact(&mut chunk[..n]).at(path)?;
        hasher.update(&chunk[..n]);
        left -= n;
    }
    let fields = merged.header_fields(capacity, spec, hasher.digest());
    let header = header_bytes(fields);
    file.seek(SeekFrom::Start(0)).at(path)?;
    file.write_all(&header).at(path)?;
    file.flush().at(path)?;
    Ok(RunHeader {
        keys: fields[1],
        capacity: fields[2],
        first: fields[3],
        through: fields[4],
        new_keys: fields[5],
        stamp: fields[6],
        body_checksum: fields[7],
        header_checksum: read_u64(&header, HEADER_LEN - 8),
    })
}

/// [`build_run_to`] into a new file at `path`, atomically and durably: built under a temporary
/// name beside it (`.<name>.tmp-<pid>-<n>`, as [`crate::file_safety::atomic_write`] names its
/// temporaries, which a backend's next writer removes if a crash leaves one), fsynced, renamed
/// over `path`, the directory fsynced. With `cancel`, the build stops
/// with an error at its next write or read once the flag is set (a background merge the writer
/// no longer needs); the temporary is removed on every error.
///
/// ```
/// use stowage_core::key_runs::{KeyRun, RunSpec, write_run_file};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("run.bin");
/// let spec = RunSpec { first: 0, through: 0, stamp: 0 };
/// let header = write_run_file(&path, &[], &[(5, 1)], spec, |_, _| false, |_, _| false, None)?;
/// assert_eq!(KeyRun::from_bytes(&path, std::fs::read(&path)?)?.header(), header);
/// assert_eq!(std::fs::read_dir(dir.path())?.count(), 1, "no temporary left");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Errors: as [`build_run_to`]; [`Error::Io`] naming the temporary or `path`, and "cancelled"
/// once `cancel` is set.
#[allow(clippy::too_many_arguments)] // build_run_to's, plus the path and the flag
pub fn write_run_file(
    path: &Path,
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    spec: RunSpec,
    same_key: impl FnMut(u64, u64) -> bool,
    in_older: impl FnMut(u64, u64) -> bool,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<RunHeader> {
    let dir = crate::file_safety::parent_dir(path);
    let name = path.file_name().ok_or_else(|| {
        Error::invalid(format!("a key index run needs a file name, got {}", path.display()))
    })?;
    let (temp, file) = crate::file_safety::create_temp_read_write(dir, name).at(path)?;
    let written = (|| {
        let mut file = Cancellable { file, cancel };
        let header = build_run_to(&mut file, &temp, inputs, fresh, spec, same_key, in_older)?;
        let file = file.file;
        file.sync_all().at(&temp)?;
        drop(file);
        std::fs::rename(&temp, path).at(path)?;
        crate::file_safety::fsync_dir(dir)?;
        Ok(header)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A run file being written that stops (with an error) at its next write or read once `cancel`
/// is set.
struct Cancellable<'a> {
    file: std::fs::File,
    cancel: Option<&'a std::sync::atomic::AtomicBool>,
}

impl Cancellable<'_> {
    fn check(&self) -> std::io::Result<()> {
        match self.cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
            true => Err(std::io::Error::other("the key index run's build was cancelled")),
            false => Ok(()),
        }
    }
}

impl Write for Cancellable<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.check()?;
        self.file.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Read for Cancellable<'_> {
    fn read(&mut self, bytes: &mut [u8]) -> std::io::Result<usize> {
        self.check()?;
        self.file.read(bytes)
    }
}

impl Seek for Cancellable<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(to)
    }
}

/// The buffer of [`build_run_to`].
const STREAM_BUFFER: usize = 1 << 20;

/// The checks every build starts with; the new table's capacity.
fn check_build(inputs: &[&KeyRun], fresh: &[(u64, u64)], spec: RunSpec) -> Result<usize> {
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
    capacity_for(input_keys, fresh.len())
}

fn write_slot(slot: &mut [u8], hash: u64, payload: u64) {
    slot[..8].copy_from_slice(&hash.to_le_bytes());
    slot[8..16].copy_from_slice(&payload.to_le_bytes());
}

/// The 80 header bytes of a version 2 run with `fields` (version to body checksum).
fn header_bytes(fields: [u64; 8]) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(&MAGIC);
    for (i, value) in fields.iter().enumerate() {
        header[8 + 8 * i..16 + 8 * i].copy_from_slice(&value.to_le_bytes());
    }
    let header_checksum = xxh3_64(&header[..HEADER_LEN - 8]);
    header[HEADER_LEN - 8..].copy_from_slice(&header_checksum.to_le_bytes());
    header
}

/// What a merge wrote, but for the wrapped entries, which the caller places.
struct Merged {
    keys: u64,
    new_keys: u64,
    /// The entries that ran past the last slot, in hash order: for the first empty slots.
    wrapped: Vec<(u64, u64)>,
}

impl Merged {
    fn header_fields(&self, capacity: usize, spec: RunSpec, body_checksum: u64) -> [u64; 8] {
        [
            VERSION,
            self.keys,
            capacity as u64,
            spec.first,
            spec.through,
            self.new_keys,
            spec.stamp,
            body_checksum,
        ]
    }
}

/// Where a merge writes its slots, front to back.
trait SlotSink {
    /// Appends `count` empty slots.
    fn zeros(&mut self, count: usize) -> Result<()>;
    /// Appends one slot.
    fn slot(&mut self, hash: u64, payload: u64) -> Result<()>;
}

/// The caller's buffer.
struct SliceSink<'a> {
    body: &'a mut [u8],
    /// Bytes written.
    at: usize,
}

impl SlotSink for SliceSink<'_> {
    fn zeros(&mut self, count: usize) -> Result<()> {
        let end = self.at + count * SLOT_LEN;
        self.body[self.at..end].fill(0);
        self.at = end;
        Ok(())
    }

    #[inline]
    fn slot(&mut self, hash: u64, payload: u64) -> Result<()> {
        write_slot(&mut self.body[self.at..self.at + SLOT_LEN], hash, payload);
        self.at += SLOT_LEN;
        Ok(())
    }
}

/// A file, through a buffer.
struct StreamSink<'a, W: Write> {
    out: BufWriter<W>,
    path: &'a Path,
}

impl<W: Write> SlotSink for StreamSink<'_, W> {
    fn zeros(&mut self, count: usize) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut left = count * SLOT_LEN;
        while left > 0 {
            let n = left.min(ZEROS.len());
            self.out.write_all(&ZEROS[..n]).at(self.path)?;
            left -= n;
        }
        Ok(())
    }

    #[inline]
    fn slot(&mut self, hash: u64, payload: u64) -> Result<()> {
        let mut slot = [0u8; SLOT_LEN];
        write_slot(&mut slot, hash, payload);
        self.out.write_all(&slot).at(self.path)
    }
}

/// The streaming k-way merge of `inputs` (each read in hash order) and `fresh` (sorted by hash,
/// stably) into `sink`, a table of `capacity` slots written front to back.
fn merge<S: SlotSink>(
    sink: S,
    capacity: usize,
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    mut same_key: impl FnMut(u64, u64) -> bool,
    mut in_older: impl FnMut(u64, u64) -> bool,
) -> Result<(Merged, S)> {
    let mut sources: Vec<Source<'_>> = inputs.iter().map(|run| Source::of(run)).collect();
    let mut sorted = fresh.to_vec();
    // Stable: a key's later entries stay after its earlier ones.
    sorted.sort_by_key(|&(hash, _)| hash);
    let mut output = Output::new(sink, capacity);
    let mut heads: Vec<Option<(u64, u64)>> = sources.iter_mut().map(Source::next).collect();
    let mut next_fresh = 0;
    let mut keys = 0u64;
    let mut new_keys: u64 = inputs.iter().map(|run| run.new_keys()).sum();
    // The payloads of the keys of one hash, in the order they are written out.
    let mut group: Vec<u64> = Vec::new();
    let out_of_order = |source: &Source| {
        Error::corrupted(
            source.path(),
            "key index run: slots out of hash order (changed after it was verified?)",
        )
    };
    loop {
        // The smallest head (the first source holding it: inputs oldest first, then fresh) and
        // the smallest head of the other sources.
        let mut first: Option<(u64, usize)> = None;
        let mut second: Option<u64> = None;
        let fresh_head = sorted.get(next_fresh).map(|&(hash, _)| hash);
        let all_heads = heads.iter().map(|head| head.map(|(hash, _)| hash)).chain([fresh_head]);
        for (s, hash) in all_heads.enumerate() {
            let Some(hash) = hash else { continue };
            match first {
                None => first = Some((hash, s)),
                Some((least, _)) if hash < least => {
                    second = Some(least);
                    first = Some((hash, s));
                }
                Some(_) => second = Some(second.map_or(hash, |b| b.min(hash))),
            }
        }
        let Some((hash, s)) = first else { break };
        if s < heads.len() && second.is_none_or(|bound| bound > hash) {
            // Only input `s` holds the hashes below `second`: its slots are copied as they are
            // (a run holds each key once, so none replaces another).
            let (head, source) = (&mut heads[s], &mut sources[s]);
            while let Some((hash, payload)) = head.filter(|&(h, _)| second.is_none_or(|b| h < b)) {
                output.push(hash, payload)?;
                keys += 1;
                *head = source.next();
                if head.is_some_and(|(next, _)| next < hash) {
                    return Err(out_of_order(source));
                }
            }
            continue;
        }
        group.clear();
        for (position, (head, source)) in heads.iter_mut().zip(&mut sources).enumerate() {
            while let Some((_, payload)) = head.filter(|&(h, _)| h == hash) {
                // The oldest input holds each key once: none of its slots can replace another.
                let replaces = if position == 0 {
                    None
                } else {
                    group.iter().position(|&held| same_key(held, payload))
                };
                match replaces {
                    Some(i) => group[i] = payload,
                    None => {
                        // Each input counted as new only the keys no run before it holds: the
                        // counts add.
                        group.push(payload);
                        keys += 1;
                    }
                }
                *head = source.next();
                if head.is_some_and(|(next, _)| next < hash) {
                    return Err(out_of_order(source));
                }
            }
        }
        while let Some(&(_, payload)) = sorted.get(next_fresh).filter(|&&(h, _)| h == hash) {
            next_fresh += 1;
            match group.iter().position(|&held| same_key(held, payload)) {
                Some(i) => group[i] = payload,
                None => {
                    group.push(payload);
                    keys += 1;
                    new_keys += u64::from(!in_older(hash, payload));
                }
            }
        }
        for &payload in &group {
            output.push(hash, payload)?;
        }
    }
    let (sink, wrapped) = output.finish()?;
    Ok((Merged { keys, new_keys, wrapped }, sink))
}

/// An input of a merge, read in hash order.
enum Source<'a> {
    /// A version 2 run: its slots in position order, the wrapped ones (collected from the front
    /// cluster first) last.
    Placed {
        run: &'a KeyRun,
        body: &'a [u8],
        shift: u32,
        next: usize,
        front: usize,
        wrapped: std::vec::IntoIter<(u64, u64)>,
    },
    /// A version 1 run's slots, sorted by hash.
    Sorted { run: &'a KeyRun, slots: std::vec::IntoIter<(u64, u64)> },
}

impl<'a> Source<'a> {
    fn of(run: &'a KeyRun) -> Source<'a> {
        if run.version == 1 {
            let mut slots: Vec<(u64, u64)> = run.slots().collect();
            slots.sort_unstable();
            return Source::Sorted { run, slots: slots.into_iter() };
        }
        let capacity = run.mask + 1;
        let front = (0..capacity).find(|&i| run.slot(i).1 == 0).unwrap_or(capacity);
        let wrapped: Vec<(u64, u64)> = (0..front)
            .map(|i| (i, run.slot(i)))
            .filter(|&(i, (hash, _))| run.home(hash) > i)
            .map(|(_, slot)| slot)
            .collect();
        let (body, shift) = (run.body(), run.shift);
        Source::Placed { run, body, shift, next: 0, front, wrapped: wrapped.into_iter() }
    }

    fn path(&self) -> &Path {
        match self {
            Source::Placed { run, .. } | Source::Sorted { run, .. } => run.path(),
        }
    }

    #[inline]
    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            Source::Sorted { slots, .. } => slots.next(),
            Source::Placed { body, shift, next, front, wrapped, .. } => {
                while let Some(slot) = body.get(*next * SLOT_LEN..(*next + 1) * SLOT_LEN) {
                    let i = *next;
                    *next += 1;
                    let (hash, payload) = (read_u64(slot, 0), read_u64(slot, 8));
                    if payload != 0 && !(i < *front && home_slot(hash, *shift) > i) {
                        return Some((hash, payload));
                    }
                }
                wrapped.next()
            }
        }
    }
}

/// A version 2 table written front to back: each entry at its home slot or right after the
/// previous one; the entries that run past the last slot are handed back for the first empty
/// slots at the front.
struct Output<S> {
    sink: S,
    shift: u32,
    capacity: usize,
    /// Slots before it are written (or zeroed).
    written: usize,
    wrapped: Vec<(u64, u64)>,
}

impl<S: SlotSink> Output<S> {
    fn new(sink: S, capacity: usize) -> Output<S> {
        let shift = 64 - capacity.trailing_zeros();
        Output { sink, shift, capacity, written: 0, wrapped: Vec::new() }
    }

    #[inline]
    fn push(&mut self, hash: u64, payload: u64) -> Result<()> {
        let i = home_slot(hash, self.shift).max(self.written);
        if i >= self.capacity {
            self.wrapped.push((hash, payload));
            return Ok(());
        }
        if i > self.written {
            self.sink.zeros(i - self.written)?;
        }
        self.sink.slot(hash, payload)?;
        self.written = i + 1;
        Ok(())
    }

    /// The sink, every slot written, and the wrapped entries.
    fn finish(mut self) -> Result<(S, Vec<(u64, u64)>)> {
        self.sink.zeros(self.capacity - self.written)?;
        if self.wrapped.len() >= self.capacity {
            return Err(Error::invalid("a key index run with more keys than slots"));
        }
        Ok((self.sink, self.wrapped))
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

    /// The header fields after the magic, as u64s.
    fn header_fields(bytes: &[u8]) -> Vec<u64> {
        bytes[8..HEADER_LEN]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The body of a table of 16 slots holding `slots` (slot, hash, payload).
    fn body_of(slots: &[(usize, u64, u64)]) -> Vec<u8> {
        let mut body = vec![0u8; 16 * SLOT_LEN];
        for &(slot, hash, payload) in slots {
            body[slot * 16..slot * 16 + 8].copy_from_slice(&hash.to_le_bytes());
            body[slot * 16 + 8..slot * 16 + 16].copy_from_slice(&payload.to_le_bytes());
        }
        body
    }

    /// A version 1 run, built as the version 1 code built it (hash-table inserts at
    /// `hash & mask`, fresh entries only): what caches written before version 2 hold.
    fn build_v1(
        fresh: &[(u64, u64)],
        spec: RunSpec,
        mut same_key: impl FnMut(u64, u64) -> bool,
        mut in_older: impl FnMut(u64, u64) -> bool,
    ) -> Vec<u8> {
        let capacity = capacity_for(0, fresh.len()).unwrap();
        let mask = capacity - 1;
        let mut bytes = vec![0u8; HEADER_LEN + capacity * SLOT_LEN];
        let (mut keys, mut new_keys) = (0u64, 0u64);
        for &(hash, payload) in fresh {
            let mut i = hash as usize & mask;
            loop {
                let at = HEADER_LEN + i * SLOT_LEN;
                let held = read_u64(&bytes, at + 8);
                if held == 0 {
                    keys += 1;
                    new_keys += u64::from(!in_older(hash, payload));
                    break;
                }
                if read_u64(&bytes, at) == hash && same_key(held, payload) {
                    break;
                }
                i = (i + 1) & mask;
            }
            let at = HEADER_LEN + i * SLOT_LEN;
            bytes[at..at + 8].copy_from_slice(&hash.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&payload.to_le_bytes());
        }
        let body_checksum = xxh3_64(&bytes[HEADER_LEN..]);
        bytes[..8].copy_from_slice(&MAGIC);
        let fields = [
            1,
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
        bytes
    }

    #[test]
    fn golden_bytes_of_a_small_version_2_run() {
        // Home slot = the hash's top 4 bits at 16 slots. a and b share slot 1 (b, the larger
        // hash, goes after a); d sits in the last slot and e, after it, wraps to slot 0. Given out
        // of hash order: the build sorts them.
        let (a, b, c) = (0x1000_0000_0000_0001, 0x1000_0000_0000_0011, 0x3000_0000_0000_0003);
        let (d, e) = (0xf000_0000_0000_0005u64, 0xf000_0000_0000_0009u64);
        let bytes = build_run(
            &[],
            &[(b, 6), (a, 5), (c, 7), (e, 9), (d, 8)],
            RunSpec { first: 2, through: 4, stamp: 9 },
            |_, _| false,
            |h, _| h == c,
        )
        .unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + 16 * SLOT_LEN);
        let body = body_of(&[(0, e, 9), (1, a, 5), (2, b, 6), (3, c, 7), (15, d, 8)]);
        assert_eq!(&bytes[HEADER_LEN..], &body[..]);
        assert_eq!(&bytes[..8], b"STWKRUN1");
        let header = header_fields(&bytes);
        // version, keys, capacity, first, through, new keys, stamp
        assert_eq!(header[..7], [2, 5, 16, 2, 4, 4, 9]);
        assert_eq!(header[7], xxh3_64(&body));
        assert_eq!(header[8], xxh3_64(&bytes[..72]));
        // The exact bytes, pinned: any change to the format shows here.
        assert_eq!(format!("{:016x}", xxh3_64(&bytes)), GOLDEN_RUN_V2_XXH3);
        let run = KeyRun::from_bytes("golden", bytes).unwrap();
        run.verify().unwrap();
        assert_eq!(run.version(), 2);
        for (hash, payload) in [(a, 5), (b, 6), (c, 7), (d, 8), (e, 9)] {
            assert_eq!(run.find(hash, |p| p == payload), Some(payload), "{hash:#x}");
        }
        assert_eq!(run.find(b, |p| p == 5), None, "slot 1's hash is a, not b");
        // Read back in hash order, the wrapped entry last.
        let mut source = Source::of(&run);
        let order: Vec<u64> = std::iter::from_fn(|| source.next()).map(|(_, p)| p).collect();
        assert_eq!(order, [5, 6, 7, 8, 9]);
    }

    /// xxh3 of the whole version 2 golden run above.
    const GOLDEN_RUN_V2_XXH3: &str = "51c3ab1c0d28df47";

    #[test]
    fn golden_bytes_of_a_small_version_1_run_are_still_read() {
        // The version 1 golden run: hashes chosen by hand so the slots are predictable (home
        // slot = hash & 15): 1 and 17 collide in slot 1.
        let bytes = build_v1(
            &[(1, 5), (17, 6), (3, 7)],
            RunSpec { first: 2, through: 4, stamp: 9 },
            |_, _| false,
            |h, _| h == 3,
        );
        assert_eq!(bytes.len(), HEADER_LEN + 16 * SLOT_LEN);
        let body = body_of(&[(1, 1, 5), (2, 17, 6), (3, 3, 7)]);
        assert_eq!(&bytes[HEADER_LEN..], &body[..]);
        assert_eq!(&bytes[..8], b"STWKRUN1");
        let header = header_fields(&bytes);
        assert_eq!(header[..7], [1, 3, 16, 2, 4, 2, 9]);
        assert_eq!(header[7], xxh3_64(&body));
        assert_eq!(header[8], xxh3_64(&bytes[..72]));
        // The bytes the version 1 code wrote, pinned by its own golden test.
        assert_eq!(format!("{:016x}", xxh3_64(&bytes)), GOLDEN_RUN_XXH3);
        let run = KeyRun::from_bytes("golden", bytes).unwrap();
        run.verify().unwrap();
        assert_eq!(run.version(), 1);
        assert_eq!(run.find(17, |p| p == 6), Some(6));
        assert_eq!(run.find(17, |p| p == 5), None, "slot 1's hash is 1, not 17");
        assert_eq!(run.find(3, |p| p == 7), Some(7));
        // Merged (sorted first), it becomes a version 2 run.
        let merged = build_run(
            &[&run],
            &[(17, 8)],
            spec(2, 5),
            |a, b| a.min(b) == 6 && a.max(b) == 8,
            |_, _| false,
        )
        .unwrap();
        let merged = KeyRun::from_bytes("merged", merged).unwrap();
        merged.verify().unwrap();
        assert_eq!((merged.version(), merged.keys(), merged.new_keys()), (2, 3, 2));
        assert_eq!(merged.find(17, |p| p == 8), Some(8));
        assert_eq!(merged.find(1, |p| p == 5), Some(5));
    }

    /// xxh3 of the whole version 1 golden run (unchanged since version 1).
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
            (0, 0),
            (0, 3),
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

    /// A tiny deterministic generator (xorshift), so the model test needs no dependency.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Merges of runs (version 2 and version 1 inputs) against a model: after every merge each
    /// key's latest payload is found, the run verifies, and the counts match. Hashes are drawn
    /// from few values (collisions), many near the top (wrapping past the last slot).
    #[test]
    fn merges_match_a_model_with_collisions_and_wrapped_slots() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..60 {
            // Key k's hash: a few distinct values, half of them in the top 1/64 of the range.
            let keys = 1 + xorshift(&mut state) % 300;
            let hashes: Vec<u64> = (0..keys)
                .map(|_| match xorshift(&mut state) % 4 {
                    0 => u64::MAX - xorshift(&mut state) % 4,
                    1 => xorshift(&mut state) | 0xfc00_0000_0000_0000,
                    2 => xorshift(&mut state) % 8,
                    _ => xorshift(&mut state),
                })
                .collect();
            // payload -> key; every write a new payload.
            let mut key_of: Vec<u64> = vec![u64::MAX];
            let mut runs: Vec<KeyRun> = Vec::new();
            let mut latest: std::collections::BTreeMap<u64, u64> = Default::default();
            for batch in 0..6u64 {
                let unit = batch;
                let fresh: Vec<(u64, u64)> = (0..1 + xorshift(&mut state) % 120)
                    .map(|_| {
                        let key = xorshift(&mut state) % keys;
                        key_of.push(key);
                        (hashes[key as usize], key_of.len() as u64 - 1)
                    })
                    .collect();
                let same = |a: u64, b: u64| key_of[a as usize] == key_of[b as usize];
                let run_keys: Vec<u64> = runs.iter().map(KeyRun::keys).collect();
                let taken = plan_merge(&run_keys, fresh.len() as u64);
                let kept = runs.len() - taken;
                let older: std::collections::BTreeSet<u64> = runs[..kept]
                    .iter()
                    .flat_map(|run| run.slots().map(|(_, p)| key_of[p as usize]))
                    .collect();
                let in_older = |_, payload: u64| older.contains(&key_of[payload as usize]);
                let first = runs.get(kept).map_or(unit, KeyRun::first);
                let spec = spec(first, unit);
                let bytes = if round % 3 == 0 && taken == 0 {
                    // Now and then a version 1 run, as caches written before version 2 hold.
                    build_v1(&fresh, spec, same, in_older)
                } else {
                    let inputs: Vec<&KeyRun> = runs[kept..].iter().collect();
                    let bytes = build_run(&inputs, &fresh, spec, same, in_older).unwrap();
                    // Streamed into a file, the same bytes.
                    let mut file = std::io::Cursor::new(vec![0xa5u8; 3]);
                    let header =
                        build_run_to(&mut file, "f", &inputs, &fresh, spec, same, in_older);
                    assert_eq!(file.get_ref(), &bytes, "round {round} batch {batch}");
                    assert_eq!(header.unwrap(), parse_header(&bytes).unwrap().1);
                    bytes
                };
                for &(_, payload) in &fresh {
                    latest.insert(key_of[payload as usize], payload);
                }
                let run = KeyRun::from_bytes(format!("run{round}_{batch}"), bytes).unwrap();
                run.verify().unwrap();
                runs.truncate(kept);
                runs.push(run);
                let total: u64 = runs.iter().map(KeyRun::new_keys).sum();
                assert_eq!(total, latest.len() as u64, "round {round} batch {batch}");
                for (&key, &payload) in &latest {
                    let hash = hashes[key as usize];
                    let found = runs
                        .iter()
                        .rev()
                        .find_map(|run| run.find(hash, |p| key_of[p as usize] == key));
                    assert_eq!(found, Some(payload), "round {round} batch {batch} key {key}");
                }
            }
        }
    }

    /// A version 2 table whose slots are not where a hash-order build puts them (with valid
    /// checksums: a writer's bug) fails `verify`, so it is never merged; lookups still only
    /// return confirmed payloads.
    #[test]
    fn misplaced_slots_fail_verify_and_are_never_merged() {
        let (a, b, c) =
            (0x1000_0000_0000_0001u64, 0x1000_0000_0000_0011u64, 0x3000_0000_0000_0003u64);
        let (d, e) = (0xf000_0000_0000_0005u64, 0xf000_0000_0000_0009u64);
        let good = [(0, e, 9), (1, a, 5), (2, b, 6), (3, c, 7), (15, d, 8)];
        let with_body = |slots: &[(usize, u64, u64)]| {
            let body = body_of(slots);
            let mut bytes = build_run(
                &[],
                &[(a, 5), (b, 6), (c, 7), (d, 8), (e, 9)],
                spec(0, 0),
                |_, _| false,
                |_, _| false,
            )
            .unwrap();
            bytes[HEADER_LEN..].copy_from_slice(&body);
            bytes[8 + 8 * 7..16 + 8 * 7].copy_from_slice(&xxh3_64(&body).to_le_bytes());
            let sum = xxh3_64(&bytes[..HEADER_LEN - 8]);
            bytes[HEADER_LEN - 8..HEADER_LEN].copy_from_slice(&sum.to_le_bytes());
            KeyRun::from_bytes("misplaced.bin", bytes).unwrap()
        };
        with_body(&good).verify().unwrap();
        for (why, slots) in [
            ("a and b swapped", vec![(0, e, 9), (1, b, 6), (2, a, 5), (3, c, 7), (15, d, 8)]),
            ("c before its home", vec![(0, e, 9), (1, a, 5), (2, c, 7), (3, b, 6), (15, d, 8)]),
            ("a gap in a cluster", vec![(0, e, 9), (1, a, 5), (3, b, 6), (4, c, 7), (15, d, 8)]),
            (
                "wrapped with the last slot empty",
                vec![(0, e, 9), (1, a, 5), (2, b, 6), (3, c, 7), (14, d, 8)],
            ),
            (
                "wrapped below the last hash",
                vec![(0, d, 8), (1, a, 5), (2, b, 6), (3, c, 7), (15, e, 9)],
            ),
            ("wrapped after a gap", vec![(1, a, 5), (2, b, 6), (3, c, 7), (5, e, 9), (15, d, 8)]),
        ] {
            let run = with_body(&slots);
            let err = run.verify().unwrap_err();
            assert!(err.to_string().contains("misplaced.bin"), "{why}: {err}");
            let merged = build_run(&[&run], &[(1, 1)], spec(0, 1), |_, _| false, |_, _| false);
            assert!(matches!(merged, Err(Error::Corrupted { .. })), "{why}");
            for (_, hash, payload) in good {
                if let Some(found) = run.find(hash, |p| p == payload) {
                    assert_eq!(found, payload, "{why}");
                }
            }
        }
    }

    /// Every entry of a run may wrap: all hashes in the last slot's range.
    #[test]
    fn a_run_whose_entries_all_wrap_is_found_and_merged() {
        let fresh: Vec<(u64, u64)> = (0..12).map(|i| (u64::MAX - 11 + i, i + 1)).collect();
        let run = build_run(&[], &fresh, spec(0, 0), |a, b| a == b, |_, _| false).unwrap();
        let run = KeyRun::from_bytes("wrapped", run).unwrap();
        run.verify().unwrap();
        for &(hash, payload) in &fresh {
            assert_eq!(run.find(hash, |p| p == payload), Some(payload));
        }
        let more: Vec<(u64, u64)> = (0..3).map(|i| (u64::MAX - 100 + i, 100 + i)).collect();
        let merged = build_run(&[&run], &more, spec(0, 1), |a, b| a == b, |_, _| false).unwrap();
        let mut file = std::io::Cursor::new(Vec::new());
        build_run_to(&mut file, "f", &[&run], &more, spec(0, 1), |a, b| a == b, |_, _| false)
            .unwrap();
        assert_eq!(file.into_inner(), merged);
        let merged = KeyRun::from_bytes("merged", merged).unwrap();
        merged.verify().unwrap();
        assert_eq!(merged.keys(), 15);
        for &(hash, payload) in fresh.iter().chain(&more) {
            assert_eq!(merged.find(hash, |p| p == payload), Some(payload));
        }
        let mut source = Source::of(&merged);
        let order: Vec<u64> = std::iter::from_fn(|| source.next()).map(|(h, _)| h).collect();
        assert!(order.is_sorted() && order.len() == 15, "{order:x?}");
    }
}
