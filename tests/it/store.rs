//! The store: journal before save, atomic replace, hand edits merged or set
//! aside (never overwritten), recovery after a crash, and the two locks.

use aot::journal::event::Event;
use aot::journal::{self, Journal};
use aot::model::time::Timestamp;
use aot::state::document;
use aot::state::{AtomStatus, CorrectionKind};
use aot::store::{self, Committed, Notice, StoreError};

use crate::child;
use crate::common::{TestEnv, binding};

fn solved(atom: &str) -> Vec<Event> {
    vec![
        Event::AtomStarted {
            atom: atom.into(),
            attempt: 1,
        },
        Event::AtomSolved {
            atom: atom.into(),
            binding: binding(&format!("{atom} done")),
        },
    ]
}

/// Asserts that folding the journal up to the file's revision gives the file.
fn assert_replay_agrees(path: &std::path::Path) {
    let file = document::read(path).unwrap().state;
    let contents = journal::read(&journal::path_for(path)).unwrap();
    let replayed = journal::fold(contents.records.iter().take_while(|r| r.seq <= file.run.revision)).unwrap();
    assert_eq!(replayed, file);
}

#[test]
fn opening_a_new_file_starts_its_journal_with_a_snapshot() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (state, notices) = store.open().unwrap();
    assert_eq!(notices, vec![Notice::JournalStarted]);
    assert_eq!(state.run.revision, 1);
    let contents = journal::read(&journal::path_for(&path)).unwrap();
    assert_eq!(contents.records.len(), 1);
    assert_eq!(contents.records[0].event.kind(), "snapshot");
    assert_replay_agrees(&path);
}

#[test]
fn commit_journals_then_saves_and_replay_agrees() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    assert_eq!(store.commit(&mut state, solved("prepare")).unwrap(), Committed::Saved);
    let on_disk = document::read(&path).unwrap().state;
    assert_eq!(on_disk, state);
    assert_eq!(on_disk.run.revision, 3);
    assert_eq!(on_disk.graph.atoms["prepare"].status, AtomStatus::Solved);
    assert_eq!(on_disk.bindings["prepare"].summary, "prepare done");
    assert_replay_agrees(&path);
}

#[test]
fn save_leaves_no_temporary_file_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store.commit(&mut state, solved("greet")).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let leftovers: Vec<_> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_hand_edit_of_user_fields_is_merged_and_journaled() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    // The user edits the goal and adds an atom while the store holds the state.
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace("goal: Combine two", "goal: Merge two").replace(
        "graph:\n  atoms:\n",
        "graph:\n  atoms:\n    extra:\n      run: 'true'\n",
    );
    std::fs::write(&path, &edited).unwrap();
    assert_eq!(store.commit(&mut state, solved("prepare")).unwrap(), Committed::Merged);
    let on_disk = document::read(&path).unwrap().state;
    assert_eq!(
        on_disk.objective.goal.as_deref(),
        Some("Merge two independently produced halves into one report")
    );
    assert!(on_disk.graph.atoms.contains_key("extra"));
    assert_eq!(on_disk.graph.atoms["prepare"].status, AtomStatus::Solved);
    assert_eq!(on_disk, state, "the in-memory state took the edit too");
    let kinds: Vec<&str> = journal::read(&journal::path_for(&path))
        .unwrap()
        .records
        .iter()
        .map(|r| r.event.kind())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        kinds,
        [
            "snapshot",
            "user_edited",
            "correction_recorded",
            "correction_recorded",
            "atom_started",
            "atom_solved"
        ],
        "the edit is recorded as corrections: objective, then graph"
    );
    let described: Vec<&str> = state.corrections.iter().map(|c| c.description.as_str()).collect();
    assert_eq!(described, ["hand edit of the objective", "hand edit of the graph"]);
    assert_replay_agrees(&path);
}

#[test]
fn a_hand_edit_of_engine_fields_is_never_overwritten() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace("    prepare:\n", "    prepare:\n      status: failed\n");
    assert_ne!(edited, text);
    std::fs::write(&path, &edited).unwrap();
    let err = store.commit(&mut state, solved("prepare")).unwrap_err();
    let StoreError::Conflict { rejected, reason, .. } = err else {
        panic!("{err}")
    };
    assert!(reason.contains("graph.atoms.prepare"), "{reason}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        edited,
        "the user's edit stays in place"
    );
    let aside = document::read(&rejected).unwrap().state;
    assert_eq!(
        aside.bindings["prepare"].summary, "prepare done",
        "the engine's work is saved aside"
    );
    assert!(
        rejected.to_string_lossy().ends_with("diamond.yaml.rejected-1.yaml"),
        "{}",
        rejected.display()
    );
    let kinds: Vec<String> = journal::read(&journal::path_for(&path))
        .unwrap()
        .records
        .iter()
        .map(|r| r.event.kind().to_string())
        .collect();
    assert!(
        kinds.contains(&"atom_solved".to_string()),
        "the events were journaled: {kinds:?}"
    );
}

