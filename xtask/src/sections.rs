//! Marked sections of a markdown page that `cargo xtask` rewrites: each named section lives
//! between `<!-- <prefix>:<name>:begin -->` and `<!-- <prefix>:<name>:end -->`, and everything
//! outside the markers (the hand-written text) is left as it is.

use std::ops::Range;

/// One page's family of sections.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The markers' prefix (`xtask-bench`).
    pub prefix: &'a str,
    /// Markers from before sections had names, and the section that owns them: its first
    /// write replaces them with its own.
    pub legacy: Option<(&'a str, (&'a str, &'a str))>,
}

impl Page<'_> {
    /// The begin and end markers of the section called `name`.
    fn markers(&self, name: &str) -> (String, String) {
        let prefix = self.prefix;
        (format!("<!-- {prefix}:{name}:begin -->"), format!("<!-- {prefix}:{name}:end -->"))
    }

    /// Where the section `name` is in `doc`, from the start of its begin marker to the end of
    /// its end marker: its own markers, else the legacy ones when it owns them.
    fn find(&self, doc: &str, name: &str) -> Option<Range<usize>> {
        let (begin, end) = self.markers(name);
        let legacy = self.legacy.filter(|(owner, _)| *owner == name).map(|(_, markers)| markers);
        [(begin.as_str(), end.as_str())].into_iter().chain(legacy).find_map(|(begin, end)| {
            let start = doc.find(begin)?;
            let length = doc[start..].find(end)?;
            Some(start..start + length + end.len())
        })
    }

    /// `doc` with the section `name` replaced by `section` between its markers. A section not
    /// yet in `doc` goes before the first section of `later` there is, else at the end (after
    /// the hand-written text of the sections before it).
    ///
    /// ```text
    /// Page { prefix: "xtask-bench", legacy: None }.replace(doc, "arrow", &["hdf5"], "table")
    /// ```
    pub fn replace(&self, doc: &str, name: &str, later: &[&str], section: &str) -> String {
        let (begin, end) = self.markers(name);
        let body = format!("{begin}\n{}\n{end}", section.trim_end());
        if let Some(range) = self.find(doc, name) {
            return format!("{}{body}{}", &doc[..range.start], &doc[range.end..]);
        }
        if let Some(next) = later.iter().filter_map(|other| self.find(doc, other)).next() {
            return format!("{}{body}\n\n{}", &doc[..next.start], &doc[next.start..]);
        }
        let mut out = doc.trim_end().to_owned();
        out.push_str("\n\n");
        out.push_str(&body);
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: Page = Page { prefix: "p", legacy: None };

    #[test]
    fn a_section_is_replaced_in_place_inserted_before_later_ones_or_appended() {
        let doc = "# T\n\nintro\n\n<!-- p:b:begin -->\nold b\n<!-- p:b:end -->\n\nafter\n";
        let replaced = PAGE.replace(doc, "b", &[], "new b\n");
        assert_eq!(replaced, doc.replace("old b", "new b"));
        let before = PAGE.replace(doc, "a", &["b"], "a");
        assert!(before.starts_with(
            "# T\n\nintro\n\n<!-- p:a:begin -->\na\n<!-- p:a:end -->\n\n<!-- p:b:begin -->"
        ));
        let appended = PAGE.replace(doc, "c", &[], "c");
        assert!(appended.ends_with("after\n\n<!-- p:c:begin -->\nc\n<!-- p:c:end -->\n"));
        let legacy = Page { prefix: "p", legacy: Some(("a", ("<!-- old -->", "<!-- /old -->"))) };
        let doc = "x\n<!-- old -->\nold\n<!-- /old -->\ny\n";
        assert_eq!(
            legacy.replace(doc, "a", &[], "a"),
            "x\n<!-- p:a:begin -->\na\n<!-- p:a:end -->\ny\n"
        );
    }
}
