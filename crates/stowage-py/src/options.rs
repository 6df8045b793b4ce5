//! `create(..., **options)`: a backend's factory with the options a Python caller named.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stowage_arrow::{ArrowFactory, ArrowOptions, Compression};
use stowage_core::BackendFactory;
use stowage_memmap::{MemmapFactory, MemmapOptions};
use stowage_npy::{NpyFactory, NpyOptions};
use stowage_remote::{RemoteFactory, RemoteOptions};

use crate::errors;

/// The options `create` takes for each backend (besides `checks`, which every backend takes).
const ACCEPTED: &[(&str, &[&str])] = &[
    (
        "arrow",
        &[
            "flush_every",
            "max_segment_bytes",
            "durable",
            "background_flush",
            "max_open_segments",
            "sample_cache_bytes",
            "writer_rank",
            "rank",
            "rank_inboxes",
            "compression",
        ],
    ),
    ("memmap", &["allow_trailing_bytes", "key_index_tail"]),
    ("npy", &["collection_size", "max_open_files"]),
    ("hdf5", &[]),
    ("remote", &["rank", "node_cache", "node_budget", "store_options", "cache_rows"]),
];

/// The options a caller passed, taken one by one; what is left at the end was not understood.
struct Taken<'a, 'py> {
    options: &'a Bound<'py, PyDict>,
}

impl<'py> Taken<'_, 'py> {
    fn take<T: pyo3::conversion::FromPyObjectOwned<'py>>(&self, name: &str) -> PyResult<Option<T>> {
        let Some(value) = self.options.get_item(name)? else { return Ok(None) };
        self.options.del_item(name)?;
        let py = self.options.py();
        value.extract::<T>().map(Some).map_err(|_| {
            errors::invalid(
                py,
                format!(
                    "option {name}={value} has the wrong type ({})",
                    std::any::type_name::<T>()
                ),
            )
        })
    }
}

/// The factory of the backend `name`, with `options` (a copy of the caller's keyword arguments)
/// applied and read checks `checks`. An unknown backend or option is `InvalidArgumentError`
/// naming what is accepted.
pub fn factory(
    py: Python<'_>,
    name: &str,
    checks: bool,
    options: &Bound<'_, PyDict>,
) -> PyResult<Box<dyn BackendFactory>> {
    let taken = Taken { options };
    let factory: Box<dyn BackendFactory> = match name {
        "arrow" => {
            let mut o = ArrowOptions { verify_checksums: checks, ..Default::default() };
            if let Some(v) = taken.take("flush_every")? {
                o.flush_every = v
            }
            if let Some(v) = taken.take("max_segment_bytes")? {
                o.max_segment_bytes = v
            }
            if let Some(v) = taken.take("durable")? {
                o.durable = v
            }
            if let Some(v) = taken.take("background_flush")? {
                o.background_flush = v
            }
            if let Some(v) = taken.take("max_open_segments")? {
                o.max_open_segments = v
            }
            if let Some(v) = taken.take("sample_cache_bytes")? {
                o.sample_cache_bytes = v
            }
            if let Some(v) = taken.take("writer_rank")? {
                o.writer_rank = v
            }
            if let Some(v) = taken.take::<Option<u32>>("rank")? {
                o.rank = v
            }
            if let Some(v) = taken.take("rank_inboxes")? {
                o.rank_inboxes = v
            }
            if let Some(v) = taken.take::<Option<String>>("compression")? {
                o.compression = match v.as_deref() {
                    None => None,
                    Some("lz4") => Some(Compression::Lz4),
                    Some("zstd") => Some(Compression::Zstd),
                    Some(other) => {
                        return Err(errors::invalid(
                            py,
                            format!(
                                "option compression={other:?}: the choices are None, \"lz4\", \"zstd\""
                            ),
                        ));
                    }
                };
            }
            Box::new(ArrowFactory { options: o })
        }
        "memmap" => {
            let mut o = MemmapOptions { verify_checksums: checks, ..Default::default() };
            if let Some(v) = taken.take("allow_trailing_bytes")? {
                o.allow_trailing_bytes = v
            }
            if let Some(v) = taken.take("key_index_tail")? {
                o.key_index_tail = v
            }
            Box::new(MemmapFactory { options: o })
        }
        "npy" => {
            let mut o = NpyOptions { verify_checksums: checks, ..Default::default() };
            if let Some(v) = taken.take("collection_size")? {
                o.collection_size = v
            }
            if let Some(v) = taken.take("max_open_files")? {
                o.max_open_files = v
            }
            Box::new(NpyFactory { options: o })
        }
        "hdf5" => Box::new(stowage_hdf5::Hdf5Factory),
        "remote" => {
            let mut o = RemoteOptions::default();
            if let Some(v) = taken.take::<Option<String>>("rank")? {
                o.rank = v
            }
            if let Some(v) = taken.take::<Option<PathBuf>>("node_cache")? {
                o.node_cache = v
            }
            if let Some(v) = taken.take::<Option<u64>>("node_budget")? {
                o.node_budget = v
            }
            if let Some(v) =
                taken.take::<std::collections::BTreeMap<String, String>>("store_options")?
            {
                o.store_options = v.into_iter().collect();
            }
            if let Some(v) = taken.take("cache_rows")? {
                o.cache_rows = v
            }
            Box::new(RemoteFactory::new(o))
        }
        other => {
            let names: Vec<&str> = ACCEPTED.iter().map(|(name, _)| *name).collect();
            return Err(errors::invalid(
                py,
                format!("backend {other:?} is not one of {}", names.join(", ")),
            ));
        }
    };
    if !options.is_empty() {
        let left: Vec<String> = options.keys().iter().map(|k| k.to_string()).collect();
        let accepted = ACCEPTED.iter().find(|(n, _)| *n == name).map_or(&[][..], |(_, a)| a);
        return Err(errors::invalid(
            py,
            format!(
                "the {name} backend takes no option {} (it takes {}checks)",
                left.join(", "),
                accepted.iter().map(|a| format!("{a}, ")).collect::<String>()
            ),
        ));
    }
    Ok(factory)
}
