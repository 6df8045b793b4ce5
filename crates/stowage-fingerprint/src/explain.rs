//! Why a fingerprint does not match: the config fields and source files that changed.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::canonical_json::{PyJsonOptions, to_python_json};

use super::{FingerprintFile, SourceStamp, fingerprint_hash};

/// One configuration field whose value differs between the stored fingerprint and the current inputs.
///
/// ```
/// use stowage_fingerprint::ConfigChange;
/// let change = ConfigChange { path: "dataset.class".into(), stored: Some("A".into()), current: None };
/// assert_eq!(change.to_string(), r#"dataset.class: "A" -> (absent)"#);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigChange {
    /// Dotted path of the field: object keys joined by `.`, list positions as `[i]`
    /// (`scaling.class`, `panels[2].name`); empty for the whole config.
    pub path: String,
    /// The stored value; `None` when the field is absent from the stored config.
    pub stored: Option<Value>,
    /// The current value; `None` when the field is absent from the current config.
    pub current: Option<Value>,
}

impl fmt::Display for ConfigChange {
    /// `path: stored -> current`, values as JSON, `(absent)` for a missing field.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "(whole config)" } else { &self.path };
        write!(formatter, "{path}: {} -> {}", show(&self.stored), show(&self.current))
    }
}

/// One source file whose stamp differs between the stored fingerprint and the current inputs.
///
/// ```
/// use stowage_fingerprint::{SourceChange, SourceStamp};
/// let stamp = |mtime| SourceStamp::MtimeSize { path: "/d/a.hid".into(), mtime_ns: Some(mtime), size: Some(38) };
/// let change = SourceChange::Changed { stored: stamp(1), current: stamp(2) };
/// assert_eq!(change.to_string(), "changed /d/a.hid: mtime_ns=1 size=38 -> mtime_ns=2 size=38");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceChange {
    /// A source that the stored fingerprint does not list.
    Added(SourceStamp),
    /// A stored source that is no longer among the current sources.
    Removed(SourceStamp),
    /// A source listed on both sides with different stamps (modified, touched, deleted or restored).
    Changed {
        /// The stored stamp.
        stored: SourceStamp,
        /// The current stamp.
        current: SourceStamp,
    },
}

impl fmt::Display for SourceChange {
    /// `added <stamp>`, `removed <stamp>` or `changed <path>: <stored fields> -> <current fields>`.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceChange::Added(stamp) => write!(formatter, "added {stamp}"),
            SourceChange::Removed(stamp) => write!(formatter, "removed {stamp}"),
            SourceChange::Changed { stored, current } => write!(
                formatter,
                "changed {}: {} -> {}",
                stored.path(),
                stored.describe_fields(),
                current.describe_fields()
            ),
        }
    }
}

/// Why a stored fingerprint does or does not match the current inputs; see [`explain`].
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// The hash recorded in the file.
    pub stored_hash: String,
    /// The hash of the stored config and sources, recomputed. It differs from `stored_hash` when the
    /// file was edited or written by another fingerprint scheme.
    pub stored_inputs_hash: String,
    /// The hash of the current config and sources.
    pub current_hash: String,
    /// Config fields that differ, in stored-key order, then fields only the current config has.
    pub config_changes: Vec<ConfigChange>,
    /// Sources that were added, removed or changed, in path order.
    pub source_changes: Vec<SourceChange>,
}

impl Explanation {
    /// True when the stored hash equals the current one: the cache may be used.
    ///
    /// ```
    /// use stowage_fingerprint::{explain, FingerprintFile};
    /// let stored = FingerprintFile::new(5, serde_json::json!({"a": 1}), vec![]);
    /// assert!(explain(&stored, &serde_json::json!({"a": 1}), &[]).is_fresh());
    /// ```
    pub fn is_fresh(&self) -> bool {
        self.stored_hash == self.current_hash
    }
}

