//! The layout of `json.dumps` output: containers, separators, indentation and key order.

use super::float_repr::python_float_repr;
use super::options::PyJsonOptions;
use super::string_escape::write_python_string;
use super::value::PyValue;

/// Encodes `value` under `options`; see [`to_python_json`](super::to_python_json).
pub(super) fn encode(value: &PyValue, options: &PyJsonOptions) -> String {
    let mut encoder = Encoder { options, out: String::new(), depth: 0 };
    encoder.value(value);
    encoder.out
}

struct Encoder<'a> {
    options: &'a PyJsonOptions,
    out: String,
    /// Nesting level of the container being written; drives indentation.
    depth: usize,
}

impl Encoder<'_> {
    fn value(&mut self, value: &PyValue) {
        match value {
            PyValue::Null => self.out.push_str("null"),
            PyValue::Bool(true) => self.out.push_str("true"),
            PyValue::Bool(false) => self.out.push_str("false"),
            PyValue::Int(int) => self.out.push_str(&int.to_string()),
            PyValue::Float(float) => self.out.push_str(&python_float_repr(*float)),
            PyValue::Str(text) => {
                write_python_string(&mut self.out, text, self.options.ensure_ascii)
            }
            PyValue::List(items) => {
                self.container('[', ']', items, |encoder, item| encoder.value(item))
            }
            PyValue::Dict(entries) => {
                let mut entries: Vec<&(String, PyValue)> = entries.iter().collect();
                if self.options.sort_keys {
                    // `str` order is byte order of UTF-8, which is Unicode code point order: the order
                    // Python sorts `str` keys in (not UTF-16 order).
                    entries.sort_by(|(left, _), (right, _)| left.cmp(right));
                }
                self.container('{', '}', &entries, |encoder, (key, item)| {
                    write_python_string(&mut encoder.out, key, encoder.options.ensure_ascii);
                    encoder.out.push_str(encoder.options.separators.key());
                    encoder.value(item);
                });
            }
        }
    }

    /// Writes `open item sep item ... close`; with `indent`, each item on its own line and the
    /// closing bracket on a line of its own, like Python's `_iterencode_list` / `_iterencode_dict`.
    fn container<T>(
        &mut self,
        open: char,
        close: char,
        items: &[T],
        mut write_item: impl FnMut(&mut Self, &T),
    ) {
        self.out.push(open);
        if items.is_empty() {
            self.out.push(close);
            return;
        }
        self.depth += 1;
        for (position, item) in items.iter().enumerate() {
            if position > 0 {
                self.out.push_str(self.options.separators.item());
            }
            self.newline_and_indent();
            write_item(self, item);
        }
        self.depth -= 1;
        self.newline_and_indent();
        self.out.push(close);
    }

    fn newline_and_indent(&mut self) {
        if let Some(spaces) = self.options.indent {
            self.out.push('\n');
            self.out.extend(std::iter::repeat_n(' ', spaces * self.depth));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PyJsonOptions, PyValue, Separators, to_python_json};
    use serde_json::json;

    fn dumps(value: &serde_json::Value, options: PyJsonOptions) -> String {
        to_python_json(value, &options)
    }

    #[test]
    fn scalars() {
        let options = PyJsonOptions::default();
        assert_eq!(dumps(&json!(null), options), "null");
        assert_eq!(dumps(&json!(true), options), "true");
        assert_eq!(dumps(&json!(false), options), "false");
        assert_eq!(dumps(&json!(-17), options), "-17");
        assert_eq!(dumps(&json!(u64::MAX), options), "18446744073709551615");
        assert_eq!(dumps(&json!(3.0), options), "3.0");
        assert_eq!(dumps(&json!("x"), options), "\"x\"");
        assert_eq!(
            to_python_json(&PyValue::Int(-(1i128 << 100)), &options),
            "-1267650600228229401496703205376"
        );
    }

    #[test]
    fn empty_containers() {
        for options in [PyJsonOptions::default(), PyJsonOptions::indented(4)] {
            assert_eq!(dumps(&json!([]), options), "[]");
            assert_eq!(dumps(&json!({}), options), "{}");
            assert_eq!(dumps(&json!([[], {}]), PyJsonOptions::default()), "[[], {}]");
        }
    }

    #[test]
    fn default_and_compact_separators() {
        let value = json!({"a": [1, 2], "b": {"c": null}});
        assert_eq!(dumps(&value, PyJsonOptions::default()), r#"{"a": [1, 2], "b": {"c": null}}"#);
        assert_eq!(dumps(&value, PyJsonOptions::aenet_compat()), r#"{"a":[1,2],"b":{"c":null}}"#);
    }

    #[test]
    fn sort_keys_by_code_point_not_utf16() {
        // U+FF61 sorts after U+10000 in UTF-16 (surrogates are 0xD800..) but before it by code point.
        let value = json!({"\u{10000}": 1, "\u{ff61}": 2, "b": 3, "B": 4, "": 5, "é": 6});
        assert_eq!(
            dumps(&value, PyJsonOptions { ensure_ascii: false, ..PyJsonOptions::dnanet() }),
            "{\"\": 5, \"B\": 4, \"b\": 3, \"é\": 6, \"\u{ff61}\": 2, \"\u{10000}\": 1}"
        );
    }

    #[test]
    fn nested_keys_are_sorted_too() {
        let value = json!({"z": {"y": 1, "x": [{"b": 1, "a": 2}]}, "a": 0});
        assert_eq!(
            dumps(&value, PyJsonOptions::dnanet()),
            r#"{"a": 0, "z": {"x": [{"a": 2, "b": 1}], "y": 1}}"#
        );
    }

    #[test]
    fn keys_are_escaped_like_values() {
        let value = json!({"ë\n\"": "ë"});
        assert_eq!(dumps(&value, PyJsonOptions::dnanet()), r#"{"\u00eb\n\"": "\u00eb"}"#);
        assert_eq!(
            dumps(&value, PyJsonOptions { ensure_ascii: false, ..PyJsonOptions::dnanet() }),
            "{\"ë\\n\\\"\": \"ë\"}"
        );
    }

    #[test]
    fn indent_puts_each_item_on_its_own_line() {
        let value = json!({"a": [1, {"b": []}], "c": "d"});
        assert_eq!(
            dumps(&value, PyJsonOptions::indented(2)),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": \"d\"\n}"
        );
    }

    #[test]
    fn indent_zero_adds_only_newlines() {
        assert_eq!(dumps(&json!([1, [2]]), PyJsonOptions::indented(0)), "[\n1,\n[\n2\n]\n]");
    }

    #[test]
    fn indent_with_default_separators_keeps_trailing_spaces() {
        // json.dumps([1, 2], indent=1, separators=(", ", ": ")) == '[\n 1, \n 2\n]'
        let options =
            PyJsonOptions { separators: Separators::Default, ..PyJsonOptions::indented(1) };
        assert_eq!(dumps(&json!([1, 2]), options), "[\n 1, \n 2\n]");
    }

    #[test]
    fn floats_inside_containers_use_python_repr() {
        let value = json!([1e-5, 1e16, 2.0, -0.0, 0.1]);
        assert_eq!(dumps(&value, PyJsonOptions::default()), "[1e-05, 1e+16, 2.0, -0.0, 0.1]");
    }
}
