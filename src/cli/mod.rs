//! The CLI layer: clap arguments, one module per subcommand, and one error type
//! whose kind decides the exit code.

/// Prints to standard output; a failed write (a full disk) returns from the
/// calling command with an error (exit 1), never a panic; a reader that
/// closed the pipe (`aot log | head`) ends the command quietly.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))?
    };
}

/// `out!` with a line break.
macro_rules! outln {
    () => { out!("\n") };
    ($($arg:tt)*) => {
        out!("{}\n", format_args!($($arg)*))
    };
}

/// Prints to standard error, inert (control characters shown, never
/// obeyed: see [`aot::model::text::inert`]); a failed write is ignored
/// (there is nowhere left to report it).
macro_rules! err {
    ($($arg:tt)*) => {{
        $crate::cli::write_stderr(&format!($($arg)*));
    }};
}

/// `err!` with a line break.
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::cli::write_stderr(&format!("{}\n", format_args!($($arg)*)));
    }};
}

mod align;
mod audit;
mod graph;
mod journal;
mod log;
mod memory;
mod redirect;
mod replay;
mod report;
mod run;
mod schema;
mod status;
mod stop;
mod ui;
mod undo;
mod validate;

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: bad input or I/O error.
pub const EXIT_ERROR: i32 = 1;
/// Exit code: usage error (clap's default).
#[allow(dead_code)]
pub const EXIT_USAGE: i32 = 2;

const AFTER_HELP: &str = "\
Exit codes: 0 completed/ok, 1 error (bad input, I/O), 2 usage, 3 stopped (manual),
4 abandoned, 5 exhausted, 6 gate (not aligned), 7 blocked, 8 iteration limit,
9 audit findings at warning level or above.

Docs: docs/user-guide.md, docs/state-file.md, docs/cli.md, docs/ggs.md, docs/memory.md";

/// Drive a piece of work to a verifiable end, with a proof that the loop stops.
#[derive(Debug, Parser)]
#[command(name = "aot", version, about, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// State file to work on (.json for JSON, anything else YAML)
    #[arg(
        long,
        global = true,
        env = "AOT_STATE",
        default_value = "aot.yaml",
        value_name = "FILE"
    )]
    state: PathBuf,

    /// Print machine-readable JSON instead of text
    #[arg(long, global = true)]
    json: bool,

    /// Memory journal shared by the tasks of a folder [default: .aot/memory.jsonl beside the state file]
    #[arg(long, global = true, env = "AOT_MEMORY", value_name = "FILE")]
    memory: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a new state file: the objective (goal, base case, background, deliverables, done) and the initial graph
    Align(align::Args),
    /// Run the loop until the base case holds or another stop reason
    Start(run::StartArgs),
    /// Run one iteration, save, and exit
    Step(run::StepArgs),
    /// Ask the running loop to stop: in-flight work is cancelled, state saved, exit 3
    Stop(stop::Args),
    /// Change the objective, the graph, a constraint or a binding, with the trail rules of each
    Redirect(redirect::Args),
    /// Put back what landings changed in your files (every landing of the last run, newest first, or one atom's), merged with your edits since; the undone atoms run again
    Undo(undo::Args),
    /// Check state files for every problem at once, with file:line:column
    Validate(validate::Args),
    /// Print the JSON Schema of the state file
    Schema(schema::Args),
    /// Show the graph with each atom's status, the ready frontier, bindings, trail and last stop
    Status(status::Args),
    /// Rebuild the state file from its journal, or check that they agree
    Replay(replay::Args),
    /// Export the work graph as Graphviz DOT, Mermaid or SVG, statuses as colours
    Graph(graph::Args),
    /// Report what the journal shows: convergence failures, thrashing, broken rules, damage, spend without progress
    Audit(audit::Args),
    /// One self-contained HTML page: graph, timeline, loss curve, memory, spend, stop, audit
    Report(report::Args),
    /// Show the journal as a decision log: runs, failures, GGS decisions and choices
    Log(log::Args),
    /// Inspect the memory shared by the tasks of this folder, and run the Dreamer
    #[command(subcommand)]
    Memory(memory::Command),
    /// Keep the journal small: fold its records into one (a running loop does this itself past 8 MiB)
    #[command(subcommand)]
    Journal(journal::Command),
}