impl fmt::Display for Explanation {
    /// A report a user can act on: both hashes, then one line per changed field and source.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_fresh() {
            return write!(
                formatter,
                "fingerprint is fresh: stored and current inputs both hash to {}",
                self.current_hash
            );
        }
        writeln!(
            formatter,
            "fingerprint is stale: stored hash {}, current inputs hash {}",
            self.stored_hash, self.current_hash
        )?;
        if !self.config_changes.is_empty() {
            writeln!(formatter, "config differences (stored -> current):")?;
            for change in &self.config_changes {
                writeln!(formatter, "  {change}")?;
            }
        }
        if !self.source_changes.is_empty() {
            writeln!(formatter, "source differences (stored -> current):")?;
            for change in &self.source_changes {
                writeln!(formatter, "  {change}")?;
            }
        }
        let edited = self.stored_hash != self.stored_inputs_hash;
        if edited {
            writeln!(
                formatter,
                "the stored hash does not match the stored config and sources (they hash to {}): \
                 fingerprint.json was edited or written by another fingerprint scheme",
                self.stored_inputs_hash
            )?;
        }
        if self.config_changes.is_empty() && self.source_changes.is_empty() && !edited {
            writeln!(
                formatter,
                "no config field or source differs; look for duplicate source paths"
            )?;
        }
        write!(formatter, "rebuild the cache, or restore the inputs listed above to reuse it")
    }
}

/// Compares a stored fingerprint with the current config and source stamps, field by field.
///
/// Config values are compared as JSON values, the way their hash sees them: `1` and `1.0` differ,
/// key order does not matter. Objects are walked key by key and lists position by position, so a
/// change deep inside the config is reported at its own dotted path. Sources are matched by path.
///
/// ```
/// use stowage_fingerprint::{explain, FingerprintFile, SourceChange, SourceStamp};
/// let stamp = |path: &str, hash: &str| SourceStamp::ContentHash { path: path.into(), content_hash: Some(hash.into()) };
/// let stored = FingerprintFile::new(
///     5,
///     serde_json::json!({"root": "/srv/rnd", "scaling": {"resolution": 32}}),
///     vec![stamp("a.hid", "aa"), stamp("b.hid", "bb")],
/// );
/// let current_config = serde_json::json!({"root": "/srv/rnd", "scaling": {"resolution": 64}});
/// let explanation = explain(&stored, &current_config, &[stamp("a.hid", "a2"), stamp("c.hid", "cc")]);
///
/// assert!(!explanation.is_fresh());
/// assert_eq!(explanation.config_changes[0].to_string(), "scaling.resolution: 32 -> 64");
/// assert_eq!(explanation.source_changes, [
///     SourceChange::Changed { stored: stamp("a.hid", "aa"), current: stamp("a.hid", "a2") },
///     SourceChange::Removed(stamp("b.hid", "bb")),
///     SourceChange::Added(stamp("c.hid", "cc")),
/// ]);
/// println!("{explanation}");
/// ```
pub fn explain(
    stored: &FingerprintFile,
    current_config: &Value,
    current_stamps: &[SourceStamp],
) -> Explanation {
    let mut config_changes = Vec::new();
    diff_config(String::new(), Some(&stored.config), Some(current_config), &mut config_changes);
    Explanation {
        stored_hash: stored.hash.clone(),
        stored_inputs_hash: stored.recompute_hash(),
        current_hash: fingerprint_hash(current_config, current_stamps),
        config_changes,
        source_changes: diff_sources(&stored.sources, current_stamps),
    }
}

fn diff_config(
    path: String,
    stored: Option<&Value>,
    current: Option<&Value>,
    changes: &mut Vec<ConfigChange>,
) {
    match (stored, current) {
        (Some(Value::Object(stored)), Some(Value::Object(current))) => {
            let only_current = current.keys().filter(|key| !stored.contains_key(*key));
            for key in stored.keys().chain(only_current) {
                let field_path =
                    if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                diff_config(field_path, stored.get(key), current.get(key), changes);
            }
        }
        (Some(Value::Array(stored)), Some(Value::Array(current))) => {
            for index in 0..stored.len().max(current.len()) {
                diff_config(
                    format!("{path}[{index}]"),
                    stored.get(index),
                    current.get(index),
                    changes,
                );
            }
        }
        _ if !same_canonical_form(stored, current) => {
            changes.push(ConfigChange { path, stored: stored.cloned(), current: current.cloned() })
        }
        _ => {}
    }
}

/// Equal as the hash sees them: `serde_json` says `-0.0 == 0.0`, but Python writes them differently.
fn same_canonical_form(stored: Option<&Value>, current: Option<&Value>) -> bool {
    let canonical = |value: &Value| to_python_json(value, &PyJsonOptions::dnanet());
    match (stored, current) {
        (Some(stored), Some(current)) => canonical(stored) == canonical(current),
        (stored, current) => stored.is_none() && current.is_none(),
    }
}

