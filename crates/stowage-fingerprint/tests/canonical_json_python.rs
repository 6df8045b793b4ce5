//! Differential test: `to_python_json` against Python's own `json.dumps`, byte for byte.
//!
//! A deterministic generator builds a corpus of values (nested containers, every class of Unicode
//! character, floats across the whole exponent range, integers beyond `u64`) under every combination
//! of options. `tests/python/json_dumps_cases.py` encodes each case with `json.dumps`; the outputs
//! must be identical.
//!
//! Without `python3` the test reports itself skipped (`stowage_core::skip`), unless
//! `STOWAGE_REQUIRE_PYTHON=1`.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use stowage_fingerprint::canonical_json::{PyJsonOptions, PyValue, Separators, to_python_json};

/// Random generated cases; the special cases come on top.
const RANDOM_CASES: usize = 3000;
const FLOAT_RUN: usize = 20_000;

#[test]
fn to_python_json_matches_python_json_dumps() {
    if !python_available() {
        return;
    }
    let cases = corpus();
    assert!(cases.len() >= 2000, "corpus too small: {}", cases.len());
    let expected = python_json_dumps(&cases);
    assert_eq!(expected.len(), cases.len(), "python returned a different number of outputs");

    let mut mismatches = Vec::new();
    for (index, ((value, options), python)) in cases.iter().zip(&expected).enumerate() {
        let rust = to_python_json(value, options);
        if &rust != python {
            mismatches.push(format!(
                "case {index} {options:?}\n  python: {python}\n  rust:   {rust}\n  value:  {value:?}"
            ));
        }
        // The serde_json::Value entry point must agree whenever the value fits into one.
        if let Some(serde_value) = as_serde_value(value) {
            let via_serde = to_python_json(&serde_value, options);
            if &via_serde != python {
                mismatches.push(format!(
                    "case {index} via serde_json::Value {options:?}\n  python: {python}\n  rust:   {via_serde}"
                ));
            }
        }
    }
    let first: Vec<&String> = mismatches.iter().take(10).collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} cases differ from Python; first ones:\n{}",
        mismatches.len(),
        cases.len(),
        first.iter().map(|m| m.as_str()).collect::<Vec<_>>().join("\n")
    );
    eprintln!("compared {} cases with python3 json.dumps: all identical", cases.len());
}

// ---------------------------------------------------------------------------------------------
// Running Python

fn python_available() -> bool {
    let required = std::env::var("STOWAGE_REQUIRE_PYTHON").is_ok_and(|value| value == "1");
    match Command::new("python3").arg("--version").output() {
        Ok(output) if output.status.success() => true,
        outcome => {
            let reason = match outcome {
                Ok(output) => format!("python3 --version exited with {}", output.status),
                Err(error) => format!("python3 not runnable: {error}"),
            };
            assert!(!required, "STOWAGE_REQUIRE_PYTHON=1 but {reason}");
            stowage_core::skip::report_skip("prerequisite", &reason);
            false
        }
    }
}

fn python_json_dumps(cases: &[(PyValue, PyJsonOptions)]) -> Vec<String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/json_dumps_cases.py");
    let transported: Vec<Value> = cases
        .iter()
        .map(|(value, options)| {
            json!({
                "value": transport(value),
                "options": {
                    "sort_keys": options.sort_keys,
                    "separators": [options.separators.item(), options.separators.key()],
                    "ensure_ascii": options.ensure_ascii,
                    "indent": options.indent,
                },
            })
        })
        .collect();
    let input = serde_json::to_vec(&transported).expect("corpus serializes");

    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run python3 {}: {error}", script.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Write from another thread: Python's output could fill the pipe before it has read all input.
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("python3 ran");
    writer.join().expect("writer thread").expect("corpus written to python3");
    assert!(
        output.status.success(),
        "python3 {} failed ({}): {}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("python3 printed a JSON list of strings")
}

/// The tagged form `json_dumps_cases.py` decodes: floats as their bit patterns, integers as
/// decimal text, so nothing is rounded or re-typed on the way.
fn transport(value: &PyValue) -> Value {
    match value {
        PyValue::Null => json!(["null"]),
        PyValue::Bool(flag) => json!(["bool", flag]),
        PyValue::Int(int) => json!(["int", int.to_string()]),
        PyValue::Float(float) => json!(["float", format!("{:016x}", float.to_bits())]),
        PyValue::Str(text) => json!(["str", text]),
        PyValue::List(items) => json!(["list", items.iter().map(transport).collect::<Vec<_>>()]),
        PyValue::Dict(entries) => json!([
            "dict",
            entries.iter().map(|(key, item)| json!([key, transport(item)])).collect::<Vec<_>>()
        ]),
    }
}

