//! The built-in worker (seed R3, the executor): a model on the tool tier
//! works an `agent` atom with native function calling — `shell`,
//! `read_file`, `write_file`, `list_files` ([`super::tools`]) — until it
//! answers without calling a tool. Every call is checked in code before it
//! runs (blocked tools, the workspace, Law 1), every result goes back as a
//! `tool` message (head and tail, 4 KB), and every model call and tool call
//! is journaled as it happens. An attempt is bounded by its turns (default
//! 30), the atom's timeout and the task's budgets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::command::{self, CommandSpec, Exit};
use super::tools::{self, Call, Rules};
use crate::engine::roles::{Assignment, Hold, Worked};
use crate::journal::event::Event;
use crate::llm::record::{Keeper, called};
use crate::llm::{Client, Message, Reply, Role, ToolCall, estimate_tokens};
use crate::model::text::{first_line, head_tail};
use crate::state::FailureClass;

/// Model turns an attempt may take by default.
pub const MAX_TURNS: u32 = 30;

/// The most tokens one answer of the worker may take.
pub const WORKER_MAX_TOKENS: u32 = 4096;

/// Tool calls run per model turn; the rest of a longer list is refused.
pub const CALLS_PER_TURN: usize = 16;

/// How long one `shell` call may run when the atom sets no timeout.
const SHELL_TIMEOUT: Duration = Duration::from_secs(600);

/// The built-in worker.
pub struct LlmWorker {
    client: Client,
    max_turns: u32,
    kept: Option<Keeper>,
}

/// What a conversation did so far, for its `agent_ran` record.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Model calls.
    pub turns: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Tool calls refused.
    pub refusals: u32,
}

impl LlmWorker {
    /// A worker calling `client` (the tool tier), `max_turns` per attempt.
    pub fn new(client: Client, max_turns: u32) -> Self {
        Self {
            client,
            max_turns: max_turns.max(1),
            kept: None,
        }
    }

    /// Keeps each attempt's conversation in `folder` (`.aot/llm/`), named in
    /// `llm_called` relative to `base`.
    pub fn keeping(mut self, folder: PathBuf, base: &Path) -> Self {
        self.kept = Some(Keeper::new(folder, base));
        self
    }

    /// Works one attempt at an `agent` atom whose task is `task`.
    pub async fn work(&self, assignment: &Assignment, task: &str, cancel: &CancellationToken) -> Worked {
        // A probe gets the reading tools only.
        let read_only = assignment.spec.read_only;
        let mut session = Session::new(&self.client, Role::Worker, assignment, read_only, self.kept.as_ref());
        let mut messages = vec![Message::user(super::prompt::render(
            super::prompt::WORKER_PROMPT,
            assignment,
            task,
        ))];
        let timeout = assignment.spec.timeout.map(|t| t.0);
        let talk = session.talk(&mut messages, self.max_turns, cancel);
        let talked = match timeout {
            Some(limit) => tokio::time::timeout(limit, talk)
                .await
                .unwrap_or(Talked::TimedOut(limit)),
            None => talk.await,
        };
        let worked = match talked {
            Talked::Answered(reply) => Worked::Done {
                summary: command::summary_of(&reply.content),
                output: head_tail(&reply.content, tools::RESULT_MAX),
            },
            Talked::Cancelled => Worked::Cancelled,
            Talked::OverBudget(message) => Worked::OverBudget { message },
            Talked::Failed(message, class) => failed(class, message),
            Talked::TimedOut(limit) => failed(
                FailureClass::Environmental,
                format!("timed out after {}", crate::model::time::Span(limit)),
            ),
            Talked::OutOfTurns(last_text) => {
                let said = if last_text.trim().is_empty() {
                    String::new()
                } else {
                    format!("; it last said: {}", first_line(last_text.trim()))
                };
                failed(
                    FailureClass::Logical,
                    format!(
                        "the worker did not finish within {} turns (each turn's tools ran; the work may be half done){said}",
                        self.max_turns
                    ),
                )
            }
        };
        let tally = &session.tally;
        assignment.report.send(
            Event::AgentRan {
                atom: assignment.atom.clone(),
                attempt: assignment.attempt,
                worker: "llm".into(),
                turns: tally.turns,
                tool_calls: tally.tool_calls,
                refusals: tally.refusals,
            },
            None,
        );
        worked
    }
}

