//! The command worker: runs a shell command (`bash -c`) in its own process
//! group, feeds it stdin, keeps the head and tail of its output (4 KB in all),
//! extracts the `summary:` line, and kills the whole group — grandchildren
//! included — on timeout or cancellation.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Bytes of output kept from the start (4 KB in all with the next two).
pub const KEEP_HEAD: usize = 1024;
/// Bytes of output kept from the middle: lines that carry an error, with context.
pub const KEEP_ERRORS: usize = 1024;
/// Bytes of output kept from the end.
pub const KEEP_TAIL: usize = 2048;

/// Lines kept before and after an error line leaving the middle.
const ERROR_CONTEXT: usize = 2;

/// What to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The shell command.
    pub command: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Text written to stdin (none: stdin is empty).
    pub stdin: Option<String>,
    /// Kill after this long.
    pub timeout: Option<Duration>,
    /// Keep all of stdout too (up to [`STDOUT_MAX`]), for a parser of the
    /// command's own output format (an agent CLI's JSON).
    pub keep_stdout: bool,
}

/// The most of stdout kept whole (`keep_stdout`).
pub const STDOUT_MAX: usize = 16 << 20;

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by a signal it did not ask for.
    Signal(i32),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// It was cancelled (stop or redirect) and killed.
    Cancelled,
    /// It could not be started.
    SpawnFailed(String),
}

/// The result of running a command.
#[derive(Debug, Clone)]
pub struct CommandResult {
    /// How it ended.
    pub exit: Exit,
    /// Head and tail of stdout and stderr interleaved, at most 4 KB.
    pub output: String,
    /// The last stdout line starting with `summary:` (prefix stripped), else
    /// the last non-empty stdout line.
    pub summary: String,
    /// How long it ran.
    pub duration: Duration,
    /// All of stdout, when kept (`keep_stdout`).
    pub stdout: Option<String>,
}

/// Says how a command ended, for a message: `exit 2`, `timed out`, ...
pub fn describe(exit: &Exit) -> String {
    match exit {
        Exit::Code(code) => format!("exit {code}"),
        Exit::Signal(signal) => format!("killed by signal {signal}"),
        Exit::TimedOut => "timed out".to_string(),
        Exit::Cancelled => "cancelled".to_string(),
        Exit::SpawnFailed(why) => why.clone(),
    }
}

impl CommandResult {
    /// Returns whether it exited 0.
    pub fn success(&self) -> bool {
        self.exit == Exit::Code(0)
    }

    /// How it ended, for a failure's record (without a summary).
    pub fn ended(&self) -> crate::model::Ended {
        crate::model::Ended {
            exit_code: self.code(),
            signal: match self.exit {
                Exit::Signal(signal) => Some(signal),
                _ => None,
            },
            summary: None,
            discarded: None,
        }
    }

    /// Returns the exit code if it exited normally.
    pub fn code(&self) -> Option<i32> {
        match self.exit {
            Exit::Code(code) => Some(code),
            _ => None,
        }
    }
}

/// Keeps the first `KEEP_HEAD` and the last `KEEP_TAIL` bytes of a stream of
/// lines, and from the middle the lines that carry an error (with
/// [`ERROR_CONTEXT`] lines around each) up to `KEEP_ERRORS` bytes: a test
/// runner's failing test or a traceback far above its summary survives.
#[derive(Debug, Default)]
struct Capture {
    head: String,
    /// Kept lines of the middle, each with its position in the stream.
    errors: Vec<(usize, String)>,
    errors_len: usize,
    /// The last lines that left the tail, for the context before an error.
    before: std::collections::VecDeque<(usize, String)>,
    /// Lines still to keep after an error line.
    after: usize,
    tail: std::collections::VecDeque<(usize, String)>,
    tail_len: usize,
    lines: usize,
}

