//! Real agent CLIs driven through aot's templates, against a scripted model
//! server on 127.0.0.1 speaking the API each CLI uses: aider (chat
//! completions) from the package index; claude (the Anthropic Messages API,
//! streamed), codex (the Responses API, streamed), opencode (chat
//! completions, streamed) and gemini (the Gemini API, streamed) from the npm
//! registry. `.ci/run` installs them and names each
//! with `AOT_TEST_<CLI>`. Each CLI reads its own settings (environment
//! variables, or its config file in a scratch `HOME`) pointing at the server;
//! aot runs it in an isolated attempt, lands or discards what it edits, and
//! counts what it reports spending against the budgets.
//!
//! Without a CLI its tests say so and pass, except in CI (`CI` set), where a
//! missing CLI fails them: there they must run.

use std::path::{Path, PathBuf};

use crate::common::{TestEnv, run_aot_with};
use crate::fake_llm::{FakeLlm, Seen, Step};
use aot::journal::event::{Event, Record};
use aot::state::FailureClass;
use serde_json::json;

/// The key the CLI is given; it must reach the server, and nothing aot writes.
const KEY: &str = "sk-aider-test-91c0";

/// The CLI's executable: `AOT_TEST_<NAME>`, else `name` on PATH. `None`
/// (said on stderr) outside CI; a failure in CI.
fn locate(name: &str) -> Option<PathBuf> {
    let var = format!("AOT_TEST_{}", name.to_ascii_uppercase());
    let found = std::env::var_os(&var)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed: .ci/run installs it and sets {var}"
        );
        eprintln!("skipped: {name} is not installed (see .ci/run, or set {var} to its path)");
    }
    found
}

fn aider() -> Option<PathBuf> {
    locate("aider")
}

/// A git repository holding `greet.py` with a typo, and a state file whose
/// one agent atom is worked by the `aider` template.
struct Project {
    env: TestEnv,
    home: tempfile::TempDir,
}

impl Project {
    fn new(constraints: &str) -> Self {
        Self::with_template("aider", constraints)
    }

    fn with_template(template: &str, constraints: &str) -> Self {
        let env = TestEnv::new();
        let project = Project {
            env,
            home: tempfile::tempdir().expect("home"),
        };
        crate::common::git_init(project.dir());
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
workers: {{ agent: {{ template: {template} }} }}
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
        crate::common::git(self.dir(), args)
    }

    /// `aot start` with aider on PATH and its own variables pointing at `server`.
    fn start(&self, aider: &Path, server: &FakeLlm) -> crate::common::Run {
        self.start_cli(
            aider,
            &[
                ("OPENAI_API_BASE", server.base.as_str()),
                ("OPENAI_API_KEY", KEY),
                // A model litellm prices, so aider prints a cost.
                ("AIDER_MODEL", "gpt-4o"),
            ],
        )
    }

