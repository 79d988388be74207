//! The four readers, each driven past parsing to what aot does next with
//! what it read, and their seed corpora.
//!
//! Besides "no panic", the state and plan targets check one property: a
//! file aot accepts is written back (`to_text`) as text it reads again to
//! the same state — the runner rewrites the file on every save, so a state
//! that does not survive the trip would lose work.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use aot::graph::WorkGraph;
use aot::journal;
use aot::memory::{self, Loaded, Potentials};
use aot::model::time::Timestamp;
use aot::state::StateFile;
use aot::state::diag::Diagnostics;
use aot::state::document::{self, Format};

pub struct Target {
    pub name: &'static str,
    pub seeds: Vec<Vec<u8>>,
    /// Reads one input; returns its outcome's fingerprint.
    pub run: fn(&[u8]) -> u64,
}

pub fn all(root: &Path) -> Vec<Target> {
    // The alias bomb is left out: each of its mutations costs the parser's
    // whole budget (0.4 s in a release build), crowding out everything else;
    // its own test keeps it.
    let states: Vec<Vec<u8>> = files(
        root,
        &["state", "tests/fixtures/bad", "tests/fixtures/journal/v1-release"],
        &["yaml", "json"],
    )
    .into_iter()
    .filter(|seed| !seed.windows(4).any(|w| w == b"*l5,"))
    .collect();
    let journals = files(
        root,
        &[
            "tests/fixtures/journal",
            "tests/fixtures/journal/v1-release",
            "tests/fixtures/journal/v2",
            "tests/fixtures/journal/v3",
            "tests/fixtures/journal/v4",
        ],
        &["jsonl"],
    );
    let memories = files(root, &["tests/fixtures/memory"], &["jsonl"]);
    let plans = states.iter().flat_map(|s| plans_of(s)).collect();
    vec![
        Target {
            name: "state",
            seeds: states,
            run: state,
        },
        Target {
            name: "plan",
            seeds: plans,
            run: plan,
        },
        Target {
            name: "journal",
            seeds: journals,
            run: journal,
        },
        Target {
            name: "memory",
            seeds: memories,
            run: memory,
        },
    ]
}

/// The files with one of `extensions` directly in each of `dirs`, sorted.
fn files(root: &Path, dirs: &[&str], extensions: &[&str]) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| std::fs::read_dir(root.join(dir)).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| p.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)))
        .collect();
    paths.sort();
    let seeds: Vec<Vec<u8>> = paths.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    assert!(!seeds.is_empty(), "no seed files in {dirs:?} under {}", root.display());
    seeds
}

/// Plan files made from a state file: its `graph:` section as YAML, and
/// its atoms as JSON when it reads.
fn plans_of(state: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(state);
    let mut plans = Vec::new();
    if let Some(at) = text.find("\ngraph:\n") {
        let plan: Vec<&str> = text[at + 8..]
            .lines()
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .map(|l| l.strip_prefix("  ").unwrap_or(l))
            .collect();
        plans.push(plan.join("\n").into_bytes());
    }
    if let Ok(doc) = document::from_bytes(Path::new("seed.yaml"), state, 0)
        && let Ok(json) = serde_json::to_vec_pretty(&serde_json::json!({ "atoms": doc.state.graph.atoms }))
    {
        plans.push(json);
    }
    plans
}

fn path_for(input: &[u8], stem: &str) -> PathBuf {
    let json = input.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    PathBuf::from(format!("{stem}.{}", if json { "json" } else { "yaml" }))
}

/// The fingerprint of an outcome: its kind and text with numbers and quoted
/// names blanked (so "line 3" and "line 4", or unknown field `a` and `b`,
/// are one outcome).
fn outcome(kind: &str, text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    kind.hash(&mut hasher);
    let mut quoted = None;
    for c in text.chars().take(100) {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), _) => {}
            (None, '`' | '"' | '\'') => {
                quoted = Some(c);
                '_'.hash(&mut hasher);
            }
            (None, c) if c.is_ascii_digit() => '#'.hash(&mut hasher),
            (None, c) => c.hash(&mut hasher),
        }
    }
    hasher.finish()
}

/// A count in buckets of powers of two.
fn bucket(n: usize) -> u32 {
    usize::BITS - n.leading_zeros()
}

