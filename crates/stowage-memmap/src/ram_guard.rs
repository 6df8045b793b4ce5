//! The RAM guard of in-memory realization: a cache may be copied into RAM only when it would use at
//! most 50% of the machine's memory (physical RAM, or the cgroup memory limit when that is lower).
//!
//! The budget is a plain value ([`MemoryBudget`]) so callers and tests can inject any total;
//! [`MemoryBudget::detect`] reads the real one from `/proc/meminfo` and the cgroup files.
//!
//! ```
//! use stowage_memmap::MemoryBudget;
//! use stowage_memmap::test_support::check_realization;
//! let budget = MemoryBudget::total_ram(8_000_000_000); // 8 GB of RAM: 4 GB may be realized
//! assert!(check_realization(4_000_000_000, &budget).is_ok());
//! let err = check_realization(5_000_000_000, &budget).unwrap_err();
//! assert!(err.to_string().contains("cache would use 5.00 GB which exceeds 50% of total RAM (8.00 GB)"));
//! ```

use std::fmt;
use std::path::Path;

use stowage_core::{Error, IoResultExt, Result};

/// Where the memory information is read from on Linux.
pub const MEMINFO_PATH: &str = "/proc/meminfo";
/// The cgroup v2 memory limit (`max` means none).
pub const CGROUP_V2_MAX_PATH: &str = "/sys/fs/cgroup/memory.max";
/// The cgroup v1 memory limit (a huge number means none).
pub const CGROUP_V1_LIMIT_PATH: &str = "/sys/fs/cgroup/memory/memory.limit_in_bytes";

/// What [`MemoryBudget::total_bytes`] was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSource {
    /// Physical RAM (`MemTotal` of `/proc/meminfo`).
    TotalRam,
    /// The cgroup memory limit, lower than physical RAM.
    CgroupLimit,
}

impl fmt::Display for BudgetSource {
    /// The words used in the refusal message: `total RAM` or `the cgroup memory limit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetSource::TotalRam => "total RAM",
            BudgetSource::CgroupLimit => "the cgroup memory limit",
        })
    }
}

/// The memory a realization is measured against: a total (RAM or cgroup limit) of which at most
/// 50% may be used.
///
/// ```
/// use stowage_memmap::{BudgetSource, MemoryBudget};
/// let budget = MemoryBudget::from_texts("MemTotal: 16000000 kB\n", Some("4000000000\n"), None)?;
/// assert_eq!(budget, MemoryBudget { total_bytes: 4_000_000_000, source: BudgetSource::CgroupLimit });
/// assert_eq!(budget.limit_bytes(), 2_000_000_000);
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    /// The total in bytes (physical RAM, or the cgroup limit when lower).
    pub total_bytes: u64,
    /// What `total_bytes` is.
    pub source: BudgetSource,
}

impl MemoryBudget {
    /// A budget of `total_bytes` of physical RAM (for tests and callers that know the total).
    pub fn total_ram(total_bytes: u64) -> MemoryBudget {
        MemoryBudget { total_bytes, source: BudgetSource::TotalRam }
    }

    /// The most a realization may use: 50% of [`MemoryBudget::total_bytes`] (rounded down).
    pub fn limit_bytes(&self) -> u64 {
        self.total_bytes / 2
    }

    /// This machine's budget: `MemTotal` of `MEMINFO_PATH`, or the cgroup limit
    /// (`CGROUP_V2_MAX_PATH`, else `CGROUP_V1_LIMIT_PATH`) when that is lower. A cgroup file that
    /// is missing, unreadable, `max` or not a number means no cgroup limit.
    ///
    /// Errors: [`Error::Io`] when `/proc/meminfo` cannot be read (no Linux `procfs`);
    /// [`Error::NotFound`] when it has no parsable `MemTotal` line.
    pub fn detect() -> Result<MemoryBudget> {
        let meminfo = std::fs::read_to_string(MEMINFO_PATH).at(MEMINFO_PATH)?;
        let read = |path: &str| std::fs::read_to_string(Path::new(path)).ok();
        Self::from_texts(
            &meminfo,
            read(CGROUP_V2_MAX_PATH).as_deref(),
            read(CGROUP_V1_LIMIT_PATH).as_deref(),
        )
    }

    /// The budget from the texts of `/proc/meminfo` and of the cgroup v2 and v1 limit files (`None`
    /// when a file could not be read). The lower of the two cgroup limits counts when both parse.
    ///
    /// Errors: [`Error::NotFound`] when `meminfo` has no parsable `MemTotal` line.
    pub fn from_texts(
        meminfo: &str,
        cgroup_v2: Option<&str>,
        cgroup_v1: Option<&str>,
    ) -> Result<MemoryBudget> {
        let ram = parse_meminfo_total(meminfo).ok_or_else(|| Error::NotFound {
            what: format!("a MemTotal line in {MEMINFO_PATH}"),
        })?;
        let cgroup =
            [cgroup_v2, cgroup_v1].into_iter().flatten().filter_map(parse_cgroup_limit).min();
        Ok(match cgroup {
            Some(limit) if limit < ram => {
                MemoryBudget { total_bytes: limit, source: BudgetSource::CgroupLimit }
            }
            _ => MemoryBudget::total_ram(ram),
        })
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes (the file counts in kB = 1024 bytes).
///
/// ```
/// use stowage_memmap::test_support::parse_meminfo_total;
/// assert_eq!(parse_meminfo_total("MemTotal:  8152132 kB\nMemFree: 1 kB\n"), Some(8_347_783_168));
/// assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
/// ```
pub fn parse_meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|line| line.strip_prefix("MemTotal:"))?;
    let mut words = line.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        None => 1,
        Some(unit) if unit.eq_ignore_ascii_case("kb") => 1024,
        Some(_) => return None,
    };
    value.checked_mul(unit).filter(|&bytes| bytes > 0)
}

