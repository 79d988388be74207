//! The journal: golden records for every event kind (the wire format is a
//! contract), torn tails, corruption, and group commit.

use std::io::Write;

use aot::journal::event::{Event, RECORD_VERSION, Record};
use aot::journal::{self, Journal, JournalError, TornTail};
use aot::model::time::{Span, Timestamp};
use aot::state::*;
use indexmap::IndexMap;

use crate::common::{TestEnv, root};

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000 + ms)
}

fn binding() -> Binding {
    Binding {
        summary: "built".into(),
        output_tail: "Finished dev profile".into(),
        artifacts: vec!["target/debug/app".into()],
        at: at(5),
        attempt: 2,
        changes: None,
    }
}

fn small_state() -> StateFile {
    let mut atoms = IndexMap::new();
    atoms.insert("build".into(), Atom::command("cargo build"));
    let objective = Objective {
        goal: Some("build".into()),
        base_case: Some(BaseCase {
            command: "cargo test".into(),
            timeout: Some(Span(std::time::Duration::from_secs(90))),
        }),
        ..Objective::default()
    };
    StateFile::new(objective, atoms)
}

/// One event of every kind. The match makes adding a variant without a golden
/// record a compile error here.
fn one_of_each() -> Vec<Event> {
    let events = vec![
        Event::snapshot(&small_state()),
        Event::user_edited(&small_state()),
        Event::ControlSet {
            control: Control {
                stop_requested: true,
                stop_reason: Some("lunch".into()),
                redirect_requested: false,
            },
        },
        Event::RunStarted { pid: 4242, yes: false },
        Event::IterationStarted { iteration: 1 },
        Event::AtomStarted {
            atom: "build".into(),
            attempt: 1,
        },
        Event::AttemptFailed {
            atom: "build".into(),
            attempt: 1,
            class: FailureClass::Environmental,
            criterion: "run".parse().unwrap(),
            message: "exit 127: cargo: not found".into(),
            ended: aot::model::Ended {
                exit_code: Some(127),
                signal: None,
                summary: Some("ran cargo build".into()),
                discarded: Some("1 file: src/main.rs (+2 -1)".into()),
            },
        },
        Event::AtomSolved {
            atom: "build".into(),
            binding: binding(),
        },
        Event::AttemptCancelled {
            atom: "build".into(),
            why: Some("its definition changed".into()),
        },
        Event::AtomFailed {
            atom: "build".into(),
            class: FailureClass::Logical,
            criterion: "check[0]".parse().unwrap(),
            message: "exit 1".into(),
            ended: aot::model::Ended {
                exit_code: None,
                signal: Some(9),
                summary: None,
                discarded: None,
            },
        },
        Event::AtomsReset {
            atoms: vec!["build".into()],
        },
        Event::AtomBlocked {
            atom: "build".into(),
            reason: "cargo is not installed".into(),
        },
        Event::AtomsPruned {
            atoms: vec!["build".into()],
        },
        Event::OrChosen {
            group: "pick".into(),
            chosen: "a".into(),
            remaining: vec!["b".into()],
            reason: "first in file order".into(),
        },
        Event::Backtracked {
            group: "pick".into(),
            from: "a".into(),
            to: "b".into(),
            reset: vec!["a".into()],
        },
        Event::BindingOverridden {
            atom: "build".into(),
            binding: binding(),
        },
        Event::CorrectionRecorded {
            correction: Correction {
                at: at(9),
                kind: CorrectionKind::DagAdjustment,
                description: "added atom docs".into(),
                trail_cleared: false,
            },
        },
        Event::BaseCaseChecked {
            evidence: Evidence {
                command: "cargo test".into(),
                exit_code: Some(0),
                output_tail: "test result: ok".into(),
                at: at(10),
                duration_ms: 1234,
            },
        },
        Event::AtomsRefined {
            atoms: vec!["build".into()],
        },
        Event::GgsDecided {
            decision: Box::new(crate::ggs::sample_decision()),
        },
        Event::Calibrated {
            calibration: Box::new(aot::memory::Calibration {
                group: "pick".into(),
                alternatives: vec![aot::memory::Recalled {
                    alt: "b".into(),
                    space: "git".into(),
                    entity: "b".into(),
                    m_att: 0.8,
                    m_dec: 0.8,
                    action: aot::memory::Action::Exploit,
                    confirmed: None,
                }],
                order: vec!["b".into()],
                must_not: vec!["tool cargo (blocked by GGS)".into()],
                should_prefer: vec!["git on b (memory: M_dec +0.80)".into()],
            }),
        },
        Event::RunPaused {},
        Event::RunStopped {
            stop: StopRecord {
                reason: StopReason::Completed,
                at: at(11),
                message: "base case holds".into(),
                evidence: None,
                final_result: Some(Box::new(aot::ggs::accept(
                    &Default::default(),
                    0.2,
                    1,
                    &Default::default(),
                ))),
            },
        },
        // Newer than version 2: last, so the older kinds keep their numbers.
        Event::Compacted {
            state: Box::new(small_state()),
            failures: vec![(
                "build".into(),
                aot::journal::Reflection {
                    attempt: 1,
                    criterion: "run".parse().unwrap(),
                    class: FailureClass::Logical,
                    message: "exit 1: 2 tests failed".into(),
                    ended: Default::default(),
                },
            )],
        },
        // Newer than version 4.
        Event::EditRejected {
            why: "graph.atoms.b.deps: unknown atom `nope`".into(),
            kept: "plan.rejected-1.yaml".into(),
        },
        Event::BlocksOverridden {
            atoms: vec!["patch-b".into()],
        },
        // Newer than version 5.
        Event::ChangesLanded {
            atom: "build".into(),
            attempt: 1,
            changes: changes(),
            commit: Some("3fcda4d5d3dcb82bdc3f54ad52c822b61312a1c5".into()),
        },
        Event::ChangesDiscarded {
            atom: "build".into(),
            attempt: 2,
            changes: changes(),
            kept: Some("/repo/.git/aot/aot.yaml/kept/1".into()),
        },
        Event::ChangesUndone {
            atom: "build".into(),
            changes: changes(),
            kept: vec!["src/main.rs (both changed the same lines)".into()],
            commit: None,
        },
        Event::WorkspaceRecovered {
            changes: changes(),
            kept: vec!["notes.txt".into()],
        },
        // Newer than version 6.
        Event::Replanned {
            replan: 2,
            directive: aot::ggs::MacroState::ChangeApproach,
            answers: Some("fix".into()),
            added: vec!["r2-read".into(), "r2-patch".into()],
            group: Some("fix-or".into()),
            rationale: "the patches fail; edit the function directly".into(),
            gates: vec!["atom `r2-patch` run: `rm -f a.py.orig` `rm` deletes files".into()],
        },
        Event::PlanRefused {
            replan: 2,
            reasons: vec!["atom `r2-w` uses the tool `sh`, which is blocked (MUST NOT)".into()],
        },
        Event::LlmCalled {
            role: "planner".into(),
            model: "qwen3:8b".into(),
            prompt_tokens: 1200,
            completion_tokens: 300,
            estimated: false,
            latency_ms: 2300,
            attempts: 2,
            error: None,
            atom: Some("fix".into()),
            cost: Some(0.0054),
            kept: Some(".aot/llm/1767225600000-1.json".into()),
        },
        // Newer than version 7.
        Event::ToolCalled {
            atom: "fix".into(),
            attempt: 1,
            tool: "shell".into(),
            input: "rm -rf build".into(),
            refused: Some("destructive without the user's confirmation (Law 1)".into()),
            exit_code: None,
        },
        Event::AgentRan {
            atom: "fix".into(),
            attempt: 1,
            worker: "llm".into(),
            turns: 4,
            tool_calls: 6,
            refusals: 1,
        },
        Event::CriterionJudged {
            atom: Some("docs".into()),
            attempt: Some(2),
            criterion: aot::model::Criterion::Plausible {
                index: 0,
                text: "the error message names the file".into(),
            },
            passed: false,
            evidence: "the message says `bad input` without the path".into(),
            class: Some(FailureClass::Logical),
        },
    ];
    for event in &events {
        match event {
            Event::Snapshot { .. }
            | Event::Compacted { .. }
            | Event::UserEdited { .. }
            | Event::ControlSet { .. }
            | Event::RunStarted { .. }
            | Event::IterationStarted { .. }
            | Event::AtomStarted { .. }
            | Event::AtomSolved { .. }
            | Event::AttemptFailed { .. }
            | Event::AttemptCancelled { .. }
            | Event::AtomFailed { .. }
            | Event::AtomsReset { .. }
            | Event::AtomsRefined { .. }
            | Event::GgsDecided { .. }
            | Event::Calibrated { .. }
            | Event::AtomBlocked { .. }
            | Event::AtomsPruned { .. }
            | Event::OrChosen { .. }
            | Event::Backtracked { .. }
            | Event::BindingOverridden { .. }
            | Event::CorrectionRecorded { .. }
            | Event::BaseCaseChecked { .. }
            | Event::RunPaused {}
            | Event::EditRejected { .. }
            | Event::BlocksOverridden { .. }
            | Event::ChangesLanded { .. }
            | Event::ChangesDiscarded { .. }
            | Event::ChangesUndone { .. }
            | Event::WorkspaceRecovered { .. }
            | Event::Replanned { .. }
            | Event::PlanRefused { .. }
            | Event::LlmCalled { .. }
            | Event::ToolCalled { .. }
            | Event::AgentRan { .. }
            | Event::CriterionJudged { .. }
            | Event::RunStopped { .. } => {}
        }
    }
    events
}

