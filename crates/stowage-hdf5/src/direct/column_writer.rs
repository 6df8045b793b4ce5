//! Writing one variable-length dataset's rows: each batch laid out as global heap collections and
//! written into reserved space, the rows' descriptors gathered per chunk and each chunk written as
//! stored bytes once full (or at the end).

use std::sync::Arc;

use hdf5::{Dataset, Group};
use stowage_core::bytes::Bytes;

use super::filters::Pipeline;
use super::global_heap::lay_out;
use super::{DESCRIPTOR, Descriptor, HeapFile, MAX_CHUNK_BYTES};
use crate::ffi::{Element, Failure, Outcome, storage};

/// Rows of one `VLEN` dataset written by stowage.
#[derive(Debug)]
pub(crate) struct DirectWriter {
    heap: Arc<HeapFile>,
    /// Where space is reserved (the dataset's group).
    group: Group,
    dataset: Dataset,
    pipeline: Pipeline,
    element: Element,
    chunk_rows: u64,
    /// Descriptors of the chunk being filled.
    chunk: Vec<u8>,
    /// Rows written so far.
    rows: u64,
}

impl DirectWriter {
    /// The direct writer of the new, empty `dataset` of `group` holding `element` values, or
    /// `None` when its layout is one this module leaves to libhdf5.
    pub fn new(
        heap: &Arc<HeapFile>,
        group: &Group,
        dataset: &Dataset,
        element: Element,
    ) -> Outcome<Option<DirectWriter>> {
        let Some(layout) = storage::vlen_storage(dataset.id())? else { return Ok(None) };
        let pipeline = Pipeline::new(&layout.filters).filter(Pipeline::can_encode);
        let chunk_bytes = layout.chunk_rows.checked_mul(DESCRIPTOR as u64);
        let fits = chunk_bytes.is_some_and(|bytes| bytes <= MAX_CHUNK_BYTES);
        let (Some(pipeline), true, true) = (pipeline, layout.element == Some(element), fits) else {
            return Ok(None);
        };
        Ok(Some(DirectWriter {
            heap: Arc::clone(heap),
            group: group.clone(),
            dataset: dataset.clone(),
            pipeline,
            element,
            chunk_rows: layout.chunk_rows,
            chunk: Vec::new(),
            rows: 0,
        }))
    }

    /// Appends `rows` (each the bytes of whole `element` values).
    pub fn write(&mut self, rows: &[Bytes]) -> Outcome<()> {
        let size = self.element.size();
        let counts = rows
            .iter()
            .map(|row| match u32::try_from(row.len() / size) {
                Ok(count) if row.len() % size == 0 => Ok(count),
                _ => Err(Failure(format!(
                    "a row of {} bytes is not a whole number of {size}-byte elements below 2^32",
                    row.len()
                ))),
            })
            .collect::<Outcome<Vec<u32>>>()?;
        let layout = lay_out(rows.iter().map(|row| row.len()));
        let base = self.heap.write(self.group.id(), &layout, rows)?;
        for (count, placed) in counts.into_iter().zip(&layout.rows) {
            let descriptor = match placed {
                Some(placed) => Descriptor {
                    count,
                    address: base + placed.collection,
                    index: u32::from(placed.index),
                },
                None => Descriptor { count: 0, address: 0, index: 0 },
            };
            self.chunk.extend_from_slice(&descriptor.encode());
            self.rows += 1;
            if self.chunk.len() as u64 == self.chunk_rows * DESCRIPTOR as u64 {
                self.write_chunk()?;
            }
        }
        Ok(())
    }

    /// Sets the dataset's row count and writes the last, partly filled chunk.
    pub fn finish(&mut self) -> Outcome<()> {
        storage::set_rows(self.dataset.id(), self.rows)?;
        if !self.chunk.is_empty() {
            self.write_chunk()?;
        }
        Ok(())
    }

    /// Writes the chunk being filled (its unfilled rows empty) and starts the next.
    fn write_chunk(&mut self) -> Outcome<()> {
        let first_row = (self.rows - 1) / self.chunk_rows * self.chunk_rows;
        self.chunk.resize(self.chunk_rows as usize * DESCRIPTOR, 0);
        let (stored, mask) = self.pipeline.encode(&self.chunk).map_err(Failure)?;
        // The extent must cover the chunk before it is written.
        storage::set_rows(self.dataset.id(), self.rows)?;
        storage::write_chunk(self.dataset.id(), first_row, mask, &stored)?;
        self.chunk.clear();
        Ok(())
    }
}
