//! Child-process modes for tests that need real, separate processes: the parent
//! re-runs this test binary with `AOT_TEST_CHILD` set and only `child_entry`
//! selected.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use aot::journal::event::Event;
use aot::model::time::SystemClock;
use aot::state::{Binding, Control};
use aot::store::Store;

/// Starts this test binary as a child in `mode` on `state`.
pub fn spawn(mode: &str, state: &std::path::Path, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "child::child_entry",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env("AOT_TEST_CHILD", mode)
    .env("AOT_TEST_STATE", state)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Waits until the child prints `ready` on stdout.
pub fn wait_ready(child: &mut Child) {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "child exited before it was ready"
        );
        if line.trim() == "ready" {
            return;
        }
    }
}

#[test]
#[ignore = "runs only as a child process of another test"]
fn child_entry() {
    let Ok(mode) = std::env::var("AOT_TEST_CHILD") else {
        return;
    };
    let state = PathBuf::from(std::env::var("AOT_TEST_STATE").unwrap());
    let mut store = Store::new(&state, Arc::new(SystemClock));
    match mode.as_str() {
        // Commit event batches and save, forever, until killed; with
        // AOT_TEST_COMPACT_EVERY=n, compact the journal after every n commits.
        "churn" => {
            let compact_every: u64 = std::env::var("AOT_TEST_COMPACT_EVERY")
                .ok()
                .map_or(0, |n| n.parse().unwrap());
            let (mut current, _) = store.open().unwrap();
            println!("ready");
            std::io::stdout().flush().unwrap();
            let atoms: Vec<aot::model::AtomId> = current.graph.atoms.keys().cloned().collect();
            for i in 0u64.. {
                let atom = atoms[(i as usize) % atoms.len()].clone();
                let events = vec![
                    Event::AtomStarted {
                        atom: atom.clone(),
                        attempt: 1,
                    },
                    Event::AtomSolved {
                        atom: atom.clone(),
                        binding: Binding {
                            summary: format!("solved in round {i}"),
                            output_tail: "x".repeat((i % 300) as usize),
                            artifacts: Vec::new(),
                            at: aot::model::time::Timestamp::now(),
                            attempt: 1,
                            changes: None,
                        },
                    },
                    Event::AtomsReset { atoms: vec![atom] },
                    Event::IterationStarted {
                        iteration: (i % 1000) as u32,
                    },
                ];
                store.commit(&mut current, events).unwrap();
                if compact_every > 0 && i % compact_every == 0 {
                    store.compact(&mut current).unwrap();
                }
            }
        }
        // Append Megrams and run the Dreamer, forever, until killed. Each
        // round appends one Megram a Dreamer forgets (400 days old) and one it
        // keeps, says `kept <id>` once the append returned, then compacts.
        "dreams" => {
            use aot::memory::{Entry, Level, Megram, MemoryFile};
            use aot::model::time::Timestamp;
            let file = MemoryFile::new(&state);
            println!("ready");
            std::io::stdout().flush().unwrap();
            let megram = |id: String, t: Timestamp, i: u64| Megram {
                id,
                level: Level::M,
                t,
                t_recalled: None,
                space: format!("tool-{}", i % 5),
                entity: "target".into(),
                content: "y".repeat((i % 300) as usize),
                state: "success".into(),
                f: 0.8,
                sigma: 1.0,
                k: 0.05,
            };
            let mut next_id = 0;
            for i in 0u64.. {
                let now = Timestamp::now();
                let old = Timestamp::from_millis(now.as_millis() - 400 * 86_400_000);
                file.append(&[
                    Entry::megram(megram(format!("old-{i}"), old, i)),
                    Entry::megram(megram(format!("keep-{i}"), now, i)),
                ])
                .unwrap();
                println!("kept keep-{i}");
                std::io::stdout().flush().unwrap();
                let loaded = file.load().unwrap();
                let plan = aot::memory::dream(&loaded.memory, now, || {
                    next_id += 1;
                    format!("c-{}-{next_id}", std::process::id())
                });
                file.apply_dream(&plan, now).unwrap();
            }
        }
        // Read-modify-write a counter N times through the short lock.
        "increment" => {
            let rounds: u32 = std::env::var("AOT_TEST_ROUNDS").unwrap().parse().unwrap();
            println!("ready");
            std::io::stdout().flush().unwrap();
            for _ in 0..rounds {
                store
                    .transact(|s| {
                        let n: u64 = s.control.stop_reason.as_deref().unwrap_or("0").parse().unwrap();
                        let control = Control {
                            stop_reason: Some((n + 1).to_string()),
                            ..s.control.clone()
                        };
                        Ok::<_, String>((vec![Event::ControlSet { control }], ()))
                    })
                    .unwrap()
                    .unwrap();
            }
        }
        // Hold the runner lock until killed.
        "runner" => {
            let _lock = aot::store::acquire_runner(store.paths(), std::process::id()).unwrap();
            println!("ready");
            std::io::stdout().flush().unwrap();
            loop {
                std::thread::park();
            }
        }
        // Append N Megrams to the memory at AOT_TEST_STATE, one write each.
        "megrams" => {
            let rounds: u32 = std::env::var("AOT_TEST_ROUNDS").unwrap().parse().unwrap();
            let prefix = std::env::var("AOT_TEST_PREFIX").unwrap();
            let file = aot::memory::MemoryFile::new(&state);
            println!("ready");
            std::io::stdout().flush().unwrap();
            for i in 0..rounds {
                let megram = aot::memory::Megram {
                    id: format!("{prefix}-{i}"),
                    level: aot::memory::Level::M,
                    t: aot::model::time::Timestamp::now(),
                    t_recalled: None,
                    space: format!("tool-{}", i % 7),
                    entity: prefix.clone(),
                    content: "x".repeat((i % 200) as usize),
                    state: "success".into(),
                    f: 0.8,
                    sigma: 1.0,
                    k: 0.05,
                };
                file.append(&[aot::memory::Entry::megram(megram)]).unwrap();
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}
