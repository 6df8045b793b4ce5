//! The segment commit log (`stowage.log`): what a cache that writes its samples in immutable
//! segment files has committed, as JSON records of the core's checksummed [`AppendLog`], and the
//! finalized marker (`stowage.complete`) beside it.
//!
//! ```text
//! record 0   {"cache": {"format": "<name>", "version": N, "schema": {...}, <the format's own
//!                       header fields>}}
//! then       {"segment": {"id": 0, ...}}      one per committed segment, ids increasing
//!            {"<kind>": ...}                  the format's own record kinds
//!            {"finalized": null}              after finalize
//! ```
//!
//! A segment is committed once its record is durable; its file is written, fsynced and renamed
//! into place before. A crash between the rename and the record leaves a file no reader uses.
//! The log also makes every loss visible: a committed segment whose file is missing or of
//! another size is damage, not an empty cache. The schema lives in the header, under the log's
//! checksums, so a flipped byte can never rename a field or change a dtype.
//!
//! The cache is finalized once a `finalized` record is read; a segment committed after it (an
//! append to a finalized cache) unfinalizes it until the next finalize. Finalize then writes
//! `stowage.complete` ([`FinalizedMarker`]) with the number of records, so that a log cut short
//! (which silently drops the `finalized` record and the commits after it) is damage that
//! `validate` reports ([`Committed::check_marker`]), not an unfinished cache.
//!
//! A backend describes its log with a [`SegmentLog`]: its format name and versions, the fields
//! it adds to the header, its segment entry, and the record kinds of its own with what they build
//! ([`SegmentLog::State`]). stowage-arrow adds key index runs, compactions and adoptions;
//! stowage-hdf5 adds nothing but a checksum in its segment entry.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use stowage_core::file_safety::AppendLog;
//! use stowage_core::segment_log::{
//!     self, CommittedSegment, Committed, NoExtension, NoRecords, Record, SegmentLog,
//! };
//! use stowage_core::{DType, Schema, ShapeRule};
//!
//! #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
//! struct Entry {
//!     id: u64,
//!     rows: u64,
//! }
//! impl CommittedSegment for Entry {
//!     fn id(&self) -> u64 {
//!         self.id
//!     }
//! }
//!
//! #[derive(Debug, Clone, Copy, PartialEq)]
//! enum ToyLog {}
//! impl SegmentLog for ToyLog {
//!     const FORMAT_NAME: &'static str = "toy";
//!     const FORMAT_VERSION: u32 = 1;
//!     const CACHE_NAME: &'static str = "toy cache";
//!     type HeaderExtension = NoExtension;
//!     type Segment = Entry;
//!     type Record = NoRecords;
//!     type State = ();
//!     fn replay(_: &mut Committed<Self>, record: NoRecords) -> Result<(), String> {
//!         match record {}
//!     }
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("stowage.log");
//! let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
//! let header = Record::<ToyLog>::Cache(ToyLog::new_header(schema, NoExtension {}));
//! let mut log = AppendLog::create_new(&path, &header.to_bytes())?;
//! log.append(&Record::<ToyLog>::Segment(Entry { id: 0, rows: 2 }).to_bytes())?;
//! log.append(&Record::<ToyLog>::Finalized.to_bytes())?;
//! log.sync()?;
//! let committed = segment_log::read::<ToyLog>(&path)?;
//! assert_eq!((committed.segments.len(), committed.finalized, committed.records), (1, true, 3));
//! assert_eq!(committed.next_segment_id(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::file_safety::{AppendLog, Recovered, atomic_write};
use crate::{Error, Result, Schema, ValidationReport};

/// The name of the finalized marker file beside the log ([`FinalizedMarker`]).
pub const FINALIZED_MARKER_NAME: &str = "stowage.complete";

/// One format of segment log: what a backend adds to the records every segment log has.
///
/// Implemented by a marker type (an enum without variants); it derives `Debug`, `Clone` and
/// `PartialEq` so that the records and states built on it do.
pub trait SegmentLog: Debug + Clone + PartialEq + Sized {
    /// The format name the header records (and [`crate::recognize`] reads).
    const FORMAT_NAME: &'static str;
    /// The version new caches are created with.
    const FORMAT_VERSION: u32;
    /// The oldest version still read (and appended to as it is).
    const OLDEST_VERSION: u32 = Self::FORMAT_VERSION;
    /// What a missing log means, for [`Error::NotFound`]: "stowage Arrow cache".
    const CACHE_NAME: &'static str;

