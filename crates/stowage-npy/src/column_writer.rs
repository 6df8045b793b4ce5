//! Writing one field's samples into collection files: slot allocation, file rotation, write
//! batching, and the fsync ordering that makes a flush durable.

use crate::layout::Layout;
use crate::ownership::OwnedFiles;
use crate::record::{new_uid, xxh64};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::{open_no_follow, sync_together};
use stowage_core::npy_header::write_header;
use stowage_core::write_behind::{BackgroundWriter, Job};
use stowage_core::{DType, Error, IoResultExt, Result, Tensor, shape};

/// Slot bytes gathered before they are handed to the OS in one write.
const BATCH_BYTES: usize = 1 << 20;
/// Slots gathered before a write, at most (the kernel takes at most 1024 buffers per `writev`).
const BATCH_SLOTS: usize = 1024;

/// The collection file a column is currently filling.
struct OpenCollection {
    uid: String,
    file: Arc<File>,
    data_offset: u64,
    next_slot: usize,
    /// Written (header or samples) since the last sync.
    dirty: bool,
    /// Ticket of the last batch of this file handed to the background writer (0: none).
    last_ticket: u64,
}

/// Slot images not yet written to the current file: slots `first_slot..first_slot + parts.len()`.
/// A part shares the caller's tensor bytes when the sample fills its slot (no copy before the
/// kernel's), or holds the zero-padded image of a smaller sample.
#[derive(Default)]
struct Batch {
    first_slot: usize,
    parts: Vec<Bytes>,
    bytes: usize,
}

/// Appends one field's samples to its collection files (a new file per writer session, then one
/// every `collection_size` samples, as hangar does), writing each sample into the leading corner of
/// its zero-filled slot.
///
/// Consecutive slots are batched and written with one `writev` per [`BATCH_BYTES`] by the shared
/// [`BackgroundWriter`]; a read of a slot not yet known to be written first writes the batch out and
/// waits ([`ColumnWriter::write_out_slot`]).
pub struct ColumnWriter {
    dtype: DType,
    slot_shape: Vec<usize>,
    slot_bytes: usize,
    collection_size: usize,
    current: Option<OpenCollection>,
    /// Behind a mutex only so that `&self` readers can force a write-out.
    batch: Mutex<Batch>,
    /// Performs the batch writes.
    worker: Arc<BackgroundWriter>,
    /// Slots of the current file below this are known to be in the page cache.
    written_through: AtomicUsize,
    /// Files filled since the last sync, by uid, with the ticket of their last batch: a read of
    /// one of their slots waits for that ticket only (rotation itself never waits).
    retired: Vec<(String, u64)>,
    /// Filled files retired since the last sync that still have unsynced writes.
    unsynced: Vec<(PathBuf, Arc<File>)>,
    /// A file was created since the last sync, so its directory entry needs an fsync too.
    created_files: bool,
    /// uids to try before random ones, last first: lets tests choose names that are taken.
    #[cfg(test)]
    scripted_uids: Vec<String>,
    /// Runs between the name check and the creation of a data file: lets tests play the other
    /// writer that creates the same name in that instant.
    #[cfg(test)]
    before_create: Option<fn(&Path)>,
}

impl ColumnWriter {
    /// A writer for a field of `dtype` whose slots have `slot_shape` (the schema's fixed or max shape).
    pub fn new(
        dtype: DType,
        slot_shape: Vec<usize>,
        collection_size: usize,
        worker: Arc<BackgroundWriter>,
    ) -> Result<ColumnWriter> {
        let slot_bytes = shape::byte_count(&slot_shape, dtype.item_size())?;
        Ok(ColumnWriter {
            dtype,
            slot_shape,
            slot_bytes,
            collection_size,
            current: None,
            batch: Mutex::new(Batch::default()),
            worker,
            written_through: AtomicUsize::new(0),
            retired: Vec::new(),
            unsynced: Vec::new(),
            created_files: false,
            #[cfg(test)]
            scripted_uids: Vec::new(),
            #[cfg(test)]
            before_create: None,
        })
    }

