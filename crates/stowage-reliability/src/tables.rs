//! How the campaigns print their results: a table (markdown, or aligned plain text for a
//! terminal) and the list of failures under it.

/// `rows` under `header`, as a markdown table or as columns aligned with spaces.
///
/// ```
/// use stowage_reliability::tables::table;
/// let rows = vec![vec!["npy".to_string(), "pass".to_string()]];
/// assert_eq!(table(&["backend", "result"], &rows, true), "| backend | result |\n|---|---|\n| npy | pass |\n");
/// assert_eq!(table(&["backend", "result"], &rows, false), "backend  result\nnpy      pass\n");
/// ```
pub fn table(header: &[&str], rows: &[Vec<String>], markdown: bool) -> String {
    let mut out = String::new();
    if markdown {
        out.push_str(&format!("| {} |\n", header.join(" | ")));
        out.push_str(&format!("|{}\n", "---|".repeat(header.len())));
        for row in rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        return out;
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].len()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    out.push_str(&line(header.to_vec()));
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// `No failures.`, or their count and one line each.
///
/// ```
/// use stowage_reliability::tables::failure_list;
/// assert_eq!(failure_list(&[]), "\nNo failures.\n");
/// assert_eq!(failure_list(&["npy: lost".into()]), "\n1 failures:\n- npy: lost\n");
/// ```
pub fn failure_list(failures: &[String]) -> String {
    if failures.is_empty() {
        return "\nNo failures.\n".into();
    }
    let mut out = format!("\n{} failures:\n", failures.len());
    for failure in failures {
        out.push_str(&format!("- {failure}\n"));
    }
    out
}
