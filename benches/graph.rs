//! Work-graph benchmark: drive a 100,000-atom random AND/OR DAG from start to
//! fully solved — every atom ready → running → solved, plus 1,000 backtracks —
//! folding every event into both the state and the graph (target ≤ 1 s).
//! Run with `cargo bench --bench graph`.

use std::time::{Duration, Instant};

use aot::graph::{FileOrder, Recovery, WorkGraph};
use aot::journal::event::{Event, Record};
use aot::model::AtomId;
use aot::model::time::Timestamp;
use aot::state::{Atom, Binding, FailureClass, Objective, StateFile};
use criterion::{Criterion, criterion_group, criterion_main};
use indexmap::IndexMap;

const ATOMS: usize = 100_000;
const ORS: usize = 1_000;

/// Deterministic pseudo-random numbers (xorshift), so every run drives the same graph.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// 100,000 atoms; each depends on up to three atoms among the 1,000 before it.
/// Every 97th position is an OR over two fresh alternatives whose first one fails.
fn big_graph() -> (StateFile, Vec<AtomId>) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut atoms = IndexMap::with_capacity(ATOMS);
    let mut doomed = Vec::new();
    let mut i = 0;
    while atoms.len() < ATOMS {
        if i % 97 == 96 && doomed.len() < ORS {
            let (bad, good) = (AtomId::from(format!("a{i}-bad")), AtomId::from(format!("a{i}-good")));
            atoms.insert(bad.clone(), Atom::command("false"));
            atoms.insert(good.clone(), Atom::command("true"));
            atoms.insert(
                AtomId::from(format!("a{i}")),
                Atom {
                    or: Some(vec![bad.clone(), good]),
                    ..Atom::default()
                },
            );
            doomed.push(bad);
        } else {
            let mut atom = Atom::command("true");
            if i > 0 {
                for _ in 0..=rng.below(3) {
                    let j = i - 1 - rng.below(i.min(1000));
                    let dep = AtomId::from(format!("a{j}"));
                    if atoms.contains_key(dep.as_str()) && !atom.deps.contains(&dep) {
                        atom.deps.push(dep);
                    }
                }
            }
            atoms.insert(AtomId::from(format!("a{i}")), atom);
        }
        i += 1;
    }
    (StateFile::new(Objective::default(), atoms), doomed)
}

/// Drives the graph to the end; returns (events, backtracks).
fn drive(mut state: StateFile, doomed: &std::collections::HashSet<AtomId>) -> (u64, u64) {
    let mut graph = WorkGraph::new(&state);
    let mut seq = 0u64;
    let mut backtracks = 0u64;
    let mut apply = |state: &mut StateFile, graph: &mut WorkGraph, events: Vec<Event>| {
        for event in events {
            seq += 1;
            let record = Record {
                v: 1,
                seq,
                at: Timestamp::from_millis(seq),
                event,
            };
            aot::journal::fold::apply_with(state, &mut [&mut *graph], &record);
        }
    };
    let binding = Binding {
        summary: "ok".into(),
        output_tail: String::new(),
        artifacts: Vec::new(),
        at: Timestamp::from_millis(0),
        attempt: 1,
        changes: None,
    };
    loop {
        let choice = graph.choice_points().next().map(String::from);
        if let Some(group) = choice {
            let events = graph.choose(&group, &FileOrder, &state.bindings);
            apply(&mut state, &mut graph, events);
            continue;
        }
        let next = graph.ready().next().map(AtomId::from);
        let Some(atom) = next else { break };
        apply(
            &mut state,
            &mut graph,
            vec![Event::AtomStarted {
                atom: atom.clone(),
                attempt: 1,
            }],
        );
        if doomed.contains(&atom) {
            let failed = Event::AtomFailed {
                atom: atom.clone(),
                class: FailureClass::Logical,
                criterion: "run".parse().unwrap(),
                message: "exit 1".into(),
                ended: Default::default(),
            };
            apply(&mut state, &mut graph, vec![failed]);
            match graph.recover(&atom, FailureClass::Logical, &FileOrder, &state.bindings) {
                Recovery::Backtrack { events } => {
                    backtracks += 1;
                    apply(&mut state, &mut graph, events);
                }
                Recovery::Exhausted { .. } => panic!("the benchmark graph always has a good alternative"),
            }
        } else {
            let events = graph.solve(&atom, binding.clone());
            apply(&mut state, &mut graph, events);
        }
    }
    assert!(graph.all_solved(), "the drive must end with the graph solved");
    (seq, backtracks)
}

fn bench(c: &mut Criterion) {
    let (state, doomed) = big_graph();
    let doomed: std::collections::HashSet<AtomId> = doomed.into_iter().collect();
    let start = Instant::now();
    let (events, backtracks) = drive(state.clone(), &doomed);
    eprintln!(
        "{} atoms, {events} events, {backtracks} backtracks: one drive took {:?}",
        state.graph.atoms.len(),
        start.elapsed()
    );
    assert_eq!(backtracks, ORS as u64);
    let mut group = c.benchmark_group("graph_100k");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    group.bench_function("build WorkGraph", |b| b.iter(|| WorkGraph::new(&state)));
    group.bench_function("drive to solved with 1,000 backtracks", |b| {
        b.iter_batched(
            || state.clone(),
            |s| drive(s, &doomed),
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
