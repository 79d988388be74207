//! Crash safety: a process that commits in a tight loop is SIGKILLed at random
//! moments. After every kill the state file parses, the journal loads (a torn
//! tail at most), the file agrees with the journal up to its revision, and the
//! next open recovers whatever the journal had beyond it.
//!
//! 200 trials by default; `AOT_CRASH_TRIALS` sets more.

use std::time::Duration;

use aot::journal;

use aot::state::document;
use rand::{RngExt, SeedableRng};

use crate::child;
use crate::common::TestEnv;

fn trials(default: usize) -> usize {
    std::env::var("AOT_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Temporary files a save or a compaction left beside `path`.
fn temps_beside(path: &std::path::Path) -> usize {
    let prefix = format!(".{}.tmp-", path.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .count()
}

/// What the kills of a `churn` child found.
#[derive(Default)]
struct Kills {
    torn_tails: usize,
    behind: usize,
    compacted: usize,
    mid_compaction: usize,
}

/// Kills a `churn` child `trials` times at random moments and checks the
/// files after each kill; `extra` goes to the child's environment.
fn kill_churn(trials: usize, extra: &[(&str, String)]) -> Kills {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let journal_path = journal::path_for(&path);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0a07);
    let mut kills = Kills::default();
    for trial in 0..trials {
        let mut child = child::spawn("churn", &path, extra);
        child::wait_ready(&mut child);
        // The kill lands at a random point of the commit cycle.
        std::thread::sleep(Duration::from_micros(rng.random_range(0..20_000)));
        child.kill().unwrap();
        child.wait().unwrap();

        let file = document::read(&path)
            .unwrap_or_else(|e| panic!("trial {trial}: state file unreadable: {e}"))
            .state;
        let contents =
            journal::read(&journal_path).unwrap_or_else(|e| panic!("trial {trial}: journal unreadable: {e}"));
        kills.torn_tails += usize::from(contents.torn.is_some());
        kills.compacted += usize::from(matches!(
            contents.records.first().map(|r| &r.event),
            Some(journal::Event::Compacted { .. })
        ));
        kills.mid_compaction += temps_beside(&journal_path).min(1);
        assert!(
            file.run.revision <= contents.last_seq(),
            "trial {trial}: file ahead of journal"
        );
        kills.behind += usize::from(file.run.revision < contents.last_seq());
        let replayed = journal::fold(contents.records.iter().take_while(|r| r.seq <= file.run.revision))
            .unwrap_or_else(|| panic!("trial {trial}: no snapshot"));
        assert_eq!(replayed, file, "trial {trial}: replay disagrees with the file");
    }
    // A final open recovers everything the journal holds, and sweeps what
    // killed writers left.
    let mut store = env.store(&path);
    let (state, _) = store.open().unwrap();
    let contents = journal::read(&journal_path).unwrap();
    assert!(contents.torn.is_none(), "open truncates a torn tail");
    assert_eq!(state.run.revision, contents.last_seq());
    assert_eq!(journal::fold(&contents.records).unwrap(), state);
    assert_eq!(
        temps_beside(&path) + temps_beside(&journal_path),
        0,
        "open sweeps stale temporary files"
    );
    kills
}

#[test]
fn sigkill_at_any_moment_loses_nothing() {
    let trials = trials(200);
    let kills = kill_churn(trials, &[]);
    eprintln!(
        "{trials} kills: {} torn journal tails, {} files behind their journal (all recovered)",
        kills.torn_tails, kills.behind
    );
}

#[test]
fn sigkill_during_journal_compaction_loses_nothing() {
    let trials = trials(100);
    let kills = kill_churn(trials, &[("AOT_TEST_COMPACT_EVERY", "2".into())]);
    eprintln!(
        "{trials} kills while compacting: {} journals compacted, {} kills mid-compaction, {} torn tails, {} files behind (all recovered)",
        kills.compacted, kills.mid_compaction, kills.torn_tails, kills.behind
    );
    assert!(
        kills.compacted > trials / 2,
        "the child compacts: {} of {trials}",
        kills.compacted
    );
}

#[test]
fn sigkill_during_memory_compaction_loses_nothing() {
    use aot::memory::MemoryFile;
    use std::io::BufRead;

    let trials = trials(100);
    let env = TestEnv::new();
    let path = env.path("memory.jsonl");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0d8e);
    let (mut confirmed, mut torn, mut mid) = (0, 0, 0);
    for trial in 0..trials {
        let mut child = child::spawn("dreams", &path, &[]);
        child::wait_ready(&mut child);
        std::thread::sleep(Duration::from_micros(rng.random_range(0..20_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        // Every Megram the child said it appended.
        let kept: Vec<String> = std::io::BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.strip_prefix("kept ").map(str::to_string))
            .collect();
        confirmed += kept.len();
        mid += temps_beside(&path).min(1);

        let loaded = MemoryFile::new(&path)
            .load()
            .unwrap_or_else(|e| panic!("trial {trial}: memory unreadable: {e}"));
        // At most the last line, torn by the kill, is unreadable.
        let lines = std::fs::read(&path)
            .unwrap()
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        assert!(
            loaded.skipped.iter().all(|&n| n == lines) && loaded.skipped.len() <= 1,
            "trial {trial}: unreadable lines {:?} of {lines}",
            loaded.skipped
        );
        torn += loaded.skipped.len();
        let ids: std::collections::HashSet<&str> = loaded.memory.megrams().iter().map(|m| m.id.as_str()).collect();
        for id in &kept {
            assert!(
                ids.contains(id.as_str()),
                "trial {trial}: {id} was appended and is gone"
            );
        }
    }
    // The next Dreamer sweeps what a killed one left.
    let file = MemoryFile::new(&path);
    let now = aot::model::time::Timestamp::now();
    let plan = aot::memory::dream(&file.load().unwrap().memory, now, || "c-final".into());
    file.apply_dream(&plan, now).unwrap();
    assert_eq!(temps_beside(&path), 0, "the Dreamer sweeps stale temporary files");
    eprintln!(
        "{trials} kills while dreaming: {confirmed} Megrams confirmed and kept, {torn} torn last lines, {mid} kills mid-compaction"
    );
}
