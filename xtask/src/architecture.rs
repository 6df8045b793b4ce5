//! `cargo xtask architecture` (also the first step of `cargo xtask test`): the dependency rules
//! between the workspace's own crates.
//!
//! Every workspace crate declares its role in its manifest:
//!
//! ```toml
//! [package.metadata.stowage]
//! role = "backend" # or core, toolkit, conformance, remote, frontend, test-support, tooling
//! ```
//!
//! and every dependency edge between workspace crates (normal, build and dev alike) must keep
//! these rules (a crate's dev-dependency on itself, for its own test features, is no edge):
//! - a `core` crate depends on no other workspace crate;
//! - a `backend` does not depend on another backend, nor on a `remote` crate (object storage,
//!   which builds on the backends), a `frontend` (the CLI) or `tooling` (the reliability
//!   campaigns, xtask);
//! - a `remote` crate does not depend on a `frontend` or `tooling`;
//! - a `conformance` crate depends on `core` crates only, so any backend can run the suite;
//! - a `toolkit` (the original tools' key schemes) depends on `core` crates only, so that any
//!   backend may use it without depending on another backend.
//!
//! A new backend crate opts in with `role = "backend"`; a crate without a role is an error, and
//! the crates that exist today are pinned to their roles ([`KNOWN_ROLES`]) so that none escapes
//! the rules by changing its label. [`check`] is a pure function over [`Crate`]s, so the unit
//! tests feed it hand-made graphs; [`run`] feeds it `cargo metadata`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::{cargo, display_command};

/// The roles a workspace crate may declare in `[package.metadata.stowage] role`.
pub const ROLES: &[&str] =
    &["core", "toolkit", "backend", "conformance", "remote", "frontend", "test-support", "tooling"];

/// The role each existing crate must declare.
pub const KNOWN_ROLES: &[(&str, &str)] = &[
    ("stowage-core", "core"),
    ("stowage-fingerprint", "toolkit"),
    ("stowage-npy", "backend"),
    ("stowage-memmap", "backend"),
    ("stowage-arrow", "backend"),
    ("stowage-hdf5", "backend"),
    ("stowage-example", "backend"),
    ("stowage-remote", "remote"),
    ("stowage-conformance", "conformance"),
    ("stowage-test-support", "test-support"),
    ("stowage-cli", "frontend"),
    ("stowage-py", "frontend"),
    ("stowage-reliability", "tooling"),
    ("xtask", "tooling"),
];

/// How a crate depends on another: the manifest section the dependency is declared in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DepKind {
    /// `[dependencies]`.
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl fmt::Display for DepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DepKind::Normal => "normal",
            DepKind::Dev => "dev",
            DepKind::Build => "build",
        })
    }
}

/// One workspace crate as the check sees it.
#[derive(Clone, Debug)]
pub struct Crate {
    /// The package name, e.g. `stowage-npy`.
    pub name: String,
    /// `[package.metadata.stowage] role`, as written (`None` when absent).
    pub role: Option<String>,
    /// Its dependencies by package name; those that are not workspace crates are ignored.
    pub deps: Vec<(String, DepKind)>,
}

/// A broken rule: the crate, the dependency edge (when the rule is about one) and the rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The crate that breaks the rule.
    pub krate: String,
    /// The dependency that breaks it and its kind; `None` for a rule about the crate's role.
    pub dep: Option<(String, DepKind)>,
    /// The rule, in words.
    pub rule: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dep {
            Some((dep, kind)) => {
                write!(f, "{} -> {dep} ({kind} dependency): {}", self.krate, self.rule)
            }
            None => write!(f, "{}: {}", self.krate, self.rule),
        }
    }
}

