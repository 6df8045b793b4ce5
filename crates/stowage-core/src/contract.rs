//! The backend contract as data: one [`Clause`] per `# Behavior` bullet of [`crate::Reader`],
//! [`crate::Backend`] and [`crate::BackendFactory`], each with a stable dotted id.
//!
//! The bullets in the trait docs name their clause id in backticks, and a test here checks that
//! the two say the same words; the conformance suite (`stowage-conformance`) tags each case with
//! the ids it checks and fails when a clause has no case; `docs/writing-a-backend.md` renders this
//! list. So the contract is written once, here, and cannot drift from the suite or the docs.
//!
//! ```
//! use stowage_core::contract::{CLAUSES, Section, clause};
//! let missing = clause("get.missing-is-none").unwrap();
//! assert_eq!(missing.section, Section::Reader);
//! assert!(CLAUSES.iter().filter(|c| c.section == Section::Backend).count() > 5);
//! ```

/// Which trait a clause belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    /// [`crate::Reader`]: every cache, read-only (the capability rules live here too).
    Reader,
    /// [`crate::Backend`]: the writer.
    Backend,
    /// [`crate::BackendFactory`]: create, open, recognize.
    Factory,
}

impl Section {
    /// Every section, in the order the contract lists them.
    pub const ALL: [Section; 3] = [Section::Reader, Section::Backend, Section::Factory];

    /// The trait's name: `Reader`, `Backend`, `BackendFactory`.
    pub fn trait_name(self) -> &'static str {
        match self {
            Section::Reader => "Reader",
            Section::Backend => "Backend",
            Section::Factory => "BackendFactory",
        }
    }
}

/// One promise of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clause {
    /// A stable dotted id, `<method or topic>.<promise>`: `get.missing-is-none`.
    pub id: &'static str,
    /// The trait whose docs hold the bullet.
    pub section: Section,
    /// The bullet's text, word for word as in the trait docs (Markdown).
    pub text: &'static str,
}

/// The clause with `id`, if there is one.
pub fn clause(id: &str) -> Option<&'static Clause> {
    CLAUSES.iter().find(|clause| clause.id == id)
}

const fn reader(id: &'static str, text: &'static str) -> Clause {
    Clause { id, section: Section::Reader, text }
}

const fn backend(id: &'static str, text: &'static str) -> Clause {
    Clause { id, section: Section::Backend, text }
}

const fn factory(id: &'static str, text: &'static str) -> Clause {
    Clause { id, section: Section::Factory, text }
}