fn changes() -> aot::model::Changes {
    use aot::model::changes::{ChangeKind, FileChange};
    aot::model::Changes {
        before: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
        after: "9256ebee319acdd0387d4e4a250a53295cc5b7cc".into(),
        files: vec![
            FileChange {
                path: "src/main.rs".into(),
                change: ChangeKind::Modified,
                added: 2,
                removed: 1,
            },
            FileChange {
                path: "notes.txt".into(),
                change: ChangeKind::Added,
                added: 1,
                removed: 0,
            },
        ],
        more: 0,
    }
}

fn golden_records() -> Vec<Record> {
    one_of_each()
        .into_iter()
        .enumerate()
        .map(|(i, event)| Record {
            v: RECORD_VERSION,
            seq: i as u64 + 1,
            at: at(i as u64),
            event,
        })
        .collect()
}

/// One golden file per record kind, in the current version's folder: a
/// change of what any kind writes fails here until the version is bumped
/// (and the old folder kept, to prove it still reads).
#[test]
fn golden_records_round_trip_byte_for_byte() {
    let dir = root().join(format!("tests/fixtures/journal/v{RECORD_VERSION}"));
    let update = std::env::var_os("AOT_UPDATE_GOLDEN").is_some();
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let records = golden_records();
    for record in &records {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let line = serde_json::to_string(record).unwrap() + "\n";
        if update {
            std::fs::write(&path, &line).unwrap();
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; a new kind needs its golden file (AOT_UPDATE_GOLDEN=1)",
                path.display()
            )
        });
        assert_eq!(
            line,
            golden,
            "the wire format of `{}` changed; bump WIRE_VERSION in src/journal/wire.rs with a conversion from \
             the old version, and keep the old golden folder (AOT_UPDATE_GOLDEN=1 writes the new one)",
            record.event.kind()
        );
        let read: Record = serde_json::from_str(&golden).unwrap();
        assert_eq!(&read, record);
    }
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        files,
        records.len(),
        "one golden file per kind, and no file for a kind that is gone"
    );
}