    /// The header fields after format, version and schema ([`NoExtension`] for none): they
    /// are written into the header record itself (serde's `flatten`).
    type HeaderExtension: Serialize + DeserializeOwned + Clone + Debug + PartialEq;
    /// One committed segment, as its `segment` record holds it.
    type Segment: CommittedSegment + Serialize + DeserializeOwned + Clone + Debug + PartialEq;
    /// The record kinds of the format's own ([`NoRecords`] for none): an externally tagged enum
    /// (`{"<kind>": ...}`) none of whose kinds is `cache`, `segment` or `finalized`.
    type Record: Serialize + DeserializeOwned + Clone + Debug + PartialEq;
    /// What the format's own records build while the log is replayed (`()` for nothing).
    type State: Default + Clone + Debug + PartialEq;

    /// The header of a new cache of `schema`: this format, its current version.
    fn new_header(
        schema: Schema,
        extension: Self::HeaderExtension,
    ) -> CacheHeader<Self::HeaderExtension> {
        CacheHeader {
            format: Self::FORMAT_NAME.to_owned(),
            version: Self::FORMAT_VERSION,
            schema,
            extension,
        }
    }

    /// Checks a header whose format and version this format reads further (the extension
    /// against the version and the schema); the error says what is wrong with it.
    fn check_header(
        header: &CacheHeader<Self::HeaderExtension>,
    ) -> std::result::Result<(), String> {
        let _ = header;
        Ok(())
    }

    /// Applies one of the format's own records to what the log has committed so far; the error
    /// says why the record cannot follow the ones before.
    fn replay(
        committed: &mut Committed<Self>,
        record: Self::Record,
    ) -> std::result::Result<(), String>;

    /// The highest id of a segment that is no longer committed (a compaction replaced it):
    /// new segments get higher ids, so that no id is used twice.
    fn highest_retired(state: &Self::State) -> Option<u64> {
        let _ = state;
        None
    }
}

/// A segment entry: the log checks that ids increase.
pub trait CommittedSegment {
    /// The segment's id (its file name is built from it).
    fn id(&self) -> u64;
}

/// The first record: what the cache is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheHeader<X> {
    /// The format name ([`SegmentLog::FORMAT_NAME`]).
    pub format: String,
    /// The version the cache was created with.
    pub version: u32,
    /// The stowage schema the cache was created with.
    pub schema: Schema,
    /// The format's own header fields, written beside the ones above.
    #[serde(flatten)]
    pub extension: X,
}

/// No header fields of the format's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoExtension {}

/// No record kinds of the format's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoRecords {}

/// One log record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<F: SegmentLog> {
    /// The header, always first.
    Cache(CacheHeader<F::HeaderExtension>),
    /// A committed segment.
    Segment(F::Segment),
    /// The cache was finalized.
    Finalized,
    /// A record of the format's own kinds.
    Own(F::Record),
}

impl<F: SegmentLog> Serialize for Record<F> {
    /// `{"cache": ...}`, `{"segment": ...}`, `{"finalized": null}`, or the format's own record
    /// as it serializes itself.
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Record::Cache(header) => {
                serializer.serialize_newtype_variant("Record", 0, "cache", header)
            }
            Record::Segment(entry) => {
                serializer.serialize_newtype_variant("Record", 1, "segment", entry)
            }
            Record::Finalized => {
                serializer.serialize_newtype_variant("Record", 2, "finalized", &())
            }
            Record::Own(record) => record.serialize(serializer),
        }
    }
}