    /// Puts `tensor` into the next free slot and returns its `(checksum, slot)` in the current file
    /// ([`ColumnWriter::current_uid`]). The bytes are durable only after [`ColumnWriter::sync`]. A
    /// new collection file is claimed in `owned` before it is created.
    pub fn write(
        &mut self,
        layout: &Layout,
        owned: &mut OwnedFiles,
        tensor: &Tensor,
    ) -> Result<(u64, u64)> {
        if self.current.as_ref().is_none_or(|c| c.next_slot >= self.collection_size) {
            self.start_file(layout, owned)?;
        }
        let current = self.current.as_mut().expect("just ensured");
        let slot = current.next_slot;
        let batch = self.batch.get_mut().expect("batch lock poisoned");
        if batch.parts.is_empty() {
            batch.first_slot = slot;
        }
        if tensor.shape() == self.slot_shape.as_slice() {
            batch.parts.push(tensor.to_shared_bytes());
        } else {
            let mut image = Vec::with_capacity(self.slot_bytes);
            append_corner_image(&mut image, tensor, &self.slot_shape, self.slot_bytes);
            batch.parts.push(image.into());
        }
        batch.bytes += self.slot_bytes;
        current.next_slot += 1;
        current.dirty = true;
        if (batch.bytes >= BATCH_BYTES || batch.parts.len() >= BATCH_SLOTS)
            && let Some(ticket) = send_batch(layout, &self.worker, current, batch, self.slot_bytes)?
        {
            current.last_ticket = ticket;
        }
        Ok((xxh64(tensor.bytes()), slot as u64))
    }

    /// The uid of the file the last [`ColumnWriter::write`] went to.
    pub fn current_uid(&self) -> &str {
        self.current.as_ref().map_or("", |c| c.uid.as_str())
    }

    /// Writes the batch out if it holds slot `slot` of file `uid`, so that a read through the
    /// file's memory map sees it. Reads of older slots cost one comparison; reads of a file filled
    /// since the last sync wait for its last batch.
    pub fn write_out_slot(&self, layout: &Layout, uid: &str, slot: u64) -> Result<()> {
        let Some(current) = self.current.as_ref().filter(|c| c.uid == uid) else {
            return match self.retired.iter().find(|(retired, _)| retired == uid) {
                Some(&(_, ticket)) => self.worker.wait_for(ticket),
                None => Ok(()),
            };
        };
        if slot < self.written_through.load(Ordering::Acquire) as u64 {
            return Ok(());
        }
        let mut batch = self.batch.lock().expect("batch lock poisoned");
        send_batch(layout, &self.worker, current, &mut batch, self.slot_bytes)?;
        self.worker.wait_idle()?;
        self.written_through.store(current.next_slot, Ordering::Release);
        Ok(())
    }

    /// Creates a new preallocated (sparse) collection file with its header and staging marker.
    fn start_file(&mut self, layout: &Layout, owned: &mut OwnedFiles) -> Result<()> {
        if let Some(previous) = self.current.as_ref() {
            let batch = self.batch.get_mut().expect("poisoned");
            let ticket = send_batch(layout, &self.worker, previous, batch, self.slot_bytes)?;
            // 0: nothing of the file was ever queued.
            let last = ticket.unwrap_or(previous.last_ticket);
            if last > 0 {
                self.retired.push((previous.uid.clone(), last));
            }
        }
        let mut rows_shape = vec![self.collection_size];
        rows_shape.extend_from_slice(&self.slot_shape);
        let header = write_header(self.dtype, &rows_shape);
        let data_len = (self.collection_size as u64) * (self.slot_bytes as u64);
        let (uid, mut file) = loop {
            let uid = self.next_uid();
            // A name any writer used, for a file or a marker, is never taken over (hangar draws
            // its uids at random and never checks).
            if owned.contains(&uid) || name_in_use(layout, &uid)? {
                continue;
            }
            // Claimed durably before the file exists: a crash never leaves a file of ours that
            // the claims do not name, so finalize never mistakes it for another writer's.
            owned.claim(&uid)?;
            let path = layout.data_file(&uid);
            #[cfg(test)]
            if let Some(race) = self.before_create.take() {
                race(&path);
            }
            // create_new (O_EXCL): a file another writer made since the check is never replaced,
            // and a link in its place is never followed.
            match open_no_follow(OpenOptions::new().read(true).write(true).create_new(true), &path)
            {
                Ok(file) => break (uid, file),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    owned.release(&uid)?;
                    continue;
                }
                Err(e) => return Err(Error::io(path, e)),
            }
        };
        let path = layout.data_file(&uid);
        file.write_all(&header).at(&path)?;
        file.set_len(header.len() as u64 + data_len).at(&path)?;
        let marker = layout.stage_marker(&uid);
        open_no_follow(OpenOptions::new().write(true).create_new(true), &marker).at(&marker)?;
        self.created_files = true;
        if let Some(previous) = self.current.take()
            && previous.dirty
        {
            self.unsynced.push((layout.data_file(&previous.uid), previous.file));
        }
        // dirty: the header itself must be durable before any record points into the file.
        let data_offset = header.len() as u64;
        let file = Arc::new(file);
        self.current = Some(OpenCollection {
            uid,
            file,
            data_offset,
            next_slot: 0,
            dirty: true,
            last_ticket: 0,
        });
        self.written_through.store(0, Ordering::Release);
        Ok(())
    }

    /// The next uid to try: random (in unit tests, scripted ones first).
    fn next_uid(&mut self) -> String {
        #[cfg(test)]
        if let Some(uid) = self.scripted_uids.pop() {
            return uid;
        }
        new_uid()
    }

    /// Writes out the batch and fsyncs every file written since the last sync, then the
    /// directories of new files. After it returns, every record this writer returned refers to
    /// durable bytes.
    pub fn sync(&mut self, layout: &Layout) -> Result<()> {
        // Data before directory entries before (in the caller) the log records that refer to both.
        if let Some(current) = self.current.as_ref() {
            let batch = self.batch.get_mut().expect("poisoned");
            send_batch(layout, &self.worker, current, batch, self.slot_bytes)?;
        }
        self.worker.wait_idle()?;
        self.retired.clear();
        if let Some(current) = self.current.as_ref() {
            self.written_through.store(current.next_slot, Ordering::Release);
        }
        let mut files = std::mem::take(&mut self.unsynced);
        if let Some(current) = self.current.as_mut().filter(|c| c.dirty) {
            files.push((layout.data_file(&current.uid), Arc::clone(&current.file)));
            current.dirty = false;
        }
        let mut dirs = Vec::new();
        if std::mem::take(&mut self.created_files) {
            dirs.extend([layout.data_dir(), layout.stage_dir()]);
        }
        let files: Vec<(&Path, &File)> = files.iter().map(|(p, f)| (p.as_path(), &**f)).collect();
        let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        sync_together(&files, &dirs)
    }
}