/// Every violation of the rules in `crates` (the whole workspace), sorted; empty when all hold.
pub fn check(crates: &[Crate]) -> Vec<Violation> {
    let roles: BTreeMap<&str, Option<&str>> =
        crates.iter().map(|c| (c.name.as_str(), c.role.as_deref())).collect();
    let mut violations = BTreeSet::new();
    for krate in crates {
        let role = krate.role.as_deref();
        let mut broken = |dep: Option<(&String, DepKind)>, rule: String| {
            let dep = dep.map(|(name, kind)| (name.clone(), kind));
            violations.insert(Violation { krate: krate.name.clone(), dep, rule });
        };
        let expected = KNOWN_ROLES.iter().find(|(name, _)| *name == krate.name).map(|(_, r)| *r);
        match (role, expected) {
            (None, _) => broken(
                None,
                format!(
                    "no role: add `[package.metadata.stowage] role = \"...\"` (one of {}) to its \
                     Cargo.toml",
                    ROLES.join(", ")
                ),
            ),
            (Some(role), _) if !ROLES.contains(&role) => {
                broken(None, format!("unknown role {role:?}: the roles are {}", ROLES.join(", ")))
            }
            (Some(role), Some(expected)) if role != expected => broken(
                None,
                format!("must have role {expected:?}, so the rules for its kind apply"),
            ),
            _ => {}
        }
        for (dep, kind) in &krate.deps {
            // Only edges between workspace crates are ruled. A crate's dev-dependency on itself
            // (to turn on its own `test-support` feature in its tests) is no edge between crates.
            if dep == &krate.name {
                continue;
            }
            let Some(&dep_role) = roles.get(dep.as_str()) else { continue };
            let rule = match (role, dep_role) {
                (Some("core"), _) => "the core crate depends on no other workspace crate".into(),
                (Some("backend"), Some("backend")) => "backends do not depend on each other".into(),
                (Some("backend"), Some(to @ ("remote" | "frontend" | "tooling"))) => {
                    format!("backends do not depend on the {to} crates")
                }
                (Some("remote"), Some(to @ ("frontend" | "tooling"))) => {
                    format!("the remote crates do not depend on the {to} crates")
                }
                (Some("toolkit"), to) if to != Some("core") => {
                    "a toolkit depends only on the core crate among workspace crates".into()
                }
                (Some("conformance"), to) if to != Some("core") => {
                    "the conformance suite depends only on the core crate among workspace crates \
                     (dev-dependencies included)"
                        .into()
                }
                _ => continue,
            };
            broken(Some((dep, *kind)), rule);
        }
    }
    violations.into_iter().collect()
}

/// The workspace crates and their dependencies, from `cargo metadata --no-deps` output (whose
/// packages are exactly the workspace members, with their declared dependencies).
///
/// Errors: the JSON is not `cargo metadata`'s.
pub fn crates_from_metadata(metadata: &Value) -> Result<Vec<Crate>, String> {
    let packages = metadata["packages"].as_array().ok_or("cargo metadata: no `packages` array")?;
    packages
        .iter()
        .map(|package| {
            let name =
                package["name"].as_str().ok_or("cargo metadata: a package without a name")?;
            // A role that is not a string is reported as an unknown role, not as a missing one.
            let role = match &package["metadata"]["stowage"]["role"] {
                Value::Null => None,
                Value::String(role) => Some(role.clone()),
                other => Some(other.to_string()),
            };
            let mut deps = Vec::new();
            for dep in package["dependencies"].as_array().into_iter().flatten() {
                let dep_name =
                    dep["name"].as_str().ok_or("cargo metadata: a nameless dependency")?;
                let kind = match dep["kind"].as_str() {
                    None => DepKind::Normal,
                    Some("dev") => DepKind::Dev,
                    Some("build") => DepKind::Build,
                    Some(other) => {
                        return Err(format!("cargo metadata: dependency kind {other:?}"));
                    }
                };
                deps.push((dep_name.to_owned(), kind));
            }
            Ok(Crate { name: name.to_owned(), role, deps })
        })
        .collect()
}

