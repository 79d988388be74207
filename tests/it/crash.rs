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

/// A git repository whose plan is a chain of `atoms` atoms, each appending
/// its own line to `log.txt`: every attempt lands a change to one file.
fn landing_chain(atoms: usize) -> TestEnv {
    let env = TestEnv::new();
    let git = |args: &[&str]| crate::common::git(env.dir.path(), args);
    crate::common::git_init(env.dir.path());
    env.write("log.txt", "");
    env.write(".gitignore", ".aot/\n");
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    let mut text = format!(
        "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: {{ command: 'test \"$(grep -c ^line- log.txt)\" -ge {atoms}' }}\n  constraints: {{ max_retries: 0, max_iterations: 100000, verify: when_solved }}\ngraph:\n  atoms:\n"
    );
    for n in 1..=atoms {
        let deps = if n == 1 {
            String::new()
        } else {
            format!(", deps: [s{}]", n - 1)
        };
        text.push_str(&format!("    s{n}: {{ run: 'echo line-{n} >> log.txt'{deps} }}\n"));
    }
    env.write("aot.yaml", &text);
    env
}

#[test]
fn sigkill_during_landings_never_applies_a_change_twice_nor_half() {
    let kills_wanted = trials(100);
    let atoms = 40;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1a4d);
    let (mut kills, mut rounds) = (0, 0);
    while kills < kills_wanted {
        let env = landing_chain(atoms);
        rounds += 1;
        loop {
            let errors = std::fs::File::create(env.path("stderr.log")).expect("stderr.log");
            let mut child = crate::common::aot_command(env.dir.path())
                .arg("start")
                .stdout(std::process::Stdio::null())
                .stderr(errors)
                .spawn()
                .expect("start aot");
            // The kill lands at a random point of the chain's attempts and landings.
            std::thread::sleep(Duration::from_millis(rng.random_range(30..400)));
            let ended = child.try_wait().expect("wait");
            if ended.is_none() {
                child.kill().expect("SIGKILL aot");
                kills += 1;
            }
            let _ = child.wait();
            if let Some(status) = ended {
                let said = std::fs::read_to_string(env.path("stderr.log")).unwrap_or_default();
                assert!(
                    status.success(),
                    "round {rounds}: aot ended by itself with {status}:\n{said}"
                );
            }
            let done = ended.is_some();
            let log = std::fs::read_to_string(env.path("log.txt")).expect("log.txt");
            // Whole lines only, each atom's at most once, in the chain's order.
            assert!(log.is_empty() || log.ends_with('\n'), "a half-written file: {log:?}");
            let lines: Vec<&str> = log.lines().collect();
            let expected: Vec<String> = (1..=lines.len()).map(|n| format!("line-{n}")).collect();
            assert_eq!(lines, expected, "round {rounds}, after {kills} kills");
            let litter: Vec<_> = std::fs::read_dir(env.dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".aot-"))
                .collect();
            if done {
                assert!(litter.is_empty(), "temporary files left: {litter:?}");
                break;
            }
            if kills >= kills_wanted && lines.len() < atoms {
                // Finish the round: the next start settles the last kill.
                let run = crate::common::run_aot(env.dir.path(), &["start"]);
                assert_eq!(run.code, 0, "{}", run.transcript());
                break;
            }
        }
        let log = std::fs::read_to_string(env.path("log.txt")).unwrap();
        let expected: String = (1..=atoms).map(|n| format!("line-{n}\n")).collect();
        assert_eq!(log, expected, "round {rounds}: every change exactly once");
        let check = crate::common::run_aot(env.dir.path(), &["replay", "--check"]);
        assert_eq!(check.code, 0, "round {rounds}: {}", check.transcript());
    }
    eprintln!("{kills} SIGKILLs over {rounds} round(s) of {atoms} landings");
}
