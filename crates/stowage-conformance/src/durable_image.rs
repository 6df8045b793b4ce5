//! Simulated power loss: the durable image the `faultfs` interposer (`faultfs/faultfs.c`, built
//! by this crate's `build.rs`) keeps of a directory tree, and the tree rebuilt from it alone. The
//! suite's power-loss cases ([`crate::power_loss`]) run a writer child process under it; the
//! crash and resource-fault campaigns of stowage-reliability use it too.
//!
//! The interposer copies a file to `shadow/files/<inode>` when it is fsynced or fdatasynced and
//! writes a directory's listing to `shadow/dirs/<inode>` when the directory is fsynced. A power
//! cut keeps exactly that: the rebuilt tree starts from the root's last synced listing, each
//! listed directory holds its own last synced listing, and each listed file holds its contents
//! at its last fsync (empty when it was never synced). Writes, names and removals not yet made
//! durable are dropped, whatever their order, so a backend passes only if its fsyncs are in the
//! right order, not just its renames.
//!
//! Two refinements of that model:
//!
//! - **Torn writes** ([`Tearing`]): a power cut may also have written back part of a file's
//!   unsynced bytes. The rebuild then compares each listed file's synced contents with what the
//!   file (found by inode in the killed tree, or in the shadow's grave) held at the kill, in
//!   blocks of 512 bytes (a sector) or 4096 (a page), and keeps the first `k` differing blocks
//!   of the killed contents, `k` drawn uniformly from `0..=n` for the file's `n` differing
//!   blocks: `0` is the all-or-nothing cut, `n` a fully written back file, anything between a
//!   write torn at a block boundary (the file's length grows to the end of the last kept block).
//! - **A failed fsync drops dirty pages** (in the interposer, see `faultfs/faultfs.c`): the
//!   pages a failed fsync could not write stay lost in every later snapshot of the file unless
//!   they are written again, as on Linux; [`DurableImage::dropped`] lists each such fsync.
//!
//! The interposer sees only what goes through libc (`write`, `pwrite`, `fsync`, `rename`, ...):
//! what it cannot model (a shared writable memory map, an `O_SYNC` open) it logs
//! ([`DurableImage::unmodeled`]), and a run with any such entry cannot vouch for its result.
//!
//! ```no_run
//! use stowage_conformance::durable_image::{DurableImage, Tearing};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let image = DurableImage::prepare(std::path::Path::new("/tmp/trial"))?; // canonical path
//! let mut child = std::process::Command::new("my-writer");
//! child.arg(image.root().join("cache"));
//! image.attach(&mut child)?;
//! child.status()?; // or kill it part way
//! assert!(image.was_loaded() && image.unmodeled().is_empty());
//! image.cut_power_torn(Some(Tearing::for_trial(7)))?; // image.root() now holds what survived
//! # Ok(())
//! # }
//! ```

use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the build put the interposer (empty when it could not be built).
const LIBRARY: &str = env!("STOWAGE_FAULTFS_LIBRARY");

/// Deepest directory nesting rebuilt (the listings cannot loop unless renames did).
const MAX_DEPTH: usize = 32;

/// The interposer library, when the build could make it.
pub fn library() -> Option<&'static Path> {
    (!LIBRARY.is_empty()).then(|| Path::new(LIBRARY))
}

/// Why [`library`] is `None`: the sentence the cases that need the interposer skip with.
pub const UNAVAILABLE: &str = "the faultfs LD_PRELOAD interposer (faultfs/faultfs.c) could not \
                               be built here (it needs Linux and a C compiler; see the \
                               stowage-conformance build warnings)";

/// One trial's modelled tree (`root`) and the interposer's record of it (`shadow`).
#[derive(Debug)]
pub struct DurableImage {
    root: PathBuf,
    shadow: PathBuf,
    root_inode: u64,
}

/// What a rebuild kept and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Files in the rebuilt tree.
    pub files: u64,
    /// Files of the killed tree that the power cut removed or changed (unsynced data or names).
    pub lost: u64,
    /// Files the power cut left with part of their unsynced bytes (a torn write), when tearing.
    pub torn: u64,
}

/// How a power cut tears unsynced writes: the block size and the seed of each file's torn point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tearing {
    /// Blocks written back whole or not at all: 512 (a sector) or 4096 (a page).
    pub block: usize,
    /// Seed of the torn points.
    pub seed: u64,
}

impl Tearing {
    /// The tearing of a trial of seed `seed`: 512-byte or 4096-byte blocks, half the trials each.
    pub fn for_trial(seed: u64) -> Tearing {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7465_6172);
        Tearing { block: if rng.random_bool(0.5) { 512 } else { 4096 }, seed: rng.random() }
    }
}

