//! `aot journal compact`: fold the journal into one record, so a long-lived
//! state file's journal stays small. A running loop does this by itself once
//! its journal passes a size (`aot start` docs); this command is for a file
//! at rest.

use aot::store::{self, Compacted, Store};
use serde_json::json;

use super::{CliError, Context, EXIT_OK};

/// `aot journal` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Fold every record into one `compacted` record (the state, and the failed attempts a retry
    /// still needs), atomically. `aot log` then starts there; `aot replay` still rebuilds the file.
    Compact,
}

pub fn run(ctx: &Context, command: Command) -> Result<i32, CliError> {
    match command {
        Command::Compact => compact(ctx),
    }
}

fn compact(ctx: &Context) -> Result<i32, CliError> {
    if !ctx.state.exists() {
        return Err(aot::state::document::ReadError::NotFound(ctx.state.clone()).into());
    }
    let mut store = Store::new(&ctx.state, super::clock_from_env());
    let paths = store.paths().clone();
    // Hold the runner lock: no loop may start on the file meanwhile.
    let _runner = store::acquire_runner(&paths, std::process::id())?;
    let (mut state, _) = store.open()?;
    let compaction = store.compact(&mut state)?;
    let journal = paths.journal.display().to_string();
    match &compaction {
        Compacted::Done(c) => {
            if ctx.json {
                outln!(
                    "{}",
                    json!({"file": ctx.label(), "journal": journal, "compacted": true, "records": c.records,
                           "through": c.through, "bytes_before": c.bytes_before, "bytes_after": c.bytes_after})
                );
            } else {
                outln!(
                    "{journal}: {} records folded into one (through #{}), {} → {}",
                    c.records,
                    c.through,
                    size(c.bytes_before),
                    size(c.bytes_after)
                );
            }
        }
        Compacted::NothingToFold | Compacted::FileBehind => {
            let reason = if matches!(compaction, Compacted::NothingToFold) {
                "nothing to fold: the journal holds at most one record"
            } else {
                "not compacted: the file changed while aot read it (an edit, or `aot stop`/`redirect`); run it again"
            };
            if ctx.json {
                outln!(
                    "{}",
                    json!({"file": ctx.label(), "journal": journal, "compacted": false, "reason": reason})
                );
            } else {
                outln!("{journal}: {reason}");
            }
        }
    }
    Ok(EXIT_OK)
}

/// A byte count the way people read it.
fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / KIB / KIB)
    }
}
