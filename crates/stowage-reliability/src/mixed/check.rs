//! The checks of a mixed trial, run after the kill and the tool's next batch, and again after
//! the closing writes: both readers hold every acknowledged sample intact and nothing else
//! wrong; after recovery (a stowage writer opened and closed, as the crash campaign does),
//! `validate(Full)` finds no problem and lists exactly the tool's unadopted data as unchecked;
//! the tool's files are as the tool left them, before and after that recovery.

use crate::mixed::formats::{Format, View};
use crate::mixed::ledger::{Key, Ledger, Writer, Written};
use crate::mixed::peer::{ToolPeer, clip};
use serde_json::Value as Json;
use std::path::Path;

/// Longest value quoted in a message, in characters.
const QUOTED: usize = 240;

/// What a check compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// Samples compared with the value put for them, by both readers.
    pub compared: u64,
    /// What `validate` reported before recovery that recovery cleared (an interrupted
    /// finalize reads as a problem until a writer opens the cache and rolls it forward).
    pub cleared_by_recovery: Option<String>,
}

/// Every check of the cache at `cache` against `ledger`. The error names the reader, the sample
/// (its key or record and who wrote it in which phase) and both sides.
pub fn check(
    format: &dyn Format,
    tool: &ToolPeer,
    cache: &Path,
    ledger: &Ledger,
    seed: u64,
) -> Result<Checked, String> {
    ledger.check_protected()?;
    format.check_tool_data(cache)?;
    let stowage = format.stowage_view(cache, ledger)?;
    let mut checked = Checked::default();
    checked.compared += compare(format, &stowage, ledger, seed)?;
    let tool_view = format.tool_view(tool, cache, ledger, &stowage)?;
    checked.compared += compare(format, &tool_view, ledger, seed)?;
    checked.cleared_by_recovery = format.validate(cache, ledger).err();
    format.recover(cache)?;
    ledger.check_protected().map_err(|e| format!("after recovery: {e}"))?;
    format.validate(cache, ledger).map_err(|e| format!("after recovery: {e}"))?;
    Ok(checked)
}

/// `view` holds every acknowledged sample, each sample it holds is the value put for it, and
/// it holds nothing that was not put. Returns the samples compared.
pub fn compare(
    format: &dyn Format,
    view: &View,
    ledger: &Ledger,
    seed: u64,
) -> Result<u64, String> {
    let reader = &view.reader;
    for (name, got) in &view.samples {
        let Some(key) = ledger.key_named(name) else {
            return Err(format!("{reader} holds {name:?}, which neither tool put"));
        };
        let entry = ledger.entry(key).expect("named keys are recorded");
        let whose = format!("{} put it in {}", who(format, key), key.phase.describe());
        if entry.written == Written::Never {
            return Err(format!(
                "{reader} holds {name:?} ({whose}), whose put was never made: the child died \
                 before it"
            ));
        }
        let want = format.expected(key, seed);
        if *got != want {
            return Err(format!(
                "{reader} reads {name:?} ({whose}) as {}, but {} was put",
                quote(got),
                quote(&want)
            ));
        }
    }
    for (key, entry) in ledger.entries() {
        if entry.written == Written::Acknowledged && !view.samples.contains_key(&entry.name) {
            let why = view.missing.get(&entry.name).map_or(String::new(), |w| format!(" ({w})"));
            return Err(format!(
                "{reader} does not find {:?}{why}: {} acknowledged it in {}",
                entry.name,
                who(format, key),
                key.phase.describe()
            ));
        }
    }
    Ok(view.samples.len() as u64)
}

/// Who writes `key`: `stowage` or the tool's name.
fn who(format: &dyn Format, key: Key) -> &'static str {
    match key.writer() {
        Writer::Stowage => "stowage",
        Writer::Tool => format.pair().tool(),
    }
}

fn quote(value: &Json) -> String {
    clip(&value.to_string(), QUOTED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mixed::ledger::Phase;
    use crate::mixed::pair::Pair;

    /// A view of `keys` as their writers put them, by the arrow+torchcachex pair's names.
    fn view_of(format: &dyn Format, keys: &[Key], seed: u64) -> View {
        let samples = keys.iter().map(|k| (format.name(*k), format.expected(*k, seed))).collect();
        View { reader: "stowage".into(), samples, ..View::default() }
    }

    #[test]
    fn a_view_is_held_to_what_was_acknowledged_and_put() {
        let format = Pair::Arrow.format();
        let (acked, maybe, never) = (
            Key::new(Phase::ToolFirst, 0),
            Key::new(Phase::StowageKilled, 0),
            Key::new(Phase::StowageKilled, 1),
        );
        let mut ledger = Ledger::default();
        ledger.record(acked, format.name(acked), Written::Acknowledged, None);
        ledger.record(maybe, format.name(maybe), Written::Maybe, None);
        ledger.record(never, format.name(never), Written::Never, None);
        assert_eq!(compare(format, &view_of(format, &[acked, maybe], 5), &ledger, 5), Ok(2));
        assert_eq!(compare(format, &view_of(format, &[acked], 5), &ledger, 5), Ok(1));

        let lost = compare(format, &view_of(format, &[maybe], 5), &ledger, 5).unwrap_err();
        assert!(lost.contains("does not find \"t1-0000\": torchcachex acknowledged it"), "{lost}");
        let unput = compare(format, &view_of(format, &[acked, never], 5), &ledger, 5).unwrap_err();
        assert!(unput.contains("\"s2-0001\"") && unput.contains("never made"), "{unput}");
        let stranger = Key::new(Phase::StowageMore, 9);
        let unknown = compare(format, &view_of(format, &[acked, stranger], 5), &ledger, 5);
        assert!(unknown.unwrap_err().contains("which neither tool put"));
        // Another seed's value: wrong data, both sides quoted.
        let wrong = compare(format, &view_of(format, &[acked], 6), &ledger, 5).unwrap_err();
        assert!(wrong.contains("reads \"t1-0000\"") && wrong.contains("was put"), "{wrong}");
    }
}
