//! The contract ([`stowage_core::contract::CLAUSES`]) against the suite ([`crate::CASES`]):
//! which cases check each clause, what does not match up, and the clause list that
//! `docs/writing-a-backend.md` shows between [`DOC_BEGIN`] and [`DOC_END`].
//!
//! ```
//! use stowage_conformance::contract::{cases_for, coverage_problems};
//! assert!(coverage_problems().is_empty());
//! assert!(cases_for("get.missing-is-none").contains(&"get_missing_key_is_none"));
//! ```

use crate::CASES;
use std::fmt::Write as _;
use stowage_core::contract::{CLAUSES, Section, clause};

/// The line that opens the rendered clause list in a Markdown document.
pub const DOC_BEGIN: &str = "<!-- contract:begin -->";
/// The line that closes it.
pub const DOC_END: &str = "<!-- contract:end -->";

/// The names of the cases that check the clause `id`, in case order.
pub fn cases_for(id: &str) -> Vec<&'static str> {
    CASES.iter().filter(|case| case.clauses.contains(&id)).map(|case| case.name).collect()
}

/// Everything that does not match up between the contract and the suite, one line each: a
/// clause no case checks, a case that names no clause, a case that names an unknown clause or
/// one clause twice. Empty when the two agree.
pub fn coverage_problems() -> Vec<String> {
    let mut problems = Vec::new();
    for c in CLAUSES {
        if cases_for(c.id).is_empty() {
            problems.push(format!("clause {} ({:?}) has no case", c.id, c.text));
        }
    }
    for case in CASES {
        if case.clauses.is_empty() {
            problems.push(format!("case {} names no clause", case.name));
        }
        for (i, id) in case.clauses.iter().enumerate() {
            if clause(id).is_none() {
                problems.push(format!("case {} names the unknown clause {id:?}", case.name));
            }
            if case.clauses[..i].contains(id) {
                problems.push(format!("case {} names the clause {id} twice", case.name));
            }
        }
    }
    problems
}

/// The clause list as Markdown, from [`DOC_BEGIN`] to [`DOC_END`] (both included): per trait a
/// table of each clause's id, its text and the cases that check it, under a line with the
/// counts.
pub fn render_markdown() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{DOC_BEGIN}");
    let _ = writeln!(
        out,
        "<!-- Rendered from stowage_core::contract::CLAUSES and the cases of stowage-conformance: \
         do not edit by hand; `STOWAGE_BLESS=1 cargo test -p stowage-conformance --lib contract` \
         rewrites it. -->"
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "The contract has **{} clauses**, checked by **{} conformance cases**.",
        CLAUSES.len(),
        CASES.len()
    );
    for section in Section::ALL {
        let _ = writeln!(out);
        let _ = writeln!(out, "#### `{}`", section.trait_name());
        let _ = writeln!(out);
        let _ = writeln!(out, "| clause | promise | checked by |");
        let _ = writeln!(out, "|---|---|---|");
        for c in CLAUSES.iter().filter(|c| c.section == section) {
            let cases: Vec<String> = cases_for(c.id).iter().map(|n| format!("`{n}`")).collect();
            let text = c.text.replace('|', "\\|");
            let _ = writeln!(out, "| `{}` | {text} | {} |", c.id, cases.join(", "));
        }
    }
    let _ = writeln!(out);
    let _ = write!(out, "{DOC_END}");
    out
}

/// `doc` with the text from [`DOC_BEGIN`] to [`DOC_END`] replaced by `rendered`.
///
/// Errors: a message when either marker is missing, repeated or out of order.
pub fn splice(doc: &str, rendered: &str) -> Result<String, String> {
    let once = |marker: &str| match doc.match_indices(marker).collect::<Vec<_>>()[..] {
        [(at, _)] => Ok(at),
        [] => Err(format!("the document has no {marker} line")),
        _ => Err(format!("the document has {marker} more than once")),
    };
    let (begin, end) = (once(DOC_BEGIN)?, once(DOC_END)?);
    if end < begin {
        return Err(format!("{DOC_END} comes before {DOC_BEGIN}"));
    }
    Ok(format!("{}{rendered}{}", &doc[..begin], &doc[end + DOC_END.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The environment variable that makes the doc test rewrite the document instead of failing.
    const BLESS_ENV: &str = "STOWAGE_BLESS";

    #[test]
    fn every_clause_has_a_case_and_every_case_a_known_clause() {
        let problems = coverage_problems();
        assert!(
            problems.is_empty(),
            "the contract (stowage_core::contract::CLAUSES) and the cases (the list in \
             stowage-conformance/src/lib.rs) do not match up:\n- {}",
            problems.join("\n- ")
        );
    }

    #[test]
    fn the_backend_guide_shows_the_rendered_contract() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/writing-a-backend.md");
        let doc = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let updated =
            splice(&doc, &render_markdown()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if updated == doc {
            return;
        }
        if std::env::var(BLESS_ENV).is_ok_and(|v| v == "1") {
            std::fs::write(&path, &updated)
                .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            eprintln!("rewrote the contract section of {}", path.display());
            return;
        }
        panic!(
            "the contract section of {} ({DOC_BEGIN} .. {DOC_END}) differs from the contract and \
             the cases; update it with:\n    {BLESS_ENV}=1 cargo test -p stowage-conformance \
             --lib contract\nwhat it should read:\n{}",
            path.display(),
            render_markdown()
        );
    }

    #[test]
    fn splice_replaces_only_between_the_markers() {
        let doc = format!("intro\n{DOC_BEGIN}\nold\n{DOC_END}\noutro\n");
        let done = splice(&doc, &format!("{DOC_BEGIN}\nnew\n{DOC_END}")).unwrap();
        assert_eq!(done, format!("intro\n{DOC_BEGIN}\nnew\n{DOC_END}\noutro\n"));
        assert!(splice("no markers", "x").unwrap_err().contains("no <!-- contract:begin"));
        let twice = format!("{DOC_BEGIN}{DOC_BEGIN}{DOC_END}");
        assert!(splice(&twice, "x").unwrap_err().contains("more than once"));
    }
}