/// Whether `uid` names a collection file or a marker of any writer: `data/10`, `stage_data/10`,
/// `store_data/10` or `remote_data/10` has an entry `<uid>.npy` (of any type, dangling links
/// included).
fn name_in_use(layout: &Layout, uid: &str) -> Result<bool> {
    let name = format!("{uid}.npy");
    for dir in [layout.data_dir(), layout.stage_dir(), layout.store_dir(), layout.remote_dir()] {
        let path = dir.join(&name);
        match std::fs::symlink_metadata(&path) {
            Ok(_) => return Ok(true),
            // No such directory (hangar never fetched from a remote), or a file in its place.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(false)
}

/// Queues the batched slots of `current` for one gathering write at their offset; the write's
/// ticket, if there was anything to write.
fn send_batch(
    layout: &Layout,
    worker: &BackgroundWriter,
    current: &OpenCollection,
    batch: &mut Batch,
    slot_bytes: usize,
) -> Result<Option<u64>> {
    if batch.parts.is_empty() {
        return Ok(None);
    }
    let offset = current.data_offset + (batch.first_slot as u64) * (slot_bytes as u64);
    let parts = std::mem::take(&mut batch.parts);
    batch.first_slot += parts.len();
    batch.bytes = 0;
    let ticket = worker.send(Job {
        file: Arc::clone(&current.file),
        path: layout.data_file(&current.uid),
        offset,
        parts,
    })?;
    Ok(Some(ticket))
}

/// Appends the full slot image of a sample smaller than its slot: the sample in the leading corner
/// `[0:s0, 0:s1, ...]`, zeros elsewhere (C order).
fn append_corner_image(
    out: &mut Vec<u8>,
    tensor: &Tensor,
    slot_shape: &[usize],
    slot_bytes: usize,
) {
    let start = out.len();
    out.resize(start + slot_bytes, 0);
    let image = &mut out[start..];
    let item = tensor.dtype().item_size();
    let sample_shape = tensor.shape();
    if tensor.bytes().is_empty() {
        return;
    }
    let rank = sample_shape.len();
    let row_bytes = sample_shape[rank - 1] * item;
    // Byte strides of each dimension in the slot and in the sample.
    let strides = |dims: &[usize]| -> Vec<usize> {
        let mut s = vec![item; dims.len()];
        for k in (0..dims.len().saturating_sub(1)).rev() {
            s[k] = s[k + 1] * dims[k + 1];
        }
        s
    };
    let (slot_strides, sample_strides) = (strides(slot_shape), strides(sample_shape));
    let rows: usize = sample_shape[..rank - 1].iter().product();
    let mut index = vec![0usize; rank - 1];
    for _ in 0..rows {
        let dst: usize = index.iter().zip(&slot_strides).map(|(i, s)| i * s).sum();
        let src: usize = index.iter().zip(&sample_strides).map(|(i, s)| i * s).sum();
        image[dst..dst + row_bytes].copy_from_slice(&tensor.bytes()[src..src + row_bytes]);
        // Odometer increment over the leading dimensions.
        for k in (0..rank - 1).rev() {
            index[k] += 1;
            if index[k] < sample_shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::read_claims;

    fn image(t: &Tensor, slot: &[usize], bytes: usize) -> Vec<u8> {
        let mut out = vec![9u8];
        append_corner_image(&mut out, t, slot, bytes);
        assert_eq!(out.remove(0), 9, "earlier bytes are kept");
        out
    }

    #[test]
    fn corner_image_places_rows_at_slot_strides() {
        let t = Tensor::from_slice(&[2, 2], &[1u8, 2, 3, 4]).unwrap();
        assert_eq!(image(&t, &[3, 3], 9), [1, 2, 0, 3, 4, 0, 0, 0, 0]);
        let t = Tensor::from_slice(&[1, 2, 1], &[7u16, 8]).unwrap();
        assert_eq!(image(&t, &[2, 2, 2], 16), [7, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let empty = Tensor::zeros(DType::U8, &[0, 3]).unwrap();
        assert_eq!(image(&empty, &[2, 3], 6), [0; 6]);
    }

    fn layout_with_taken_names(dir: &Path) -> Layout {
        let layout = Layout::new(dir);
        for d in [layout.data_dir(), layout.stage_dir(), layout.store_dir(), layout.remote_dir()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(layout.data_file("aaaaaaaa"), b"another writer's data").unwrap();
        std::fs::write(layout.stage_marker("bbbbbbbb"), b"").unwrap();
        std::fs::write(layout.store_marker("cccccccc"), b"").unwrap();
        std::fs::write(layout.remote_dir().join("dddddddd.npy"), b"").unwrap();
        std::os::unix::fs::symlink("nowhere", layout.data_file("ffffffff")).unwrap();
        layout
    }

    fn column(uids: &[&str]) -> ColumnWriter {
        let worker = Arc::new(BackgroundWriter::start("test").unwrap());
        let mut column = ColumnWriter::new(DType::U8, vec![2], 3, worker).unwrap();
        // Popped from the end: tried in the order given.
        column.scripted_uids = uids.iter().rev().map(|u| (*u).to_owned()).collect();
        column
    }

    /// Every name any writer uses (a data file, any marker, a dangling link, a uid stowage's
    /// records point into) is skipped, and only the file created is claimed.
    #[test]
    fn new_files_avoid_every_name_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout_with_taken_names(dir.path());
        let referenced = vec!["eeeeeeee".to_owned()];
        let mut owned = OwnedFiles::open(&layout, &referenced).unwrap();
        let names = ["aaaaaaaa", "bbbbbbbb", "cccccccc", "dddddddd", "eeeeeeee", "ffffffff"];
        let mut column = column(&[&names[..], &["gggggggg"]].concat());
        let tensor = Tensor::from_slice(&[2], &[7u8, 9]).unwrap();
        column.write(&layout, &mut owned, &tensor).unwrap();
        column.sync(&layout).unwrap();
        assert_eq!(column.current_uid(), "gggggggg");
        assert!(column.scripted_uids.is_empty(), "every taken name was tried and skipped");
        assert_eq!(std::fs::read(layout.data_file("aaaaaaaa")).unwrap(), b"another writer's data");
        for uid in &names[1..5] {
            assert!(!layout.data_file(uid).exists(), "{uid}: no data file was created");
        }
        for uid in ["aaaaaaaa", "cccccccc", "dddddddd", "ffffffff"] {
            assert!(!layout.stage_marker(uid).exists(), "{uid}: no staging marker was created");
        }
        let claims = read_claims(&layout).unwrap();
        assert_eq!(claims.uids.into_iter().collect::<Vec<_>>(), ["gggggggg"]);
        assert!(layout.stage_marker("gggggggg").exists());
        let file = crate::collection::CollectionFile::open(layout.data_file("gggggggg")).unwrap();
        assert_eq!(file.read_slot(0, &[2], Some(xxh64(&[7, 9]))).unwrap().bytes(), [7, 9]);
    }

    /// A file another writer creates between the name check and the creation is neither replaced
    /// nor claimed: the claim is released and the next name is used.
    #[test]
    fn a_name_taken_in_the_last_instant_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout_with_taken_names(dir.path());
        let mut owned = OwnedFiles::open(&layout, &[]).unwrap();
        let mut column = column(&["hhhhhhhh", "iiiiiiii"]);
        column.before_create = Some(|path| std::fs::write(path, b"raced in").unwrap());
        let tensor = Tensor::from_slice(&[2], &[1u8, 2]).unwrap();
        column.write(&layout, &mut owned, &tensor).unwrap();
        assert_eq!(column.current_uid(), "iiiiiiii");
        assert_eq!(std::fs::read(layout.data_file("hhhhhhhh")).unwrap(), b"raced in");
        assert!(!layout.stage_marker("hhhhhhhh").exists());
        assert!(!owned.contains("hhhhhhhh") && owned.contains("iiiiiiii"));
        let claims = read_claims(&layout).unwrap();
        assert_eq!(claims.uids.into_iter().collect::<Vec<_>>(), ["iiiiiiii"]);
        assert_eq!(claims.records, Some(3), "claim, release, claim");
    }
}
