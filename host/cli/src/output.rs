//! Human output: aligned plain-text tables. Machine output is JSON via
//! `views` and `--json`.
//!
//! Invariant: text that a guest, producer or API caller controls (errors,
//! codes, results, progress, job types, scopes, rejection reasons) never
//! reaches the operator's terminal raw. Human output passes [`printable`]
//! (every control character, C0, DEL and C1, is written as an escape such
//! as `\u{1b}`; tables apply it to every cell), and JSON output passes
//! [`json_for_terminal`] (serde escapes C0 in strings; DEL and C1 are
//! escaped as `\u007f`…`\u009f` too, which keeps the JSON value the same).

use std::borrow::Cow;

/// `text` with every control character escaped (see the module docs).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Pretty JSON of `value`, safe to print (see [`json_text_for_terminal`]).
///
/// # Errors
/// `value` cannot be serialized.
pub fn json_for_terminal(value: &impl serde::Serialize) -> serde_json::Result<String> {
    serde_json::to_string_pretty(value).map(|text| json_text_for_terminal(&text).into_owned())
}

/// JSON text with every control character but `\n`, `\r` and `\t`
/// escaped as `\u00XX`. serde_json escapes C0 inside strings but leaves DEL
/// and C1 raw; in valid JSON those can only stand inside strings, where the
/// escape means the same character, so the JSON value does not change.
pub fn json_text_for_terminal(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| c.is_control() && !matches!(c, '\n' | '\r' | '\t');
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Renders rows under headers as an aligned table; every cell passes
/// [`printable`].
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| printable(cell).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// Shortens long text for a table cell.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_cells_clip() {
        let text = table(
            &["id", "status"],
            &[
                vec!["1".into(), "ok".into()],
                vec!["1234".into(), "failed".into()],
            ],
        );
        assert_eq!(text, "id    status\n1     ok\n1234  failed\n");
        assert_eq!(clip("abcdef", 4), "abc…");
    }

    #[test]
    fn control_characters_never_reach_the_terminal_raw() {
        let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{7f}line\nbreak\0";
        let shown = printable(hostile);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(
            shown,
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{7f}line\\nbreak\\u{0}"
        );
        assert!(matches!(printable("plain ünïcode"), Cow::Borrowed(_)));
        let text = table(&["error"], &[vec![hostile.to_string()]]);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{9b}'),
            "{text:?}"
        );

        let value = serde_json::json!({ "last_error": hostile });
        let json = json_for_terminal(&value).expect("json");
        assert!(
            !json.chars().any(|c| c.is_control() && c != '\n'),
            "{json:?}"
        );
        let back: serde_json::Value = serde_json::from_str(&json).expect("still JSON");
        assert_eq!(back, value, "escaping keeps the JSON value");
    }
}