impl<F: SegmentLog> Record<F> {
    /// The record as the log stores it.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("records serialize")
    }

    /// The record stored as `bytes`; the error says what does not parse, and in which kind.
    ///
    /// The body is parsed straight into its type (a log of a million segment records is read
    /// at every open), with no JSON tree in between.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Record<F>, String> {
        let map: BTreeMap<String, &RawValue> = serde_json::from_slice(bytes).map_err(|e| {
            match serde_json::from_slice::<Value>(bytes) {
                Ok(value) if !value.is_object() => {
                    format!("{value} is not a record (an object of one key, its kind)")
                }
                _ => e.to_string(),
            }
        })?;
        let entries: Vec<(&String, &&RawValue)> = map.iter().collect();
        let [(kind, body)] = entries.as_slice() else {
            let keys: Vec<&String> = map.keys().collect();
            return Err(format!("an object with keys {keys:?}, not a record of one kind"));
        };
        let of_kind = |e: serde_json::Error| format!("{kind:?} record: {e}");
        let body = body.get();
        match kind.as_str() {
            "cache" => serde_json::from_str(body).map(Record::Cache).map_err(of_kind),
            "segment" => serde_json::from_str(body).map(Record::Segment).map_err(of_kind),
            "finalized" => {
                serde_json::from_str::<()>(body).map(|()| Record::Finalized).map_err(of_kind)
            }
            _ => serde_json::from_slice(bytes).map(Record::Own).map_err(of_kind),
        }
    }
}

/// What a log says: the header, the committed segments in id order, whether the cache is
/// finalized, and what the format's own records built.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed<F: SegmentLog> {
    /// The first record.
    pub header: CacheHeader<F::HeaderExtension>,
    /// Every committed segment, ids increasing.
    pub segments: Vec<F::Segment>,
    /// Whether a `finalized` record came after the last committed segment.
    pub finalized: bool,
    /// Records in the log.
    pub records: u64,
    /// What the format's own records built.
    pub own: F::State,
}

impl<F: SegmentLog> Committed<F> {
    /// The state of a log that holds only `header`: nothing committed yet.
    pub fn new(header: CacheHeader<F::HeaderExtension>) -> Committed<F> {
        Committed {
            header,
            segments: Vec::new(),
            finalized: false,
            records: 1,
            own: F::State::default(),
        }
    }

    /// The committed segment ids, ascending.
    pub fn ids(&self) -> Vec<u64> {
        self.segments.iter().map(CommittedSegment::id).collect()
    }

    /// The id the next segment gets: above every committed one and every retired one
    /// ([`SegmentLog::highest_retired`]).
    pub fn next_segment_id(&self) -> u64 {
        let last = self.segments.last().map(CommittedSegment::id);
        last.max(F::highest_retired(&self.own)).map_or(0, |id| id + 1)
    }

    /// Commits `entry` after the committed segments; its id must be above every id so far
    /// ([`Committed::next_segment_id`]). Leaves `finalized` alone: a replayed `segment` record
    /// clears it, a compaction's segments do not.
    pub fn commit_segment(&mut self, entry: F::Segment) -> std::result::Result<(), String> {
        let next = self.next_segment_id();
        if next > 0 && entry.id() < next {
            return Err(format!("segment {} after segment {}", entry.id(), next - 1));
        }
        self.segments.push(entry);
        Ok(())
    }

    /// The marker finalize writes for the log as it stands.
    pub fn marker(&self) -> FinalizedMarker {
        FinalizedMarker { log_records: self.records }
    }

    /// Reads the finalized marker at `marker_path` and adds to `report` what makes it and the
    /// log at `log_path` (this state) damaged: a marker that does not read, a log that holds
    /// fewer records than the marker counts (cut short: its `finalized` record, and maybe
    /// commits, are lost), a finalized log without its marker. Returns the marker when it reads,
    /// for checks of the format's own.
    pub fn check_marker(
        &self,
        log_path: &Path,
        marker_path: &Path,
        report: &mut ValidationReport,
    ) -> Option<FinalizedMarker> {
        let marker = match FinalizedMarker::read(marker_path) {
            Ok(marker) => marker,
            Err(e) => {
                report.problem(Some(marker_path), None, e.to_string());
                return None;
            }
        };
        match marker {
            Some(marker) if marker.log_records > self.records => report.problem(
                Some(log_path),
                None,
                format!(
                    "holds {} complete records, {} says the cache was finalized at {}: the log \
                     was cut short",
                    self.records,
                    marker_path.display(),
                    marker.log_records
                ),
            ),
            None if self.finalized => report.problem(
                Some(marker_path),
                None,
                format!(
                    "missing, though {} says the cache was finalized (reopening for writing \
                     restores it)",
                    log_path.display()
                ),
            ),
            _ => {}
        }
        marker
    }
}