/// Today's golden records as a version before 8 wrote them: no worker or
/// validator records, no files a recovery kept.
fn golden_records_before_v8() -> Vec<Record> {
    golden_records()
        .into_iter()
        .filter(|r| !matches!(r.event.kind(), "tool_called" | "agent_ran" | "criterion_judged"))
        .map(|mut r| {
            if let Event::WorkspaceRecovered { kept, .. } = &mut r.event {
                kept.clear();
            }
            r
        })
        .collect()
}

/// The golden records of version 7 still read, into the same domain records.
#[test]
fn version_7_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v7");
    let mut read = 0;
    for record in &golden_records_before_v8() {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 7 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// Today's golden records as a version before 7 wrote them: no planner records.
fn golden_records_before_v7() -> Vec<Record> {
    golden_records_before_v8()
        .into_iter()
        .filter(|r| !matches!(r.event.kind(), "replanned" | "plan_refused" | "llm_called"))
        .collect()
}

/// The golden records of version 6 still read, into the same domain records.
#[test]
fn version_6_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v6");
    let mut read = 0;
    for record in &golden_records_before_v7() {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 6 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// Today's golden records as a version before 6 wrote them: no workspace
/// records, and failures without what their attempt had changed.
fn golden_records_before_v6() -> Vec<Record> {
    golden_records_before_v7()
        .into_iter()
        .filter(|r| !r.event.kind().starts_with("changes_") && r.event.kind() != "workspace_recovered")
        .map(|mut r| {
            if let Event::AttemptFailed { ended, .. } | Event::AtomFailed { ended, .. } = &mut r.event {
                ended.discarded = None;
            }
            r
        })
        .collect()
}

/// The golden records of version 5 still read, into the same domain records.
#[test]
fn version_5_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v5");
    let mut read = 0;
    for record in &golden_records_before_v6() {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 5 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// Today's golden records as a version before 5 wrote them: no refused
/// edits, and failures without exit code, signal or summary.
fn golden_records_before_v5() -> Vec<Record> {
    golden_records_before_v6()
        .into_iter()
        .filter(|r| !["edit_rejected", "blocks_overridden"].contains(&r.event.kind()))
        .map(|mut r| {
            if let Event::AttemptFailed { ended, .. } | Event::AtomFailed { ended, .. } = &mut r.event {
                *ended = Default::default();
            }
            r
        })
        .collect()
}

/// Today's golden records as a version before 4 wrote them: also, an
/// interrupted attempt had no `why`.
fn golden_records_before_v4() -> Vec<Record> {
    golden_records_before_v5()
        .into_iter()
        .map(|mut r| {
            if let Event::AttemptCancelled { why, .. } = &mut r.event {
                *why = None;
            }
            r
        })
        .collect()
}

/// The golden records of version 4 still read, into the same domain records.
#[test]
fn version_4_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v4");
    let mut read = 0;
    for record in &golden_records_before_v5() {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 4 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// The golden records of version 3 still read, into the same domain records.
#[test]
fn version_3_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v3");
    let mut read = 0;
    for record in &golden_records_before_v4() {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 3 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// The golden records of version 2 still read, into the same domain records.
#[test]
fn version_2_golden_records_still_read() {
    let dir = root().join("tests/fixtures/journal/v2");
    let records = golden_records_before_v4();
    let mut read = 0;
    for record in &records {
        let path = dir.join(format!("{}.jsonl", record.event.kind()));
        let Ok(text) = std::fs::read_to_string(&path) else {
            assert_eq!(
                record.event.kind(),
                "compacted",
                "only kinds newer than version 2 lack a file"
            );
            continue;
        };
        let old: Record = serde_json::from_str(&text).unwrap();
        assert_eq!(old.v, RECORD_VERSION, "upgraded on read");
        assert_eq!(&old, record, "version 2 `{}` reads as today's", record.event.kind());
        read += 1;
    }
    assert_eq!(read, std::fs::read_dir(&dir).unwrap().count());
}

/// The golden records of version 1 (written before the wire types existed)
/// still read, into the same domain records.
#[test]
fn version_1_golden_records_still_read() {
    let read = journal::read(&root().join("tests/fixtures/journal/v1.jsonl")).unwrap();
    let records: Vec<Record> = golden_records_before_v4()
        .into_iter()
        .filter(|r| r.event.kind() != "compacted")
        .collect();
    assert_eq!(read.records.len(), records.len());
    for (old, new) in read.records.iter().zip(&records) {
        assert_eq!(old, new, "version 1 `{}` reads as today's", new.event.kind());
    }
}

/// A journal written by the release before the wire types (a run whose
/// first patch leaves the base case failing, a flaky alternative, then the
/// second patch) replays into the state that release wrote, and its base-case
/// decision reads as one.
#[test]
fn a_journal_written_by_the_previous_release_replays() {
    let dir = root().join("tests/fixtures/journal/v1-release");
    let contents = journal::read(&dir.join("aot.yaml.journal.jsonl")).unwrap();
    assert!(
        contents.records.iter().all(|r| r.v == RECORD_VERSION),
        "upgraded on read"
    );
    let folded = journal::fold(&contents.records).expect("starts with a snapshot");
    let written = aot::state::document::read(&dir.join("aot.yaml")).unwrap().state;
    assert_eq!(folded.graph.atoms, written.graph.atoms);
    assert_eq!(folded.bindings, written.bindings);
    assert_eq!(folded.trail, written.trail);
    assert_eq!(folded.run.stop, written.run.stop);
    // That release listed every decision under `run.ggs.history`: read as the
    // count and the latest, the same as the journal's fold.
    assert_eq!(written.run.ggs.rounds, 2);
    assert_eq!(folded.run.ggs, written.run.ggs);
    let decisions: Vec<&aot::ggs::Decision> = contents
        .records
        .iter()
        .filter_map(|r| match &r.event {
            Event::GgsDecided { decision } => Some(&**decision),
            _ => None,
        })
        .collect();
    assert_eq!(decisions.len(), 2);
    assert!(
        decisions[0].base_case_failed && decisions[0].failed.is_empty(),
        "{:?}",
        decisions[0]
    );
    assert!(!decisions[1].base_case_failed);
    assert_eq!(decisions[1].failed, [aot::model::AtomId::from("flaky")]);
}

#[test]
fn a_torn_tail_is_reported_skipped_and_truncated_on_open() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal
        .append(at(0), one_of_each().into_iter().take(3).collect())
        .unwrap();
    drop(journal);
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(br#"{"v":1,"seq":4,"at":"2026-01-01T00:00:00.000Z","event":{"type":"iter"#)
        .unwrap();
    drop(file);

    let read = journal::read(&path).unwrap();
    assert_eq!(read.records.len(), 3);
    assert_eq!(read.torn, Some(TornTail { line: 4, bytes: 68 }));

    let (mut journal, contents) = Journal::open(&path).unwrap();
    assert_eq!(contents.torn.map(|t| t.line), Some(4));
    let appended = journal
        .append(at(1), vec![Event::IterationStarted { iteration: 7 }])
        .unwrap();
    assert_eq!(appended[0].seq, 4);
    let read = journal::read(&path).unwrap();
    assert_eq!(read.records.len(), 4);
    assert!(read.torn.is_none());
}

#[test]
fn a_complete_but_unterminated_last_line_is_also_torn() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal
        .append(at(0), vec![Event::IterationStarted { iteration: 1 }])
        .unwrap();
    drop(journal);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.trim_end()).unwrap();
    let read = journal::read(&path).unwrap();
    assert!(read.records.is_empty());
    assert_eq!(read.torn.map(|t| t.line), Some(1));
}

#[test]
fn a_corrupt_line_in_the_middle_is_an_error_naming_the_line() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    journal
        .append(at(0), vec![Event::IterationStarted { iteration: 1 }])
        .unwrap();
    drop(journal);
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"not json\n{}\n").unwrap();
    drop(file);
    let err = journal::read(&path).unwrap_err();
    assert!(matches!(err, JournalError::Corrupt { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("j.jsonl:2:"), "{err}");
}

#[test]
fn a_gap_in_sequence_numbers_is_detected() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let line = |seq: u64| {
        serde_json::to_string(&Record {
            v: 1,
            seq,
            at: at(0),
            event: Event::IterationStarted { iteration: 1 },
        })
        .unwrap()
            + "\n"
    };
    std::fs::write(&path, line(1) + &line(3)).unwrap();
    let err = journal::read(&path).unwrap_err();
    assert!(err.to_string().contains("sequence 3 follows 1"), "{err}");
}

#[test]
fn a_batch_is_one_group_with_consecutive_sequence_numbers() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let (mut journal, _) = Journal::open(&path).unwrap();
    let batch: Vec<Event> = (0..1000).map(|i| Event::IterationStarted { iteration: i }).collect();
    let records = journal.append(at(0), batch).unwrap();
    assert_eq!(records.first().map(|r| r.seq), Some(1));
    assert_eq!(records.last().map(|r| r.seq), Some(1000));
    let more = journal
        .append(at(1), vec![Event::RunStarted { pid: 1, yes: false }])
        .unwrap();
    assert_eq!(more[0].seq, 1001);
    assert_eq!(journal::read(&path).unwrap().records.len(), 1001);
}

#[test]
fn records_appended_by_another_handle_are_caught_up() {
    let env = TestEnv::new();
    let path = env.path("j.jsonl");
    let (mut mine, _) = Journal::open(&path).unwrap();
    mine.append(at(0), vec![Event::RunStarted { pid: 1, yes: false }])
        .unwrap();
    let (mut theirs, _) = Journal::open(&path).unwrap();
    theirs
        .append(at(1), vec![Event::IterationStarted { iteration: 1 }])
        .unwrap();
    let caught = mine.catch_up().unwrap();
    assert_eq!(caught.len(), 1);
    let next = mine
        .append(at(2), vec![Event::IterationStarted { iteration: 2 }])
        .unwrap();
    assert_eq!(next[0].seq, 3);
}

/// `aot journal compact` after a run: one record, which every reader folds
/// into the same file; the next run follows on from it.
#[test]
fn compacting_a_journal_keeps_what_every_command_shows() {
    let env = TestEnv::new();
    env.example("or-fallback.yaml");
    fn with<'a>(args: &[&'a str]) -> Vec<&'a str> {
        [&["--state", "or-fallback.yaml"][..], args].concat()
    }
    assert_eq!(env.aot_fixed_clock(&with(&["start"])).code, 0);
    let status_before = env.aot(&with(&["status"]));
    let journal_path = journal::path_for(&env.path("or-fallback.yaml"));
    let records_before = journal::read(&journal_path).unwrap().records;

    let out = env.aot(&with(&["journal", "compact"]));
    assert_eq!(out.code, 0, "{}", out.transcript());
    assert!(
        out.stdout
            .contains(&format!("{} records folded into one", records_before.len())),
        "{}",
        out.stdout
    );
    let records = journal::read(&journal_path).unwrap().records;
    assert_eq!(records.len(), 1);
    assert!(matches!(records[0].event, Event::Compacted { .. }));
    assert_eq!(records[0].seq, records_before.last().unwrap().seq);

    assert_eq!(env.aot(&with(&["status"])).stdout, status_before.stdout);
    let check = env.aot(&with(&["replay", "--check"]));
    assert_eq!(check.code, 0, "{}", check.transcript());
    let log = env.aot(&with(&["log"]));
    assert!(log.stdout.contains("journal compacted"), "{}", log.stdout);

    // Nothing left to fold; and --json says so.
    let again = env.aot(&with(&["--json", "journal", "compact"]));
    assert_eq!(again.code, 0, "{}", again.transcript());
    let json: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(json["compacted"], false);

    // A new run journals after the compacted record, without a gap.
    let restart = env.aot_fixed_clock(&with(&["start"]));
    assert_eq!(restart.code, 0, "{}", restart.transcript());
    let after = journal::read(&journal_path).unwrap().records;
    assert!(after.len() > 1);
    assert_eq!(after[1].seq, records[0].seq + 1);
}