fn refused(diagnostics: &Diagnostics) -> u64 {
    // Rendering quotes the source around each problem: it runs too.
    let rendered = diagnostics.render(false);
    assert!(!rendered.is_empty(), "an empty report");
    let first = diagnostics.errors.first().map_or("", |d| d.message.as_str());
    outcome(&format!("refused {}", bucket(diagnostics.errors.len())), first)
}

/// What the runner does with a state it accepted: build the work graph,
/// bound the loop, and write it back — which must read again the same.
fn accepted(state: &StateFile, format: Format, header: &str) -> u64 {
    let graph = WorkGraph::new(state);
    let ready = graph.ready().count();
    let _ = (graph.variant(), graph.remaining_bound(), graph.all_solved());
    let text = match document::to_text(state, format, header) {
        Ok(text) => text,
        Err(e) => panic!("an accepted state cannot be written: {e}"),
    };
    match document::parse("written", &text, format) {
        Ok(again) => assert!(again == *state, "an accepted state reads back different:\n{text}"),
        Err(d) => panic!("an accepted state, written, is refused: {}\n{text}", d.render(false)),
    }
    outcome(
        &format!(
            "ok {} {} {}",
            bucket(state.graph.atoms.len()),
            bucket(ready),
            bucket(state.bindings.len())
        ),
        "",
    )
}

fn state(input: &[u8]) -> u64 {
    let path = path_for(input, "fuzz");
    match document::from_bytes(&path, input, 0) {
        Ok(doc) => accepted(&doc.state, Format::of(&path), &doc.header),
        Err(d) => refused(&d),
    }
}

/// A valid state without atoms, for a plan's atoms to go into (as `aot align --plan` does).
fn base() -> &'static StateFile {
    static BASE: OnceLock<StateFile> = OnceLock::new();
    BASE.get_or_init(|| {
        let text = "version: 1\nobjective:\n  goal: g\n  base_case:\n    command: 'true'\ngraph:\n  atoms: {}\n";
        match document::parse("base", text, Format::Yaml) {
            Ok(state) => state,
            Err(d) => panic!("the base state is refused: {}", d.render(false)),
        }
    })
}

fn plan(input: &[u8]) -> u64 {
    let path = path_for(input, "plan");
    match document::plan_from_bytes(&path, input) {
        Ok(plan) => {
            let mut state = base().clone();
            state.graph.atoms = plan.atoms;
            match document::check(&state, "plan") {
                Ok(()) => accepted(&state, Format::Yaml, ""),
                Err(d) => refused(&d),
            }
        }
        Err(d) => refused(&d),
    }
}

fn journal(input: &[u8]) -> u64 {
    match journal::from_bytes(Path::new("fuzz.journal.jsonl"), input) {
        Ok(contents) => {
            let folded = journal::fold(&contents.records);
            if let Some(state) = &folded {
                let _ = WorkGraph::new(state).ready().count();
                if let Err(e) = document::to_text(state, Format::Yaml, "") {
                    panic!("a folded journal cannot be written: {e}");
                }
            }
            outcome(
                &format!(
                    "ok {} {} {}",
                    bucket(contents.records.len()),
                    contents.torn.is_some(),
                    folded.is_some()
                ),
                "",
            )
        }
        Err(e) => outcome("refused", &e.to_string()),
    }
}

fn memory(input: &[u8]) -> u64 {
    let loaded = Loaded::from_bytes(input);
    let memory = &loaded.memory;
    let now = Timestamp::from_millis(1_800_000_000_000);
    let mut actions = 0;
    for ((space, entity), megrams) in memory.clusters() {
        let potentials = Potentials::of(megrams.iter().copied(), now);
        let _ = (potentials.action(), memory.query(space, entity, now));
        actions += 1;
    }
    let mut next = 0;
    let dream = memory::dream(memory, now, || {
        next += 1;
        format!("d-{next}")
    });
    outcome(
        &format!(
            "ok {} {} {} {} {}",
            bucket(memory.len()),
            bucket(loaded.skipped.len()),
            bucket(actions),
            bucket(dream.forget.len() + dream.demote.len()),
            bucket(dream.consolidate.len())
        ),
        "",
    )
}
