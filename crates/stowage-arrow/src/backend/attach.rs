//! [`ArrowBackend::attach`]: stowage's commit log started in a cache torchcachex created.

use std::path::Path;

use stowage_core::file_safety::WriterLock;
use stowage_core::{DType, Error, Result, Schema, ShapeRule};

use super::{ArrowBackend, capabilities, write_new_log};
use crate::blob_encoding::BlobEncoding;
use crate::commit_log::{self, CacheHeader};
use crate::decode::{ColumnGroup, column_groups_for};
use crate::encode::arrow_schema;
use crate::layout::Layout;
use crate::options::ArrowOptions;
use crate::schema_json::{ColumnType, OutputStructure, SchemaJson};
use crate::segment::Segment;

impl ArrowBackend {
    /// Starts stowage's commit log in a cache torchcachex created (its `schema.json` and
    /// segments, no `stowage.log`) and opens it for appending. The schema is torchcachex's
    /// (`torchcachex_header`): its output structure, a tensor field of any shape per tensor
    /// entry, a bytes field per pickled entry, stored as verbatim pickles, so that stowage's
    /// segments have exactly torchcachex's columns and torchcachex goes on appending to the
    /// cache. No file of torchcachex's changes; its segments are another writer's until
    /// [`ArrowBackend::adopt`] checksums them. On a rank other than the writer rank nothing is
    /// written and the handle refuses every write (see [`ArrowBackend::create`]).
    ///
    /// Errors: `AlreadyExists` naming `stowage.log` when stowage's log is there (use
    /// [`ArrowBackend::open`]); as `torchcachex_header`; `Unsupported` for a schema outside
    /// [`capabilities`]; `Locked`; `Io`.
    ///
    /// ```no_run
    /// use stowage_arrow::{ArrowBackend, ArrowOptions};
    /// // A cache torchcachex wrote: ArrowIPCCacheBackend(cache_dir="cache", module_id="encoder").
    /// let mut cache = ArrowBackend::attach("cache/encoder", ArrowOptions::default())?;
    /// let adoption = cache.adopt()?; // optional: checksum torchcachex's segments
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn attach(dir: impl AsRef<Path>, options: ArrowOptions) -> Result<ArrowBackend> {
        options.check()?;
        let layout = Layout::new(dir.as_ref());
        let refuse_existing = |layout: &Layout| match layout.commit_log().exists() {
            true => Err(Error::AlreadyExists { path: layout.commit_log() }),
            false => Ok(()),
        };
        refuse_existing(&layout)?;
        let header = torchcachex_header(&layout)?;
        capabilities().check_schema(&header.schema, crate::BACKEND_NAME)?;
        let rank = options.current_rank()?;
        if rank != options.writer_rank {
            return Self::other_rank(layout, header, options, rank);
        }
        let lock = WriterLock::acquire(layout.root())?;
        refuse_existing(&layout)?;
        write_new_log(&layout, &header)?;
        Self::open_writer(layout, lock, options)
    }
}

/// The commit log header stowage starts a cache torchcachex created with: its `schema.json`'s
/// output structure, and a schema of its columns (`<name>_data` a tensor of the column's element
/// type and any shape, `<name>_blob` bytes; `tensor` and `blob` in those structures), bytes as
/// verbatim pickles ([`BlobEncoding::VerbatimPickles`]).
///
/// Errors: `NotFound` when there is no `schema.json` (torchcachex writes it with its first
/// sample); `Corrupted` when it does not parse; `Incompatible` naming the column when it has a
/// column stowage cannot write as torchcachex does, when a segment's columns disagree with it,
/// or when the `schema.json` stowage would write for it differs from torchcachex's.
pub fn torchcachex_header(layout: &Layout) -> Result<CacheHeader> {
    let path = layout.schema();
    let described = SchemaJson::read(&path)?.ok_or_else(|| Error::NotFound {
        what: format!(
            "{} (torchcachex writes it with its first sample; nothing to attach to)",
            path.display()
        ),
    })?;
    let structure = described.output_structure;
    let incompatible = |detail: String| Error::Incompatible { path: path.clone(), detail };
    let mut schema = Schema::new();
    for field in &described.fields {
        let name = field.name.as_str();
        let (entry, suffix) = match structure {
            OutputStructure::Tensor | OutputStructure::Blob => match name {
                "data" => (crate::decode::TENSOR_FIELD, "data"),
                "blob" => (crate::decode::BLOB_FIELD, "blob"),
                other => (other, other),
            },
            _ => name.rsplit_once('_').unwrap_or((name, "")),
        };
        match (suffix, &field.column_type) {
            _ if name == "key" => {}
            ("shape", ColumnType::List(DType::I64)) => {}
            ("data", ColumnType::List(dtype)) => {
                schema = schema.tensor(entry, *dtype, ShapeRule::Any)
            }
            ("blob", ColumnType::Binary) => schema = schema.bytes(entry),
            _ => {
                return Err(incompatible(format!(
                    "column {name:?} of type {:?} is none of torchcachex's key, <name>_data \
                     (a list of a tensor element type), <name>_shape (list<int64>), <name>_blob \
                     (binary) for output structure {}",
                    field.column_type.type_string(),
                    structure.name()
                )));
            }
        }
    }
    let header = commit_log::new_header(schema, structure, BlobEncoding::VerbatimPickles);
    let (structure, fields, encoding) =
        commit_log::columns(&header).map_err(|e| incompatible(e.to_string()))?;
    // The segments are the authority on element types (torchcachex reads `halffloat` back wrong).
    for (id, segment_path) in layout.list_segments()? {
        let Ok(segment) = Segment::open(id, &segment_path) else { continue };
        let groups = column_groups_for(segment.schema(), structure, encoding)
            .map_err(|why| Error::Incompatible { path: segment_path.clone(), detail: why })?;
        for group in groups {
            let ColumnGroup::Tensor { name, dtype, .. } = group else { continue };
            let declared = header.schema.get(&name).map(|f| &f.kind);
            if let Some(stowage_core::FieldKind::Tensor { dtype: declared, .. }) = declared
                && *declared != dtype
            {
                return Err(Error::Incompatible {
                    path: segment_path,
                    detail: format!(
                        "field {name:?} holds {dtype} values, {} says {declared}",
                        path.display()
                    ),
                });
            }
        }
    }
    let would_write = SchemaJson::describe(structure, &arrow_schema(structure, &fields))?.to_json();
    let written = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    if would_write != written {
        return Err(incompatible(format!(
            "stowage would describe the columns it writes as {}, torchcachex wrote {}",
            String::from_utf8_lossy(&would_write),
            String::from_utf8_lossy(&written)
        )));
    }
    Ok(header)
}