/// A cgroup memory limit file's text as a limit in bytes: `None` for `max` (no limit), for an
/// empty text and for anything that is not a decimal number.
///
/// ```
/// use stowage_memmap::test_support::parse_cgroup_limit;
/// assert_eq!(parse_cgroup_limit("max\n"), None);
/// assert_eq!(parse_cgroup_limit("2147483648\n"), Some(2_147_483_648));
/// assert_eq!(parse_cgroup_limit("lots"), None);
/// ```
pub fn parse_cgroup_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&bytes| bytes > 0)
}

/// Checks that realizing `bytes` in RAM stays within 50% of `budget`'s total.
///
/// Refuses with [`Error::InvalidArgument`] (the request does not fit this machine; the fix is the
/// argument `load_in_memory=False`) whose `detail` is exactly the spec's message, GB being 1e9
/// bytes and both numbers printed with two decimals:
///
/// `load_in_memory=True refused: cache would use X.XX GB which exceeds 50% of total RAM (T.TT GB).
/// Set load_in_memory=False and stream from the memmap instead.`
///
/// `T.TT` is the total the budget was derived from; when that is the cgroup limit, the message says
/// `of the cgroup memory limit` instead of `of total RAM`. Exactly 50% is allowed.
///
/// ```
/// use stowage_core::Error;
/// use stowage_memmap::test_support::check_realization;
/// use stowage_memmap::{BudgetSource, MemoryBudget};
/// let budget = MemoryBudget { total_bytes: 2_000_000_000, source: BudgetSource::CgroupLimit };
/// let Err(Error::InvalidArgument { detail }) = check_realization(1_234_567_890, &budget) else {
///     panic!()
/// };
/// assert_eq!(
///     detail,
///     "load_in_memory=True refused: cache would use 1.23 GB which exceeds 50% of the cgroup \
///      memory limit (2.00 GB). Set load_in_memory=False and stream from the memmap instead."
/// );
/// ```
pub fn check_realization(bytes: u64, budget: &MemoryBudget) -> Result<()> {
    if u128::from(bytes) * 2 <= u128::from(budget.total_bytes) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "load_in_memory=True refused: cache would use {:.2} GB which exceeds 50% of {} ({:.2} GB). \
         Set load_in_memory=False and stream from the memmap instead.",
        bytes as f64 / 1e9,
        budget.source,
        budget.total_bytes as f64 / 1e9
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       16318412 kB\nMemFree:         1234 kB\n";

    #[test]
    fn cgroup_texts() {
        assert_eq!(parse_cgroup_limit("max"), None);
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("536870912\n"), Some(536_870_912));
        assert_eq!(parse_cgroup_limit("  42 "), Some(42));
        for garbage in ["", "\n", "-1", "12 kB", "1.5e9", "maximum", "0", "99999999999999999999999"]
        {
            assert_eq!(parse_cgroup_limit(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn meminfo_texts() {
        assert_eq!(parse_meminfo_total(MEMINFO), Some(16_318_412 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 3 kB\nMemTotal: 2 kB"), Some(2048));
        assert_eq!(parse_meminfo_total("MemTotal: 7"), Some(7));
        for garbage in ["", "MemTotal: kB", "MemTotal: x kB", "MemTotal: 3 MB", "MemTotal: 0 kB"] {
            assert_eq!(parse_meminfo_total(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn the_lower_of_ram_and_cgroup_counts() {
        let ram = 16_318_412 * 1024;
        let budget = |v2, v1| MemoryBudget::from_texts(MEMINFO, v2, v1).unwrap();
        assert_eq!(budget(None, None), MemoryBudget::total_ram(ram));
        assert_eq!(budget(Some("max\n"), None), MemoryBudget::total_ram(ram));
        assert_eq!(budget(Some("garbage"), Some("")), MemoryBudget::total_ram(ram));
        // cgroup v1's "unlimited" is a huge number, above RAM.
        assert_eq!(budget(None, Some("9223372036854771712\n")), MemoryBudget::total_ram(ram));
        let limited = MemoryBudget { total_bytes: 1 << 30, source: BudgetSource::CgroupLimit };
        assert_eq!(budget(Some("1073741824\n"), None), limited);
        assert_eq!(budget(Some("max"), Some("1073741824")), limited);
        assert_eq!(budget(Some("1073741824"), Some("2147483648")), limited);
        assert!(matches!(
            MemoryBudget::from_texts("MemFree: 1 kB", None, None),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn refusal_message_and_boundary() {
        let budget = MemoryBudget::total_ram(3_000_000_000);
        assert!(check_realization(1_500_000_000, &budget).is_ok());
        assert!(check_realization(0, &MemoryBudget::total_ram(0)).is_ok());
        let Err(Error::InvalidArgument { detail }) = check_realization(1_500_000_001, &budget)
        else {
            panic!("not refused")
        };
        assert_eq!(
            detail,
            "load_in_memory=True refused: cache would use 1.50 GB which exceeds 50% of total RAM \
             (3.00 GB). Set load_in_memory=False and stream from the memmap instead."
        );
        let huge = check_realization(u64::MAX, &budget).unwrap_err().to_string();
        assert!(huge.contains("18446744073.71 GB"), "{huge}");
    }
}
