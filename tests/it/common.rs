//! Shared helpers: a temporary folder with copies of the examples, a runner
//! for the real `aot` binary, and a bounded wait on file-system events.
//!
//! Hermetic by default: the binary runs with none of the caller's `AOT_*`,
//! `OPENAI_*` or `ANTHROPIC_*` variables (a developer's `AOT_MEMORY` or agent
//! command must not leak into a test), without colour, and with the fixed
//! test clock unless a test asks for the wall clock. The in-process store
//! uses the fixed [`clock`].

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aot::model::time::{FixedClock, Timestamp};
use aot::state::Binding;
use aot::store::Store;
use notify::Watcher;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every example state file, sorted.
pub fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("state"))
        .expect("state/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .collect();
    files.sort();
    files
}

/// A fixed clock starting at 2026-01-01T00:00:00Z, one second per reading.
pub fn clock() -> Arc<FixedClock> {
    Arc::new(FixedClock::new(Timestamp::from_millis(1_767_225_600_000), 1000))
}

/// A binding with a summary, at the test clock's start.
pub fn binding(summary: &str) -> Binding {
    Binding {
        summary: summary.into(),
        output_tail: String::new(),
        artifacts: Vec::new(),
        at: Timestamp::from_millis(1_767_225_600_000),
        attempt: 1,
        changes: None,
    }
}

/// A temporary folder that is removed when dropped.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Copies an example into the folder; returns its new path.
    pub fn example(&self, name: &str) -> PathBuf {
        let to = self.path(name);
        std::fs::copy(root().join("state").join(name), &to).expect("copy example");
        to
    }

    /// Writes a file into the folder; returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let to = self.path(name);
        std::fs::write(&to, text).expect("write file");
        to
    }

    /// Returns a store over `path` with the fixed test clock and no fsync.
    pub fn store(&self, path: &Path) -> Store {
        let mut store = Store::new(path, clock());
        store.set_durable(false);
        store
    }

    /// Runs the real binary in this folder.
    pub fn aot(&self, args: &[&str]) -> Run {
        run_aot(self.dir.path(), args)
    }

    /// Runs the real binary with the fixed test clock.
    pub fn aot_fixed_clock(&self, args: &[&str]) -> Run {
        run_aot_with(self.dir.path(), args, &[("AOT_TEST_CLOCK", "1767225600000")])
    }

    /// The real binary, hermetic, in this folder (for tests that spawn it).
    pub fn command(&self) -> Command {
        aot_command(self.dir.path())
    }

    /// Starts `aot start` in the background and waits (bounded) until the file
    /// `marker` appears, which the test's atom creates once it is running.
    pub fn start_until(&self, marker: &str) -> std::process::Child {
        let child = self
            .command()
            .arg("start")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start aot");
        let path = self.path(marker);
        wait_until(self.dir.path(), &format!("{marker} appears"), || path.exists());
        child
    }

    /// Waits (bounded) until `ready` holds, looking again at every change in this folder.
    pub fn wait_until(&self, what: &str, ready: impl FnMut() -> bool) {
        wait_until(self.dir.path(), what, ready);
    }
}

/// How long a test waits for something that should happen in well under a second.
pub const BOUND: Duration = Duration::from_secs(20);

/// Waits until `ready` holds: it is checked at once, then again after every
/// file-system event under `dir` (and at least every half second, for
/// conditions no event announces, such as a process ending). Panics after
/// [`BOUND`], saying `what` never happened.
pub fn wait_until(dir: &Path, what: &str, mut ready: impl FnMut() -> bool) {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        let _ = tx.send(());
    })
    .expect("watch the test folder");
    watcher
        .watch(dir, notify::RecursiveMode::Recursive)
        .expect("watch the test folder");
    let deadline = Instant::now() + BOUND;
    while !ready() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}: not within {} s", BOUND.as_secs());
        let _ = rx.recv_timeout(left.min(Duration::from_millis(500)));
    }
}

/// The real binary in `dir`, hermetic: none of the caller's `AOT_*`,
/// `OPENAI_*`, `BRAIN_*`, `TOOL_*` or `ANTHROPIC_*` variables, no colour, the fixed test clock.
/// A test that needs the wall clock removes `AOT_TEST_CLOCK`.
pub fn aot_command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aot"));
    command.current_dir(dir);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if ["AOT_", "OPENAI_", "BRAIN_", "TOOL_", "ANTHROPIC_"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            command.env_remove(name.as_ref());
        }
    }
    command.env("NO_COLOR", "1").env("AOT_TEST_CLOCK", "1767225600000");
    // The copies of the tests' repositories live in the temporary folder.
    command.env("AOT_COPIES", copies());
    command
}

/// Runs git in `dir` (failing the test when git fails); its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A git repository in `dir` with a test identity (no commit yet).
pub fn git_init(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    git(dir, &["config", "user.name", "Test"]);
}

/// Where the tests' runs keep the copies of their repositories.
pub fn copies() -> PathBuf {
    std::env::temp_dir().join("aot-test-copies")
}

/// What a run of the binary produced.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Returns stdout, stderr and the exit code as one text for snapshots.
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        if !self.stdout.is_empty() {
            out.push_str(&self.stdout);
        }
        if !self.stderr.is_empty() {
            out.push_str("--- stderr\n");
            out.push_str(&self.stderr);
        }
        out.push_str(&format!("[exit {}]\n", self.code));
        out
    }
}

pub fn run_aot(dir: &Path, args: &[&str]) -> Run {
    run_aot_with(dir, args, &[])
}

/// Runs the real binary in `dir` (hermetic, see [`aot_command`]) with extra
/// environment variables.
pub fn run_aot_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output: Output = aot_command(dir)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run aot");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Every file under `dir`, recursively (for scans of everything aot wrote).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
