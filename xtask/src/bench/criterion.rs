//! Reading criterion's results back: the mean time and throughput of each benchmark a suite reports.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::rate::{Measured, Row, Throughput};

/// Reads criterion's results for each of `ids` in `group` under `criterion_home`, one row per id in
/// the order of `ids`, with the reason when one has no result.
///
/// Criterion writes `<home>/<directory>/new/benchmark.json` and `.../new/estimates.json`, where the
/// directory is the filename-safe form of `group/function[/value]` (`numpy10/get_checksum`, or
/// `numpy10_get_checksum` for a benchmark named `"numpy10/get_checksum"` outside a group, or
/// `numpy10/get_checksum/1000` with a parameter). The id is matched on the `full_id` recorded in
/// `benchmark.json`: `group/id` exactly, else the first `group/id/<value>` in directory order.
pub fn read_criterion(criterion_home: &Path, group: &str, ids: &[&str]) -> Vec<Row> {
    let mut found: Vec<PathBuf> = Vec::new();
    find_benchmark_files(criterion_home, &mut found);
    found.sort();
    let recorded: Vec<(String, &Path)> = found
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let json: Value = serde_json::from_str(&text).ok()?;
            let full_id = json.get("full_id")?.as_str()?.to_owned();
            Some((full_id, path.as_path()))
        })
        .collect();

    ids.iter()
        .map(|id| {
            let exact = format!("{group}/{id}");
            let prefix = format!("{exact}/");
            let chosen = recorded
                .iter()
                .find(|(full_id, _)| *full_id == exact)
                .or_else(|| recorded.iter().find(|(full_id, _)| full_id.starts_with(&prefix)));
            let measured = match chosen {
                Some((_, benchmark_json)) => read_measurement(benchmark_json),
                None => Err(format!(
                    "no criterion result for {exact} under {}",
                    criterion_home.display()
                )),
            };
            Row { name: id.to_string(), measured }
        })
        .collect()
}

/// Every `new/benchmark.json` below `dir` (criterion's current results, not saved baselines).
fn find_benchmark_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_benchmark_files(&path, found);
        } else if path.file_name().is_some_and(|name| name == "benchmark.json")
            && dir.file_name().is_some_and(|name| name == "new")
        {
            found.push(path);
        }
    }
}

/// The mean (from `estimates.json`) and throughput (from `benchmark.json`) of one benchmark.
fn read_measurement(benchmark_json: &Path) -> Result<Measured, String> {
    let read_json = |path: &Path| -> Result<Value, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|error| format!("{} is not JSON: {error}", path.display()))
    };
    let benchmark = read_json(benchmark_json)?;
    let estimates_path = benchmark_json.with_file_name("estimates.json");
    let estimates = read_json(&estimates_path)?;
    let mean_ns = estimates
        .pointer("/mean/point_estimate")
        .and_then(Value::as_f64)
        .filter(|mean| *mean > 0.0)
        .ok_or_else(|| {
            format!("{} has no positive mean.point_estimate", estimates_path.display())
        })?;
    let throughput = benchmark.get("throughput").and_then(throughput_from_json);
    Ok(Measured::from_criterion(mean_ns, throughput))
}