/// What a command needs besides its own arguments.
pub struct Context {
    /// The state file.
    pub state: PathBuf,
    /// Machine output requested.
    pub json: bool,
    /// The memory journal, if not the default.
    pub memory: Option<PathBuf>,
    /// Colors allowed on stderr.
    pub color: bool,
}

impl Context {
    /// Returns the state file's path as the user gave it.
    pub fn label(&self) -> String {
        self.state.display().to_string()
    }

    /// Returns the memory journal's path: `--memory`, or beside the state file.
    pub fn memory_path(&self) -> PathBuf {
        self.memory
            .clone()
            .unwrap_or_else(|| aot::memory::MemoryFile::beside(&self.state))
    }
}

/// Warns about edits a save kept aside (`<state>.rejected-<n>`); with
/// `--json` the command's output lists them instead.
pub fn report_set_aside(paths: &[std::path::PathBuf], json: bool) {
    if json {
        return;
    }
    for kept in paths {
        warn(&format!(
            "the file was edited while aot was saving it; that edit is kept as {} — apply it again",
            kept.display()
        ));
    }
}

/// Writes to standard output, flushed, or says why it could not.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    use std::io::Write as _;
    let text = args.to_string();
    let mut out = std::io::stdout().lock();
    out.write_all(aot::model::text::inert(&text).as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::writing)
}

/// A writer that makes what passes through it inert (see
/// [`aot::model::text::inert`]): for commands that stream many lines.
pub struct InertWriter<W: std::io::Write>(pub W);

impl<W: std::io::Write> std::io::Write for InertWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(aot::model::text::inert(text).as_bytes())?,
            // Not text (a cut sequence): control bytes shown, the rest as it is.
            Err(_) => {
                for byte in buf {
                    match byte {
                        b'\n' | b'\t' => self.0.write_all(&[*byte])?,
                        0..=0x1f | 0x7f => self.0.write_all(format!("\\u{byte:04x}").as_bytes())?,
                        _ => self.0.write_all(&[*byte])?,
                    }
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Writes `text` to standard error, inert; a failed write is ignored.
pub fn write_stderr(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(aot::model::text::inert(text).as_bytes());
}

/// Writes a rendering aot styled itself (diagnostics in colour) as it is:
/// its escapes are aot's own, and the file text inside it was made inert
/// before it was styled.
pub fn write_stderr_styled(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// A failed command: printed once, then the process exits with `code`.
#[derive(Debug)]
pub struct CliError {
    /// Exit code.
    pub code: i32,
    /// What went wrong (already rendered when `rendered`).
    pub message: String,
    /// Lines that suggest what to do.
    pub hints: Vec<String>,
    /// Whether `message` is a complete rendering (diagnostics) to print as is.
    pub rendered: bool,
}

impl CliError {
    /// Returns an error with exit code 1.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_ERROR,
            message: message.into(),
            hints: Vec::new(),
            rendered: false,
        }
    }

    /// Adds a hint line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// Returns the error of a failed write to standard output: none to
    /// print, exit 0, when the reader closed the pipe (`aot log | head`).
    pub fn writing(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Self::rendered(String::new(), EXIT_OK)
        } else {
            Self::new(format!("cannot write to standard output: {error}"))
        }
    }

    /// Returns an error whose message is already rendered.
    pub fn rendered(text: String, code: i32) -> Self {
        Self {
            code,
            message: text,
            hints: Vec::new(),
            rendered: true,
        }
    }
}

impl From<aot::store::StoreError> for CliError {
    fn from(error: aot::store::StoreError) -> Self {
        use aot::store::StoreError;
        match error {
            StoreError::Read(read) => read.into(),
            StoreError::AlreadyRunning { .. } => {
                CliError::new(error.to_string()).hint("`aot stop` stops it; `aot status` shows what it is doing")
            }
            StoreError::Io { ref path, ref source } => {
                let hint = unwritable_hint(path, source);
                let error = CliError::new(error.to_string());
                match hint {
                    Some(hint) => error.hint(hint),
                    None => error,
                }
            }
            StoreError::Journal(aot::journal::JournalError::Io { ref path, ref source }) => {
                let hint = unwritable_hint(path, source);
                let error = CliError::new(error.to_string());
                match hint {
                    Some(hint) => error.hint(hint),
                    None => error,
                }
            }
            other => CliError::new(other.to_string()),
        }
    }
}

