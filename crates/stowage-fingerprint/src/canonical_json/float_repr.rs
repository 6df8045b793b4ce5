//! Python's `repr(float)`, as `json.dumps` writes floats.

/// Formats `value` exactly as Python's `json.dumps` writes a float: `repr(value)` for finite values,
/// `NaN`, `Infinity` and `-Infinity` otherwise.
///
/// The rules of `repr` (CPython's `float_repr_style = 'short'`):
/// - the shortest digit string that reads back to the same `f64`;
/// - positional notation when the decimal exponent is in `-4..16`, always with a fractional part
///   (`2.0`, `0.0001`, `1234567890123456.0`);
/// - otherwise scientific notation with a signed exponent of at least two digits, and no `.0` on a
///   one-digit mantissa (`1e-05`, `1e+16`, `1.5e+300`, `5e-324`);
/// - the sign of zero is kept (`-0.0`).
///
/// ```
/// use stowage_fingerprint::canonical_json::python_float_repr;
/// assert_eq!(python_float_repr(2.0), "2.0");
/// assert_eq!(python_float_repr(1e-5), "1e-05");
/// assert_eq!(python_float_repr(1e16), "1e+16");
/// assert_eq!(python_float_repr(0.1 + 0.2), "0.30000000000000004");
/// assert_eq!(python_float_repr(f64::NAN), "NaN");
/// ```
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sign = if value.is_sign_negative() { "-" } else { "" };
    if value == 0.0 {
        return format!("{sign}0.0");
    }
    let (digits, decimal_point) = shortest_digits(value.abs());
    let body = if decimal_point <= -4 || decimal_point > 16 {
        scientific(&digits, decimal_point - 1)
    } else {
        positional(&digits, decimal_point)
    };
    format!("{sign}{body}")
}

/// The shortest round-trip digits of a positive finite `value` and the position of the decimal point
/// relative to them: `value = 0.DIGITS × 10^decimal_point`.
///
/// Rust's `{:e}` prints the shortest round-trip digits, choosing the candidate closest to `value`,
/// as Python does. The two differ only when `value` lies exactly halfway between two shortest
/// candidates: Rust may pick the odd one, Python (David Gay's `dtoa`) always the even one. For example
/// `118.980255126953125` is `118.98025512695313` in Rust and `118.98025512695312` in Python.
fn shortest_digits(value: f64) -> (String, i32) {
    let text = format!("{value:e}");
    let (mantissa, exponent) = text.split_once('e').expect("`{:e}` always prints an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` prints a decimal exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let decimal_point = exponent + 1;
    match half_even_tie_break(value, &digits, decimal_point) {
        Some(even) => (even, decimal_point),
        None => (digits, decimal_point),
    }
}

/// When `value` is exactly halfway between two `digits.len()`-digit decimals and `digits` ends in an
/// odd digit, the even neighbour if it also reads back to `value`; `None` otherwise.
fn half_even_tie_break(value: f64, digits: &str, decimal_point: i32) -> Option<String> {
    let last = digits.as_bytes()[digits.len() - 1];
    if last.is_multiple_of(2) {
        return None;
    }
    let (exact_digits, exact_decimal_point) = short_exact_expansion(value)?;
    // A tie: the exact value has exactly one digit more than the shortest form, and it is a 5.
    let is_tie = exact_digits.len() == digits.len() + 1
        && exact_digits.ends_with('5')
        && exact_decimal_point == decimal_point;
    if !is_tie {
        return None;
    }
    let rounded_down = &exact_digits[..digits.len()];
    let even = if rounded_down != digits {
        rounded_down.to_owned()
    } else {
        // `digits` is the rounded-down neighbour; the other one is one unit higher in the last digit.
        if last == b'9' {
            return None; // the carry would give a shorter form, which Rust would have found
        }
        let mut bytes = digits.as_bytes().to_vec();
        let last_index = bytes.len() - 1;
        bytes[last_index] = last + 1;
        String::from_utf8(bytes).expect("ASCII digits")
    };
    let reads_back = format!("0.{even}e{decimal_point}").parse::<f64>().ok() == Some(value);
    reads_back.then_some(even)
}

/// The exact decimal expansion of a positive finite `value` when it has at most 18 significant
/// digits (the only case in which a tie between two shortest candidates of at most 17 digits can
/// happen): the digits and the position of the decimal point, as in [`shortest_digits`].
fn short_exact_expansion(value: f64) -> Option<(String, i32)> {
    const LIMIT: u128 = 1_000_000_000_000_000_000; // 10^18
    let bits = value.to_bits();
    let biased_exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & 0x000f_ffff_ffff_ffff;
    let (mantissa, exponent) = if biased_exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased_exponent - 1075)
    };
    // value = odd × 2^exponent
    let shift = mantissa.trailing_zeros() as i32;
    let (odd, exponent) = (u128::from(mantissa >> shift), exponent + shift);
    if exponent >= 0 {
        // An integer without a factor 5, so its decimal form has no trailing zeros.
        let integer =
            odd.checked_shl(exponent as u32).filter(|n| *n < LIMIT && n >> exponent == odd)?;
        let digits = integer.to_string();
        let decimal_point = digits.len() as i32;
        Some((digits, decimal_point))
    } else {
        // odd × 2^-j = odd × 5^j / 10^j, and odd × 5^j is odd: no trailing zeros.
        let scale = 5u128.checked_pow(exponent.unsigned_abs())?;
        let scaled = odd.checked_mul(scale).filter(|n| *n < LIMIT)?;
        let digits = scaled.to_string();
        let decimal_point = digits.len() as i32 + exponent;
        Some((digits, decimal_point))
    }
}