impl Capture {
    fn push(&mut self, line: &str) {
        let n = self.lines;
        self.lines += 1;
        if self.head.len() + line.len() < KEEP_HEAD && self.tail.is_empty() {
            self.head.push_str(line);
            return;
        }
        self.tail.push_back((n, line.to_string()));
        self.tail_len += line.len();
        while self.tail_len > KEEP_TAIL && self.tail.len() > 1 {
            if let Some(old) = self.tail.pop_front() {
                self.tail_len -= old.1.len();
                self.leave_middle(old);
            }
        }
    }

    /// A line leaves the tail: kept if it carries an error or is near one.
    fn leave_middle(&mut self, line: (usize, String)) {
        if crate::model::text::carries_error(&line.1) {
            for before in std::mem::take(&mut self.before) {
                self.keep_error_line(before);
            }
            self.keep_error_line(line);
            self.after = ERROR_CONTEXT;
        } else if self.after > 0 {
            self.after -= 1;
            self.keep_error_line(line);
        } else {
            self.before.push_back(line);
            if self.before.len() > ERROR_CONTEXT {
                self.before.pop_front();
            }
        }
    }

    fn keep_error_line(&mut self, (n, line): (usize, String)) {
        if self.errors_len + line.len() <= KEEP_ERRORS {
            self.errors_len += line.len();
            self.errors.push((n, line));
        }
    }

