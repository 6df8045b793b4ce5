//! Never writing through a symbolic link inside a cache.
//!
//! A link inside a cache directory (planted by a hostile archive, left by a copy tool, or made by
//! a user who linked one file elsewhere) must not make stowage truncate, append to or overwrite a
//! file outside the cache. So every file stowage opens for writing inside a cache is opened with
//! `O_NOFOLLOW` ([`open_no_follow`]): a link in its place is refused with an error that names the
//! link ([`is_refused_symlink`] recognizes it). Files that another library opens by path
//! (libhdf5) are checked with [`refuse_symlink`] right before. Directories inside a cache are
//! created and checked with [`create_dir_within`] and [`refuse_symlinks_within`]: `O_NOFOLLOW`
//! only concerns the last component of a path, so a linked `segments/` would otherwise take every
//! new file out of the cache.
//!
//! What stays allowed:
//! - **Reads** through links: users link data directories and files, and reading changes nothing.
//! - **The cache directory itself** may be a link: the user named it, so it is where they want
//!   the cache. Only what is *inside* it is never followed for a write.
//! - **Renames over a link** (atomic replace, publishing): `rename(2)` replaces the link itself,
//!   never the file it points to. Creating with `O_EXCL` (every temporary file) never follows a
//!   link either.
//!
//! Directories are checked with `symlink_metadata` (`lstat`), not opened with `openat`: a
//! directory that another process swaps for a link between the check and the open can still
//! redirect a write. That process can write into the cache anyway; what this guards against is a
//! link already there, which the check always sees. (`openat` chains would close the window at
//! the cost of `unsafe` descriptor handling on every path; the files themselves, where the data
//! goes, are refused by the kernel with `O_NOFOLLOW`, without a window.)
//!
//! ```
//! use std::fs::OpenOptions;
//! use stowage_core::file_safety::{is_refused_symlink, open_no_follow};
//! use stowage_core::IoResultExt;
//!
//! let (cache, elsewhere) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let outside = elsewhere.path().join("precious.txt");
//! std::fs::write(&outside, b"keep me")?;
//! let link = cache.path().join("data.bin");
//! std::os::unix::fs::symlink(&outside, &link)?;
//!
//! let err = open_no_follow(OpenOptions::new().append(true), &link).at(&link).unwrap_err();
//! assert!(is_refused_symlink(&err));
//! assert!(err.to_string().contains("data.bin"), "{err}");
//! assert_eq!(std::fs::read(&outside)?, b"keep me");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::{Error, Result};

/// Opens `path` with `options`, refusing to follow a symbolic link in its place.
///
/// On unix the open adds `O_NOFOLLOW` (replacing any custom flags set on `options`), so the
/// kernel refuses a link atomically. Elsewhere `path` is checked with `symlink_metadata` first.
/// A link in a *directory* of `path` is not refused here (`O_NOFOLLOW` concerns the last
/// component only): see [`create_dir_within`] and [`refuse_symlinks_within`].
///
/// Errors: the I/O error of the open; a link at `path` gives an error of kind `Other` whose
/// message says that `path` is a symbolic link (and where it points) that stowage will not
/// write through. Wrapped with [`IoResultExt::at`](crate::IoResultExt::at), it becomes an
/// [`Error::Io`] naming the link, which [`is_refused_symlink`] recognizes. With `create_new`, a
/// link at `path` is refused by the kernel as `AlreadyExists`, as for any existing file.
pub fn open_no_follow(options: &OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut options = options.clone();
        options.custom_flags(libc::O_NOFOLLOW);
        options.open(path).map_err(|err| {
            // Linux and macOS answer a link with ELOOP, FreeBSD with EMLINK. A genuine loop in a
            // directory of the path also gives ELOOP: only a link at `path` itself is named one.
            let refused = matches!(err.raw_os_error(), Some(libc::ELOOP) | Some(libc::EMLINK))
                && is_symlink(path);
            if refused { refused_symlink(path) } else { err }
        })
    }
    #[cfg(not(unix))]
    {
        if is_symlink(path) {
            return Err(refused_symlink(path));
        }
        options.open(path)
    }
}

/// Refuses a symbolic link at `path`: `Ok` when `path` is anything else or does not exist.
///
/// For a file another library opens by path for writing (libhdf5's `H5Fcreate`, which follows
/// links), checked right before it does, and for a directory inside a cache before files are
/// written into it. A check, not an open: a link made after it is not seen (see the module
/// documentation).
///
/// Errors: [`Error::Io`] naming `path` when it is a link ([`is_refused_symlink`] is true) or
/// cannot be examined.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let link = dir.path().join("segments");
/// stowage_core::file_safety::refuse_symlink(&link)?; // missing: fine
/// std::os::unix::fs::symlink("/tmp", &link)?;
/// let err = stowage_core::file_safety::refuse_symlink(&link).unwrap_err();
/// assert!(err.to_string().contains("segments"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn refuse_symlink(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            Err(Error::io(path, refused_symlink(path)))
        }
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(Error::io(path, err)),
    }
}