/// What a torn write leaves of a file whose durable contents are `synced` and whose contents at
/// the kill were `current`: `synced` with the first `kept` of the `block`-sized blocks where the
/// two differ taken from `current` (a file that lost no block is `synced`; one that kept every
/// block is `current`, its length included). Returns the contents and how many blocks differ.
///
/// ```
/// use stowage_conformance::durable_image::torn;
/// let synced = b"aaaa".to_vec();
/// let current = b"aaaabbbbcccc".to_vec();
/// assert_eq!(torn(&synced, &current, 4, 0), (synced.clone(), 2));
/// assert_eq!(torn(&synced, &current, 4, 1).0, b"aaaabbbb");
/// assert_eq!(torn(&synced, &current, 4, 2).0, current);
/// ```
pub fn torn(synced: &[u8], current: &[u8], block: usize, kept: usize) -> (Vec<u8>, usize) {
    let block = block.max(1);
    let span = synced.len().max(current.len());
    let differs = |b: usize| {
        let range = b * block..((b + 1) * block).min(span);
        let (s, c) = (synced.get(range.clone()), current.get(range.clone()));
        // A block past either end differs unless both are past it.
        s != c || synced.len() < range.end || current.len() < range.end
    };
    let blocks: Vec<usize> = (0..span.div_ceil(block)).filter(|&b| differs(b)).collect();
    if kept >= blocks.len() {
        return (current.to_vec(), blocks.len());
    }
    let mut out = synced.to_vec();
    for &b in &blocks[..kept] {
        let start = b * block;
        let end = ((b + 1) * block).min(current.len());
        if start >= end {
            continue;
        }
        if out.len() < end {
            out.resize(end, 0);
        }
        out[start..end].copy_from_slice(&current[start..end]);
    }
    (out, blocks.len())
}

impl DurableImage {
    /// Creates the empty tree `dir/fs` and the shadow store `dir/shadow` (same filesystem, so
    /// the interposer can keep removed inodes alive by linking them there).
    ///
    /// `dir` must be canonical (absolute, no symbolic link on the way): the interposer compares
    /// it with the kernel's names of the files the child opens.
    pub fn prepare(dir: &Path) -> io::Result<DurableImage> {
        let (root, shadow) = (dir.join("fs"), dir.join("shadow"));
        fs::create_dir_all(&root)?;
        for sub in ["files", "dirs", "tmp", "grave", "lostbase"] {
            fs::create_dir_all(shadow.join(sub))?;
        }
        let root_inode = fs::metadata(&root)?.ino();
        Ok(DurableImage { root, shadow, root_inode })
    }

    /// The modelled tree: what the child writes under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Loads the interposer into `command` and points it at this image.
    ///
    /// Errors: the interposer could not be built.
    pub fn attach(&self, command: &mut Command) -> Result<(), String> {
        let library = library().ok_or(UNAVAILABLE)?;
        let mut preload = OsString::from(library);
        if let Some(existing) = std::env::var_os("LD_PRELOAD") {
            preload.push(":");
            preload.push(existing);
        }
        command
            .env("LD_PRELOAD", preload)
            .env("FAULTFS_ROOT", &self.root)
            .env("FAULTFS_SHADOW", &self.shadow);
        Ok(())
    }

    /// The environment that loads the interposer (before `others`, colon-separated preloads
    /// of other interposers, which then sit between it and libc: a failure they inject is one
    /// it sees) and points it at this image.
    ///
    /// Errors: the interposer could not be built.
    pub fn env(&self, others: &str) -> Result<Vec<(String, String)>, String> {
        let library = library().ok_or(UNAVAILABLE)?;
        let mut preload = library.display().to_string();
        if !others.is_empty() {
            preload = format!("{preload}:{others}");
        }
        Ok(vec![
            ("LD_PRELOAD".into(), preload),
            ("FAULTFS_ROOT".into(), self.root.display().to_string()),
            ("FAULTFS_SHADOW".into(), self.shadow.display().to_string()),
        ])
    }

    /// Records the whole tree as durable, as `sync()` would (for a tree written before the
    /// interposer was attached).
    ///
    /// Errors: reading the tree or writing the shadow store.
    pub fn sync_all(&self) -> io::Result<()> {
        fn walk(image: &DurableImage, dir: &Path) -> io::Result<()> {
            let mut listing = String::new();
            for entry in fs::read_dir(dir)? {
                let entry = entry?;
                let (meta, name) = (fs::symlink_metadata(entry.path())?, entry.file_name());
                let name = name.to_string_lossy();
                let kind = if meta.is_dir() {
                    walk(image, &entry.path())?;
                    'd'
                } else if meta.is_file() {
                    fs::copy(
                        entry.path(),
                        image.shadow.join("files").join(meta.ino().to_string()),
                    )?;
                    'f'
                } else {
                    'o'
                };
                listing.push_str(&format!("{kind} {} {name}\n", meta.ino()));
            }
            let inode = fs::metadata(dir)?.ino();
            fs::write(image.shadow.join("dirs").join(inode.to_string()), listing)
        }
        walk(self, &self.root)
    }