#[test]
fn compacting_is_refused_while_a_loop_runs_on_the_file() {
    let env = TestEnv::new();
    env.example("single.yaml");
    let paths = aot::store::Paths::new(&env.path("single.yaml"));
    let _runner = aot::store::acquire_runner(&paths, 4242).unwrap();
    let out = env.aot(&["--state", "single.yaml", "journal", "compact"]);
    assert_eq!(out.code, 1, "{}", out.transcript());
    assert!(
        out.stderr.contains("already running") && out.stderr.contains("4242"),
        "{}",
        out.stderr
    );
}

/// A retry's context is the atom's last few failed attempts, however many
/// there were: the environment a worker gets it in has a size limit.
#[test]
fn the_correction_history_keeps_the_last_attempts_of_each_atom() {
    let records: Vec<Record> = std::iter::once(Event::snapshot(&small_state()))
        .chain((1..=20).map(|attempt| Event::AttemptFailed {
            atom: "build".into(),
            attempt,
            class: FailureClass::Logical,
            criterion: "run".parse().unwrap(),
            message: format!("exit 1: try {attempt}"),
            ended: Default::default(),
        }))
        .enumerate()
        .map(|(i, event)| Record {
            v: RECORD_VERSION,
            seq: i as u64 + 1,
            at: at(i as u64),
            event,
        })
        .collect();
    let history = aot::journal::History::of(&records);
    let kept: Vec<u32> = history.of_atom("build").iter().map(|r| r.attempt).collect();
    assert_eq!(kept, (13..=20).collect::<Vec<u32>>());
}

#[test]
fn a_record_of_a_newer_version_or_an_unknown_kind_says_upgrade_aot() {
    let env = TestEnv::new();
    let first = r#"{"v":3,"seq":1,"at":"2026-01-01T00:00:00Z","event":{"type":"run_paused"}}"#;
    for (second, says) in [
        (
            r#"{"v":99,"seq":2,"at":"2026-01-01T00:00:00Z","event":{"type":"run_paused"}}"#,
            "record version 99 is newer than this aot reads",
        ),
        (
            r#"{"v":3,"seq":2,"at":"2026-01-01T00:00:00Z","event":{"type":"atom_teleported","atom":"a"}}"#,
            "record kind `atom_teleported` is not one this aot knows",
        ),
        (
            r#"{"v":2,"seq":2,"at":"2026-01-01T00:00:00Z","event":{"type":"atom_teleported"}}"#,
            "upgrade aot",
        ),
    ] {
        let path = env.write("j.jsonl", &format!("{first}\n{second}\n"));
        let err = journal::read(&path).unwrap_err().to_string();
        assert!(err.contains(says) && err.contains(":2:"), "{err}");
    }
}