/// Refuses a symbolic link at `path` or at any directory between `root` and it: every existing
/// component of `path` below `root` is checked with [`refuse_symlink`]; `root` itself (the cache
/// directory the user named) may be a link. Missing components are fine.
///
/// Errors: [`Error::InvalidArgument`] when `path` is not `root` or below it (or climbs out with
/// `..`); as [`refuse_symlink`] for the first link found, naming it.
///
/// ```
/// let cache = tempfile::tempdir()?;
/// std::fs::create_dir(cache.path().join("stage"))?;
/// std::os::unix::fs::symlink("/tmp", cache.path().join("stage/10"))?;
/// let file = cache.path().join("stage/10/data.npy");
/// let err = stowage_core::file_safety::refuse_symlinks_within(cache.path(), &file).unwrap_err();
/// assert!(err.to_string().contains("stage/10"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn refuse_symlinks_within(root: &Path, path: &Path) -> Result<()> {
    let mut current = root.to_path_buf();
    for name in components_below(root, path)? {
        current.push(name);
        refuse_symlink(&current)?;
    }
    Ok(())
}

/// Creates the directory `dir` inside the cache directory `root`, with any missing directories
/// between them, never following a link: each directory below `root` that exists must be a real
/// directory. `root` must exist (create it with `create_dir_all`; it may be a link). Nothing is
/// fsynced: callers sync the parents of what they created, as for `create_dir_all`.
///
/// Errors: [`Error::InvalidArgument`] when `dir` is not below `root`; [`Error::Io`] naming the
/// first directory that is a link ([`is_refused_symlink`]), is not a directory, or cannot be
/// created.
///
/// ```
/// use stowage_core::file_safety::{create_dir_within, is_refused_symlink};
/// let (cache, elsewhere) = (tempfile::tempdir()?, tempfile::tempdir()?);
/// create_dir_within(cache.path(), &cache.path().join("segments/0"))?;
/// assert!(cache.path().join("segments/0").is_dir());
///
/// std::os::unix::fs::symlink(elsewhere.path(), cache.path().join("logs"))?;
/// let err = create_dir_within(cache.path(), &cache.path().join("logs")).unwrap_err();
/// assert!(is_refused_symlink(&err), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn create_dir_within(root: &Path, dir: &Path) -> Result<()> {
    let mut current = root.to_path_buf();
    for name in components_below(root, dir)? {
        current.push(name);
        match fs::create_dir(&current) {
            Ok(()) => {}
            // mkdir never follows a link in its last component: one there is "already exists".
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(Error::io(&current, err)),
        }
        let metadata = fs::symlink_metadata(&current).map_err(|err| Error::io(&current, err))?;
        if metadata.file_type().is_symlink() {
            return Err(Error::io(&current, refused_symlink(&current)));
        }
        if !metadata.is_dir() {
            return Err(Error::io(
                &current,
                io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a directory"),
            ));
        }
    }
    Ok(())
}

/// [`create_dir_within`], then every directory from `root` to `dir`'s parent fsynced, so that
/// the names of `dir` and of the directories made on the way survive a power cut. Synced even
/// when they existed: an earlier process may have crashed between making one and syncing its
/// parent.
///
/// ```
/// let cache = tempfile::tempdir()?;
/// let index = cache.path().join("index");
/// stowage_core::file_safety::create_dir_within_durably(cache.path(), &index)?;
/// assert!(index.is_dir());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Errors: as [`create_dir_within`]; [`Error::Io`] naming a directory that cannot be synced.
pub fn create_dir_within_durably(root: &Path, dir: &Path) -> Result<()> {
    create_dir_within(root, dir)?;
    let mut parent = root.to_path_buf();
    for name in components_below(root, dir)? {
        super::fsync_dir(&parent)?;
        parent.push(name);
    }
    Ok(())
}

