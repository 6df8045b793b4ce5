//! What the numbers were measured on: CPU, cores, memory, compiler, Python and the time, for the
//! line that opens each section of `docs/benchmarks.md` and `docs/reliability.md`.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// What the numbers were measured on.
#[derive(Debug)]
pub struct Machine {
    /// The CPU model.
    pub cpu: String,
    /// Cores available to this process.
    pub cores: usize,
    /// Total memory, e.g. `7.8 GiB`.
    pub memory: String,
    /// `rustc --version`.
    pub rustc: String,
    /// The Python peer's interpreter and package versions, when it ran.
    pub python: Option<String>,
    /// When, as `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
}

impl Machine {
    /// Reads this machine's facts now; `python` comes from the peer, which knows its versions.
    pub fn detect(python: Option<String>) -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let rustc = Command::new(rustc)
            .arg("--version")
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .unwrap_or_else(|| "rustc (version unknown)".to_owned());
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Machine {
            cpu: cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown CPU".to_owned()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory: total_memory(&read("/proc/meminfo")).unwrap_or_else(|| "unknown".to_owned()),
            rustc,
            python,
            date: utc_timestamp(seconds),
        }
    }
}

/// The first `model name` of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// `MemTotal` of `/proc/meminfo` in GiB, e.g. `7.8 GiB`.
fn total_memory(meminfo: &str) -> Option<String> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.1} GiB", kib / (1024.0 * 1024.0)))
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch, without a date crate.
fn utc_timestamp(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let minute_of_day = (seconds % 86_400) / 60;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", minute_of_day / 60, minute_of_day % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU model and memory come from `/proc` text.
    #[test]
    fn machine_facts_are_parsed_from_proc() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R) CPU @ 2.20GHz"));
        assert_eq!(cpu_model("processor: 0\n"), None);
        let meminfo = "MemTotal:        8152132 kB\nMemFree:          123 kB\n";
        assert_eq!(total_memory(meminfo).as_deref(), Some("7.8 GiB"));
    }

    /// The epoch, a leap day and a recent date.
    #[test]
    fn utc_timestamps_follow_the_calendar() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_timestamp(1_767_225_600 + 3_600 + 120), "2026-01-01 01:02 UTC");
    }
}