/// Criterion's serialized `Throughput` (`{"Elements": 1000}`, or a list of them, of which the
/// first counts), or none for `null` and kinds it does not know.
fn throughput_from_json(value: &Value) -> Option<Throughput> {
    let value = match value {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let object = value.as_object()?;
    let (kind, amount) = object.iter().next()?;
    match kind.as_str() {
        "Elements" => amount.as_u64().map(Throughput::Rows),
        "Bytes" | "BytesDecimal" => amount.as_u64().map(Throughput::Bytes),
        "Bits" => amount.as_u64().map(Throughput::Bits),
        "ElementsAndBytes" => amount.get("elements")?.as_u64().map(Throughput::Rows),
        _ => None,
    }
}

/// Fake criterion result directories for the tests of this module and of the run loop.
#[cfg(test)]
pub mod fake {
    use std::path::Path;

    /// Writes criterion's two files for one benchmark below `home/<directory>/new/`.
    pub fn write_result(
        home: &Path,
        directory: &str,
        full_id: &str,
        throughput: &str,
        mean_ns: f64,
    ) {
        let new = home.join(directory).join("new");
        std::fs::create_dir_all(&new).unwrap();
        let group = full_id.split('/').next().unwrap();
        let benchmark = format!(
            r#"{{"group_id":"{group}","function_id":null,"value_str":null,"throughput":{throughput},"full_id":"{full_id}","directory_name":"{directory}","title":"{full_id}"}}"#
        );
        std::fs::write(new.join("benchmark.json"), benchmark).unwrap();
        let estimate = format!(
            r#"{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":{mean_ns},"upper_bound":{mean_ns}}},"point_estimate":{mean_ns},"standard_error":1.0}}"#
        );
        let estimates = format!(
            r#"{{"mean":{estimate},"median":{estimate},"median_abs_dev":{estimate},"slope":null,"std_dev":{estimate}}}"#
        );
        std::fs::write(new.join("estimates.json"), estimates).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::fake::write_result;
    use super::*;
    use crate::bench::rate::Unit;
    use crate::bench::suite::{MEMMAP, NUMPY10};

    /// The measured rate of `id` among `results`.
    fn rate(results: &[Row], id: &str) -> Result<Measured, String> {
        results.iter().find(|row| row.name == id).unwrap().measured.clone()
    }

    /// Every layout criterion writes, every throughput kind, baselines ignored, bad estimates named.
    #[test]
    fn criterion_results_are_read_from_every_directory_layout() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        // A function in the group: numpy10/<id>/new.
        write_result(
            home,
            "numpy10/get_checksum",
            "numpy10/get_checksum",
            r#"{"Elements":1000}"#,
            1e6,
        );
        // A parameterised function: numpy10/<id>/<value>/new.
        write_result(
            home,
            "numpy10/put_flush/4096",
            "numpy10/put_flush/4096",
            r#"{"Elements":500}"#,
            1e9,
        );
        // A benchmark named "numpy10/open" outside a group: the slash is sanitised away.
        write_result(home, "numpy10_open", "numpy10/open", "null", 2e3);
        // Bytes throughput.
        write_result(
            home,
            "numpy10/reference_raw_copy",
            "numpy10/reference_raw_copy",
            r#"{"Bytes":4096}"#,
            1e3,
        );
        // Elements and bytes: the elements count.
        write_result(
            home,
            "numpy10/get_no_checksum",
            "numpy10/get_no_checksum",
            r#"{"ElementsAndBytes":{"elements":10,"bytes":40}}"#,
            1e4,
        );
        // A saved baseline is not the current result.
        write_result(
            home,
            "numpy10/reference_copy_xxh64/base",
            "numpy10/reference_copy_xxh64",
            "null",
            1.0,
        );
        std::fs::rename(
            home.join("numpy10/reference_copy_xxh64/base/new"),
            home.join("numpy10/reference_copy_xxh64/base/old"),
        )
        .unwrap();
        // An estimates.json without a mean.
        write_result(
            home,
            "numpy10/reference_write_fsync",
            "numpy10/reference_write_fsync",
            "null",
            1.0,
        );
        std::fs::write(home.join("numpy10/reference_write_fsync/new/estimates.json"), "{}")
            .unwrap();

        let results = read_criterion(home, NUMPY10.group, NUMPY10.benchmark_ids);
        assert_eq!(results.len(), NUMPY10.benchmark_ids.len());

        let get = rate(&results, "get_checksum").unwrap();
        assert_eq!(get.unit, Unit::Rows);
        assert!((get.value - 1e6).abs() < 1e-6, "{}", get.value);
        assert_eq!(get.mean_ns, Some(1e6));

        let put = rate(&results, "put_flush").unwrap();
        assert!((put.value - 500.0).abs() < 1e-9);

        let open = rate(&results, "open").unwrap();
        assert_eq!(open.unit, Unit::Iterations);
        assert!((open.value - 5e5).abs() < 1e-6);

        let raw = rate(&results, "reference_raw_copy").unwrap();
        assert_eq!(raw.unit, Unit::Bytes);
        assert!((raw.value - 4096e6).abs() < 1e-3);

        let no_checksum = rate(&results, "get_no_checksum").unwrap();
        assert_eq!(no_checksum.per_iteration, Some(Throughput::Rows(10)));
        assert_eq!(no_checksum.unit, Unit::Rows);

        assert!(
            rate(&results, "reference_copy_xxh64").unwrap_err().contains("no criterion result")
        );
        assert!(
            rate(&results, "reference_write_fsync").unwrap_err().contains("mean.point_estimate")
        );
        assert!(rate(&results, "reference_xxh64_in_place").is_err());
    }

    /// `numpy10/open/1` sorts before `numpy10/open/new`; the exact id still wins.
    #[test]
    fn exact_id_wins_over_a_parameterised_one() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        write_result(home, "numpy10/open/1", "numpy10/open/1", "null", 10.0);
        write_result(home, "numpy10/open", "numpy10/open", "null", 20.0);
        let results = read_criterion(home, NUMPY10.group, &["open"]);
        assert_eq!(rate(&results, "open").unwrap().mean_ns, Some(20.0));
    }

    /// No criterion directory at all: every row says what is missing where.
    #[test]
    fn missing_criterion_directory_reports_every_id_missing() {
        let home = tempfile::tempdir().unwrap();
        let results =
            read_criterion(&home.path().join("absent"), NUMPY10.group, NUMPY10.benchmark_ids);
        assert!(results.iter().all(|row| row.measured.is_err()));
    }

    /// Two suites share one criterion home and the same ids (`open`, `get_checksum`): each reads
    /// its own group's results only.
    #[test]
    fn suites_sharing_ids_read_only_their_own_group() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        write_result(home, "numpy10/open", "numpy10/open", r#"{"Elements":1}"#, 50e6);
        write_result(home, "memmap/open", "memmap/open", r#"{"Elements":1}"#, 20e3);
        let memmap = read_criterion(home, MEMMAP.group, MEMMAP.benchmark_ids);
        assert_eq!(memmap.len(), MEMMAP.benchmark_ids.len());
        assert_eq!(rate(&memmap, "open").unwrap().mean_ns, Some(20e3));
        assert!(rate(&memmap, "open_1k_rows").unwrap_err().contains("memmap/open_1k_rows"));
        let numpy10 = read_criterion(home, NUMPY10.group, &["open"]);
        assert_eq!(rate(&numpy10, "open").unwrap().mean_ns, Some(50e6));
    }
}