/// How a conversation with tools ended.
pub(super) enum Talked {
    /// The model answered without calling a tool.
    Answered(Reply),
    /// The turns ran out (the model's last words).
    OutOfTurns(String),
    /// A call failed for good (retries spent, or a refused request).
    Failed(String, FailureClass),
    /// The next call could pass the task's budget: it was not made.
    OverBudget(String),
    /// The atom's time ran out.
    TimedOut(Duration),
    /// The attempt was cancelled.
    Cancelled,
}

/// One conversation of a role with the tools, for one attempt: each model
/// call and each tool call checked, run, reported and kept.
pub(super) struct Session<'a> {
    client: &'a Client,
    role: Role,
    assignment: &'a Assignment,
    read_only: bool,
    kept: Option<(&'a Keeper, PathBuf)>,
    protected: Vec<PathBuf>,
    started: Instant,
    /// Turns and tool calls so far.
    pub tally: Tally,
}

impl<'a> Session<'a> {
    /// A conversation of `role` for `assignment`; `read_only` offers only the reading tools.
    pub fn new(
        client: &'a Client,
        role: Role,
        assignment: &'a Assignment,
        read_only: bool,
        keeper: Option<&'a Keeper>,
    ) -> Self {
        Self {
            client,
            role,
            assignment,
            read_only,
            kept: keeper.map(|k| (k, k.name(now_millis()))),
            protected: protected(assignment),
            started: Instant::now(),
            tally: Tally::default(),
        }
    }

    /// Talks until the model answers without a tool call, at most `turns`
    /// more calls; `messages` grows with every turn.
    pub async fn talk(&mut self, messages: &mut Vec<Message>, turns: u32, cancel: &CancellationToken) -> Talked {
        let offered = tools::offered(self.read_only);
        let exists = |p: &Path| p.exists();
        let assignment = self.assignment;
        let protected = std::mem::take(&mut self.protected);
        let rules = Rules {
            root: &assignment.root,
            cwd: &assignment.cwd,
            protected: &protected,
            blocked_tools: &assignment.brief.blocked_tools,
            confirmed: assignment.brief.confirmed,
            read_only: self.read_only,
            exists: &exists,
        };
        let mut last_text = String::new();
        let last = self.tally.turns + turns;
        let talked = loop {
            if self.tally.turns >= last {
                break Talked::OutOfTurns(last_text);
            }
            if cancel.is_cancelled() {
                break Talked::Cancelled;
            }
            let hold = match self.hold(messages, cancel).await {
                Ok(Some(hold)) => hold,
                Ok(None) => break Talked::Cancelled,
                Err(message) => break Talked::OverBudget(message),
            };
            self.tally.turns += 1;
            let call = tokio::select! {
                call = self.client.chat_with_tools(self.role, messages, &offered, WORKER_MAX_TOKENS) => Some(call),
                () = cancel.cancelled() => None,
            };
            let Some(call) = call else {
                // The provider may bill a request cut off mid-way: its prompt is counted, estimated.
                let prompt: u64 = messages.iter().map(message_tokens).sum();
                assignment.report.send(
                    Event::LlmCalled {
                        role: self.role.name().into(),
                        model: self.client.endpoint().model.clone(),
                        prompt_tokens: prompt,
                        completion_tokens: 0,
                        estimated: true,
                        latency_ms: 0,
                        attempts: 1,
                        error: Some("cancelled while the model was answering".into()),
                        atom: Some(assignment.atom.clone()),
                        cost: None,
                        kept: None,
                    },
                    Some(hold),
                );
                break Talked::Cancelled;
            };
            let kept = self.keep(messages, &call).await;
            assignment.report.send(
                called(
                    self.role,
                    &call,
                    &self.client.endpoint().model,
                    Some(&assignment.atom),
                    assignment.llm.as_ref(),
                    kept,
                ),
                Some(hold),
            );
            let reply = match call {
                Ok(reply) => reply,
                Err(e) => {
                    break Talked::Failed(
                        format!(
                            "the {}'s model call failed (turn {}): {}",
                            self.role, self.tally.turns, e.message
                        ),
                        e.class,
                    );
                }
            };
            if reply.tool_calls.is_empty() {
                break Talked::Answered(reply);
            }
            last_text = reply.content.clone();
            messages.push(Message::assistant_calls(reply.content, reply.tool_calls.clone()));
            let mut cancelled = false;
            for (i, tool_call) in reply.tool_calls.iter().enumerate() {
                if i >= CALLS_PER_TURN {
                    self.tally.tool_calls += 1;
                    self.tally.refusals += 1;
                    messages.push(Message::tool_result(
                        &tool_call.id,
                        format!("refused: at most {CALLS_PER_TURN} tool calls run per turn; ask again for the rest"),
                    ));
                    continue;
                }
                match self.run_tool(tool_call, &rules, cancel).await {
                    Some(result) => messages.push(Message::tool_result(&tool_call.id, result)),
                    None => {
                        cancelled = true;
                        break;
                    }
                }
            }
            if cancelled {
                break Talked::Cancelled;
            }
        };
        self.protected = protected;
        talked
    }

