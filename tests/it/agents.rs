//! Real agent CLIs driven through aot's templates, against the scripted
//! OpenAI-compatible server on 127.0.0.1: aider from the package index
//! (`.ci/run` installs it into a virtual environment and names it with
//! `AOT_TEST_AIDER`). The CLI reads its own variables (`OPENAI_API_BASE`,
//! `OPENAI_API_KEY`, `AIDER_MODEL`) from the environment aot runs in; aot
//! runs it in an isolated attempt, lands or discards what it edits, and
//! counts what it reports spending against the budgets.
//!
//! Without aider these tests say so and pass, except in CI (`CI` set), where
//! a missing CLI fails them: there they must run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{TestEnv, run_aot_with};
use crate::fake_llm::{FakeLlm, Step};
use aot::journal::event::{Event, Record};
use aot::state::FailureClass;

/// The key the CLI is given; it must reach the server, and nothing aot writes.
const KEY: &str = "sk-aider-test-91c0";

/// The aider executable: `AOT_TEST_AIDER`, else `aider` on PATH. `None`
/// (said on stderr) outside CI; a failure in CI.
fn aider() -> Option<PathBuf> {
    let found = std::env::var_os("AOT_TEST_AIDER")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("aider"))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "aider is not installed: .ci/run installs aider-chat into a virtual environment and sets AOT_TEST_AIDER"
        );
        eprintln!("skipped: aider is not installed (pip install aider-chat, or set AOT_TEST_AIDER to its path)");
    }
    found
}

/// A git repository holding `greet.py` with a typo, and a state file whose
/// one agent atom is worked by the `aider` template.
struct Project {
    env: TestEnv,
    home: tempfile::TempDir,
}

impl Project {
    fn new(constraints: &str) -> Self {
        let env = TestEnv::new();
        let project = Project {
            env,
            home: tempfile::tempdir().expect("home"),
        };
        project.git(&["init", "-q"]);
        project.git(&["config", "user.email", "test@example.com"]);
        project.git(&["config", "user.name", "Test"]);
        project.env.write("greet.py", "print(\"helo\")\n");
        project.env.write(".gitignore", ".aot/\n");
        project.git(&["add", "greet.py", ".gitignore"]);
        project.git(&["commit", "-q", "-m", "start"]);
        project.env.write(
            "aot.yaml",
            &format!(
                r#"version: 2
objective:
  goal: greet.py prints hello
  background_intent: a typo in the greeting
  deliverables: greet.py
  definition_of_done: python3 greet.py prints hello
  base_case: {{ command: "python3 greet.py | grep -qx hello" }}
  constraints: {{ {constraints} }}
workers: {{ agent: {{ template: aider }} }}
graph:
  atoms:
    fix:
      agent: Fix the typo in greet.py so that it prints hello
      check: ["grep -q 'print(.hello.)' greet.py"]
"#
            ),
        );
        project
    }

    fn dir(&self) -> &Path {
        self.env.dir.path()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.dir())
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

    /// `aot start` with aider on PATH and its own variables pointing at `server`.
    fn start(&self, aider: &Path, server: &FakeLlm) -> crate::common::Run {
        let bin = aider.parent().expect("aider's folder");
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let home = self.home.path().to_str().expect("home path");
        run_aot_with(
            self.dir(),
            &["start"],
            &[
                ("PATH", path.to_str().expect("PATH is text")),
                ("HOME", home),
                ("OPENAI_API_BASE", server.base.as_str()),
                ("OPENAI_API_KEY", KEY),
                // A model litellm prices, so aider prints a cost.
                ("AIDER_MODEL", "gpt-4o"),
            ],
        )
    }

    fn greet(&self) -> String {
        std::fs::read_to_string(self.env.path("greet.py")).expect("greet.py")
    }

    fn records(&self) -> Vec<Record> {
        let text = std::fs::read_to_string(self.env.path("aot.yaml.journal.jsonl")).expect("journal");
        text.lines().map(|l| serde_json::from_str(l).expect("record")).collect()
    }

    /// Every file aot or the CLI wrote, read as text, holds no key.
    fn assert_no_key_written(&self) {
        for file in crate::common::files_under(self.dir()) {
            if file.components().any(|c| c.as_os_str() == ".git") {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&file) {
                assert!(!text.contains(KEY), "{} holds the key", file.display());
            }
        }
    }
}

/// aider's SEARCH/REPLACE answer turning the greeting into `to`.
fn edit(to: &str) -> Step {
    Step::chat_with_usage(
        &format!(
            "I will fix the greeting.\n\ngreet.py\n```python\n<<<<<<< SEARCH\nprint(\"helo\")\n=======\nprint(\"{to}\")\n>>>>>>> REPLACE\n```\n"
        ),
        Some((1500, 60)),
    )
}

