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

#[test]
fn sigkill_at_any_moment_loses_nothing() {
    let trials: usize = std::env::var("AOT_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let journal_path = journal::path_for(&path);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0a07);
    let mut torn_tails = 0;
    let mut behind = 0;
    for trial in 0..trials {
        let mut child = child::spawn("churn", &path, &[]);
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
        torn_tails += usize::from(contents.torn.is_some());
        assert!(
            file.run.revision <= contents.last_seq(),
            "trial {trial}: file ahead of journal"
        );
        behind += usize::from(file.run.revision < contents.last_seq());
        let replayed = journal::fold(contents.records.iter().take_while(|r| r.seq <= file.run.revision))
            .unwrap_or_else(|| panic!("trial {trial}: no snapshot"));
        assert_eq!(replayed, file, "trial {trial}: replay disagrees with the file");
    }
    // A final open recovers everything the journal holds.
    let mut store = env.store(&path);
    let (state, _) = store.open().unwrap();
    let contents = journal::read(&journal_path).unwrap();
    assert!(contents.torn.is_none(), "open truncates a torn tail");
    assert_eq!(state.run.revision, contents.last_seq());
    assert_eq!(journal::fold(&contents.records).unwrap(), state);
    eprintln!("{trials} kills: {torn_tails} torn journal tails, {behind} files behind their journal (all recovered)");
}
