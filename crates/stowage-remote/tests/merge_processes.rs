//! Eight writer processes commit to one cache at once through a local directory store, merging
//! after each commit, and three are killed with `kill -9` mid-way and restarted: every
//! acknowledged commit is in the final version, none twice, and the final content is what one
//! merge of all the commits gives.
//!
//! One test in a binary of its own: it forks.

mod common;

use std::io::Write;
use std::time::Duration;

use stowage_remote::commits;
use stowage_remote::manifest::Manifest;
use stowage_remote::{RemoteStore, merge, versions};
use stowage_test_support::fork::{Ended, fork_child, kill_child, wait_child};

const RANKS: usize = 8;
const COMMITS: u64 = 6;

/// Rank `rank`'s loop: commit, merge, note the commit as acknowledged, until it has `COMMITS`
/// commits. A restarted rank goes on from its last commit.
fn writer(url: &str, rank: &str, acks: &std::path::Path) -> i32 {
    let store = RemoteStore::open(url).unwrap();
    while commits::next_seq(&store, rank).unwrap() <= COMMITS {
        let seq = common::commit_one(&store, rank);
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(acks).unwrap();
        writeln!(file, "{seq}").unwrap();
        // A merge that keeps losing races leaves the commit for the next one.
        let _ = merge::merge(&store, "arrow");
        // Some computing between commits: a run takes at least COMMITS * 50 ms, so that the
        // kills below land mid-run.
        std::thread::sleep(Duration::from_millis(50));
    }
    0
}

#[test]
fn eight_writers_with_kills_lose_no_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/cache", dir.path().display());
    let acks = dir.path().join("acks");
    std::fs::create_dir(&acks).unwrap();
    let ranks: Vec<String> = (0..RANKS).map(|r| format!("rank-{r}")).collect();
    let spawn = |rank: &str| {
        let (url, acks) = (url.clone(), acks.join(rank));
        let rank = rank.to_owned();
        fork_child(120, move || writer(&url, &rank, &acks))
    };
    let children: Vec<libc::pid_t> = ranks.iter().map(|rank| spawn(rank)).collect();
    // Kill three of them at different moments, then let them resume.
    for (i, victim) in [1usize, 4, 6].into_iter().enumerate() {
        std::thread::sleep(Duration::from_millis(40 + 30 * i as u64));
        kill_child(children[victim]);
    }
    let mut restarted = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        match wait_child(child) {
            Ended::Exited(0) => {}
            Ended::Signaled(libc::SIGKILL) => restarted.push(spawn(&ranks[i])),
            other => panic!("{}: {other:?}", ranks[i]),
        }
    }
    assert_eq!(restarted.len(), 3, "the three kills landed mid-run");
    for child in restarted {
        assert_eq!(wait_child(child), Ended::Exited(0));
    }

    let store = RemoteStore::open(&url).unwrap();
    merge::merge(&store, "arrow").unwrap();
    let newest = versions::newest(&store).unwrap().unwrap();
    for rank in &ranks {
        let seqs: Vec<u64> =
            newest.parts.iter().filter(|p| &p.rank == rank).map(|p| p.seq).collect();
        assert_eq!(seqs, (1..=COMMITS).collect::<Vec<_>>(), "{rank}: each commit exactly once");
        let acked = std::fs::read_to_string(acks.join(rank)).unwrap_or_default();
        for seq in acked.lines().map(|l| l.parse::<u64>().unwrap()) {
            assert!(seqs.contains(&seq), "{rank}: acknowledged commit {seq} lost");
        }
    }
    assert_eq!(newest.rows, RANKS as u64 * (1..=COMMITS).map(|seq| 10 + seq).sum::<u64>());
    // Whatever merges happened, the content is one merge of every commit.
    let all = merge::fold(None, "arrow", &merge::pending(&store, None).unwrap()).unwrap();
    let strip = |m: &Manifest| Manifest { version: 0, ..m.clone() }.to_bytes();
    assert_eq!(strip(&newest), strip(&all));
}