/// Whether `err` is the refusal of [`open_no_follow`], [`refuse_symlink`],
/// [`refuse_symlinks_within`] or [`create_dir_within`] to write through a symbolic link; the
/// link is the error's path.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let link = dir.path().join("link");
/// std::os::unix::fs::symlink("/tmp", &link)?;
/// let err = stowage_core::file_safety::refuse_symlink(&link).unwrap_err();
/// assert!(stowage_core::file_safety::is_refused_symlink(&err));
/// assert!(!stowage_core::file_safety::is_refused_symlink(&stowage_core::Error::invalid("x")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn is_refused_symlink(err: &Error) -> bool {
    match err {
        Error::Io { source, .. } => {
            source.get_ref().is_some_and(|inner| inner.is::<RefusedSymlink>())
        }
        _ => false,
    }
}

/// The error of a refused link at `path`: says where it points and that stowage will not write
/// through it; the caller attaches the path.
pub(crate) fn refused_symlink(path: &Path) -> io::Error {
    io::Error::other(RefusedSymlink { target: fs::read_link(path).ok() })
}

/// The inner error of a refused link, so that [`is_refused_symlink`] can recognize it.
#[derive(Debug)]
struct RefusedSymlink {
    target: Option<PathBuf>,
}

impl fmt::Display for RefusedSymlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("is a symbolic link")?;
        if let Some(target) = &self.target {
            write!(f, " to {}", target.display())?;
        }
        f.write_str(
            "; stowage never writes through a symbolic link inside a cache (replace the link \
             with the file or directory it points to, or remove it)",
        )
    }
}

impl std::error::Error for RefusedSymlink {}

fn is_symlink(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// The names of `path` below `root`, refusing a path outside it.
fn components_below<'a>(root: &Path, path: &'a Path) -> Result<Vec<&'a std::ffi::OsStr>> {
    let outside =
        || Error::invalid(format!("{} is not inside the cache {}", path.display(), root.display()));
    let relative = path.strip_prefix(root).map_err(|_| outside())?;
    relative
        .components()
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            _ => Err(outside()),
        })
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn outside_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outside.txt");
        fs::write(&path, b"outside").unwrap();
        (dir, path)
    }

    #[test]
    fn opening_a_link_for_writing_is_refused_and_names_it() {
        let (_elsewhere, outside) = outside_file();
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("data.bin");
        symlink(&outside, &link).unwrap();
        for options in [
            OpenOptions::new().write(true).clone(),
            OpenOptions::new().append(true).create(true).clone(),
            OpenOptions::new().write(true).truncate(true).clone(),
            OpenOptions::new().read(true).write(true).create(true).truncate(false).clone(),
        ] {
            let err = open_no_follow(&options, &link).map_err(|e| Error::io(&link, e)).unwrap_err();
            assert!(is_refused_symlink(&err), "{err}");
            let text = err.to_string();
            assert!(text.contains(&link.display().to_string()), "{text}");
            assert!(text.contains("outside.txt"), "names the target too: {text}");
        }
        assert_eq!(fs::read(&outside).unwrap(), b"outside");
    }

    #[test]
    fn a_dangling_link_is_refused_too_not_created_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let link = dir.path().join("log");
        symlink(&target, &link).unwrap();
        let err = open_no_follow(OpenOptions::new().append(true).create(true), &link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists());
    }

    #[test]
    fn a_regular_file_opens_and_a_missing_one_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        open_no_follow(OpenOptions::new().write(true).create(true), &path).unwrap();
        assert!(path.is_file());
        let err =
            open_no_follow(OpenOptions::new().write(true), &dir.path().join("b")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_linked_directory_inside_is_refused_but_the_root_may_be_a_link() {
        let elsewhere = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        symlink(elsewhere.path(), &root).unwrap();
        create_dir_within(&root, &root.join("segments")).unwrap();
        refuse_symlinks_within(&root, &root.join("segments/x.arrow")).unwrap();

        symlink(elsewhere.path(), root.join("segments/linked")).unwrap();
        let inner = root.join("segments/linked/deeper");
        let err = create_dir_within(&root, &inner).unwrap_err();
        assert!(is_refused_symlink(&err), "{err}");
        assert!(err.to_string().contains("linked"), "{err}");
        assert!(!elsewhere.path().join("deeper").exists());
        let err = refuse_symlinks_within(&root, &inner.join("file")).unwrap_err();
        assert!(is_refused_symlink(&err), "{err}");
    }

    #[test]
    fn a_path_outside_the_root_is_an_invalid_argument() {
        let dir = tempfile::tempdir().unwrap();
        for path in [Path::new("/elsewhere"), &dir.path().join("../x")] {
            let err = create_dir_within(dir.path(), path).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        }
    }

    #[test]
    fn a_file_where_a_directory_belongs_is_named() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("segments"), b"").unwrap();
        let err = create_dir_within(dir.path(), &dir.path().join("segments")).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        assert!(!is_refused_symlink(&err));
    }
}
