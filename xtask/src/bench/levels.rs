//! Levels a bench measured that criterion cannot hold (resident memory, say): read from the
//! `measurements.json` the bench leaves in its bench data.

use std::path::Path;

use serde_json::Value;

use super::rate::{Measured, Row, Unit};
use super::suite::Level;

/// The file in the bench data that holds the levels.
pub const FILE: &str = "measurements.json";

/// One row per level of `levels`: its value from `<bench data>/measurements.json`
/// (`{"<name>": {"value": <number>, "unit": "MiB"}}`; the units are `MiB`, `ms`,
/// `requests` and `µs`), or why it is missing.
pub fn read_levels(bench_data: &Path, levels: &[Level]) -> Vec<Row> {
    if levels.is_empty() {
        return Vec::new();
    }
    let path = bench_data.join(FILE);
    let json: Result<Value, String> = std::fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))
        .and_then(|text| {
            serde_json::from_str(&text)
                .map_err(|error| format!("{} is not JSON: {error}", path.display()))
        });
    levels_in(&json, levels, &path.display().to_string())
}

/// One row per level of `levels` from `json`, an object in the shape of `measurements.json`
/// (or why there is none); `source` names it in messages. A suite whose peer script measures
/// everything gives its levels in its JSON line's `"levels"`.
pub fn levels_in(json: &Result<Value, String>, levels: &[Level], source: &str) -> Vec<Row> {
    levels
        .iter()
        .map(|level| Row {
            name: level.name.to_owned(),
            measured: json.clone().and_then(|json| level_of(&json, level.name, source)),
        })
        .collect()
}

fn level_of(json: &Value, name: &str, source: &str) -> Result<Measured, String> {
    let entry = json.get(name).ok_or_else(|| format!("{source} has no {name}"))?;
    let value = entry.get("value").and_then(Value::as_f64).filter(|v| v.is_finite() && *v >= 0.0);
    let unit = entry.get("unit").and_then(Value::as_str).and_then(Unit::level_named);
    match (value, unit) {
        (Some(value), Some(unit)) => Ok(Measured::level(value, unit)),
        _ => Err(format!(
            "{source}: {name} is not {{\"value\": <number >= 0>, \"unit\": \"MiB\", \"ms\", \
             \"requests\" or \"µs\"}}: {entry}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEVELS: &[Level] = &[
        Level { name: "open_rss_10m", description: "resident memory" },
        Level { name: "absent", description: "not in the file" },
        Level { name: "bad_unit", description: "a unit the table does not know" },
    ];

    #[test]
    fn levels_come_from_the_file_and_each_problem_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_levels(dir.path(), LEVELS);
        assert!(missing[0].measured.as_ref().unwrap_err().contains("cannot read"));
        std::fs::write(
            dir.path().join(FILE),
            r#"{"open_rss_10m": {"value": 12.5, "unit": "MiB"}, "bad_unit": {"value": 1, "unit": "GB"}, "p50": {"value": 1.25, "unit": "ms"}, "opens": {"value": 4, "unit": "requests"}}"#,
        )
        .unwrap();
        let rows = read_levels(dir.path(), LEVELS);
        let level = rows[0].measured.as_ref().unwrap();
        assert_eq!((level.value, level.unit, level.mean_ns), (12.5, Unit::Mebibytes, None));
        assert!(rows[1].measured.as_ref().unwrap_err().contains("has no absent"));
        assert!(rows[2].measured.as_ref().unwrap_err().contains("\"GB\""));
        assert!(read_levels(dir.path(), &[]).is_empty());
        let other_units = [
            Level { name: "p50", description: "a median latency" },
            Level { name: "opens", description: "requests of an open" },
        ];
        let rows = read_levels(dir.path(), &other_units);
        let units: Vec<Unit> = rows.iter().map(|row| row.measured.as_ref().unwrap().unit).collect();
        assert_eq!(units, [Unit::Milliseconds, Unit::Requests]);
    }

    /// Levels given in a peer's JSON line read the same way, microseconds included.
    #[test]
    fn levels_in_a_peer_line_and_microseconds() {
        let levels = [
            Level { name: "arrow_get_overhead", description: "overhead" },
            Level { name: "npy_get_overhead", description: "absent" },
        ];
        let json: Result<Value, String> =
            Ok(serde_json::json!({"arrow_get_overhead": {"value": 0.75, "unit": "µs"}}));
        let rows = levels_in(&json, &levels, "the script's \"levels\"");
        let level = rows[0].measured.as_ref().unwrap();
        assert_eq!((level.value, level.unit), (0.75, Unit::Microseconds));
        assert_eq!(
            rows[1].measured.as_ref().unwrap_err(),
            "the script's \"levels\" has no npy_get_overhead"
        );
        let rows = levels_in(&Err("the script did not run".to_owned()), &levels, "x");
        assert!(
            rows.iter().all(|row| row.measured.as_ref().unwrap_err() == "the script did not run")
        );
    }
}
