//! Store benchmarks: save and load of a 10,000-atom state file (target: save
//! ≤ 50 ms), and journal append throughput with group commit (target ≥ 50,000
//! events/s). Run with `cargo bench --bench store`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use aot::journal::Journal;
use aot::journal::event::Event;
use aot::model::AtomId;
use aot::model::time::{SystemClock, Timestamp};
use aot::state::document::{self, Format};
use aot::state::{Atom, AtomStatus, Binding, Objective, StateFile};
use aot::store::{Store, write_atomic};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use indexmap::IndexMap;

/// A 10,000-atom graph: each atom depends on up to three earlier ones, every
/// tenth is an OR over the next two, half are solved with a binding.
fn big_state(n: usize) -> StateFile {
    let mut atoms = IndexMap::new();
    let mut bindings = IndexMap::new();
    for i in 0..n {
        let id = AtomId::from(format!("atom-{i:05}"));
        let mut atom = if i % 10 == 0 && i + 2 < n {
            Atom {
                or: Some(vec![
                    format!("atom-{:05}", i + 1).into(),
                    format!("atom-{:05}", i + 2).into(),
                ]),
                ..Atom::default()
            }
        } else {
            Atom::command(format!("./build.sh --part {i} && echo 'summary: part {i} built'"))
        };
        if atom.or.is_none() {
            atom.deps = (1..=3)
                .filter(|d| i >= 10 * d)
                .map(|d| AtomId::from(format!("atom-{:05}", i - 10 * d + 3)))
                .collect();
            atom.check = vec![format!("test -f out/{i}.o")];
            if i % 2 == 0 {
                atom.status = AtomStatus::Solved;
                atom.attempts = 1;
                bindings.insert(
                    id.clone(),
                    Binding {
                        summary: format!("part {i} built"),
                        output_tail: "compiling...\nfinished in 0.4s".into(),
                        artifacts: vec![format!("out/{i}.o")],
                        at: Timestamp::from_millis(1_767_225_600_000 + i as u64),
                        attempt: 1,
                        changes: None,
                    },
                );
            }
        }
        atoms.insert(id, atom);
    }
    let objective = Objective {
        goal: Some("build everything".into()),
        ..Objective::default()
    };
    let mut state = StateFile::new(objective, atoms);
    state.bindings = bindings;
    state
}

fn save_and_load(c: &mut Criterion) {
    let state = big_state(10_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    let text = document::to_text(&state, Format::Yaml, "").unwrap();
    write_atomic(&path, text.as_bytes()).unwrap();
    document::read(&path).expect("the benchmark state is valid");
    eprintln!("10,000-atom state file: {:.1} MiB", text.len() as f64 / 1048576.0);

    let mut group = c.benchmark_group("state_10k_atoms");
    group.sample_size(20).measurement_time(Duration::from_secs(8));
    group.bench_function("serialize", |b| {
        b.iter(|| document::to_text(black_box(&state), Format::Yaml, "").unwrap())
    });
    group.bench_function("save (serialize + atomic replace with fsync)", |b| {
        b.iter(|| {
            let text = document::to_text(black_box(&state), Format::Yaml, "").unwrap();
            write_atomic(&path, text.as_bytes()).unwrap();
        })
    });
    group.bench_function("load (parse + validate)", |b| {
        b.iter(|| document::read(black_box(&path)).unwrap())
    });

    // A full commit: catch up the journal, check the file for hand edits, append, save.
    let mut store = Store::new(&path, Arc::new(SystemClock));
    let (mut current, _) = store.open().unwrap();
    group.bench_function("commit (journal + edit check + save)", |b| {
        b.iter(|| {
            store
                .commit(&mut current, vec![Event::IterationStarted { iteration: 1 }])
                .unwrap()
        })
    });
    group.finish();
}

fn journal_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("journal_append");
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    for batch in [1usize, 64, 512] {
        let path = dir.path().join(format!("j{batch}.jsonl"));
        let (mut journal, _) = Journal::open(&path).unwrap();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(format!("batch {batch}, fsync per batch"), |b| {
            b.iter_batched(
                || {
                    (0..batch)
                        .map(|i| Event::AtomStarted {
                            atom: format!("atom-{i:05}").into(),
                            attempt: 1,
                        })
                        .collect::<Vec<_>>()
                },
                |events| journal.append(Timestamp::now(), events).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

/// Files of about 1 MB built to make validation slow (issue 12): dangling
/// dependencies on one line, bad templates, a long unknown name among many
/// atoms. Parse, validate and render the report, as `aot validate` does.
fn validate_hostile(c: &mut Criterion) {
    let head = r#"{"version":1,"objective":{"goal":"g","background_intent":"b","deliverables":"d","definition_of_done":"x","base_case":{"command":"true"}},"graph":{"atoms":"#;
    let deps: Vec<String> = (0..70_000).map(|i| format!("\"missing{i}\"")).collect();
    let refs: Vec<String> = (0..35_000)
        .map(|i| format!("{{{{bindings.nope{i}.summary}}}}"))
        .collect();
    let many: Vec<String> = (0..20_000).map(|i| format!(r#""x{i}":{{"run":"true"}}"#)).collect();
    let files = [
        (
            "dangling deps",
            format!(r#"{head}{{"a":{{"run":"true","deps":[{}]}}}}}}}}"#, deps.join(",")),
        ),
        (
            "bad templates",
            format!(r#"{head}{{"a":{{"run":"{}"}}}}}}}}"#, refs.join(" ")),
        ),
        (
            "long unknown name",
            format!(
                r#"{head}{{{},"a":{{"run":"true","deps":["{}"]}}}}}}}}"#,
                many.join(","),
                "z".repeat(500_000)
            ),
        ),
    ];
    let mut group = c.benchmark_group("validate_1mb");
    group.sample_size(10);
    for (name, text) in &files {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(*name, |b| {
            b.iter(|| {
                let report = document::parse("bench.yaml", text, Format::Yaml).expect_err("invalid");
                report.render(false).len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, save_and_load, journal_append, validate_hostile);
criterion_main!(benches);
