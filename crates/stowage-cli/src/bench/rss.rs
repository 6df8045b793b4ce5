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

/// The most anonymous memory ([`anon_mib`]) seen by a thread that reads it every
/// [`AnonPeak::EVERY`] until stopped: a peak that lasts longer than that is seen, whatever the
/// code being measured does meanwhile.
pub struct AnonPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Option<f64>>,
}

impl AnonPeak {
    /// How often the sampler reads `/proc/self/status`.
    pub const EVERY: std::time::Duration = std::time::Duration::from_millis(5);

    /// Starts sampling.
    pub fn start() -> AnonPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak: Option<f64> = None;
            loop {
                if let Some(anon) = anon_mib() {
                    peak = Some(peak.map_or(anon, |p: f64| p.max(anon)));
                }
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Self::EVERY);
            }
        });
        AnonPeak { stop, thread }
    }

    /// Stops sampling; the peak seen, MiB (`None` where the system does not say).
    pub fn stop(self) -> Option<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(None)
    }
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

    /// The process's memory is what these tests measure: one at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn alone() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_peak_covers_a_large_allocation_and_resets() {
        let _alone = alone();
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
        let _alone = alone();
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

    /// A 64 MiB buffer that lives 100 ms and is freed before the sampler stops is in its peak.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_anonymous_peak_sees_a_buffer_freed_before_it_stops() {
        let _alone = alone();
        let before = anon_mib().unwrap();
        let sampler = AnonPeak::start();
        let heap = vec![1u8; 64 << 20];
        std::hint::black_box(&heap);
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(heap);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(sampler.stop().unwrap() >= before + 60.0);
    }
}