/// Reads the log at `path` without changing it. A torn last record (a writer appending, or a
/// crash) is not committed and is left alone.
///
/// Errors: [`Error::NotFound`] naming [`SegmentLog::CACHE_NAME`] when there is no log; as
/// [`interpret`] otherwise.
pub fn read<F: SegmentLog>(path: &Path) -> Result<Committed<F>> {
    let recovered = match AppendLog::read_all(path) {
        Err(Error::NotFound { .. }) => {
            return Err(Error::NotFound {
                what: format!("{} (no {})", F::CACHE_NAME, path.display()),
            });
        }
        other => other?,
    };
    interpret(path, &recovered)
}

/// The committed state of the records `recovered` from the log at `path` (see [`read`]).
///
/// Errors: [`Error::Corrupted`] naming the log when a record before the last is damaged or does
/// not parse, the header is missing or repeated, segment ids do not increase, or a record of
/// the format's own does not fit ([`SegmentLog::replay`]); [`Error::Incompatible`] for another
/// format or version.
pub fn interpret<F: SegmentLog>(path: &Path, recovered: &Recovered) -> Result<Committed<F>> {
    if let Some(damage) = recovered.damage.as_ref().filter(|d| d.is_mid_log()) {
        return Err(Error::corrupted(path, damage.to_string()));
    }
    let mut records = recovered.records.iter().enumerate().map(|(i, bytes)| {
        Record::<F>::decode(bytes)
            .map_err(|e| Error::corrupted(path, format!("record {i} does not parse: {e}")))
    });
    let header = match records.next().transpose()? {
        Some(Record::Cache(header)) => header,
        Some(other) => {
            return Err(Error::corrupted(path, format!("starts with {other:?}, not the header")));
        }
        None => return Err(Error::corrupted(path, "holds no header record")),
    };
    if header.format != F::FORMAT_NAME
        || !(F::OLDEST_VERSION..=F::FORMAT_VERSION).contains(&header.version)
    {
        let versions = match F::OLDEST_VERSION == F::FORMAT_VERSION {
            true => format!("version {}", F::FORMAT_VERSION),
            false => format!("versions {} to {}", F::OLDEST_VERSION, F::FORMAT_VERSION),
        };
        return Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "format {:?} version {}, this reader handles {:?} {versions}",
                header.format,
                header.version,
                F::FORMAT_NAME
            ),
        });
    }
    F::check_header(&header).map_err(|why| {
        Error::corrupted(path, format!("header of version {}: {why}", header.version))
    })?;
    let mut committed = Committed::<F>::new(header);
    committed.records = recovered.records.len() as u64;
    for (i, record) in records.enumerate() {
        let at = |detail: String| Error::corrupted(path, format!("record {}: {detail}", i + 1));
        match record? {
            Record::Segment(entry) => {
                committed.commit_segment(entry).map_err(at)?;
                committed.finalized = false;
            }
            Record::Finalized => committed.finalized = true,
            Record::Own(record) => F::replay(&mut committed, record).map_err(at)?,
            Record::Cache(_) => return Err(at("a second header".to_owned())),
        }
    }
    Ok(committed)
}

/// The finalized marker (the file `stowage.complete`): the log's record count when the cache was
/// last finalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalizedMarker {
    /// Records in the log then.
    pub log_records: u64,
}

