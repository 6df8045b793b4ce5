//! JSON string literals as Python's `json` module writes them.

/// Appends `text` to `out` as a quoted JSON string literal, escaped like Python's `json.dumps`.
///
/// Always escaped: `"` and `\` as `\"` and `\\`; `\n`, `\r`, `\t`, backspace and form feed by their
/// short forms; every other character below U+0020 as `\u00XX` (lowercase hex, like Python).
/// With `ensure_ascii`, every character outside `' '..='~'` is escaped too (so U+007F becomes
/// `\u007f`), characters above U+FFFF as a UTF-16 surrogate pair (`\ud83d\ude00`). Without it, those
/// characters are written as they are (U+007F included).
pub fn write_python_string(out: &mut String, text: &str, ensure_ascii: bool) {
    out.push('"');
    // Runs of printable ASCII other than `"` and `\\` are copied as they are: the common case
    // (paths, keys) then costs one copy instead of one push per character.
    let plain = |b: &u8| (b' '..=b'~').contains(b) && *b != b'"' && *b != b'\\';
    let mut rest = text;
    while !rest.is_empty() {
        let run = rest.bytes().take_while(plain).count();
        out.push_str(&rest[..run]);
        rest = &rest[run..];
        let Some(character) = rest.chars().next() else { break };
        rest = &rest[character.len_utf8()..];
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            _ if (character as u32) < 0x20 || ensure_ascii => push_utf16_escapes(out, character),
            _ => out.push(character),
        }
    }
    out.push('"');
}

/// `\uXXXX` for each UTF-16 code unit of `character`.
fn push_utf16_escapes(out: &mut String, character: char) {
    use std::fmt::Write;
    let mut units = [0u16; 2];
    for unit in character.encode_utf16(&mut units) {
        // Writing to a String cannot fail.
        let _ = write!(out, "\\u{unit:04x}");
    }
}

#[cfg(test)]
mod tests {
    use super::write_python_string;

    fn escaped(text: &str, ensure_ascii: bool) -> String {
        let mut out = String::new();
        write_python_string(&mut out, text, ensure_ascii);
        out
    }

    #[test]
    fn quote_and_backslash() {
        assert_eq!(escaped(r#"a"b\c"#, true), r#""a\"b\\c""#);
        assert_eq!(escaped(r#"a"b\c"#, false), r#""a\"b\\c""#);
    }

    #[test]
    fn short_control_escapes() {
        assert_eq!(escaped("\n\r\t\u{08}\u{0c}", true), r#""\n\r\t\b\f""#);
        assert_eq!(escaped("\n\r\t\u{08}\u{0c}", false), r#""\n\r\t\b\f""#);
    }

    #[test]
    fn other_control_characters_use_lowercase_u00xx() {
        assert_eq!(
            escaped("\u{00}\u{01}\u{0b}\u{1b}\u{1f}", true),
            r#""\u0000\u0001\u000b\u001b\u001f""#
        );
        assert_eq!(escaped("\u{00}\u{1f}", false), r#""\u0000\u001f""#);
    }

    #[test]
    fn delete_is_escaped_only_with_ensure_ascii() {
        assert_eq!(escaped("\u{7f}", true), r#""\u007f""#);
        assert_eq!(escaped("\u{7f}", false), "\"\u{7f}\"");
    }

    #[test]
    fn ensure_ascii_escapes_non_ascii_in_lowercase_hex() {
        assert_eq!(escaped("é", true), r#""\u00e9""#);
        assert_eq!(escaped("Zoë", true), r#""Zo\u00eb""#);
        assert_eq!(escaped("\u{a0}\u{ff}\u{100}", true), r#""\u00a0\u00ff\u0100""#);
        assert_eq!(escaped("€", true), r#""\u20ac""#);
        assert_eq!(escaped("\u{fffd}\u{ffff}", true), r#""\ufffd\uffff""#);
    }

    #[test]
    fn ensure_ascii_uses_surrogate_pairs_above_the_bmp() {
        assert_eq!(escaped("😀", true), r#""\ud83d\ude00""#);
        assert_eq!(escaped("\u{10000}", true), r#""\ud800\udc00""#);
        assert_eq!(escaped("\u{10ffff}", true), r#""\udbff\udfff""#);
    }

    #[test]
    fn without_ensure_ascii_non_ascii_passes_through() {
        assert_eq!(escaped("é😀\u{80}\u{2028}", false), "\"é😀\u{80}\u{2028}\"");
    }

    #[test]
    fn printable_ascii_passes_through() {
        let printable: String = (' '..='~').filter(|c| *c != '"' && *c != '\\').collect();
        assert_eq!(escaped(&printable, true), format!("\"{printable}\""));
        assert_eq!(escaped("", true), "\"\"");
    }
}