    fn text(&self) -> String {
        let mut out = self.head.clone();
        let mut next = self.head.matches('\n').count();
        for (n, line) in self.errors.iter().chain(self.tail.iter()) {
            if *n > next {
                let gap = n - next;
                out.push_str(&format!(
                    "[… {gap} line{} omitted …]\n",
                    if gap == 1 { "" } else { "s" }
                ));
            }
            out.push_str(line);
            next = n + 1;
        }
        // A single huge line may still exceed the budget: keep its two ends.
        if out.len() > KEEP_HEAD + KEEP_ERRORS + KEEP_TAIL + 64 {
            let head_end = floor_char_boundary(&out, KEEP_HEAD);
            let tail_start = ceil_char_boundary(&out, out.len() - KEEP_TAIL);
            out = format!("{}\n[…]\n{}", &out[..head_end], &out[tail_start..]);
        }
        out
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(text: &str, mut i: usize) -> usize {
    while i < text.len() && !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[derive(Debug, Default)]
struct Summary {
    marked: Option<String>,
    last: Option<String>,
}

/// The summary of a text: its last line starting with `summary:` (prefix
/// stripped), else its last non-empty line.
pub fn summary_of(text: &str) -> String {
    let mut summary = Summary::default();
    for line in text.lines() {
        summary.see(line);
    }
    summary.get()
}

impl Summary {
    fn see(&mut self, line: &str) {
        let line = line.trim_end();
        if let Some(rest) = line.trim_start().strip_prefix("summary:") {
            self.marked = Some(rest.trim().to_string());
        } else if !line.trim().is_empty() {
            self.last = Some(line.trim().to_string());
        }
    }

    fn get(self) -> String {
        self.marked.or(self.last).unwrap_or_default()
    }
}

/// The longest output line kept whole; the rest of a longer line is dropped
/// (and counted), so a command printing one endless line costs no memory.
pub const LINE_MAX: usize = 64 * 1024;

/// How long output pipes are still read after the command has ended (or was
/// killed): a process that left the group (`setsid … &`) and kept the pipes
/// open does not hold the attempt beyond this.
pub const AFTER_EXIT: Duration = Duration::from_secs(1);

async fn read_lines<R: AsyncRead + Unpin>(reader: R, tx: tokio::sync::mpsc::Sender<(bool, String)>, stdout: bool) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::new();
    let mut dropped = 0;
    while let Ok(chunk) = reader.fill_buf().await {
        if chunk.is_empty() {
            break;
        }
        let (len, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let content = len - usize::from(ended);
        let keep = LINE_MAX.saturating_sub(line.len()).min(content);
        line.extend_from_slice(&chunk[..keep]);
        dropped += content - keep;
        reader.consume(len);
        if ended && tx.send((stdout, finish_line(&mut line, &mut dropped))).await.is_err() {
            return;
        }
    }
    if !line.is_empty() || dropped > 0 {
        let _ = tx.send((stdout, finish_line(&mut line, &mut dropped))).await;
    }
}

/// The line read so far (without its break) as text ending in a line break,
/// with a note of what was cut from it; empties the buffer.
fn finish_line(line: &mut Vec<u8>, dropped: &mut usize) -> String {
    let mut text = String::from_utf8_lossy(line).into_owned();
    line.clear();
    if *dropped > 0 {
        text.push_str(&format!("… [{} bytes cut]", *dropped));
        *dropped = 0;
    }
    text.push('\n');
    text
}

/// Process groups of the commands running now, so that an emergency exit can
/// kill them all (`kill_all`).
static LIVE_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn track(pid: Option<u32>, live: bool) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    if let Ok(mut groups) = LIVE_GROUPS.lock() {
        if live {
            groups.push(pid);
        } else {
            groups.retain(|&g| g != pid);
        }
    }
}

/// Kills every command still running (for a second Ctrl-C: exit now, leave nothing behind).
pub fn kill_all() {
    if let Ok(groups) = LIVE_GROUPS.lock() {
        for &pid in groups.iter() {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Stops what a killed run left running for the state file `state`: every
/// process whose environment names this file (`AOT_STATE=<state>`) *and* a
/// runner (`AOT_RUNNER_PID`, set only on the workers a runner starts) that is
/// no longer alive, with its process group. A process that merely has
/// `AOT_STATE` exported (the user's shell) is never touched, nor is this
/// process, its own group, or any of its ancestors. Called by a new runner,
/// which holds the runner lock. Waits (at most 2 s) until they are gone.
/// Returns how many processes there were. Linux (`/proc`); elsewhere nothing.
pub fn reap_orphans(state: &std::path::Path) -> usize {
    let wanted = format!("AOT_STATE={}", state.display());
    let runner_prefix = format!("{}=", crate::engine::roles::RUNNER_VAR);
    let me = std::process::id() as i32;
    let found = find_processes(|_, vars| {
        if !vars.contains(&wanted.as_bytes()) {
            return false;
        }
        let runner = vars
            .iter()
            .find_map(|var| var.strip_prefix(runner_prefix.as_bytes()))
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i32>().ok());
        // Started by a runner, and that runner is gone (or is this one's pid
        // reused: a new runner has started none yet).
        runner.is_some_and(|runner| runner == me || !crate::model::process::running(runner))
    });
    kill_found(&found);
    found.len()
}

/// Kills what an attempt of `atom` left running when it ended — a daemon
/// that left the attempt's process group (`setsid`, a double fork) carries
/// the attempt's marks in its environment (`AOT_ATOM`, `AOT_ATTEMPT`, and
/// this runner's pid). Returns how many. Linux (`/proc`); elsewhere nothing.
pub fn kill_attempt_leftovers(atom: &str, attempt: u32) -> usize {
    let marks = [
        format!("AOT_ATOM={atom}"),
        format!("AOT_ATTEMPT={attempt}"),
        format!("{}={}", crate::engine::roles::RUNNER_VAR, std::process::id()),
    ];
    let found = find_processes(|_, vars| marks.iter().all(|m| vars.contains(&m.as_bytes())));
    kill_found(&found);
    found.len()
}

/// Kills everything a run started that is still running at its end: every
/// process with this runner's mark, and every process this one adopted as
/// a subreaper (an attempt's orphan that cleared its environment). Returns
/// how many. Linux (`/proc`); elsewhere nothing.
pub fn kill_run_leftovers() -> usize {
    let mark = format!("{}={}", crate::engine::roles::RUNNER_VAR, std::process::id());
    let me = std::process::id() as i32;
    let found = find_processes(|ppid, vars| ppid == me || vars.contains(&mark.as_bytes()));
    kill_found(&found);
    found.len()
}

/// Makes this process the reaper of its descendants' orphans (Linux): a
/// process an attempt double-forks away stays below it, to be found and
/// ended with the run.
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Makes this process not dumpable (Linux): a process of the same user
/// without `CAP_SYS_PTRACE` — an attempt's command, the model's shell —
/// can neither read its `/proc/<pid>/environ` and memory nor trace it.
/// (A root attempt keeps that capability until the sandbox drops it.)
pub fn not_dumpable() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// (ppid, process group) of `pid`, from `/proc`.
fn stat_of(pid: i32) -> Option<(i32, i32)> {
    // After the command name in parentheses: state, ppid, pgrp.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace().skip(1);
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

/// The live processes (pid, group) for which `wanted(ppid, environment)`
/// holds, never this process nor its ancestors; zombies are left out.
fn find_processes(wanted: impl Fn(i32, &[&[u8]]) -> bool) -> Vec<(i32, i32)> {
    let me = std::process::id() as i32;
    let mut ancestors = std::collections::HashSet::from([me]);
    let mut at = me;
    while let Some((ppid, _)) = stat_of(at).filter(|(ppid, _)| *ppid > 1) {
        if !ancestors.insert(ppid) {
            break;
        }
        at = ppid;
    }
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if ancestors.contains(&pid) || !crate::model::process::running(pid) {
            continue;
        }
        let Some((ppid, group)) = stat_of(pid) else {
            continue;
        };
        // Another user's process, or one gone meanwhile: its environment is
        // unreadable (an adopted orphan is judged by its parent alone).
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if wanted(ppid, &vars) {
            // An ancestor's group (the user's shell job) is never killed.
            found.push((pid, if ancestors.contains(&group) { 0 } else { group }));
        }
    }
    found
}

/// SIGKILLs each found process and its group (never this process's group),
/// then waits (at most 2 s) until they cannot write any more.
fn kill_found(found: &[(i32, i32)]) {
    if found.is_empty() {
        return;
    }
    let my_group = nix::unistd::getpgrp().as_raw();
    for &(pid, group) in found {
        if group > 1 && group != my_group {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    // SIGKILL is delivered asynchronously.
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while Instant::now() < deadline && found.iter().any(|&(pid, _)| crate::model::process::running(pid)) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Kills a command's process group when its run is dropped half-way.
struct GroupGuard {
    pid: Option<u32>,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pid);
            track(self.pid, false);
        }
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // The group may already be gone; nothing else to do then.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// aot's own model settings (`BRAIN_*`, `TOOL_*`; docs/llm.md): what aot
/// calls, not what an atom's command or agent CLI should. They reach a
/// command only when its atom's `env:` sets them; `OPENAI_*` are the shell's,
/// which agent CLIs read as they always do.
pub const OWN_MODEL_VARS: [&str; 6] = [
    "BRAIN_BASE_URL",
    "BRAIN_API_KEY",
    "BRAIN_MODEL",
    "TOOL_BASE_URL",
    "TOOL_API_KEY",
    "TOOL_MODEL",
];

/// Runs a command to its end, its timeout, or cancellation.
pub async fn run(spec: &CommandSpec, cancel: &CancellationToken) -> CommandResult {
    let started = Instant::now();
    let mut command = Command::new("bash");
    for name in OWN_MODEL_VARS {
        command.env_remove(name);
    }
    command
        .arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return CommandResult {
                exit: Exit::SpawnFailed(format!("cannot start bash: {e}")),
                output: String::new(),
                summary: String::new(),
                duration: started.elapsed(),
                stdout: None,
            };
        }
    };
    let pid = child.id();
    track(pid, true);
    // A caller that drops this future (an outer timeout) still leaves nothing running.
    let mut guard = GroupGuard { pid, armed: true };
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let mut readers = tokio::task::JoinSet::new();
    if let Some(out) = child.stdout.take() {
        readers.spawn(read_lines(out, tx.clone(), true));
    }
    if let Some(err) = child.stderr.take() {
        readers.spawn(read_lines(err, tx.clone(), false));
    }
    drop(tx);
    if let (Some(mut stdin), Some(text)) = (child.stdin.take(), spec.stdin.clone()) {
        tokio::spawn(async move {
            // A command that does not read its stdin closes the pipe: not an error.
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let mut capture = Capture::default();
    let mut summary = Summary::default();
    let mut stdout = spec.keep_stdout.then(String::new);
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep_until = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep_until);
    let mut exit = None;
    let mut ended_at = None;
    let mut streams_open = true;
    while exit.is_none() || streams_open {
        if exit.is_some() && ended_at.is_none() {
            ended_at = Some(tokio::time::Instant::now());
        }
        let stop_reading = ended_at.unwrap_or_else(tokio::time::Instant::now) + AFTER_EXIT;
        tokio::select! {
            _ = tokio::time::sleep_until(stop_reading), if ended_at.is_some() && streams_open => {
                // A process outside the group still holds the pipes open.
                readers.abort_all();
                streams_open = false;
                capture.push(&format!(
                    "[aot: output still open {}s after the command ended: a background process holds it; \
                     redirect a service's output (`setsid svc >svc.log 2>&1 &`)]\n",
                    AFTER_EXIT.as_secs()
                ));
            },
            line = rx.recv(), if streams_open => match line {
                Some((is_stdout, line)) => {
                    if is_stdout {
                        summary.see(&line);
                        if let Some(all) = stdout.as_mut().filter(|all| all.len() + line.len() <= STDOUT_MAX) {
                            all.push_str(&line);
                        }
                    }
                    capture.push(&line);
                }
                None => streams_open = false,
            },
            status = child.wait(), if exit.is_none() => {
                exit = Some(match status {
                    Ok(status) => match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                        (Some(code), _) => Exit::Code(code),
                        (None, Some(signal)) => Exit::Signal(signal),
                        (None, None) => Exit::Signal(0),
                    },
                    Err(e) => Exit::SpawnFailed(format!("lost the child process: {e}")),
                });
                // Background processes the command left behind hold the pipes
                // open; the command is over, so its group goes with it.
                kill_group(pid);
            },
            _ = &mut sleep_until, if exit.is_none() => {
                kill_group(pid);
                let _ = child.wait().await;
                exit = Some(Exit::TimedOut);
            },
            _ = cancel.cancelled(), if exit.is_none() => {
                kill_group(pid);
                let _ = child.wait().await;
                exit = Some(Exit::Cancelled);
            },
        }
    }
    track(pid, false);
    guard.armed = false;
    CommandResult {
        exit: exit.unwrap_or(Exit::Cancelled),
        output: capture.text(),
        summary: summary.get(),
        duration: started.elapsed(),
        stdout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str) -> CommandSpec {
        CommandSpec {
            command: command.into(),
            cwd: std::env::temp_dir(),
            env: vec![("GREETING".into(), "hi".into())],
            stdin: None,
            timeout: Some(Duration::from_secs(20)),
            keep_stdout: false,
        }
    }

    #[tokio::test]
    async fn summary_is_the_marked_line_else_the_last_line() {
        let never = CancellationToken::new();
        let r = run(&spec("echo one; echo 'summary: the result'; echo three"), &never).await;
        assert!(r.success());
        assert_eq!(r.summary, "the result");
        assert_eq!(r.output, "one\nsummary: the result\nthree\n");
        let r = run(&spec("echo out; echo 'summary: not from stderr' >&2"), &never).await;
        assert_eq!(r.summary, "out", "only stdout lines are summaries");
        assert!(r.output.contains("not from stderr"), "stderr is kept in the output");
        let r = run(&spec("echo $GREETING; echo; exit 3"), &never).await;
        assert_eq!(r.exit, Exit::Code(3));
        assert_eq!(r.summary, "hi");
    }

    #[tokio::test]
    async fn output_keeps_head_and_tail_within_four_kilobytes() {
        let never = CancellationToken::new();
        let r = run(&spec("for i in $(seq 1 2000); do echo line $i; done"), &never).await;
        assert!(r.output.len() <= 4200, "{}", r.output.len());
        assert!(r.output.starts_with("line 1\n"));
        assert!(r.output.ends_with("line 2000\n"));
        assert!(r.output.contains("lines omitted"));
        assert_eq!(r.summary, "line 2000");
    }

    #[tokio::test]
    async fn an_error_far_from_both_ends_is_kept_with_its_context() {
        let never = CancellationToken::new();
        let r = run(
            &spec("for i in $(seq 1 3000); do echo line $i; [ $i = 1500 ] && echo 'thread main panicked at src/lib.rs:9'; done; exit 101"),
            &never,
        )
        .await;
        assert!(r.output.len() <= 4200, "{}", r.output.len());
        for needle in [
            "line 1\n",
            "line 1499\nline 1500\nthread main panicked at src/lib.rs:9\nline 1501\n",
            "line 3000\n",
        ] {
            assert!(r.output.contains(needle), "`{needle}` in:\n{}", r.output);
        }
        assert!(r.output.contains("lines omitted …]\nline 1499"), "{}", r.output);
    }

    #[tokio::test]
    async fn one_huge_line_is_cut_on_character_boundaries() {
        let never = CancellationToken::new();
        let r = run(&spec("printf 'é%.0s' $(seq 1 20000); echo"), &never).await;
        assert!(r.output.len() < 4300, "{}", r.output.len());
        assert!(r.output.contains("[…]"));
    }

    #[tokio::test]
    async fn stdin_reaches_the_command() {
        let never = CancellationToken::new();
        let mut s = spec("read first; echo \"summary: got $first\"");
        s.stdin = Some("prompt text\nmore\n".into());
        assert_eq!(run(&s, &never).await.summary, "got prompt text");
    }

    /// Returns the live (not zombie) processes whose command line contains `marker`.
    fn live_with(marker: &str) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let dir = entry.path();
            let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let zombie = std::fs::read_to_string(dir.join("stat")).is_ok_and(|s| s.contains(") Z "));
            if cmdline.contains(marker) && !zombie && !cmdline.contains("cargo") {
                found.push(cmdline);
            }
        }
        found
    }

    async fn assert_gone(marker: &str) {
        // The kill is sent before `run` returns; its delivery is asynchronous.
        for _ in 0..500 {
            if live_with(marker).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("still running: {:?}", live_with(marker));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let never = CancellationToken::new();
        let marker = format!("aot-timeout-{}", std::process::id());
        let mut s = spec(&format!("(exec -a {marker} sleep 1000) & echo started; wait"));
        s.timeout = Some(Duration::from_millis(300));
        let r = run(&s, &never).await;
        assert_eq!(r.exit, Exit::TimedOut);
        assert_eq!(r.summary, "started");
        assert_gone(&marker).await;
    }

    #[tokio::test]
    async fn background_children_die_with_a_finished_command() {
        let never = CancellationToken::new();
        let marker = format!("aot-background-{}", std::process::id());
        let r = run(&spec(&format!("(exec -a {marker} sleep 1000) & echo done")), &never).await;
        assert!(r.success());
        assert_gone(&marker).await;
    }

    #[tokio::test]
    async fn cancellation_kills_at_once() {
        let cancel = CancellationToken::new();
        let marker = format!("aot-cancel-{}", std::process::id());
        let s = spec(&format!("exec -a {marker} sleep 1000"));
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            trigger.cancel();
        });
        let started = Instant::now();
        let r = run(&s, &cancel).await;
        assert_eq!(r.exit, Exit::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_gone(&marker).await;
    }

    #[tokio::test]
    async fn a_missing_program_exits_127() {
        let never = CancellationToken::new();
        assert_eq!(run(&spec("no-such-program-aot"), &never).await.exit, Exit::Code(127));
    }
}