#[test]
fn an_invalid_hand_edit_is_never_overwritten() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    std::fs::write(&path, "version: 1\nobjective: [unfinished\n").unwrap();
    let err = store.commit(&mut state, solved("greet")).unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "version: 1\nobjective: [unfinished\n"
    );
}

#[test]
fn another_process_write_through_the_store_is_not_mistaken_for_a_hand_edit() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut runner = env.store(&path);
    let (mut state, _) = runner.open().unwrap();
    // A second store (as `aot stop` will be) changes control through the lock.
    let mut other = env.store(&path);
    other
        .transact(|s| {
            let mut control = s.control.clone();
            control.stop_requested = true;
            Ok::<_, String>((vec![Event::ControlSet { control }], ()))
        })
        .unwrap()
        .unwrap();
    assert_eq!(runner.commit(&mut state, solved("prepare")).unwrap(), Committed::Saved);
    assert!(state.control.stop_requested, "the runner saw the other process's event");
    let on_disk = document::read(&path).unwrap().state;
    assert!(on_disk.control.stop_requested);
    assert_eq!(on_disk.graph.atoms["prepare"].status, AtomStatus::Solved);
    assert_replay_agrees(&path);
}

#[test]
fn open_recovers_records_a_crash_left_out_of_the_file() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    store.open().unwrap();
    // Journal two transitions without saving: a crash between the two writes.
    let (mut journal, _) = Journal::open(&journal::path_for(&path)).unwrap();
    journal
        .append(Timestamp::from_millis(1_767_225_700_000), solved("prepare"))
        .unwrap();
    drop(journal);
    let mut store = env.store(&path);
    let (state, notices) = store.open().unwrap();
    assert_eq!(notices, vec![Notice::Recovered { records: 2 }]);
    assert_eq!(state.bindings["prepare"].summary, "prepare done");
    assert_eq!(
        document::read(&path).unwrap().state,
        state,
        "the recovered state was saved"
    );
    assert_replay_agrees(&path);
}

#[test]
fn open_journals_hand_edits_made_while_nothing_ran() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    env.store(&path).open().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("max_parallel_agents: 3", "max_parallel_agents: 2")).unwrap();
    let (state, notices) = env.store(&path).open().unwrap();
    assert_eq!(notices, vec![Notice::MergedEdit]);
    assert_eq!(state.objective.constraints.max_parallel_agents, Some(2));
    assert_replay_agrees(&path);
}

#[test]
fn a_correction_event_clears_the_trail_only_for_objective_changes() {
    let env = TestEnv::new();
    let path = env.example("or-fallback.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    let choose = Event::OrChosen {
        group: "config".into(),
        chosen: "from-remote".into(),
        remaining: vec!["from-default".into()],
        reason: "first in file order".into(),
    };
    store.commit(&mut state, vec![choose]).unwrap();
    let correction = |kind, cleared| Event::CorrectionRecorded {
        correction: aot::state::Correction {
            at: Timestamp::from_millis(1_767_225_600_000),
            kind,
            description: "test".into(),
            trail_cleared: cleared,
        },
    };
    store
        .commit(&mut state, vec![correction(CorrectionKind::ConstraintChange, false)])
        .unwrap();
    assert_eq!(state.trail.len(), 1);
    store
        .commit(&mut state, vec![correction(CorrectionKind::DagAdjustment, false)])
        .unwrap();
    assert_eq!(state.trail.len(), 2, "user_correction appended");
    store
        .commit(&mut state, vec![correction(CorrectionKind::ObjectiveChange, true)])
        .unwrap();
    assert!(state.trail.is_empty());
    assert_eq!(state.corrections.len(), 3);
    assert_replay_agrees(&path);
}

#[test]
fn the_runner_lock_admits_one_runner_and_names_it() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    let paths = store::Paths::new(&path);
    let mut holder = child::spawn("runner", &path, &[]);
    child::wait_ready(&mut holder);
    let err = store::acquire_runner(&paths, std::process::id()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("aot is already running on {} (pid {})", path.display(), holder.id())
    );
    assert_eq!(store::running_pid(&paths), Some(holder.id()));
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The lock dies with its holder, even when it is killed.
    let lock = store::acquire_runner(&paths, std::process::id()).unwrap();
    assert_eq!(store::running_pid(&paths), Some(std::process::id()));
    drop(lock);
    assert_eq!(store::running_pid(&paths), None);
}

#[test]
fn two_processes_doing_read_modify_write_lose_no_update() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    env.store(&path).open().unwrap();
    let rounds: u32 = std::env::var("AOT_TEST_RMW_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let extra = [("AOT_TEST_ROUNDS", rounds.to_string())];
    let mut a = child::spawn("increment", &path, &extra);
    let mut b = child::spawn("increment", &path, &extra);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let state = document::read(&path).unwrap().state;
    assert_eq!(state.control.stop_reason, Some((2 * rounds).to_string()));
    assert_replay_agrees(&path);
}

