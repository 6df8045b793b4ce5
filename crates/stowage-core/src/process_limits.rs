//! The limits of this process that bound how many files a backend keeps open or mapped: a
//! backend reading a cache of many segment files keeps a bounded set of them, sized from these.

/// The kernel's limit on this process's memory maps (`vm.max_map_count`), 65,530 where it
/// cannot be read (Linux's default).
///
/// ```
/// assert!(stowage_core::process_limits::max_map_count() >= 1);
/// ```
pub fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .unwrap_or(65_530)
}

/// The soft limit on this process's open file descriptors (`RLIMIT_NOFILE`), `None` where it
/// cannot be read.
///
/// ```
/// # #[cfg(unix)]
/// assert!(stowage_core::process_limits::open_file_limit().is_some_and(|n| n >= 3));
/// ```
pub fn open_file_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes only the struct it is given, which lives for the call.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        read.then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
    }
    #[cfg(not(unix))]
    None
}
