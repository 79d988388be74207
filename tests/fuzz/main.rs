//! The fuzzer: mutated inputs for the four readers a user, a model or a
//! crash can hand aot — the state file, the plan file, the journal and the
//! memory — each run in process under three watches:
//!
//! - a panic anywhere (also in a thread whose panic the reader swallows);
//! - a hang: one input running longer than [`hang_limit`];
//! - memory: one allocation, or everything live, over [`MEMORY_LIMIT`].
//!
//! It runs on stable Rust with no instrumentation, so it guides itself by
//! outcomes instead of coverage: an input whose result (an error message with
//! its numbers blanked, or the shape of what was read) has not been seen
//! joins the corpus. The seed corpus is `state/` and `tests/fixtures/`.
//!
//! `cargo test --test fuzz` runs each target for a few seconds; the
//! environment sets a longer run (see `docs/architecture.md#fuzzing`):
//!
//! - `AOT_FUZZ_SECS` — seconds per target (default 3);
//! - `AOT_FUZZ_INPUTS` — stop a target after this many inputs;
//! - `AOT_FUZZ_SEED` — the first worker's seed (printed by every run);
//! - `AOT_FUZZ_THREADS` — workers per target (default: the cores);
//! - `AOT_FUZZ_INPUT` — replay one kept input instead;
//! - `AOT_FUZZ_TRACE` — write each input to the findings folder first;
//! - arguments — run only the targets whose names contain one of them.
//!
//! A finding is written to `target/fuzz-findings/` and fails the run.

mod alloc;
mod mutate;
mod targets;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng, rngs::StdRng};

use crate::targets::Target;

#[global_allocator]
static ALLOC: alloc::Tracking = alloc::Tracking;

/// No allocation, and no total of live allocations, may pass this.
pub const MEMORY_LIMIT: usize = 512 * 1024 * 1024;

/// The longest an input may take. A debug build runs the readers ten times
/// slower, so it is allowed ten times longer; the release run holds to 1 s.
fn hang_limit() -> Duration {
    if cfg!(debug_assertions) {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(1)
    }
}

/// The stack a worker gets: 2 MiB, what std's threads get (the runner's own
/// threads get 8 MiB). Parsing the deepest nesting the reader admits takes
/// under 512 KiB in a release build; a debug build's frames are several
/// times larger, so its workers get 8 MiB.
const WORKER_STACK: usize = if cfg!(debug_assertions) { 8 << 20 } else { 2 << 20 };

/// Panics seen by the hook, counted so a swallowed one is still caught.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

fn main() {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let targets: Vec<Target> = targets::all(root)
        .into_iter()
        .filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str())))
        .collect();
    if targets.is_empty() {
        return;
    }
    if let Ok(file) = std::env::var("AOT_FUZZ_INPUT") {
        // Replays one kept input, on a worker-sized stack, panicking loudly.
        let input = std::fs::read(&file).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        for target in &targets {
            let run = target.run;
            let input = input.clone();
            let ran = std::thread::Builder::new()
                .stack_size(WORKER_STACK)
                .spawn(move || run(&input))
                .and_then(|h| h.join().map_err(|_| std::io::Error::other("panicked")));
            println!(
                "fuzz {}: {file}: {}",
                target.name,
                if ran.is_ok() { "ok" } else { "PANIC" }
            );
        }
        return;
    }
    let secs: u64 = env_number("AOT_FUZZ_SECS").unwrap_or(3);
    let inputs: Option<u64> = env_number("AOT_FUZZ_INPUTS");
    let seed: u64 = env_number("AOT_FUZZ_SEED").unwrap_or_else(|| rand::rng().random());
    let threads = env_number("AOT_FUZZ_THREADS")
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    println!(
        "fuzz: seed {seed}, {threads} worker(s), {secs} s{} per target, hang limit {} ms, memory limit {} MiB",
        inputs.map(|n| format!(" or {n} inputs")).unwrap_or_default(),
        hang_limit().as_millis(),
        MEMORY_LIMIT >> 20
    );
    std::panic::set_hook(Box::new(|info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = info.to_string();
        }
    }));

    let findings = root.join("target").join("fuzz-findings");
    let mut failed = false;
    let mut total = 0;
    for target in &targets {
        alloc::reset_biggest();
        let report = run_target(target, seed, threads, Duration::from_secs(secs), inputs, &findings);
        total += report.inputs;
        println!(
            "fuzz {:<8} {:>9} inputs  {:>6} outcomes  corpus {:>4}  slowest {:>5} ms  biggest allocation {:>7} KiB  panics {}",
            target.name,
            report.inputs,
            report.outcomes,
            report.corpus,
            report.slowest.as_millis(),
            alloc::biggest() >> 10,
            report.panics.len()
        );
        for panic in &report.panics {
            println!("  PANIC, input kept at {}", panic.display());
            failed = true;
        }
    }
    println!("fuzz: {total} inputs, peak live memory {} MiB", alloc::peak() >> 20);
    if failed {
        eprintln!(
            "fuzz: findings above; last panic: {}",
            LAST_PANIC.lock().map(|p| p.clone()).unwrap_or_default()
        );
        std::process::exit(1);
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.trim().replace('_', "").parse() {
        Ok(n) => Some(n),
        Err(_) => {
            eprintln!("fuzz: {name}={value} is not a whole number");
            std::process::exit(2);
        }
    }
}