#[test]
fn a_transaction_between_a_runners_records_and_its_save_is_not_a_conflict() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut runner = env.store(&path);
    let (mut state, _) = runner.open().unwrap();
    // The runner journals work but saves only at its next boundary.
    runner.record(&mut state, solved("prepare")).unwrap();
    // Meanwhile `aot stop` catches the file up and sets control.
    let mut other = env.store(&path);
    let after = other
        .transact(|s| {
            let mut control = s.control.clone();
            control.stop_requested = true;
            Ok::<_, String>((vec![Event::ControlSet { control }], ()))
        })
        .unwrap()
        .unwrap()
        .state;
    assert_eq!(
        after.graph.atoms["prepare"].status,
        AtomStatus::Solved,
        "the other process saw the runner's journal"
    );
    let records = runner.record(&mut state, solved("left")).unwrap();
    assert_eq!(
        records.first().map(|r| r.event.kind()),
        Some("control_set"),
        "the runner folds the other's record first"
    );
    assert!(state.control.stop_requested);
    assert_eq!(runner.commit(&mut state, Vec::new()).unwrap(), Committed::Saved);
    let on_disk = document::read(&path).unwrap().state;
    assert_eq!(on_disk, state);
    assert_replay_agrees(&path);
}

#[test]
fn a_binding_edited_by_hand_is_a_bindings_override() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store.commit(&mut state, solved("prepare")).unwrap();
    store.commit(&mut state, solved("left")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replace("summary: left done", "summary: left, by hand");
    assert_ne!(edited, text);
    std::fs::write(&path, &edited).unwrap();
    assert_eq!(store.commit(&mut state, Vec::new()).unwrap(), Committed::Merged);
    assert_eq!(state.bindings["left"].summary, "left, by hand");
    assert_eq!(state.corrections.last().unwrap().kind, CorrectionKind::BindingsOverride);
    assert_replay_agrees(&path);
}

#[test]
fn an_edit_that_lands_during_a_transaction_is_kept_aside_and_reported() {
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut store = env.store(&path);
    store.open().unwrap();
    let edited = path.clone();
    let done = store
        .transact(|s| {
            // An editor (which takes no lock) saves between aot's read and its write.
            let text = std::fs::read_to_string(&edited).unwrap();
            std::fs::write(&edited, format!("{text}# my edit\n")).unwrap();
            let mut control = s.control.clone();
            control.stop_requested = true;
            Ok::<_, String>((vec![Event::ControlSet { control }], ()))
        })
        .unwrap()
        .unwrap();
    assert_eq!(done.set_aside.len(), 1, "the caller is told what was kept aside");
    let kept = std::fs::read_to_string(&done.set_aside[0]).unwrap();
    assert!(kept.ends_with("# my edit\n"), "{kept}");
}

#[test]
fn a_hand_edit_raced_by_another_process_saving_is_taken_in_once() {
    // The runner takes hand edits in while `aot redirect` (another store on
    // the same file) saves: whichever sees the edit first merges it, and the
    // other finds it explained by the journal — never two corrections.
    let env = TestEnv::new();
    let path = env.example("diamond.yaml");
    let mut runner = env.store(&path);
    let (mut state, _) = runner.open().unwrap();
    let edits = 60;
    for i in 0..edits {
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen(
            "graph:\n  atoms:\n",
            &format!("graph:\n  atoms:\n    hand{i}:\n      run: 'true'\n"),
            1,
        );
        assert_ne!(edited, text);
        std::fs::write(&path, &edited).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut other = env.store(&path);
                other
                    .transact(|s| {
                        let mut control = s.control.clone();
                        control.stop_reason = Some(format!("redirect {i}"));
                        Ok::<_, String>((vec![Event::ControlSet { control }], ()))
                    })
                    .unwrap()
                    .unwrap();
            });
            runner.take_edit(&mut state).unwrap();
        });
        runner.commit(&mut state, Vec::new()).unwrap();
    }
    let by_hand = state
        .corrections
        .iter()
        .filter(|c| c.description.starts_with("hand edit"))
        .count();
    assert_eq!(by_hand, edits, "one correction per edit: {:#?}", state.corrections);
    for i in 0..edits {
        assert!(
            state.graph.atoms.contains_key(format!("hand{i}").as_str()),
            "hand{i} kept"
        );
    }
    assert_replay_agrees(&path);
}

#[test]
fn a_file_with_a_record_but_no_journal_starts_a_new_journal_from_it() {
    // A state file committed to git without its journal, then cloned.
    let env = TestEnv::new();
    env.example("single.yaml");
    assert_eq!(env.aot(&["--state", "single.yaml", "start"]).code, 0);
    let done = std::fs::read_to_string(env.path("single.yaml")).unwrap();
    assert!(done.contains("status:"), "{done}");
    let clone = TestEnv::new();
    clone.write("single.yaml", &done);
    // The work's output was committed with it.
    std::fs::create_dir_all(clone.path("out")).unwrap();
    std::fs::copy(env.path("out/hello.txt"), clone.path("out/hello.txt")).unwrap();
    let run = clone.aot(&["--state", "single.yaml", "start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(run.stderr.contains("had no journal beside it"), "{}", run.stderr);
    assert_eq!(clone.aot(&["--state", "single.yaml", "replay", "--check"]).code, 0);
    assert_eq!(clone.aot(&["--state", "single.yaml", "status"]).code, 0);
}