/// Runs `cargo metadata --format-version 1 --no-deps` and checks the rules.
///
/// Errors: cargo metadata failed, or a rule is broken (the message lists every violation).
pub fn run() -> Result<(), String> {
    let mut command = cargo();
    command.args(["metadata", "--format-version", "1", "--no-deps"]);
    let line = display_command(&command);
    let output = command.output().map_err(|e| format!("could not start `{line}`: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`{line}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("`{line}` printed something that is not JSON: {e}"))?;
    let crates = crates_from_metadata(&metadata)?;
    let violations = check(&crates);
    if violations.is_empty() {
        println!(
            "xtask: architecture: the {} workspace crates keep the dependency rules",
            crates.len()
        );
        return Ok(());
    }
    let list: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
    Err(format!(
        "architecture check: {} violation(s) of the dependency rules between workspace crates \
         (see xtask/src/architecture.rs):\n{}",
        violations.len(),
        list.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(name: &str, role: &str, deps: &[(&str, DepKind)]) -> Crate {
        Crate {
            name: name.to_owned(),
            role: (!role.is_empty()).then(|| role.to_owned()),
            deps: deps.iter().map(|(dep, kind)| ((*dep).to_owned(), *kind)).collect(),
        }
    }

    /// The workspace as it should be, plus a future backend that opted in by metadata.
    fn clean() -> Vec<Crate> {
        use DepKind::*;
        vec![
            krate("stowage-core", "core", &[("serde", Normal), ("tempfile", Dev)]),
            krate("stowage-conformance", "conformance", &[("stowage-core", Normal)]),
            krate(
                "stowage-npy",
                "backend",
                &[("stowage-core", Normal), ("stowage-conformance", Dev)],
            ),
            krate(
                "stowage-zarr",
                "backend",
                &[("stowage-core", Normal), ("stowage-conformance", Dev)],
            ),
            krate(
                "stowage-remote",
                "remote",
                &[("stowage-core", Normal), ("stowage-zarr", Normal)],
            ),
            krate(
                "stowage-cli",
                "frontend",
                &[("stowage-npy", Normal), ("stowage-zarr", Normal), ("stowage-remote", Normal)],
            ),
            krate("stowage-reliability", "tooling", &[("stowage-cli", Normal), ("cc", Build)]),
            krate("helpers", "test-support", &[("stowage-core", Normal)]),
            krate("xtask", "tooling", &[("serde_json", Normal)]),
        ]
    }

    /// `clean()` with `deps` added to crate `name`.
    fn with(name: &str, deps: &[(&str, DepKind)]) -> Vec<Violation> {
        let mut crates = clean();
        let krate = crates.iter_mut().find(|c| c.name == name).unwrap();
        krate.deps.extend(deps.iter().map(|(dep, kind)| ((*dep).to_owned(), *kind)));
        check(&crates)
    }

    #[test]
    fn a_clean_graph_passes() {
        assert_eq!(check(&clean()), vec![]);
    }

    #[test]
    fn a_dev_dependency_on_itself_is_no_edge() {
        assert_eq!(with("stowage-npy", &[("stowage-npy", DepKind::Dev)]), vec![]);
        assert_eq!(with("stowage-core", &[("stowage-core", DepKind::Dev)]), vec![]);
    }

    #[test]
    fn core_depends_on_no_workspace_crate() {
        let violations = with("stowage-core", &[("stowage-npy", DepKind::Dev)]);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let text = violations[0].to_string();
        assert_eq!(
            text,
            "stowage-core -> stowage-npy (dev dependency): the core crate depends on no other \
             workspace crate"
        );
    }

    #[test]
    fn backends_do_not_depend_on_each_other_and_every_edge_is_listed() {
        let violations =
            with("stowage-zarr", &[("stowage-npy", DepKind::Dev), ("stowage-npy", DepKind::Build)]);
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "stowage-zarr -> stowage-npy (dev dependency): backends do not depend on each other",
                "stowage-zarr -> stowage-npy (build dependency): backends do not depend on each \
                 other",
            ]
        );
    }

    #[test]
    fn conformance_depends_only_on_core() {
        let violations = with("stowage-conformance", &[("helpers", DepKind::Dev)]);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].dep, Some(("helpers".to_owned(), DepKind::Dev)));
        assert!(violations[0].rule.contains("only on the core crate"), "{}", violations[0]);
    }

    #[test]
    fn backends_do_not_depend_on_the_cli_or_the_tooling() {
        let violations = with(
            "stowage-npy",
            &[("stowage-cli", DepKind::Normal), ("stowage-reliability", DepKind::Dev)],
        );
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "stowage-npy -> stowage-cli (normal dependency): backends do not depend on the \
                 frontend crates",
                "stowage-npy -> stowage-reliability (dev dependency): backends do not depend on \
                 the tooling crates",
            ]
        );
    }

    #[test]
    fn the_remote_crate_builds_on_backends_and_no_backend_on_it() {
        let violations = with("stowage-npy", &[("stowage-remote", DepKind::Dev)]);
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["stowage-npy -> stowage-remote (dev dependency): backends do not depend on the \
              remote crates"]
        );
        let violations = with("stowage-remote", &[("stowage-cli", DepKind::Normal)]);
        let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["stowage-remote -> stowage-cli (normal dependency): the remote crates do not depend \
              on the frontend crates"]
        );
    }

    #[test]
    fn a_missing_or_unknown_role_is_an_error() {
        let mut crates = clean();
        crates.push(krate("stowage-new", "", &[("stowage-core", DepKind::Normal)]));
        crates.push(krate("stowage-odd", "plugin", &[]));
        let text: Vec<String> = check(&crates).iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].starts_with("stowage-new: no role: add `[package.metadata.stowage]"));
        assert!(text[1].starts_with("stowage-odd: unknown role \"plugin\""), "{}", text[1]);
    }

    #[test]
    fn a_known_crate_cannot_change_its_role_to_escape_the_rules() {
        let mut crates = clean();
        crates[2].role = Some("tooling".to_owned()); // stowage-npy
        let text: Vec<String> = check(&crates).iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["stowage-npy: must have role \"backend\", so the rules for its kind apply"]
        );
    }

    #[test]
    fn metadata_gives_roles_and_dependency_kinds() {
        let metadata = serde_json::json!({"packages": [
            {"name": "stowage-npy", "metadata": {"stowage": {"role": "backend"}}, "dependencies": [
                {"name": "stowage-core", "kind": null},
                {"name": "stowage-conformance", "kind": "dev"},
                {"name": "cc", "kind": "build"},
            ]},
            {"name": "stowage-new", "metadata": null, "dependencies": []},
        ]});
        let crates = crates_from_metadata(&metadata).unwrap();
        assert_eq!(crates[0].role.as_deref(), Some("backend"));
        assert_eq!(
            crates[0].deps,
            [
                ("stowage-core".to_owned(), DepKind::Normal),
                ("stowage-conformance".to_owned(), DepKind::Dev),
                ("cc".to_owned(), DepKind::Build),
            ]
        );
        assert_eq!(crates[1].role, None);
    }
}
