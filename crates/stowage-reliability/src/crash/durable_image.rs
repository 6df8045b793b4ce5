//! Simulated power loss: the durable image the `faultfs` interposer keeps of a trial's
//! directory tree (see `faultfs/faultfs.c`), and the tree rebuilt from it alone.
//!
//! The interposer copies a file to `shadow/files/<inode>` when it is fsynced or fdatasynced and
//! writes a directory's listing to `shadow/dirs/<inode>` when the directory is fsynced. A power
//! cut keeps exactly that: the rebuilt tree starts from the root's last synced listing, each
//! listed directory holds its own last synced listing, and each listed file holds its contents
//! at its last fsync (empty when it was never synced). Writes, names and removals not yet made
//! durable are dropped, whatever their order, so a backend passes only if its fsyncs are in the
//! right order, not just its renames.

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
}

impl DurableImage {
    /// Creates the empty tree `dir/fs` and the shadow store `dir/shadow` (same filesystem, so
    /// the interposer can keep removed inodes alive by linking them there).
    pub fn prepare(dir: &Path) -> io::Result<DurableImage> {
        let (root, shadow) = (dir.join("fs"), dir.join("shadow"));
        fs::create_dir_all(&root)?;
        for sub in ["files", "dirs", "tmp", "grave"] {
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
        let library = library().ok_or("the faultfs interposer was not built (no C compiler?)")?;
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
        let killed = self.root.with_extension("killed");
        fs::rename(&self.root, &killed)?;
        let mut rebuilt = Rebuilt::default();
        self.rebuild(self.root_inode, &self.root, 0, &mut rebuilt)?;
        rebuilt.lost = count_lost(&killed, &self.root)?;
        Ok(rebuilt)
    }

    fn rebuild(&self, inode: u64, at: &Path, depth: usize, out: &mut Rebuilt) -> io::Result<()> {
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
                    match fs::copy(&synced, &path) {
                        Ok(_) => {}
                        // Named durably, never synced: a power cut leaves it empty.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            fs::File::create(&path)?;
                        }
                        Err(e) => return Err(e),
                    }
                    out.files += 1;
                }
                _ => {}
            }
        }
        Ok(())
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
