//! The campaign's child processes: the `concurrency` binary started again with `--child <role>`
//! and the arguments [`ChildArgs::to_args`] writes. The parent talks to each by lines
//! ([`super::process::Child`]).

use super::{killed_writer, lock_race, reader, writer};
use crate::backends::Subject;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a child process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The live trial's writer ([`writer::run`]).
    Writer,
    /// A live trial's reader process ([`reader::read_until_done`]).
    Reader,
    /// One of two writers racing for the lock ([`lock_race::racer`]).
    Racer,
    /// A writer that is killed while it holds the lock ([`killed_writer::holder`]).
    Holder,
}

impl Role {
    /// The role's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
            Role::Racer => "racer",
            Role::Holder => "holder",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Result<Role, String> {
        [Role::Writer, Role::Reader, Role::Racer, Role::Holder]
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| format!("unknown child role {name:?}"))
    }
}

/// Everything a child needs, as it travels on the command line.
#[derive(Debug, Clone)]
pub struct ChildArgs {
    /// What to do.
    pub role: Role,
    /// The backend's name.
    pub backend: String,
    /// The cache directory.
    pub dir: PathBuf,
    /// The live trial's progress file (unused by other roles).
    pub progress: PathBuf,
    /// The campaign seed (trial seeds for the racer and the holder).
    pub seed: u64,
    /// The live trial's length in seconds (the writer's; readers derive their deadline).
    pub seconds: f64,
    /// The child's number among its siblings.
    pub id: u32,
    /// The realistic form ([`crate::corruption::scale::Scale::Realistic`]): the backend at its
    /// default options, and the live writer first writes this many distinct keys at full speed
    /// (0: the quick form, small settings and no preload).
    pub preload: u64,
}

impl ChildArgs {
    /// The arguments that make the campaign binary run this child.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--child".into(),
            self.role.name().into(),
            "--backends".into(),
            self.backend.clone(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--progress".into(),
            self.progress.display().to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--seconds".into(),
            self.seconds.to_string(),
            "--id".into(),
            self.id.to_string(),
        ]
        .into_iter()
        .chain(
            (self.preload > 0)
                .then(|| ["--preload".into(), self.preload.to_string()])
                .into_iter()
                .flatten(),
        )
        .collect()
    }
}

/// How long after the live trial's planned end a reader process gives up waiting for the
/// writer's `done` (finalize included).
pub const READER_SLACK: Duration = Duration::from_secs(180);

/// How much longer readers wait for the writer's `done` when it preloads first (the realistic
/// form: 100,000 keys, thousands of durable flushes, on a machine other jobs share).
pub fn preload_slack(preload: u64) -> Duration {
    Duration::from_secs(if preload > 0 { 900 } else { 0 })
}

/// Runs the child `args` describes over `subject`, printing its protocol lines to `out`.
pub fn child_main(subject: &Subject, args: &ChildArgs, out: &mut dyn Write) -> Result<(), String> {
    let factory = &*subject.factory;
    match args.role {
        Role::Writer => {
            let pace = writer::Pace { seconds: args.seconds, preload: args.preload };
            writer::run(factory, &args.dir, &args.progress, args.seed, pace, out)
        }
        Role::Reader => {
            let setup = reader::ReaderSetup {
                factory,
                dir: &args.dir,
                progress: &args.progress,
                seed: args.seed,
                name: format!("process {}", args.id),
                deadline: Instant::now()
                    + Duration::from_secs_f64(args.seconds)
                    + READER_SLACK
                    + preload_slack(args.preload),
            };
            let stats = reader::read_until_done(&setup);
            writeln!(out, "summary {}", stats.to_json()).map_err(|e| format!("stdout: {e}"))
        }
        Role::Racer => lock_race::racer(factory, &args.dir, args.id, out),
        Role::Holder => killed_writer::holder(factory, &args.dir, args.seed, out),
    }
}
