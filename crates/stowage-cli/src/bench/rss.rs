//! Peak resident memory of this process, per phase: Linux's high-water mark (`VmHWM`), which
//! writing `5` to `/proc/self/clear_refs` resets to the current resident memory (`VmRSS`).
//! Elsewhere (or without /proc) they do nothing and the figures are unknown.

/// Resets the high-water mark, so the next [`peak_mib`] covers only what runs from here.
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The peak resident memory since the last [`reset_peak`] (or since start), in MiB; `None`
/// where the system does not say.
pub fn peak_mib() -> Option<f64> {
    status_mib("VmHWM:")
}

/// The resident memory now, in MiB; `None` where the system does not say.
pub fn current_mib() -> Option<f64> {
    status_mib("VmRSS:")
}

/// The resident anonymous memory now (heap and stacks: `RssAnon`), in MiB: the resident memory
/// without the page cache that maps of files touch. `None` where the system does not say.
pub fn anon_mib() -> Option<f64> {
    status_mib("RssAnon:")
}

fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_peak_covers_a_large_allocation_and_resets() {
        reset_peak();
        let before = peak_mib().unwrap();
        assert!((current_mib().unwrap() - before).abs() < 16.0, "just reset: peak near current");
        let big = vec![1u8; 64 << 20];
        std::hint::black_box(&big);
        let during = peak_mib().unwrap();
        assert!(during >= before + 60.0, "{before} -> {during}");
        drop(big);
        reset_peak();
        assert!(peak_mib().unwrap() < during - 30.0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn anonymous_memory_counts_the_heap_not_a_mapped_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, vec![7u8; 64 << 20]).unwrap();
        let before = anon_mib().unwrap();
        // SAFETY: the file is this test's own, in its own temporary directory, never changed
        // while mapped.
        let map = unsafe { memmap2::Mmap::map(&std::fs::File::open(&path).unwrap()).unwrap() };
        let sum: u64 = map.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert_eq!(sum, 7 * (16 << 10));
        assert!(anon_mib().unwrap() < before + 16.0, "a touched map is not anonymous");
        let heap = vec![1u8; 64 << 20];
        std::hint::black_box(&heap);
        assert!(anon_mib().unwrap() >= before + 60.0);
    }
}