/// A hint for a file aot could not write because its folder is read-only.
fn unwritable_hint(path: &std::path::Path, source: &std::io::Error) -> Option<String> {
    let read_only = matches!(
        source.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
    );
    read_only.then(|| {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or(".".to_string(), |p| p.display().to_string());
        format!(
            "{dir} is not writable: aot keeps the state file's journal and its `.aot/` folder (locks, memory) beside it; \
             make the folder writable, or copy the state file to a folder you can write (e.g. `cp {} /tmp/`) and use --state there",
            path.file_name().map_or("the state file".into(), |n| n.to_string_lossy().into_owned())
        )
    })
}

impl From<aot::state::document::ReadError> for CliError {
    fn from(error: aot::state::document::ReadError) -> Self {
        use aot::state::document::ReadError;
        match error {
            ReadError::Invalid(diagnostics) => CliError::rendered(diagnostics.render(color_stderr()), EXIT_ERROR),
            ReadError::NotFound(path) => CliError::new(format!("no state file at {}", path.display()))
                .hint("pass --state FILE (or set AOT_STATE), or create one with `aot align`"),
            other => CliError::new(other.to_string()),
        }
    }
}

impl From<aot::journal::JournalError> for CliError {
    fn from(error: aot::journal::JournalError) -> Self {
        CliError::new(error.to_string())
    }
}

fn color_stderr() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

/// Returns the wall clock, or — for reproducible tests — a fixed clock starting
/// at `AOT_TEST_CLOCK` (milliseconds since the epoch) and advancing 1 ms per reading.
pub fn clock_from_env() -> std::sync::Arc<dyn aot::model::time::Clock> {
    match std::env::var("AOT_TEST_CLOCK").ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(start) => std::sync::Arc::new(aot::model::time::FixedClock::new(
            aot::model::time::Timestamp::from_millis(start),
            1,
        )),
        None => std::sync::Arc::new(aot::model::time::SystemClock),
    }
}

/// Prints a warning line on stderr.
/// The folder the state file is in, absolute: where commands run and what
/// Law 1 calls the workspace.
pub fn folder_of(state: &std::path::Path) -> std::path::PathBuf {
    let folder = state
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf())
}

pub fn warn(message: &str) {
    errln!("warning: {message}");
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            let _ = e.print();
            return code;
        }
    };
    let ctx = Context {
        state: cli.state,
        json: cli.json,
        memory: cli.memory,
        color: color_stderr(),
    };
    let result = match cli.command {
        Command::Align(args) => align::run(&ctx, args),
        Command::Start(args) => run::start(&ctx, args),
        Command::Step(args) => run::step(&ctx, args),
        Command::Stop(args) => stop::run(&ctx, args),
        Command::Redirect(args) => redirect::run(&ctx, args),
        Command::Undo(args) => undo::run(&ctx, args),
        Command::Validate(args) => validate::run(&ctx, args),
        Command::Schema(args) => schema::run(&ctx, args),
        Command::Status(args) => status::run(&ctx, args),
        Command::Replay(args) => replay::run(&ctx, args),
        Command::Graph(args) => graph::run(&ctx, args),
        Command::Audit(args) => audit::run(&ctx, args),
        Command::Report(args) => report::run(&ctx, args),
        Command::Log(args) => log::run(&ctx, args),
        Command::Memory(command) => memory::run(&ctx, command),
        Command::Journal(command) => journal::run(&ctx, command),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            if error.rendered {
                // Diagnostics styled by aot, their quoted text already inert.
                write_stderr_styled(&error.message);
            } else {
                errln!("error: {}", error.message);
            }
            for hint in &error.hints {
                errln!("hint: {hint}");
            }
            error.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_folder_gets_a_hint_that_names_it() {
        let path = std::path::Path::new("/srv/work/aot.yaml.journal.jsonl");
        for kind in [
            std::io::ErrorKind::PermissionDenied,
            std::io::ErrorKind::ReadOnlyFilesystem,
        ] {
            let hint = unwritable_hint(path, &std::io::Error::from(kind)).expect("a hint");
            assert!(hint.starts_with("/srv/work is not writable"), "{hint}");
            assert!(hint.contains("--state"), "{hint}");
        }
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(unwritable_hint(path, &other), None);
    }
}