    /// Each fsync that failed on a file of the tree, as the interposer logged it: `dropped
    /// <inode> <pages> <path>`, `pages` being the dirty pages it dropped.
    pub fn dropped(&self) -> Vec<String> {
        let text = fs::read_to_string(self.shadow.join("dropped")).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// Whether a process loaded the interposer with this image's settings.
    pub fn was_loaded(&self) -> bool {
        self.shadow.join("loaded").exists()
    }

    /// What the interposer could not model (shared writable maps, synchronous opens), one entry
    /// each; a trial with any cannot vouch for its result.
    pub fn unmodeled(&self) -> Vec<String> {
        let text = fs::read_to_string(self.shadow.join("unmodeled")).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// Replaces the tree with what a power cut at this moment would have left: the tree as the
    /// kill left it moves to `fs.killed` (kept for comparison), and `fs` is rebuilt from the
    /// durable image alone.
    pub fn cut_power(&self) -> io::Result<Rebuilt> {
        self.cut_power_torn(None)
    }

    /// As [`cut_power`](Self::cut_power), tearing unsynced writes as `tearing` says (`None`:
    /// the all-or-nothing cut).
    pub fn cut_power_torn(&self, tearing: Option<Tearing>) -> io::Result<Rebuilt> {
        let killed = self.root.with_extension("killed");
        fs::rename(&self.root, &killed)?;
        let mut rebuild = Rebuild::new(self, &killed, tearing)?;
        self.rebuild(self.root_inode, &self.root, 0, &mut rebuild)?;
        let mut rebuilt = rebuild.out;
        rebuilt.lost = count_lost(&killed, &self.root)?;
        Ok(rebuilt)
    }

    /// Builds at `dest` (which must not exist) the tree a power cut at this moment would leave,
    /// without tearing and leaving the tree itself alone.
    pub fn durable_copy(&self, dest: &Path) -> io::Result<Rebuilt> {
        let mut rebuild = Rebuild::new(self, &self.root, None)?;
        self.rebuild(self.root_inode, dest, 0, &mut rebuild)?;
        let mut rebuilt = rebuild.out;
        rebuilt.lost = count_lost(&self.root, dest)?;
        Ok(rebuilt)
    }

    fn rebuild(&self, inode: u64, at: &Path, depth: usize, out: &mut Rebuild) -> io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(io::Error::other(format!("durable listings nest deeper than {MAX_DEPTH}")));
        }
        fs::create_dir(at)?;
        let listing = match fs::read_to_string(self.shadow.join("dirs").join(inode.to_string())) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        for line in listing.lines() {
            let entry = Entry::parse(line).ok_or_else(|| {
                io::Error::other(format!("bad listing line {line:?} of directory inode {inode}"))
            })?;
            let path = at.join(entry.name);
            match entry.kind {
                'd' => self.rebuild(entry.inode, &path, depth + 1, out)?,
                'f' => {
                    let synced = self.shadow.join("files").join(entry.inode.to_string());
                    let synced = match fs::read(&synced) {
                        Ok(bytes) => bytes,
                        // Named durably, never synced: a power cut leaves it empty.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                        Err(e) => return Err(e),
                    };
                    let contents = out.tear(entry.inode, synced)?;
                    fs::write(&path, contents)?;
                    out.out.files += 1;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// A rebuild in progress: what it kept, and for tearing, where each inode's latest contents are.
struct Rebuild {
    out: Rebuilt,
    tearing: Option<(Tearing, StdRng)>,
    /// Inode -> a path holding it (the killed tree's, or the grave's), when tearing.
    inodes: HashMap<u64, PathBuf>,
}

impl Rebuild {
    fn new(image: &DurableImage, live: &Path, tearing: Option<Tearing>) -> io::Result<Rebuild> {
        let mut inodes = HashMap::new();
        if tearing.is_some() {
            let mut stack = vec![live.to_path_buf(), image.shadow.join("grave")];
            while let Some(dir) = stack.pop() {
                for entry in fs::read_dir(&dir)? {
                    let entry = entry?;
                    let meta = fs::symlink_metadata(entry.path())?;
                    if meta.is_dir() {
                        stack.push(entry.path());
                    } else if meta.is_file() {
                        inodes.entry(meta.ino()).or_insert_with(|| entry.path());
                    }
                }
            }
        }
        let tearing = tearing.map(|t| (t, StdRng::seed_from_u64(t.seed)));
        Ok(Rebuild { out: Rebuilt::default(), tearing, inodes })
    }

    /// What the file of `inode`, durably `synced`, holds after the cut.
    fn tear(&mut self, inode: u64, synced: Vec<u8>) -> io::Result<Vec<u8>> {
        let (Some((tearing, rng)), Some(path)) = (self.tearing.as_mut(), self.inodes.get(&inode))
        else {
            return Ok(synced);
        };
        let current = fs::read(path)?;
        let (_, blocks) = torn(&synced, &current, tearing.block, 0);
        if blocks == 0 {
            return Ok(synced);
        }
        let kept = rng.random_range(0..=blocks);
        if kept > 0 && kept < blocks {
            self.out.torn += 1;
        }
        Ok(torn(&synced, &current, tearing.block, kept).0)
    }
}

/// One line of a durable listing: `<d|f|o> <inode> <name>`.
struct Entry<'a> {
    kind: char,
    inode: u64,
    name: &'a str,
}

impl<'a> Entry<'a> {
    fn parse(line: &'a str) -> Option<Entry<'a>> {
        let mut parts = line.splitn(3, ' ');
        let kind = parts.next()?.chars().next()?;
        let inode = parts.next()?.parse().ok()?;
        let name = parts.next().filter(|n| !n.is_empty() && *n != "." && *n != "..")?;
        Some(Entry { kind, inode, name })
    }
}

/// Files under `killed` that are missing from `rebuilt` or differ there (the writer lock's file,
/// which no backend syncs and none needs after a crash, aside).
fn count_lost(killed: &Path, rebuilt: &Path) -> io::Result<u64> {
    let mut lost = 0;
    for entry in fs::read_dir(killed)? {
        let entry = entry?;
        if entry.file_name() == stowage_core::file_safety::WriterLock::FILE_NAME {
            continue;
        }
        let (from, to) = (entry.path(), rebuilt.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            lost += if to.is_dir() { count_lost(&from, &to)? } else { 1 };
        } else if fs::read(&from).ok() != fs::read(&to).ok() {
            lost += 1;
        }
    }
    Ok(lost)
}

/// File operations whose durable image is known exactly, for testing the interposer: run them
/// in a process with the interposer attached, cut power, and the tree must be
/// [`DEMO_EXPECTED`]. Each step exercises one rule of the model.
///
/// Errors: any file operation's.
pub fn demo_writes(root: &Path) -> io::Result<()> {
    use std::io::Write;
    let sync_dir = |dir: &Path| fs::File::open(dir)?.sync_all();
    let write = |name: &str, bytes: &[u8]| -> io::Result<fs::File> {
        let mut file = fs::File::create(root.join(name))?;
        file.write_all(bytes)?;
        Ok(file)
    };
    // `synced`: data and name synced, then more data that is not.
    let mut synced = write("synced", b"v1")?;
    synced.sync_data()?;
    // `unsynced-data`: its name is synced below, its data never: it comes back empty.
    write("unsynced-data", b"lost")?;
    // `replaced`: durable "old", then replaced by an atomic write whose rename is not synced.
    write("replaced", b"old")?.sync_all()?;
    write("removed", b"still here")?.sync_all()?;
    sync_dir(root)?;
    synced.write_all(b" and v2")?;
    // `unsynced-name`: data synced, its directory never: it is gone.
    write("unsynced-name", b"gone")?.sync_all()?;
    write(".replaced.tmp", b"new")?.sync_all()?;
    fs::rename(root.join(".replaced.tmp"), root.join("replaced"))?;
    // `removed`: its unlink is not synced, so it is still there; its inode must not be reused
    // by `reuse`, whose synced data would otherwise be taken for `removed`'s.
    fs::remove_file(root.join("removed"))?;
    write("reuse", b"other data")?.sync_all()?;
    // `sub`: synced itself, but its name in the root never was.
    fs::create_dir(root.join("sub"))?;
    write("sub/inner", b"x")?.sync_all()?;
    sync_dir(&root.join("sub"))
}

/// The tree a power cut after [`demo_writes`] leaves: `(name, contents)`, sorted by name.
pub const DEMO_EXPECTED: &[(&str, &[u8])] =
    &[("removed", b"still here"), ("replaced", b"old"), ("synced", b"v1"), ("unsynced-data", b"")];

/// The files under `root` as `(relative name, contents)`, sorted by name (directories are
/// walked into, not listed).
///
/// Errors: reading the tree.
pub fn files_under(root: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(root).expect("under root").display().to_string();
                out.push((name, fs::read(&path)?));
            }
        }
    }
    out.sort();
    Ok(out)
}
