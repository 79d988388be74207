//! Shared helpers: a temporary folder with copies of the examples, and a runner
//! for the real `aot` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use aot::model::time::{FixedClock, Timestamp};
use aot::state::Binding;
use aot::store::Store;

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

    /// Starts `aot start` in the background and waits (bounded) until the file
    /// `marker` appears, which the test's atom creates once it is running.
    pub fn start_until(&self, marker: &str) -> std::process::Child {
        let child = Command::new(env!("CARGO_BIN_EXE_aot"))
            .arg("start")
            .current_dir(self.dir.path())
            .env_remove("AOT_STATE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start aot");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !self.path(marker).exists() {
            assert!(std::time::Instant::now() < deadline, "{marker} never appeared");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child
    }
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

/// Runs the real binary in `dir` with extra environment variables.
pub fn run_aot_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output: Output = Command::new(env!("CARGO_BIN_EXE_aot"))
        .args(args)
        .current_dir(dir)
        .env_remove("AOT_STATE")
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .output()
        .expect("run aot");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