    /// Holds the worst case of the next call under the task's budgets.
    async fn hold(&self, messages: &[Message], cancel: &CancellationToken) -> Result<Option<Hold>, String> {
        let prompt: u64 = messages.iter().map(message_tokens).sum();
        let worst_prompt = prompt * 11 / 10;
        let worst_reply = u64::from(WORKER_MAX_TOKENS);
        let model = &self.client.endpoint().model;
        let cost = self
            .assignment
            .llm
            .as_ref()
            .and_then(|l| l.prices.get(model))
            .map(|p| p.cost(worst_prompt, worst_reply));
        self.assignment
            .report
            .hold(self.role.name(), worst_prompt + worst_reply, cost, cancel)
            .await
    }

    /// Runs one tool call under the rules, journals it, and returns what the
    /// model is told (`None`: the attempt was cancelled meanwhile).
    async fn run_tool(
        &mut self,
        tool_call: &ToolCall,
        rules: &Rules<'_>,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let assignment = self.assignment;
        self.tally.tool_calls += 1;
        let name = tool_call.function.name.as_str();
        let journal = |tool: &str, input: String, refused: Option<String>, exit_code: Option<i32>| {
            assignment.report.send(
                Event::ToolCalled {
                    atom: assignment.atom.clone(),
                    attempt: assignment.attempt,
                    tool: tool.into(),
                    input,
                    refused,
                    exit_code,
                },
                None,
            );
        };
        let call = match tools::parse(name, &tool_call.function.arguments) {
            Ok(call) => call,
            Err(why) => {
                self.tally.refusals += 1;
                let input = crate::model::text::cut(first_line(&tool_call.function.arguments), 200);
                journal(&crate::model::text::cut(name, 64), input, Some(why.clone()), None);
                return Some(format!("refused: {why}"));
            }
        };
        if let Some(why) = tools::refusal(&call, rules) {
            self.tally.refusals += 1;
            journal(call.tool(), call.input(), Some(why.clone()), None);
            return Some(format!("refused: {why}"));
        }
        let (answer, exit_code) = match &call {
            Call::Shell { command } => {
                let left = assignment
                    .spec
                    .timeout
                    .map(|t| t.0.saturating_sub(self.started.elapsed()));
                // The model's commands do not see aot's secrets (API keys, tokens).
                let mut env: Vec<(String, String)> = std::env::vars_os()
                    .filter_map(|(k, _)| k.into_string().ok())
                    .filter(|k| crate::model::secret::is_secret_name(k))
                    .map(|k| (k, String::new()))
                    .collect();
                env.extend(assignment.env.iter().cloned());
                let spec = CommandSpec {
                    command: command.clone(),
                    cwd: assignment.cwd.clone(),
                    env,
                    stdin: None,
                    timeout: Some(left.unwrap_or(SHELL_TIMEOUT).max(Duration::from_millis(100))),
                    keep_stdout: false,
                };
                let result = command::run(&spec, cancel).await;
                if result.exit == Exit::Cancelled {
                    return None;
                }
                let output = if result.output.trim().is_empty() {
                    "(no output)".to_string()
                } else {
                    result.output.clone()
                };
                (format!("{}\n{output}", command::describe(&result.exit)), result.code())
            }
            Call::ReadFile {
                path,
                from_line,
                to_line,
            } => {
                let (confine, path, from, to) = (Confine::of(rules), path.clone(), *from_line, *to_line);
                (file_tool(cancel, move || confine.read(&path, from, to)).await?, None)
            }
            Call::WriteFile { path, content } => {
                let (confine, path, content) = (Confine::of(rules), path.clone(), content.clone());
                (file_tool(cancel, move || confine.write(&path, &content)).await?, None)
            }
            Call::ListFiles { path } => {
                let (confine, path) = (Confine::of(rules), path.clone());
                (file_tool(cancel, move || confine.list(&path)).await?, None)
            }
        };
        journal(call.tool(), call.input(), None, exit_code);
        // What goes to the model (and the kept conversation) holds no secret.
        Some(assignment.report.redact(&head_tail(&answer, tools::RESULT_MAX)))
    }