impl FinalizedMarker {
    /// Reads the marker at `path`; `Ok(None)` when there is none.
    ///
    /// Errors: [`Error::Corrupted`] naming it when it does not parse; [`Error::Io`].
    pub fn read(path: &Path) -> Result<Option<FinalizedMarker>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::corrupted(path, format!("does not parse as a completion marker: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// The marker's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("markers serialize")
    }

    /// Writes the marker to `path`, atomically ([`atomic_write`]).
    ///
    /// Errors: [`Error::Io`] naming the file.
    pub fn write(&self, path: &Path) -> Result<()> {
        atomic_write(path, &self.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, ShapeRule};

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    struct Entry {
        id: u64,
        rows: u64,
    }

    impl CommittedSegment for Entry {
        fn id(&self) -> u64 {
            self.id
        }
    }

    /// A header field and a record kind of the format's own: a note, and `retire`, which
    /// withdraws a committed segment.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Note {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Own {
        Retire(u64),
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum TestLog {}

    /// Versions 2 and 3; version 3 has a note in its header.
    impl SegmentLog for TestLog {
        type HeaderExtension = Note;
        type Segment = Entry;
        type Record = Own;
        type State = Vec<u64>;
        const FORMAT_NAME: &'static str = "test-log";
        const CACHE_NAME: &'static str = "test cache";
        const OLDEST_VERSION: u32 = 2;
        const FORMAT_VERSION: u32 = 3;

        fn check_header(header: &CacheHeader<Note>) -> std::result::Result<(), String> {
            match (header.version, &header.extension.note) {
                (3, None) => Err("version 3 has a note".into()),
                _ => Ok(()),
            }
        }

        fn replay(committed: &mut Committed<Self>, record: Own) -> std::result::Result<(), String> {
            let Own::Retire(id) = record;
            let at = committed.segments.iter().position(|s| s.id == id);
            let at = at.ok_or_else(|| format!("retires segment {id}, not committed"))?;
            committed.segments.remove(at);
            committed.own.push(id);
            Ok(())
        }

        fn highest_retired(state: &Vec<u64>) -> Option<u64> {
            state.iter().copied().max()
        }
    }

    type R = Record<TestLog>;

    fn header() -> R {
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
        R::Cache(TestLog::new_header(schema, Note { note: Some("n".into()) }))
    }

    fn segment(id: u64) -> R {
        R::Segment(Entry { id, rows: 2 })
    }

    fn interpret_records(records: &[R]) -> Result<Committed<TestLog>> {
        let records = records.iter().map(R::to_bytes).collect();
        let recovered = Recovered { records, valid_len: 0, dropped_tail_bytes: 0, damage: None };
        interpret(Path::new("stowage.log"), &recovered)
    }

    #[test]
    fn records_are_the_json_texts_of_their_kinds() {
        let texts: Vec<String> = [header(), segment(4), R::Own(Own::Retire(4)), R::Finalized]
            .iter()
            .map(|r| String::from_utf8(r.to_bytes()).unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                r#"{"cache":{"format":"test-log","version":3,"schema":{"fields":[{"name":"x","kind":"tensor","dtype":"f32","shape":{"rule":"any"},"nullable":false}]},"note":"n"}}"#,
                r#"{"segment":{"id":4,"rows":2}}"#,
                r#"{"retire":4}"#,
                r#"{"finalized":null}"#,
            ]
        );
        for text in &texts {
            let decoded = R::decode(text.as_bytes()).unwrap();
            assert_eq!(String::from_utf8(decoded.to_bytes()).unwrap(), *text);
        }
    }

    #[test]
    fn segments_and_finalize_are_replayed_in_order() {
        let committed = interpret_records(&[header(), segment(0), segment(1), R::Finalized]);
        let committed = committed.unwrap();
        assert_eq!(
            (committed.ids(), committed.finalized, committed.records),
            (vec![0, 1], true, 4)
        );
        assert_eq!(committed.next_segment_id(), 2);
        let committed =
            interpret_records(&[header(), segment(0), R::Finalized, segment(1)]).unwrap();
        assert!(!committed.finalized, "a segment after finalize unfinalizes");
        // The format's own records: segment 1 is retired, and its id never comes back.
        let records = [header(), segment(0), segment(1), R::Own(Own::Retire(1))];
        let committed = interpret_records(&records).unwrap();
        assert_eq!((committed.ids(), committed.own.clone()), (vec![0], vec![1]));
        assert_eq!(committed.next_segment_id(), 2);
        let mut reused = records.to_vec();
        reused.push(segment(1));
        let err = interpret_records(&reused).unwrap_err().to_string();
        assert!(err.contains("record 4: segment 1 after segment 1"), "{err}");
    }

    #[test]
    fn damage_is_corruption_naming_the_log_and_the_record() {
        let cases: Vec<(Vec<R>, &str)> = vec![
            (vec![], "holds no header record"),
            (vec![segment(0)], "not the header"),
            (vec![header(), segment(1), segment(1)], "record 2: segment 1 after segment 1"),
            (vec![header(), header()], "record 1: a second header"),
            (vec![header(), R::Own(Own::Retire(9))], "record 1: retires segment 9"),
        ];
        for (records, needle) in cases {
            let err = interpret_records(&records).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(err.to_string().contains("stowage.log") && err.to_string().contains(needle));
        }
        let no_note = R::Cache(TestLog::new_header(Schema::new(), Note { note: None }));
        let err = interpret_records(&[no_note]).unwrap_err().to_string();
        assert!(err.contains("header of version 3: version 3 has a note"), "{err}");
        for (bytes, needle) in [
            (&b"[1]"[..], "is not a record"),
            (b"{\"segment\":{\"id\":1}}", "\"segment\" record: missing field `rows`"),
            (b"{\"finalized\":1}", "\"finalized\" record"),
            (b"{\"segment\":{\"id\":1,\"rows\":1},\"x\":2}", "not a record of one kind"),
            (b"{\"merged\":3}", "unknown variant `merged`"),
            (b"\xff", "record 1 does not parse"),
        ] {
            let mut records = vec![header().to_bytes(), bytes.to_vec()];
            records.push(segment(0).to_bytes());
            let recovered =
                Recovered { records, valid_len: 0, dropped_tail_bytes: 0, damage: None };
            let err = interpret::<TestLog>(Path::new("stowage.log"), &recovered).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(err.to_string().contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn another_format_or_version_is_incompatible_naming_both() {
        for (format, version) in [("other", 3), ("test-log", 1), ("test-log", 4)] {
            let header = CacheHeader {
                format: format.to_owned(),
                version,
                schema: Schema::new(),
                extension: Note { note: Some("n".into()) },
            };
            let err = interpret_records(&[R::Cache(header)]).unwrap_err();
            assert!(matches!(err, Error::Incompatible { .. }), "{err}");
            let expected = format!(
                "format {format:?} version {version}, this reader handles \"test-log\" versions \
                 2 to 3"
            );
            assert!(err.to_string().contains(&expected), "{err}");
        }
        // Version 2 carries no note: read as it is.
        let old =
            CacheHeader { version: 2, ..TestLog::new_header(Schema::new(), Note { note: None }) };
        assert_eq!(interpret_records(&[R::Cache(old)]).unwrap().header.version, 2);
    }

    #[test]
    fn a_missing_log_is_not_found_naming_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let err = read::<TestLog>(&dir.path().join("stowage.log")).unwrap_err();
        assert!(matches!(&err, Error::NotFound { what } if what.starts_with("test cache (no ")));
    }

    #[test]
    fn the_marker_reports_a_log_cut_short_and_its_own_loss() {
        let dir = tempfile::tempdir().unwrap();
        let (log, marker) =
            (dir.path().join("stowage.log"), dir.path().join(FINALIZED_MARKER_NAME));
        let finalized = interpret_records(&[header(), segment(0), R::Finalized]).unwrap();
        let check = |committed: &Committed<TestLog>| {
            let mut report = ValidationReport::default();
            let read = committed.check_marker(&log, &marker, &mut report);
            (read, report.problems)
        };
        assert_eq!(check(&finalized).1[0].path.as_deref(), Some(marker.as_path()));
        assert!(check(&finalized).1[0].detail.contains("missing"));
        finalized.marker().write(&marker).unwrap();
        assert_eq!(std::fs::read(&marker).unwrap(), br#"{"log_records":3}"#);
        assert_eq!(check(&finalized), (Some(FinalizedMarker { log_records: 3 }), vec![]));
        // The same log without its `finalized` record: cut short.
        let cut = interpret_records(&[header(), segment(0)]).unwrap();
        let (_, problems) = check(&cut);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path.as_deref(), Some(log.as_path()));
        assert!(problems[0].detail.contains("holds 2 complete records"), "{problems:?}");
        assert!(problems[0].detail.contains("finalized at 3: the log was cut short"));
        std::fs::write(&marker, b"{").unwrap();
        let (read, problems) = check(&finalized);
        assert!(read.is_none() && problems[0].detail.contains("completion marker"));
        assert!(matches!(FinalizedMarker::read(&marker), Err(Error::Corrupted { .. })));
    }
}
