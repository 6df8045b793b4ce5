//! This process's resources, for tests and measuring examples that bound them: the soft
//! descriptor limit a test sets for itself, the descriptors and memory maps it holds, and its
//! memory figures (Linux `/proc/self`).
//!
//! A test binary that sets the limit should hold that one test only: the limit is the whole
//! process's.

/// Sets this process's soft limit on open file descriptors (`RLIMIT_NOFILE`) to `limit`.
///
/// # Panics
/// When the limit cannot be read or set (above the hard limit, say).
///
/// ```no_run
/// stowage_test_support::process::set_descriptor_limit(256);
/// ```
pub fn set_descriptor_limit(limit: u64) {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write one rlimit of ours.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut current), 0);
        current.rlim_cur = limit;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const current), 0);
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut current), 0);
    }
    assert_eq!(current.rlim_cur, limit);
}

/// The file descriptors this process holds now (entries of `/proc/self/fd`).
///
/// ```
/// # #[cfg(target_os = "linux")]
/// assert!(stowage_test_support::process::descriptors() >= 3);
/// ```
pub fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// The memory maps of this process whose line in `/proc/self/maps` satisfies `wanted` (a file's
/// path, say).
///
/// ```
/// # #[cfg(target_os = "linux")]
/// assert!(stowage_test_support::process::maps_where(|line| !line.is_empty()) > 0);
/// ```
pub fn maps_where(wanted: impl Fn(&str) -> bool) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines().filter(|line| wanted(line)).count()
}

/// A field of `/proc/self/status` in KiB (`RssAnon:`, the heap without mapped pages; `VmHWM:`,
/// the peak resident memory), 0 where it cannot be read.
///
/// ```
/// # #[cfg(target_os = "linux")]
/// assert!(stowage_test_support::process::status_kib("VmRSS:") > 0);
/// ```
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Whether the map of this process that holds `address` is advised `MADV_RANDOM` (`rr` among
/// its `VmFlags` in `/proc/self/smaps`).
///
/// # Panics
/// When no map of this process holds `address`.
///
/// ```no_run
/// let bytes = vec![0u8; 4096];
/// assert!(!stowage_test_support::process::advised_random(bytes.as_ptr() as usize));
/// ```
pub fn advised_random(address: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((start, end)) = range.split_once('-')
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
        {
            inside = (start..end).contains(&address);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return flags.split_whitespace().any(|flag| flag == "rr");
        }
    }
    panic!("no map at {address:#x}");
}