/// The same value as a `serde_json::Value`, when it has one (finite floats, 64-bit integers).
fn as_serde_value(value: &PyValue) -> Option<Value> {
    Some(match value {
        PyValue::Null => Value::Null,
        PyValue::Bool(flag) => Value::Bool(*flag),
        PyValue::Int(int) => {
            if let Ok(small) = i64::try_from(*int) {
                Value::from(small)
            } else {
                Value::from(u64::try_from(*int).ok()?)
            }
        }
        PyValue::Float(float) => Value::Number(serde_json::Number::from_f64(*float)?),
        PyValue::Str(text) => Value::String(text.clone()),
        PyValue::List(items) => {
            Value::Array(items.iter().map(as_serde_value).collect::<Option<_>>()?)
        }
        PyValue::Dict(entries) => Value::Object(
            entries
                .iter()
                .map(|(key, item)| Some((key.clone(), as_serde_value(item)?)))
                .collect::<Option<_>>()?,
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// The corpus

fn corpus() -> Vec<(PyValue, PyJsonOptions)> {
    let mut rng = XorShift(0x5eed_cafe_f00d_1234);
    let mut cases = Vec::new();
    for _ in 0..RANDOM_CASES {
        let value = random_value(&mut rng, 4);
        cases.push((value, random_options(&mut rng)));
    }
    for options in all_option_combinations() {
        cases.push((special_floats(), options));
        cases.push((special_strings(), options));
        cases.push((special_keys(), options));
        cases.push((special_ints(), options));
        cases.push((PyValue::List(vec![]), options));
        cases.push((PyValue::Dict(vec![]), options));
        cases.push((
            PyValue::List(vec![PyValue::List(vec![]), PyValue::Dict(vec![]), PyValue::Null]),
            options,
        ));
    }
    // A long run of floats hammers the shortest-repr digits more than the nested cases can.
    let floats = (0..FLOAT_RUN).map(|_| PyValue::Float(random_float(&mut rng))).collect();
    cases.push((PyValue::List(floats), PyJsonOptions::aenet_compat()));
    let bit_patterns = (0..20_000).map(|_| PyValue::Float(f64::from_bits(rng.next()))).collect();
    cases.push((PyValue::List(bit_patterns), PyJsonOptions::default()));
    cases
}

fn all_option_combinations() -> Vec<PyJsonOptions> {
    let mut all = Vec::new();
    for sort_keys in [false, true] {
        for separators in [Separators::Default, Separators::Compact, Separators::Indented] {
            for ensure_ascii in [false, true] {
                for indent in [None, Some(0), Some(2)] {
                    all.push(PyJsonOptions { sort_keys, separators, ensure_ascii, indent });
                }
            }
        }
    }
    all
}

fn random_options(rng: &mut XorShift) -> PyJsonOptions {
    PyJsonOptions {
        sort_keys: rng.chance(0.5),
        separators: *rng.pick(&[Separators::Default, Separators::Compact, Separators::Indented]),
        ensure_ascii: rng.chance(0.5),
        indent: *rng.pick(&[None, None, None, Some(0), Some(1), Some(4)]),
    }
}

fn random_value(rng: &mut XorShift, depth: u32) -> PyValue {
    if depth == 0 || rng.chance(0.35) {
        return random_scalar(rng);
    }
    let length = rng.below(6) as usize;
    if rng.chance(0.5) {
        PyValue::List((0..length).map(|_| random_value(rng, depth - 1)).collect())
    } else {
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for _ in 0..length {
            let key = random_key(rng);
            // A Python dict cannot hold a key twice.
            if seen.insert(key.clone()) {
                entries.push((key, random_value(rng, depth - 1)));
            }
        }
        PyValue::Dict(entries)
    }
}

fn random_scalar(rng: &mut XorShift) -> PyValue {
    match rng.below(10) {
        0 => PyValue::Null,
        1 => PyValue::Bool(rng.chance(0.5)),
        2 | 3 => PyValue::Int(random_int(rng)),
        4..=6 => PyValue::Float(random_float(rng)),
        _ => PyValue::Str(random_string(rng, 12)),
    }
}

fn random_int(rng: &mut XorShift) -> i128 {
    match rng.below(6) {
        0 => i128::from(rng.below(100)) - 50,
        1 => i128::from(rng.next() as i64),
        2 => i128::from(rng.next()),
        3 => *rng.pick(&[
            i128::from(i64::MIN),
            i128::from(i64::MAX),
            i128::from(u64::MAX),
            i128::from(i64::MIN) - 1,
            i128::from(u64::MAX) + 1,
            i128::MIN,
            i128::MAX,
            0,
        ]),
        // Beyond 64 bits: Python ints have no bound.
        4 => (i128::from(rng.next()) << 60) ^ i128::from(rng.next()),
        _ => -((i128::from(rng.next()) << 40) | 1),
    }
}

fn random_float(rng: &mut XorShift) -> f64 {
    let ulps = |value: f64, steps: i64| f64::from_bits((value.to_bits() as i64 + steps) as u64);
    let value = match rng.below(13) {
        // Any bit pattern, including NaN payloads and infinities.
        0 => f64::from_bits(rng.next()),
        // Subnormals.
        1 => f64::from_bits(rng.next() & 0x000f_ffff_ffff_ffff),
        // Around the 1e-4 / 1e-5 switch to exponent notation.
        2 => ulps(
            *rng.pick(&[1e-4, 1e-5, 9.999_999_999_999_999e-5, 0.000_123]),
            rng.below(7) as i64 - 3,
        ),
        // Around the 1e16 switch.
        3 => ulps(
            *rng.pick(&[1e16, 9_999_999_999_999_998.0, 1e15, 1.234_567_890_123_456_7e16]),
            rng.below(7) as i64 - 3,
        ),
        // Integral floats of every size.
        4 => (rng.next() >> rng.below(64)) as f64,
        // Powers of ten across the whole range and their neighbours.
        5 => ulps(10f64.powi(rng.below(630) as i32 - 324), rng.below(3) as i64 - 1),
        // Short decimals like configs hold.
        6 => (rng.below(2_000_001) as f64 - 1e6) / 10f64.powi(rng.below(8) as i32),
        // Uniform in [0, 1) and scaled.
        7 => {
            (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi(rng.below(40) as i32 - 20)
        }
        8 => *rng.pick(&[
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            f64::EPSILON,
            0.1,
            0.30000000000000004,
        ]),
        // Values that came from f32.
        9 => f64::from(f32::from_bits(rng.next() as u32)),
        // Powers of two.
        10 => 2f64.powi(rng.below(2100) as i32 - 1075),
        // Short binary fractions: their exact decimal form is short, so it can fall exactly halfway
        // between two shortest candidates (Python then rounds to even).
        11 => (rng.next() >> rng.below(64)) as f64 / 2f64.powi(rng.below(30) as i32),
        _ => f64::from_bits(rng.next() & 0x7fef_ffff_ffff_ffff | 0x3000_0000_0000_0000),
    };
    if rng.chance(0.3) { -value } else { value }
}

fn random_char(rng: &mut XorShift) -> char {
    let code = match rng.below(20) {
        0..=7 => 0x20 + rng.below(0x5f) as u32,
        8 | 9 => *rng.pick(&[0x00, 0x01, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1b, 0x1f, 0x7f]),
        10 => *rng.pick(&['"' as u32, '\\' as u32, '/' as u32, '\'' as u32]),
        11 | 12 => 0x80 + rng.below(0x780) as u32,
        13 | 14 => 0x800 + rng.below(0xf800) as u32,
        15 => *rng.pick(&[0x2028, 0x2029, 0xfeff, 0xfffd, 0xffff, 0xe000, 0xd7ff, 0x85, 0xa0]),
        _ => 0x10000 + rng.below(0x100000) as u32,
    };
    // Surrogate code points are not chars; Rust strings cannot hold them.
    char::from_u32(code).unwrap_or('\u{fffd}')
}

fn random_string(rng: &mut XorShift, max_length: u64) -> String {
    let length = rng.below(max_length + 1);
    (0..length).map(|_| random_char(rng)).collect()
}

fn random_key(rng: &mut XorShift) -> String {
    if rng.chance(0.4) {
        // Short keys from an alphabet whose code point order differs from UTF-16 order.
        let alphabet = ["a", "B", "b", "é", "\u{ff61}", "\u{10000}", "\u{e000}", "", "_", "1"];
        (0..rng.below(3) + 1).map(|_| *rng.pick(&alphabet)).collect()
    } else {
        random_string(rng, 6)
    }
}

fn special_floats() -> PyValue {
    let values = [
        0.0,
        -0.0,
        1.0,
        -2.0,
        0.1,
        1e-4,
        9.999_999_999_999_999e-5,
        1e-5,
        1.5e-5,
        1e15,
        9_999_999_999_999_998.0,
        1e16,
        1.000_000_000_000_000_2e16,
        1.5e300,
        1e308,
        5e-324,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        123_456_789_012_345_680.0,
    ];
    PyValue::List(values.into_iter().map(PyValue::Float).collect())
}

fn special_strings() -> PyValue {
    let control: String = (0u8..0x20).map(char::from).chain(['\u{7f}']).collect();
    let values = [
        control.as_str(),
        "\"\\/",
        "é Zoë",
        "😀 \u{10000} \u{10ffff}",
        "\u{2028}\u{2029}\u{feff}\u{ffff}",
        "",
        "plain ascii ~",
    ];
    PyValue::List(values.into_iter().map(|text| PyValue::Str(text.to_owned())).collect())
}

fn special_keys() -> PyValue {
    let keys = ["\u{10000}", "\u{ff61}", "\u{e000}", "b", "B", "", "é", "aa", "a", "\u{7f}", "\n"];
    PyValue::Dict(
        keys.iter()
            .enumerate()
            .map(|(index, key)| (key.to_string(), PyValue::Int(index as i128)))
            .collect(),
    )
}

fn special_ints() -> PyValue {
    let values = [
        0,
        -1,
        i128::from(i64::MIN),
        i128::from(u64::MAX),
        i128::from(u64::MAX) + 1,
        i128::MIN,
        i128::MAX,
    ];
    PyValue::List(values.into_iter().map(PyValue::Int).collect())
}

/// xorshift64*: deterministic, good enough to spread cases, no dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn chance(&mut self, probability: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= probability
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