struct Report {
    inputs: u64,
    outcomes: usize,
    corpus: usize,
    slowest: Duration,
    panics: Vec<PathBuf>,
}

/// What one worker is doing, for the watchdog.
#[derive(Default)]
struct Current {
    /// Nanoseconds since the target's start when the current input began; 0 when idle.
    started: AtomicU64,
    input: Mutex<Vec<u8>>,
}

/// How one input ended.
enum Ran {
    /// Cleanly, with this outcome.
    Outcome(u64),
    /// In a panic; the input was kept at the path.
    Panicked(PathBuf),
}

fn run_target(
    target: &Target,
    seed: u64,
    threads: usize,
    budget: Duration,
    inputs: Option<u64>,
    findings: &Path,
) -> Report {
    let epoch = Instant::now();
    let deadline = epoch + budget;
    let count = AtomicU64::new(0);
    let seen: Mutex<HashSet<u64>> = Mutex::new(HashSet::new());
    let corpus: Mutex<Vec<Vec<u8>>> = Mutex::new(target.seeds.clone());
    let slowest = Mutex::new(Duration::ZERO);
    let panics = Mutex::new(Vec::new());
    let workers: Vec<Current> = (0..threads.max(1)).map(|_| Current::default()).collect();
    let done = AtomicBool::new(false);
    let found = AtomicBool::new(false);
    let dictionary = mutate::dictionary(&target.seeds);

    std::thread::scope(|scope| {
        scope.spawn(|| watchdog(target.name, &workers, epoch, &done, findings));
        // Seeds first, unmutated.
        for input in &target.seeds {
            match run_one(target, input, &workers[0], epoch, findings) {
                Ran::Outcome(outcome) => {
                    lock(&seen).insert(outcome);
                }
                Ran::Panicked(path) => lock(&panics).push(path),
            }
        }
        let handles: Vec<_> = workers
            .iter()
            .enumerate()
            .map(|(n, current)| {
                let (count, seen, corpus, slowest, panics, dictionary, found) =
                    (&count, &seen, &corpus, &slowest, &panics, &dictionary, &found);
                std::thread::Builder::new()
                    .stack_size(WORKER_STACK)
                    .spawn_scoped(scope, move || {
                        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(n as u64));
                        loop {
                            let n = count.fetch_add(1, Ordering::Relaxed);
                            if inputs.is_some_and(|max| n >= max)
                                || Instant::now() >= deadline
                                || found.load(Ordering::SeqCst)
                            {
                                count.fetch_sub(1, Ordering::Relaxed);
                                break;
                            }
                            let (base, other) = {
                                let corpus = lock(corpus);
                                let base = corpus[rng.random_range(0..corpus.len())].clone();
                                let other = corpus[rng.random_range(0..corpus.len())].clone();
                                (base, other)
                            };
                            let input = mutate::mutate(&mut rng, &base, &other, dictionary);
                            let started = Instant::now();
                            let outcome = match run_one(target, &input, current, epoch, findings) {
                                Ran::Outcome(outcome) => outcome,
                                Ran::Panicked(path) => {
                                    // Like libFuzzer, the first finding ends the target.
                                    lock(panics).push(path);
                                    found.store(true, Ordering::SeqCst);
                                    break;
                                }
                            };
                            let took = started.elapsed();
                            {
                                let mut slowest = lock(slowest);
                                *slowest = (*slowest).max(took);
                            }
                            if lock(seen).insert(outcome) {
                                let mut corpus = lock(corpus);
                                if corpus.len() < CORPUS_MAX {
                                    corpus.push(input);
                                } else {
                                    let at = rng.random_range(target.seeds.len()..corpus.len());
                                    corpus[at] = input;
                                }
                            }
                        }
                    })
            })
            .collect();
        for handle in handles {
            match handle {
                Ok(handle) => {
                    let _ = handle.join();
                }
                Err(e) => panic!("cannot start a fuzz worker: {e}"),
            }
        }
        done.store(true, Ordering::SeqCst);
    });

    Report {
        inputs: count.load(Ordering::Relaxed),
        outcomes: lock(&seen).len(),
        corpus: lock(&corpus).len(),
        slowest: *lock(&slowest),
        panics: panics.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

/// The most inputs a target's corpus keeps; past it a new one replaces a
/// random non-seed entry.
const CORPUS_MAX: usize = 4096;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn run_one(target: &Target, input: &[u8], current: &Current, epoch: Instant, findings: &Path) -> Ran {
    input.clone_into(&mut lock(&current.input));
    if std::env::var_os("AOT_FUZZ_TRACE").is_some() {
        let _ = std::fs::create_dir_all(findings);
        let _ = std::fs::write(
            findings.join(format!("{}-current-{:?}", target.name, std::thread::current().id())),
            input,
        );
    }
    let before = PANICS.load(Ordering::SeqCst);
    current
        .started
        .store(epoch.elapsed().as_nanos() as u64 + 1, Ordering::SeqCst);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (target.run)(input)));
    current.started.store(0, Ordering::SeqCst);
    match result {
        Ok(outcome) if PANICS.load(Ordering::SeqCst) == before => Ran::Outcome(outcome),
        _ => Ran::Panicked(keep(findings, target.name, "panic", input)),
    }
}

