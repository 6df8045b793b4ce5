//! The stowage child of a mixed trial: it runs the session of the trial's seed on the cache
//! the tool has written to, announcing each step on stdout as the crash campaign's child does
//! ([`crate::crash::child::Line`]), and waits to be killed.

use crate::crash::child::Line;
use crate::mixed::formats::MixedWriter;
use crate::mixed::ledger::{Key, Phase};
use crate::mixed::pair::Pair;
use crate::mixed::session::{Session, Step};
use std::io::{Read, Write};
use std::path::Path;

/// The child's main: runs the session of `seed` for the pair named `pair` on `cache`, then
/// waits (its handle open, the writer lock held) until killed or its stdin closes. Exits with
/// status 3 after printing `failed <step> <error>` when a step fails.
pub fn child_main(pair: &str, cache: &Path, seed: u64) -> ! {
    let Some(pair) = Pair::named(pair) else {
        println!("failed 0 no mixed pair is named {pair:?}");
        std::process::exit(3)
    };
    let format = pair.format();
    let session = Session::generate(pair, seed);
    let mut out = std::io::stdout().lock();
    let mut say = |line: &dyn std::fmt::Display| {
        // The parent counts on seeing each line as soon as it is true.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let mut writer: Option<Box<dyn MixedWriter>> = None;
    for (n, step) in session.steps.iter().enumerate() {
        say(&Line::Begin(n));
        let result = match (step, writer.as_mut()) {
            (Step::Open, _) => format.open_writer(cache, seed).map(|w| writer = Some(w)),
            (Step::Put(numbers), Some(w)) => {
                numbers.iter().try_for_each(|&number| w.put(Key::new(Phase::StowageKilled, number)))
            }
            (Step::Flush, Some(w)) => w.flush(),
            (Step::Adopt, Some(w)) => w.adopt(),
            (Step::Finalize, Some(w)) => w.finalize(),
            (_, None) => unreachable!("a session opens first"),
        };
        if let Err(e) = result {
            say(&format_args!("failed {n} {}: {e}", crate::crash::kill::ChildOp::name(step)));
            std::process::exit(3)
        }
        say(&Line::End(n));
    }
    say(&Line::Done);
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0)
}
