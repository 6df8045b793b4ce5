//! The campaigns of issue 18 over caches on object stores (`stowage-remote`): a writer under
//! every network fault aimed at every kind of object it touches ([`faults`]), a writer killed
//! mid-upload ([`killed_upload`]), and eight writer processes on one cache with random
//! `kill -9` ([`writers`]). What they check: no acknowledged sample lost, no torn version
//! visible, the writer resumes (or its error names the object), and the merge's result does not
//! depend on timing.
//!
//! The checks every campaign shares are here: the samples (a pure function of their key, so
//! that any reader can check any key it finds) and the walk over every version of a cache.

pub mod faults;
pub mod killed_upload;
pub mod writers;

use std::collections::BTreeSet;
use std::path::Path;

use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};
use stowage_remote::view::View;
use stowage_remote::{RemoteOptions, RemoteStore, versions};

/// The schema of every campaign cache: a fixed tensor and a ragged one, so that rows differ in
/// length.
pub fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2])).tensor(
        "tail",
        DType::U8,
        ShapeRule::RaggedLeading(vec![]),
    )
}

/// The sample stored under `key`: a function of the key alone, so that a reader checks any key
/// it finds without knowing who wrote it.
pub fn sample_of(key: &str) -> Sample {
    // FNV-1a: stable across processes and versions.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let tail: Vec<u8> = key.bytes().cycle().take((hash % 61) as usize).collect();
    Sample::new()
        .with("x", Tensor::from_slice(&[2], &[hash as u32, (hash >> 32) as u32]).expect("2 values"))
        .with("tail", Tensor::from_slice(&[tail.len()], &tail).expect("a byte vector"))
}

/// The options of a campaign handle: its node cache in `node` and, for a writer, `rank`.
pub fn options(
    node: &Path,
    rank: Option<&str>,
    store_options: &[(String, String)],
) -> RemoteOptions {
    RemoteOptions {
        rank: rank.map(str::to_owned),
        node_cache: Some(node.to_path_buf()),
        node_budget: Some(1 << 30),
        store_options: store_options.to_vec(),
        cache_rows: false,
        ..RemoteOptions::default()
    }
}

/// What [`check_every_version`] read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionsRead {
    /// The versions in the store (1 to the newest).
    pub versions: u64,
    /// The versions whose every key was read and checked.
    pub read_whole: u64,
    /// The keys read, over all versions read whole.
    pub keys_read: u64,
}

/// Opens every version of the cache in `store` as a reader would have (versions 1 to the
/// newest, none missing) and checks that it is whole: its key count is its manifest's, no key
/// is listed twice, and every key it lists reads back exactly [`sample_of`]. Versions are read
/// whole every `stride`-th (and the newest always); the others are opened and their parts'
/// objects checked to exist with the sizes the manifest names. Returns what it read, or every
/// problem found.
///
/// Errors: the store's, and every torn or missing version, as text.
pub fn check_every_version(
    store: &RemoteStore,
    node: &Path,
    stride: u64,
) -> Result<VersionsRead, String> {
    let fail = |e: stowage_core::Error| e.to_string();
    let Some(newest) = versions::newest(store).map_err(fail)? else {
        return Ok(VersionsRead::default());
    };
    let options = options(node, None, &[]);
    let mut view =
        View::newest(store.clone(), options.open_node_cache().map_err(fail)?, schema(), false)
            .map_err(fail)?;
    let mut read = VersionsRead { versions: newest.version, ..VersionsRead::default() };
    let mut problems = Vec::new();
    for version in 1..=newest.version {
        let manifest = match versions::read(store, version) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("version {version}: {e}"));
                continue;
            }
        };
        let keys_expected = manifest.keys;
        if version % stride.max(1) != 0 && version != newest.version {
            for object in manifest.parts.iter().flat_map(|p| p.objects.iter()) {
                match store.head(&object.name) {
                    Ok(Some(info)) if info.size == object.size => {}
                    other => problems.push(format!(
                        "version {version}: part object {} of {} bytes: {other:?}",
                        object.name, object.size
                    )),
                }
            }
            continue;
        }
        view.adopt(Some(manifest), None).map_err(fail)?;
        let keys = match view.keys() {
            Ok(keys) => keys,
            Err(e) => {
                problems.push(format!("version {version}: keys: {e}"));
                continue;
            }
        };
        let unique: BTreeSet<&String> = keys.iter().collect();
        if unique.len() != keys.len() || keys.len() as u64 != keys_expected {
            problems.push(format!(
                "version {version}: {} keys listed, {} distinct, the manifest counts {keys_expected}",
                keys.len(),
                unique.len()
            ));
        }
        problems.extend(
            read_exactly(&|batch| view.get_batch(batch), &keys)
                .into_iter()
                .map(|p| format!("version {version}: {p}")),
        );
        read.read_whole += 1;
        read.keys_read += keys.len() as u64;
    }
    if problems.is_empty() { Ok(read) } else { Err(problems.join("\n")) }
}

/// A `get_batch`: a reader's or a view's.
pub type GetBatch<'a> = dyn Fn(&[&str]) -> stowage_core::Result<Vec<Option<Sample>>> + 'a;

/// Reads `keys` with `get_batch` (a reader's, or a view's: neighbouring rows of a part in one
/// request) a thousand at a time, and says which do not read back exactly [`sample_of`].
pub fn read_exactly(get_batch: &GetBatch<'_>, keys: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for chunk in keys.chunks(1000) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        match get_batch(&refs) {
            Ok(samples) => {
                for (key, sample) in chunk.iter().zip(samples) {
                    if sample.as_ref() != Some(&sample_of(key)) {
                        problems.push(format!("key {key} reads {sample:?}"));
                    }
                }
            }
            Err(e) => problems.push(format!("reading {} keys from {}: {e}", chunk.len(), chunk[0])),
        }
    }
    problems
}

/// Whether `error`'s text names an object of the cache at `url` (its URL), as the errors a
/// writer must act on do: `None` when it does, else the complaint.
pub fn names_the_store(error: &stowage_core::Error, url: &str) -> Option<String> {
    let text = error.to_string();
    if text.contains(url.trim_end_matches('/')) {
        None
    } else {
        Some(format!("an error that names no object of {url}: {text}"))
    }
}