fn diff_sources(stored: &[SourceStamp], current: &[SourceStamp]) -> Vec<SourceChange> {
    let by_path = |stamps: &[SourceStamp]| -> BTreeMap<String, SourceStamp> {
        stamps.iter().map(|stamp| (stamp.path().to_owned(), stamp.clone())).collect()
    };
    let mut stored = by_path(stored);
    let mut changes = Vec::new();
    let mut current = by_path(current);
    let all_paths: std::collections::BTreeSet<String> =
        stored.keys().chain(current.keys()).cloned().collect();
    for path in all_paths {
        match (stored.remove(&path), current.remove(&path)) {
            (Some(before), Some(after)) if before != after => {
                changes.push(SourceChange::Changed { stored: before, current: after });
            }
            (Some(before), None) => changes.push(SourceChange::Removed(before)),
            (None, Some(after)) => changes.push(SourceChange::Added(after)),
            _ => {}
        }
    }
    changes
}

fn show(value: &Option<Value>) -> String {
    let readable = PyJsonOptions { ensure_ascii: false, ..PyJsonOptions::default() };
    value.as_ref().map_or_else(|| "(absent)".to_owned(), |value| to_python_json(value, &readable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_changes(stored: Value, current: Value) -> Vec<String> {
        let mut changes = Vec::new();
        diff_config(String::new(), Some(&stored), Some(&current), &mut changes);
        changes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn nested_fields_get_dotted_paths() {
        assert_eq!(
            config_changes(
                json!({"a": {"b": [1, {"c": "x"}]}, "gone": 1}),
                json!({"a": {"b": [1, {"c": "é"}, 3]}, "new": null})
            ),
            [
                r#"a.b[1].c: "x" -> "é""#,
                "a.b[2]: (absent) -> 3",
                "gone: 1 -> (absent)",
                "new: (absent) -> null",
            ]
        );
    }

    #[test]
    fn int_versus_float_is_a_change_key_order_is_not() {
        assert_eq!(config_changes(json!({"a": 1}), json!({"a": 1.0})), ["a: 1 -> 1.0"]);
        let reordered: Value = serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap();
        assert!(config_changes(json!({"a": 1, "b": 2}), reordered).is_empty());
    }

    #[test]
    fn negative_zero_is_a_change() {
        assert_eq!(config_changes(json!({"a": 0.0}), json!({"a": -0.0})), ["a: 0.0 -> -0.0"]);
    }

    #[test]
    fn type_change_is_reported_at_its_path() {
        assert_eq!(
            config_changes(json!({"a": [1]}), json!({"a": {"0": 1}})),
            [r#"a: [1] -> {"0": 1}"#]
        );
        assert_eq!(config_changes(json!(1), json!(2)), ["(whole config): 1 -> 2"]);
    }

    #[test]
    fn display_lists_every_change_and_a_next_step() {
        let stamp =
            |mtime| SourceStamp::MtimeSize { path: "/d/a".into(), mtime_ns: mtime, size: Some(1) };
        let stored = FingerprintFile::new(5, json!({"root": "/d"}), vec![stamp(Some(1))]);
        let text = explain(&stored, &json!({"root": "/e"}), &[stamp(None)]).to_string();
        assert!(
            text.starts_with(&format!("fingerprint is stale: stored hash {}", stored.hash)),
            "{text}"
        );
        assert!(text.contains("\n  root: \"/d\" -> \"/e\"\n"), "{text}");
        assert!(
            text.contains("\n  changed /d/a: mtime_ns=1 size=1 -> mtime_ns=null size=1\n"),
            "{text}"
        );
        assert!(
            text.ends_with("rebuild the cache, or restore the inputs listed above to reuse it"),
            "{text}"
        );
    }

    #[test]
    fn edited_file_is_called_out() {
        let mut stored = FingerprintFile::new(5, json!({"a": 1}), vec![]);
        stored.hash = "0".repeat(64);
        let explanation = explain(&stored, &json!({"a": 1}), &[]);
        assert!(explanation.config_changes.is_empty() && explanation.source_changes.is_empty());
        assert!(
            explanation.to_string().contains("was edited or written by another fingerprint scheme")
        );
    }

    #[test]
    fn fresh_explanation_says_so() {
        let stored = FingerprintFile::new(5, json!({"a": 1}), vec![]);
        let text = explain(&stored, &json!({"a": 1}), &[]).to_string();
        assert_eq!(
            text,
            format!("fingerprint is fresh: stored and current inputs both hash to {}", stored.hash)
        );
    }
}