/// `d.ddde+XX`: a one-digit mantissa has no fractional part, the exponent has a sign and two digits.
fn scientific(digits: &str, exponent: i32) -> String {
    let (first, rest) = digits.split_at(1);
    let fraction = if rest.is_empty() { String::new() } else { format!(".{rest}") };
    let exponent_sign = if exponent < 0 { '-' } else { '+' };
    format!("{first}{fraction}e{exponent_sign}{:02}", exponent.unsigned_abs())
}

/// `ddd.ddd` with zeros added on either side so that there is always a digit before and after the point.
fn positional(digits: &str, decimal_point: i32) -> String {
    let digit_count = digits.len() as i32;
    if decimal_point <= 0 {
        format!("0.{}{digits}", "0".repeat(decimal_point.unsigned_abs() as usize))
    } else if decimal_point >= digit_count {
        format!("{digits}{}.0", "0".repeat((decimal_point - digit_count) as usize))
    } else {
        let (integral, fraction) = digits.split_at(decimal_point as usize);
        format!("{integral}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::python_float_repr as repr;

    #[test]
    fn integral_floats_get_a_point_zero() {
        assert_eq!(repr(0.0), "0.0");
        assert_eq!(repr(1.0), "1.0");
        assert_eq!(repr(-2.0), "-2.0");
        assert_eq!(repr(100.0), "100.0");
        assert_eq!(repr(123456789.0), "123456789.0");
    }

    #[test]
    fn negative_zero_keeps_its_sign() {
        assert_eq!(repr(-0.0), "-0.0");
    }

    #[test]
    fn small_exponent_boundary_is_minus_four() {
        assert_eq!(repr(0.0001), "0.0001");
        assert_eq!(repr(0.00012345), "0.00012345");
        assert_eq!(repr(0.00009999999999999999), "9.999999999999999e-05");
        assert_eq!(repr(1e-5), "1e-05");
        assert_eq!(repr(1.5e-5), "1.5e-05");
        assert_eq!(repr(-1e-5), "-1e-05");
    }

    #[test]
    fn large_exponent_boundary_is_sixteen() {
        assert_eq!(repr(1e15), "1000000000000000.0");
        assert_eq!(repr(9999999999999998.0), "9999999999999998.0");
        assert_eq!(repr(1234567890123456.0), "1234567890123456.0");
        assert_eq!(repr(1e16), "1e+16");
        assert_eq!(repr(1.0000000000000002e16), "1.0000000000000002e+16");
        assert_eq!(repr(12345678901234567890.0), "1.2345678901234567e+19");
    }

    #[test]
    fn exponents_have_a_sign_and_at_least_two_digits() {
        assert_eq!(repr(1.5e300), "1.5e+300");
        assert_eq!(repr(1e100), "1e+100");
        assert_eq!(repr(1e-100), "1e-100");
        assert_eq!(repr(2.5e-10), "2.5e-10");
        assert_eq!(repr(1e22), "1e+22");
    }

    #[test]
    fn extremes_and_subnormals() {
        assert_eq!(repr(5e-324), "5e-324");
        assert_eq!(repr(f64::MIN_POSITIVE), "2.2250738585072014e-308");
        assert_eq!(repr(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(repr(f64::MIN), "-1.7976931348623157e+308");
        assert_eq!(repr(f64::EPSILON), "2.220446049250313e-16");
    }

    #[test]
    fn shortest_round_trip_digits() {
        assert_eq!(repr(0.1), "0.1");
        assert_eq!(repr(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(repr(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(repr(123.456), "123.456");
        assert_eq!(repr(f64::from(0.1f32)), "0.10000000149011612");
    }

    #[test]
    // The literals are exact binary values, written out in full on purpose.
    #[allow(clippy::excessive_precision)]
    fn exact_ties_round_the_last_digit_to_even() {
        // 118.980255126953125 and 1000000000000000.25 are exact binary values.
        assert_eq!(repr(118.980_255_126_953_125), "118.98025512695312");
        assert_eq!(repr(1_000_000_000_000_000.25), "1000000000000000.2");
        assert_eq!(repr(-1_000_000_000_000_000.25), "-1000000000000000.2");
        // Not a tie: the exact value is not halfway, the closest candidate wins.
        assert_eq!(repr(1_000_000_000_000_000.4), "1000000000000000.4");
        assert_eq!(repr(1_000_000_000_000_000.75), "1000000000000000.8");
        assert_eq!(repr(0.5), "0.5");
        assert_eq!(repr(2.5), "2.5");
    }

    #[test]
    fn non_finite_use_javascript_names() {
        assert_eq!(repr(f64::NAN), "NaN");
        assert_eq!(repr(-f64::NAN), "NaN");
        assert_eq!(repr(f64::INFINITY), "Infinity");
        assert_eq!(repr(f64::NEG_INFINITY), "-Infinity");
    }
}