    /// `aot start` with `cli`'s folder on PATH, `HOME` the scratch home, and `vars`.
    fn start_cli(&self, cli: &Path, vars: &[(&str, &str)]) -> crate::common::Run {
        let bin = cli.parent().expect("the CLI's folder");
        let path = std::env::join_paths(
            std::iter::once(bin.to_path_buf())
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH");
        let home = self.home.path().to_str().expect("home path");
        let mut all = vec![("PATH", path.to_str().expect("PATH is text")), ("HOME", home)];
        all.extend_from_slice(vars);
        run_aot_with(self.dir(), &["start"], &all)
    }

    /// Writes `text` to `name` under the scratch `HOME` (a CLI's config).
    fn home_file(&self, name: &str, text: &str) {
        let path = self.home.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("config folder");
        std::fs::write(path, text).expect("config file");
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

/// The fix every CLI below makes with its own tool: one command or write.
const FIXED: &str = "print(\"hello\")\n";

/// The worker's one journaled call: (prompt tokens, reply tokens).
fn counted(project: &Project) -> (u64, u64) {
    let calls = worker_calls(&project.records());
    assert_eq!(calls.len(), 1, "{calls:?}");
    (calls[0].0, calls[0].1)
}

/// Asserts a CLI's edit landed, the run completed, and the spend the CLI
/// reported for its two model calls (1,500 and 60 tokens each) was counted.
fn assert_landed_and_counted(project: &Project, run: &crate::common::Run, server: &FakeLlm) {
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(project.greet(), FIXED);
    assert!(
        server
            .seen()
            .iter()
            .any(|s| s.prompt().contains("Fix the typo in greet.py")
                || s.body.to_string().contains("Fix the typo in greet.py")),
        "the task reached the model"
    );
    assert_eq!(counted(project), (3000, 120));
    assert_eq!(project.git(&["rev-list", "--count", "HEAD"]).trim(), "1", "no commit");
    project.assert_no_key_written();
}

/// Whether a request already carries the result of the tool the model
/// called: then the model answers with its summary.
fn tool_ran(seen: &Seen) -> bool {
    let body = seen.body.to_string();
    ["function_call_output", "\"role\":\"tool\"", "functionResponse"]
        .iter()
        .any(|marker| body.contains(marker))
}

/// The Responses API's stream of one response holding `items`.
fn codex_turn(items: Vec<serde_json::Value>) -> Step {
    let mut events = vec![(
        Some("response.created"),
        json!({"type": "response.created", "response": {"id": "resp"}}),
    )];
    for item in items {
        events.push((
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "item": item}),
        ));
    }
    events.push((
        Some("response.completed"),
        json!({"type": "response.completed", "response": {"id": "resp", "usage": {
            "input_tokens": 1500, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1560}}}),
    ));
    Step::sse(&events, false)
}

#[test]
fn codex_runs_its_command_the_fix_lands_and_its_tokens_count() {
    let Some(codex) = locate("codex") else { return };
    let project = Project::with_template("codex", "max_retries: 0, max_tokens: 100000");
    let server = FakeLlm::serve(|seen: &Seen| {
        if seen.method != "POST" {
            return Step::status(404, &[]);
        }
        if tool_ran(seen) {
            codex_turn(vec![json!({"type": "message", "role": "assistant", "id": "msg_2",
                "content": [{"type": "output_text", "text": "Fixed the typo.\nsummary: greet.py prints hello"}]})])
        } else {
            codex_turn(vec![
                json!({"type": "function_call", "name": "exec_command", "call_id": "call_1",
                "arguments": json!({"cmd": "sed -i s/helo/hello/ greet.py"}).to_string()}),
            ])
        }
    });
    // codex reads its provider from its config file (not OPENAI_BASE_URL).
    project.home_file(
        ".codex/config.toml",
        &format!(
            "model = \"gpt-4o\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
            server.base
        ),
    );
    let run = project.start_cli(&codex, &[("OPENAI_API_KEY", KEY)]);
    assert_landed_and_counted(&project, &run, &server);
    let binding = aot::state::document::read(&project.env.path("aot.yaml"))
        .unwrap()
        .state
        .bindings["fix"]
        .clone();
    assert_eq!(
        binding.summary, "greet.py prints hello",
        "its final message is the summary"
    );
}

/// A chat-completions stream: `content`, or one tool call, with usage.
fn chat_stream(content: Option<&str>, call: Option<(&str, serde_json::Value)>) -> Step {
    let delta = match (content, call) {
        (Some(text), _) => json!({"role": "assistant", "content": text}),
        (None, Some((name, args))) => json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
            "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}),
        (None, None) => json!({"role": "assistant", "content": ""}),
    };
    let finish = if content.is_some() { "stop" } else { "tool_calls" };
    let chunk = |choice: serde_json::Value, usage: Option<serde_json::Value>| {
        let mut c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", "choices": [choice]});
        if let Some(usage) = usage {
            c["usage"] = usage;
        }
        (None, c)
    };
    Step::sse(
        &[
            chunk(json!({"index": 0, "delta": delta, "finish_reason": null}), None),
            chunk(
                json!({"index": 0, "delta": {}, "finish_reason": finish}),
                Some(json!({"prompt_tokens": 1500, "completion_tokens": 60, "total_tokens": 1560})),
            ),
        ],
        true,
    )
}

#[test]
fn opencode_runs_its_bash_tool_the_fix_lands_and_its_tokens_count() {
    let Some(opencode) = locate("opencode") else { return };
    let project = Project::with_template("opencode", "max_retries: 0, max_tokens: 100000");
    let server = FakeLlm::serve(|seen: &Seen| {
        if seen.method != "POST" {
            return Step::status(404, &[]);
        }
        // opencode asks for a title beside the conversation, in any order.
        if seen.prompt().contains("title generator") {
            chat_stream(Some("Fix the greeting"), None)
        } else if tool_ran(seen) {
            chat_stream(Some("Fixed the typo.\nsummary: greet.py prints hello"), None)
        } else {
            chat_stream(
                None,
                Some((
                    "bash",
                    json!({"command": "sed -i s/helo/hello/ greet.py", "description": "Fix the typo"}),
                )),
            )
        }
    });
    project.home_file(
        ".config/opencode/opencode.json",
        &json!({
            "model": "scripted/fake-model",
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "scripted",
                "options": {"baseURL": server.base, "apiKey": "{env:OPENAI_API_KEY}"},
                "models": {"fake-model": {"name": "fake"}}
            }}
        })
        .to_string(),
    );
    let run = project.start_cli(&opencode, &[("OPENAI_API_KEY", KEY)]);
    assert_landed_and_counted(&project, &run, &server);
}