/// Every clause of the contract, in the order of the trait docs.
pub const CLAUSES: &[Clause] = &[
    // Reader::name
    reader(
        "errors.unsupported-names-backend",
        "Is the same string as the factory's `name` and as the `backend` of every \
         `Error::Unsupported` the backend returns.",
    ),
    // Reader::capabilities
    reader("capabilities.declared-works", "Every declared capability works."),
    reader(
        "capabilities.undeclared-unsupported",
        "Every undeclared capability returns `Error::Unsupported`.",
    ),
    reader(
        "capabilities.match-factory",
        "A cache created by a factory, or opened by it read-only or for appending, declares \
         exactly the factory's capabilities.",
    ),
    reader(
        "capabilities.max-rank",
        "`max_rank` is enforced: with `Some(n)`, a tensor field of rank n works and `create` \
         refuses rank n + 1 with `Error::Unsupported`, creating nothing; with `None`, rank 8 \
         works.",
    ),
    // Reader::schema
    reader("schema.survives-reopen", "After reopening, equals the schema given at creation."),
    // Reader::get
    reader("get.missing-is-none", "A missing key returns `Ok(None)`."),
    reader(
        "get.returns-what-was-put",
        "Returns exactly the sample that was put: each field's dtype, shape and bytes.",
    ),
    reader(
        "get.corruption-is-an-error",
        "Corrupted bytes are an error (`Error::Corrupted` naming the file and key), never \
         returned as data.",
    ),
    // Reader::get_batch
    reader(
        "get-if-ready.agrees-with-get",
        "`Some` holds exactly what `get` returns for the key; `None` changes nothing.",
    ),
    reader("get-batch.agrees-with-get", "Agrees with `get` key by key."),
    // Reader::get_batch_each
    reader(
        "get-batch-each.agrees-with-get-batch",
        "Visits each key once, in order, with what `get_batch` returns for it, until `visit` \
         breaks.",
    ),
    // Reader::contains
    reader(
        "contains.agrees-with-get",
        "Agrees with `get(key).is_some()` without reading sample bytes.",
    ),
    // Reader::len
    reader("len.counts-distinct-keys", "Equals `keys().len()`."),
    // Reader::keys
    reader("keys.first-put-order", "Each key once, in the order of its first put."),
    // Reader::validate
    reader("validate.never-writes", "Never changes any file."),
    reader("validate.clean-cache-is-clean", "A clean cache gives an empty problem list."),
    reader(
        "validate.reports-what-get-detects",
        "Every corruption `get` would detect is listed with its file and key.",
    ),
    // Backend::put
    backend(
        "put.schema-mismatch-writes-nothing",
        "A sample that does not match the schema returns `Error::SchemaMismatch` and writes \
         nothing.",
    ),
    backend(
        "put.empty-key-is-invalid",
        "The empty key returns `Error::InvalidArgument` (or `Error::Unsupported`) and stores \
         nothing.",
    ),
    backend(
        "put.existing-key-follows-overwrite",
        "A key that exists: replaced when `Capabilities::overwrite`, else `Error::Unsupported` \
         (\"overwrite of an existing key\") and the old value stays readable.",
    ),
    backend(
        "put.after-finalize-is-finalized",
        "After `finalize`: `Error::Finalized`, unless the cache was reopened in append mode and \
         the backend declares `append_after_finalize`.",
    ),
    backend(
        "put.read-only-is-unsupported",
        "On a read-only handle: `Error::Unsupported`, and so do `flush` and `finalize`.",
    ),
    backend(
        "put.not-durable-is-error",
        "On a handle that cannot make the put durable (a failed flush before, or a role that \
         does not write): an error, never `Ok`.",
    ),
    backend(
        "put.visible-at-once",
        "Visible to `get` on this handle at once; durable only after `flush`.",
    ),
    // Backend::flush
    backend(
        "flush.crash-keeps-flushed",
        "After it returns `Ok`, a crash (`kill -9`; a power loss too with \
         `Capabilities::durable_flush`) loses none of those samples; a crash during it leaves \
         each sample either complete or absent, never partial.",
    ),
    backend(
        "flush.power-loss-never-torn",
        "Without `Capabilities::durable_flush`, a power loss may lose flushed samples, but the \
         cache still opens, every visible key holds exactly its sample, and `validate(Full)` is \
         clean.",
    ),
    backend(
        "flush.failure-poisons",
        "A failed flush is reported, and the handle then refuses further writes \
         (`Error::Poisoned`).",
    ),
    backend(
        "flush.io-failure-is-error",
        "A write or sync of the cache's files that fails (`ENOSPC`, `EIO`) makes the call it \
         happens in, or at the latest the next `flush` or `finalize`, return an error (never a \
         panic, never a silent `Ok`); every sample of a `flush` that returned `Ok` before it \
         stays readable and exact, also after a power cut.",
    ),
    // Backend::finalize
    backend(
        "finalize.commits",
        "Commits the cache as complete: `is_finalized` is true from then on, also after \
         reopening (a cache only flushed is not finalized), and `put` returns \
         `Error::Finalized` (unless reopened in append mode with `append_after_finalize`).",
    ),
    backend(
        "finalize.crash-leaves-resumable-or-complete",
        "A crash during finalize leaves either a complete cache (finalized, with every sample \
         put) or a resumable one (every flushed sample, and the next writer can finish it).",
    ),
    // BackendFactory::recognize
    factory(
        "recognize.own-caches",
        "Recognizes every cache this factory creates, flushed or finalized, as its own format \
         (the first of `formats`); `Ok(None)` for a path that holds none of its caches (an \
         empty directory, a directory of unrelated files): the path is left for the next \
         factory.",
    ),
    factory(
        "recognize.marker-decides",
        "A directory with a stowage marker (`stowage.json`, or `stowage.log` without one) is \
         judged by the format the marker names alone: `Ok(None)` when it names another format, \
         whatever else the directory holds.",
    ),
    factory(
        "recognize.unreadable-marker-is-error",
        "`Err` when the path claims to be one of this factory's caches but its marker cannot be \
         read or does not say which format it is (a `stowage.json` that does not parse): it is \
         never guessed around.",
    ),
    factory("recognize.never-writes", "Reads at most a few small files; never writes."),
    // BackendFactory::create
    factory(
        "create.unsupported-schema-creates-nothing",
        "A schema outside the capabilities returns `Error::Unsupported` and creates nothing.",
    ),
    factory(
        "create.existing-is-already-exists",
        "A directory that already holds a cache returns `Error::AlreadyExists`.",
    ),
    factory(
        "create.takes-the-lock",
        "Takes the writer lock: `Error::Locked` when another writer holds it (unless the \
         backend declares `Capabilities::concurrent_writers`).",
    ),
    // BackendFactory::open
    factory("open.missing-is-not-found", "A missing cache returns `Error::NotFound`."),
    factory(
        "open.read-only-takes-no-lock",
        "`OpenMode::ReadOnly` takes no lock: it opens and reads what was flushed while a writer \
         holds the cache.",
    ),
    factory(
        "open.read-only-outlives-finalize",
        "A read-only handle opened while a writer holds the cache keeps reading what was \
         flushed before it opened (`get`, `contains`, `keys`, `validate`) after that writer \
         flushes more and finalizes.",
    ),
    factory(
        "open.append-takes-the-lock",
        "`OpenMode::Append` takes the writer lock: `Error::Locked` while another writer holds \
         it, free again once that writer is dropped (unless the backend declares \
         `Capabilities::concurrent_writers`).",
    ),
    factory(
        "open.concurrent-writers-keep-every-put",
        "With `Capabilities::concurrent_writers`, `create` and `OpenMode::Append` take no lock: \
         several handles write one cache at once, and a handle opened once they flushed reads \
         every key each of them flushed, with its exact sample.",
    ),
    factory(
        "open.ignores-stray-files",
        "Files the backend did not write, in any of the cache's directories, are ignored: the \
         cache reads and validates as without them.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The source of the trait docs of `section`.
    fn source(section: Section) -> &'static str {
        match section {
            Section::Reader => include_str!("reader.rs"),
            Section::Backend => include_str!("backend.rs"),
            Section::Factory => include_str!("factory.rs"),
        }
    }

    /// Every `# Behavior` bullet of `source` as `(id, text)`: a bullet is `/// - ` followed by
    /// continuation lines indented by two more spaces, and starts with its id in backticks.
    fn bullets(source: &str) -> Vec<Result<(String, String), String>> {
        let mut out = Vec::new();
        let mut in_behavior = false;
        let mut current: Option<String> = None;
        let finish = |current: &mut Option<String>, out: &mut Vec<_>| {
            if let Some(bullet) = current.take() {
                out.push(parse_bullet(&bullet));
            }
        };
        for line in source.lines() {
            let Some(doc) = line.trim_start().strip_prefix("///") else {
                finish(&mut current, &mut out);
                in_behavior = false;
                continue;
            };
            let doc = doc.strip_prefix(' ').unwrap_or(doc);
            if doc == "# Behavior" {
                in_behavior = true;
                continue;
            }
            if !in_behavior {
                continue;
            }
            if let Some(start) = doc.strip_prefix("- ") {
                finish(&mut current, &mut out);
                current = Some(start.to_owned());
            } else if let (Some(more), Some(bullet)) = (doc.strip_prefix("  "), current.as_mut()) {
                bullet.push(' ');
                bullet.push_str(more.trim());
            } else {
                // Any other line (a blank one, prose, the next heading) ends the list.
                finish(&mut current, &mut out);
                in_behavior = false;
            }
        }
        finish(&mut current, &mut out);
        out
    }

    /// `` `id`: text `` into its parts.
    fn parse_bullet(bullet: &str) -> Result<(String, String), String> {
        let rest = bullet.strip_prefix('`').ok_or_else(|| format!("no clause id: {bullet:?}"))?;
        let (id, text) = rest
            .split_once("`: ")
            .ok_or_else(|| format!("no `id`: before the text: {bullet:?}"))?;
        Ok((id.to_owned(), text.to_owned()))
    }

    #[test]
    fn every_behavior_bullet_is_a_clause_word_for_word_and_back() {
        let mut problems = Vec::new();
        let mut seen = HashSet::new();
        for section in Section::ALL {
            for bullet in bullets(source(section)) {
                let (id, text) = match bullet {
                    Ok(parsed) => parsed,
                    Err(e) => {
                        problems.push(format!("{}: {e}", section.trait_name()));
                        continue;
                    }
                };
                match clause(&id) {
                    None => problems.push(format!("bullet `{id}` has no clause in CLAUSES")),
                    Some(c) if c.section != section => problems.push(format!(
                        "bullet `{id}` is in {} but its clause says {}",
                        section.trait_name(),
                        c.section.trait_name()
                    )),
                    Some(c) if c.text != text => problems.push(format!(
                        "bullet `{id}` and its clause differ:\n  doc:    {text}\n  clause: {}",
                        c.text
                    )),
                    Some(_) => {}
                }
                if !seen.insert(id.clone()) {
                    problems.push(format!("bullet `{id}` appears twice"));
                }
            }
        }
        for c in CLAUSES {
            if !seen.contains(c.id) {
                problems.push(format!("clause `{}` has no bullet in the trait docs", c.id));
            }
        }
        assert!(
            problems.is_empty(),
            "the contract and the trait docs differ:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn ids_are_unique_and_dotted() {
        let mut ids = HashSet::new();
        for c in CLAUSES {
            assert!(ids.insert(c.id), "clause id {} appears twice", c.id);
            let well_formed = c.id.split_once('.').is_some_and(|(topic, promise)| {
                let ok = |s: &str| {
                    !s.is_empty() && s.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-')
                };
                ok(topic) && ok(promise)
            });
            assert!(well_formed, "clause id {} is not <topic>.<promise> in lowercase", c.id);
        }
    }
}