    /// Writes the conversation so far; the path as journaled.
    async fn keep(&self, messages: &[Message], call: &Result<Reply, crate::llm::CallError>) -> Option<String> {
        let (keeper, path) = self.kept.as_ref()?;
        let answer = match call {
            Ok(reply) => {
                serde_json::json!({"model": reply.model, "answer": reply.content, "tool_calls": reply.tool_calls})
            }
            Err(e) => serde_json::json!({"error": e.message}),
        };
        let body = serde_json::json!({
            "role": self.role.name(),
            "atom": self.assignment.atom,
            "attempt": self.assignment.attempt,
            "messages": messages,
            "answers": [answer],
        });
        keeper.write(path, &body).await
    }
}

/// The largest file `read_file` reads.
pub const READ_MAX: u64 = 8 << 20;

/// Where the file tools work, owned (for the blocking pool).
#[derive(Clone)]
struct Confine {
    root: PathBuf,
    cwd: PathBuf,
    protected: Vec<PathBuf>,
}

impl Confine {
    fn of(rules: &Rules<'_>) -> Self {
        Self {
            root: rules.root.to_path_buf(),
            cwd: rules.cwd.to_path_buf(),
            protected: rules.protected.to_vec(),
        }
    }

    /// `path` resolved inside the workspace, as the file system has it:
    /// symbolic links followed for reading and checked to stay inside,
    /// refused at the end of a path to write; folders named `.git` or
    /// `.aot` anywhere, and aot's files, never written (compared without
    /// case, for file systems that ignore it).
    fn resolve(&self, path: &str, writing: bool) -> Result<PathBuf, String> {
        let full = tools::resolve(&self.root, &self.cwd, path)?;
        let root = self
            .root
            .canonicalize()
            .map_err(|e| format!("the workspace {} cannot be read: {e}", self.root.display()))?;
        let lower = |p: &Path| p.to_string_lossy().to_lowercase();
        let owned = |p: &Path| -> bool {
            let inner = p.strip_prefix(&root).unwrap_or(p);
            inner.components().any(|c| {
                let name = c.as_os_str().to_string_lossy().to_lowercase();
                name == ".git" || name == ".aot"
            }) || self.protected.iter().any(|q| {
                let q = q.canonicalize().unwrap_or_else(|_| q.clone());
                lower(p).starts_with(&lower(&q))
            })
        };
        if !writing {
            let real = full.canonicalize().map_err(|e| format!("cannot open `{path}`: {e}"))?;
            if !real.starts_with(&root) {
                return Err(format!("`{path}` leads outside the workspace (a symbolic link)"));
            }
            return Ok(real);
        }
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(format!("`{path}` is a symbolic link: write the file it names instead"));
        }
        let (Some(parent), Some(name)) = (full.parent(), full.file_name()) else {
            return Err(format!("`{path}` names no file"));
        };
        // The deepest folder that exists decides where the new ones go.
        let mut existing = parent.to_path_buf();
        while !existing.exists() {
            if !existing.pop() {
                break;
            }
        }
        let real_existing = existing
            .canonicalize()
            .map_err(|e| format!("cannot open the folder of `{path}`: {e}"))?;
        let real = real_existing
            .join(parent.strip_prefix(&existing).unwrap_or(Path::new("")))
            .join(name);
        if !real.starts_with(&root) {
            return Err(format!("`{path}` leads outside the workspace (a symbolic link)"));
        }
        if owned(&real) {
            return Err(format!("`{path}` is aot's or git's own, not the work's"));
        }
        Ok(real)
    }

    fn read(&self, path: &str, from: Option<usize>, to: Option<usize>) -> String {
        let full = match self.resolve(path, false) {
            Ok(full) => full,
            Err(why) => return format!("refused: {why}"),
        };
        let meta = match std::fs::metadata(&full) {
            Ok(meta) => meta,
            Err(e) => return format!("cannot read `{path}`: {e}"),
        };
        if !meta.is_file() {
            return format!("`{path}` is not a regular file (use list_files for a folder)");
        }
        if meta.len() > READ_MAX {
            return format!(
                "`{path}` is {} bytes, over the {READ_MAX} bytes read_file reads: look at parts of it with shell (`head`, `grep -n`)",
                meta.len()
            );
        }
        match std::fs::read(&full) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => tools::lines(&text, from, to),
                Err(e) => format!("`{path}` is not UTF-8 text ({} bytes)", e.as_bytes().len()),
            },
            Err(e) => format!("cannot read `{path}`: {e}"),
        }
    }

    fn write(&self, path: &str, content: &str) -> String {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let full = match self.resolve(path, true) {
            Ok(full) => full,
            Err(why) => return format!("refused: {why}"),
        };
        if let Ok(meta) = std::fs::symlink_metadata(&full)
            && !meta.is_file()
        {
            return format!("refused: `{path}` is not a regular file");
        }
        if let Some(parent) = full.parent()
            && let Err(e) = std::fs::create_dir_all(parent)
        {
            return format!("cannot make the folder of `{path}`: {e}");
        }
        // The folders just made may not have been links; the file is opened without following one.
        if !full
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .is_some_and(|p| self.root.canonicalize().is_ok_and(|root| p.starts_with(root)))
        {
            return format!("refused: `{path}` leads outside the workspace");
        }
        // Opened without following a link and without truncating: what was
        // opened is checked before a byte changes.
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&full);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) => return format!("cannot write `{path}`: {e}"),
        };
        if let Err(why) = self.may_write(&file) {
            return format!("refused: `{path}` {why}");
        }
        match file.set_len(0).and_then(|()| file.write_all(content.as_bytes())) {
            Ok(()) => format!("wrote `{path}` ({} bytes)", content.len()),
            Err(e) => format!("cannot write `{path}`: {e}"),
        }
    }

    /// Whether the opened file may be written, by what it is rather than by
    /// its name: a regular file with one link (a hard link is another
    /// name for a file that may be anywhere, the journal or a file outside
    /// the workspace among them), and none of aot's files by device and
    /// inode.
    fn may_write(&self, file: &std::fs::File) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = file.metadata().map_err(|e| format!("cannot be read back: {e}"))?;
        if !meta.is_file() {
            return Err("is not a regular file".into());
        }
        if meta.nlink() > 1 {
            return Err(format!(
                "has {} names (hard links): one of them may be outside the workspace or aot's own, so it is not written",
                meta.nlink()
            ));
        }
        let same =
            |other: &Path| std::fs::metadata(other).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino());
        if self.protected.iter().any(|p| same(p)) {
            return Err("is aot's own file".into());
        }
        Ok(())
    }

    fn list(&self, path: &str) -> String {
        let full = match self.resolve(path, false) {
            Ok(full) => full,
            Err(why) => return format!("refused: {why}"),
        };
        match tools::list(&full) {
            Ok(listing) => listing,
            Err(e) => format!("cannot list `{path}`: {e}"),
        }
    }
}