fn worker_calls(records: &[Record]) -> Vec<(u64, u64, Option<f64>)> {
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::LlmCalled {
                role,
                prompt_tokens,
                completion_tokens,
                cost,
                ..
            } if role == "worker" => Some((*prompt_tokens, *completion_tokens, *cost)),
            _ => None,
        })
        .collect()
}

#[test]
fn aiders_edit_lands_the_base_case_holds_and_its_spend_is_counted() {
    let Some(aider) = aider() else { return };
    let project = Project::new("max_retries: 0, max_tokens: 100000, max_cost: 1");
    let server = FakeLlm::start(vec![edit("hello")]);
    let run = project.start(&aider, &server);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(project.greet(), "print(\"hello\")\n");
    // aider was told the task, with the user's key, by its own variables.
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "one model call");
    assert!(
        seen[0].prompt().contains("Fix the typo in greet.py"),
        "{}",
        seen[0].prompt()
    );
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    // `Tokens: 1.5k sent, 60 received. Cost: $0.0044 …` counted as the worker's spend.
    let calls = worker_calls(&project.records());
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (prompt, completion, cost) = calls[0];
    assert_eq!((prompt, completion), (1500, 60));
    let cost = cost.expect("aider printed a cost");
    assert!((cost - 0.0044).abs() < 1e-9, "{cost}");
    // Only the edit: no commit, no .gitignore entry, no history file.
    assert_eq!(project.git(&["rev-list", "--count", "HEAD"]).trim(), "1");
    assert_eq!(
        std::fs::read_to_string(project.env.path(".gitignore")).unwrap(),
        ".aot/\n"
    );
    assert!(!project.env.path(".aider.chat.history.md").exists());
    assert!(!project.env.path(".aider.input.history").exists());
    project.assert_no_key_written();
}

#[test]
fn aiders_wrong_edit_fails_the_check_and_is_discarded() {
    let Some(aider) = aider() else { return };
    let project = Project::new("max_retries: 0");
    let server = FakeLlm::start(vec![edit("goodbye")]);
    let run = project.start(&aider, &server);
    assert_ne!(run.code, 0, "{}", run.transcript());
    assert_eq!(
        project.greet(),
        "print(\"helo\")\n",
        "the wrong edit stayed:\n{}",
        run.transcript()
    );
    let failed = project
        .records()
        .into_iter()
        .find_map(|r| match r.event {
            Event::AtomFailed { class, criterion, .. } => Some((class, criterion.to_string())),
            _ => None,
        })
        .expect("the atom failed");
    assert_eq!(failed.0, FailureClass::Logical);
    assert!(failed.1.starts_with("check[0]"), "{}", failed.1);
    assert_eq!(project.git(&["status", "--porcelain", "greet.py"]), "");
}

#[test]
fn aiders_spend_counts_against_max_tokens_and_max_cost() {
    let Some(aider) = aider() else { return };
    for (constraints, spent) in [
        ("max_retries: 2, max_tokens: 1000", "token budget is spent"),
        ("max_retries: 2, max_cost: 0.004", "dollar budget is spent"),
    ] {
        let project = Project::new(constraints);
        // A wrong edit, then a right one the spent budget must never ask for.
        let server = FakeLlm::start(vec![edit("goodbye"), edit("hello")]);
        let run = project.start(&aider, &server);
        assert_ne!(run.code, 0, "{constraints}:\n{}", run.transcript());
        assert_eq!(
            server.seen().len(),
            1,
            "{constraints}: no call after the budget was spent"
        );
        assert_eq!(project.greet(), "print(\"helo\")\n", "{constraints}");
        let stop = aot::state::document::read(&project.env.path("aot.yaml"))
            .unwrap()
            .state
            .run
            .stop
            .expect("stopped");
        let said = format!("{} {}", stop.message, run.transcript());
        assert!(said.contains(spent), "{constraints}: {said}");
    }
}

#[test]
fn a_server_error_aider_reports_is_an_environmental_failure() {
    let Some(aider) = aider() else { return };
    let project = Project::new("max_retries: 0");
    let server = FakeLlm::start(vec![Step::status(401, &[])]);
    let run = project.start(&aider, &server);
    assert_ne!(run.code, 0, "{}", run.transcript());
    let classes: Vec<(FailureClass, String)> = project
        .records()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::AtomFailed { class, message, .. } | Event::AttemptFailed { class, message, .. } => {
                Some((class, message))
            }
            _ => None,
        })
        .collect();
    assert!(!classes.is_empty(), "{}", run.transcript());
    for (class, message) in &classes {
        assert_eq!(*class, FailureClass::Environmental, "{message}");
        assert!(message.contains("the agent reported"), "{message}");
    }
    assert_eq!(project.greet(), "print(\"helo\")\n");
    project.assert_no_key_written();
}