/// The Gemini API's stream of one answer: `parts`, with usage.
fn gemini_turn(parts: serde_json::Value) -> Step {
    Step::sse(
        &[(
            None,
            json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 1500, "candidatesTokenCount": 60, "totalTokenCount": 1560},
                "modelVersion": "gemini-2.5-pro"}),
        )],
        false,
    )
}

#[test]
fn gemini_writes_the_file_with_its_tool_the_fix_lands_and_its_tokens_count() {
    let Some(gemini) = locate("gemini") else { return };
    let project = Project::with_template("gemini", "max_retries: 0, max_tokens: 100000");
    let server = FakeLlm::serve(|seen: &Seen| {
        if seen.method != "POST" {
            return Step::status(404, &[]);
        }
        if tool_ran(seen) {
            gemini_turn(json!([{"text": "Fixed the typo.\nsummary: greet.py prints hello"}]))
        } else {
            gemini_turn(json!([{"functionCall": {"name": "write_file",
                "args": {"file_path": "greet.py", "content": FIXED}}}]))
        }
    });
    // The API key is gemini's auth method; the model is named (no router).
    project.home_file(
        ".gemini/settings.json",
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    );
    let base = server.base.trim_end_matches("/v1").to_string();
    let run = project.start_cli(
        &gemini,
        &[
            ("GEMINI_API_KEY", KEY),
            ("GEMINI_MODEL", "gemini-2.5-pro"),
            ("GOOGLE_GEMINI_BASE_URL", base.as_str()),
        ],
    );
    assert_landed_and_counted(&project, &run, &server);
}

/// The Anthropic Messages API's stream of one message: a text block, or one
/// `tool_use` block, with usage.
fn claude_turn(block: serde_json::Value) -> Step {
    let tool = block["type"] == "tool_use";
    let start = if tool {
        json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
    } else {
        json!({"type": "text", "text": ""})
    };
    let delta = if tool {
        json!({"type": "input_json_delta", "partial_json": block["input"].to_string()})
    } else {
        json!({"type": "text_delta", "text": block["text"]})
    };
    Step::sse(
        &[
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg", "type": "message", "role": "assistant",
                    "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 1500, "output_tokens": 1}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": start}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": if tool { "tool_use" } else { "end_turn" },
                    "stop_sequence": null}, "usage": {"output_tokens": 60}}),
            ),
            (Some("message_stop"), json!({"type": "message_stop"})),
        ],
        false,
    )
}

#[test]
fn claude_reads_then_edits_the_fix_lands_and_its_spend_counts() {
    let Some(claude) = locate("claude") else { return };
    let project = Project::with_template("claude", "max_retries: 0, max_tokens: 100000, max_cost: 1");
    let server = FakeLlm::serve(|seen: &Seen| {
        if seen.method != "POST" {
            return Step::status(404, &[]);
        }
        // Its tools take absolute paths: the folder it works in is in its prompt.
        let body = seen.body.to_string();
        let cwd = body
            .split("orking directory: ")
            .nth(1)
            .and_then(|rest| rest.split("\\n").next())
            .unwrap_or_default()
            .to_string();
        let file = format!("{cwd}/greet.py");
        match body.matches("\"tool_result\"").count() {
            0 => {
                claude_turn(json!({"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": file}}))
            }
            1 => claude_turn(json!({"type": "tool_use", "id": "toolu_2", "name": "Edit",
                "input": {"file_path": file, "old_string": "helo", "new_string": "hello"}})),
            _ => claude_turn(json!({"type": "text", "text": "Fixed the typo.\nsummary: greet.py prints hello"})),
        }
    });
    let base = server.base.trim_end_matches("/v1").to_string();
    let run = project.start_cli(
        &claude,
        &[("ANTHROPIC_API_KEY", KEY), ("ANTHROPIC_BASE_URL", base.as_str())],
    );
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(project.greet(), FIXED);
    let calls = worker_calls(&project.records());
    assert_eq!(calls.len(), 1, "{calls:?}");
    // Three calls of 1,500 and 60 tokens, and the cost claude computed.
    assert_eq!((calls[0].0, calls[0].1), (4500, 180));
    assert!(calls[0].2.is_some_and(|c| c > 0.0), "{calls:?}");
    project.assert_no_key_written();
}