/// Runs a file tool on the blocking pool, raced with the attempt's
/// cancellation (`None`: cancelled — a tool stuck on a pipe does not hold it).
async fn file_tool(cancel: &CancellationToken, job: impl FnOnce() -> String + Send + 'static) -> Option<String> {
    let task = tokio::task::spawn_blocking(job);
    tokio::select! {
        done = task => Some(done.unwrap_or_else(|e| format!("the tool failed: {e}"))),
        () = cancel.cancelled() => None,
    }
}

/// The files no tool writes: the state file and its journal, aot's folder, git's.
fn protected(assignment: &Assignment) -> Vec<PathBuf> {
    let mut out = vec![assignment.root.join(".aot"), assignment.root.join(".git")];
    if let Some((_, state)) = assignment.env.iter().find(|(k, _)| k == "AOT_STATE") {
        let state = PathBuf::from(state);
        if let Some(name) = state.file_name() {
            // With isolation the attempt's copy holds the file under the same name.
            let here = assignment.root.join(name);
            let mut journal = here.clone().into_os_string();
            journal.push(".journal.jsonl");
            out.push(PathBuf::from(journal));
            out.push(here);
        }
        out.push(state);
    }
    out
}

fn message_tokens(m: &Message) -> u64 {
    let calls: u64 = m
        .tool_calls
        .iter()
        .map(|c| estimate_tokens(&c.function.arguments) + estimate_tokens(&c.function.name) + 8)
        .sum();
    estimate_tokens(&m.content) + calls + 4
}

fn failed(class: FailureClass, message: String) -> Worked {
    Worked::Failed {
        class,
        message,
        ended: Default::default(),
        blocked: None,
    }
}

fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_the_last_summary_line() {
        let summary_of = command::summary_of;
        assert_eq!(summary_of("did it\nsummary: first\nmore\nsummary: second\n"), "second");
        assert_eq!(summary_of("all done\n\n"), "all done");
        assert_eq!(summary_of(""), "");
    }
}