/// Writes a finding's input where a developer finds it; returns its path.
fn keep(findings: &Path, target: &str, what: &str, input: &[u8]) -> PathBuf {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    input.hash(&mut hasher);
    let path = findings.join(format!("{target}-{what}-{:016x}", hasher.finish()));
    let _ = std::fs::create_dir_all(findings);
    let _ = std::fs::write(&path, input);
    path
}

/// Watches the workers: an input past the hang limit, or memory past its
/// limit (the allocating thread waits for this), ends the run with the input kept.
fn watchdog(target: &str, workers: &[Current], epoch: Instant, done: &AtomicBool, findings: &Path) {
    while !done.load(Ordering::SeqCst) {
        let now = epoch.elapsed().as_nanos() as u64;
        let over = alloc::over();
        for current in workers {
            let started = current.started.load(Ordering::SeqCst);
            if started == 0 {
                continue;
            }
            let running = Duration::from_nanos(now.saturating_sub(started));
            let finding = if over > 0 {
                Some(format!("an allocation of {over} bytes (limit {MEMORY_LIMIT})"))
            } else if running > hang_limit() {
                Some(format!(
                    "an input running {} ms (limit {} ms)",
                    running.as_millis(),
                    hang_limit().as_millis()
                ))
            } else {
                None
            };
            if let Some(finding) = finding {
                let input = lock(&current.input).clone();
                let path = keep(findings, target, if over > 0 { "memory" } else { "hang" }, &input);
                println!("fuzz {target}: {finding}; input kept at {}", path.display());
                std::process::exit(1);
            }
        }
        if over > 0 {
            println!("fuzz {target}: an allocation of {over} bytes outside any input");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
