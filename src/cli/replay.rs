//! `aot replay`: rebuild the state file from its journal, or check that the two
//! agree (`--check`).

use aot::state::document::{self, Format};
use aot::{journal, store};
use serde_json::json;

use super::{CliError, Context, EXIT_ERROR, EXIT_OK, warn};

/// Arguments of `aot replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Compare the file with the journal instead of rewriting it; exit 1 with a diff when they differ
    #[arg(long)]
    check: bool,
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let paths = store::Paths::new(&ctx.state);
    let format = Format::of(&ctx.state);
    if args.check && !paths.journal.exists() {
        // A run killed before its first write leaves no journal: nothing disagrees.
        document::read(&ctx.state)?;
        if ctx.json {
            outln!("{}", json!({"file": ctx.label(), "agree": true, "journal": false}));
        } else {
            outln!(
                "{}: no journal yet, nothing to compare (aot starts one with its first change)",
                ctx.label()
            );
        }
        return Ok(EXIT_OK);
    }
    if !paths.journal.exists() {
        return Err(CliError::new(format!("no journal at {}", paths.journal.display()))
            .hint("the journal is written by commands that change the state, such as `aot start`"));
    }
    if args.check {
        return check(ctx, &paths, format);
    }
    if let Some(pid) = store::running_pid(&paths) {
        return Err(CliError::new(format!("aot is running on {} (pid {pid})", ctx.label()))
            .hint("`aot stop` first: the runner owns the file while it runs"));
    }
    let _lock = store::lock_short(&paths)?;
    let contents = journal::read(&paths.journal)?;
    if let Some(torn) = contents.torn {
        warn(&format!(
            "{}: line {} is incomplete (a crash during a write) and was skipped",
            paths.journal.display(),
            torn.line
        ));
    }
    let state = journal::fold(&contents.records)
        .ok_or_else(|| CliError::new(format!("{} has no snapshot to start from", paths.journal.display())))?;
    let header = std::fs::read_to_string(&ctx.state)
        .map(|t| document::header_of(&t))
        .unwrap_or_default();
    let text = document::to_text(&state, format, &header).map_err(CliError::new)?;
    aot::model::file::refuse_link(&ctx.state)
        .and_then(|()| store::write_atomic(&ctx.state, text.as_bytes()))
        .map_err(|e| CliError::new(format!("{}: {e}", ctx.label())))?;
    if ctx.json {
        outln!(
            "{}",
            json!({"file": ctx.label(), "revision": state.run.revision, "records": contents.records.len()})
        );
    } else {
        outln!(
            "{}: rebuilt from {} journal records (revision {})",
            ctx.label(),
            contents.records.len(),
            state.run.revision
        );
    }
    Ok(EXIT_OK)
}

fn check(ctx: &Context, paths: &store::Paths, format: Format) -> Result<i32, CliError> {
    let doc = document::read(&ctx.state)?;
    let contents = journal::read(&paths.journal)?;
    if let Some(torn) = contents.torn {
        warn(&format!(
            "{}: line {} is incomplete (a crash during a write) and was skipped",
            paths.journal.display(),
            torn.line
        ));
    }
    let revision = doc.state.run.revision;
    let ahead = contents.last_seq().saturating_sub(revision);
    let started_after = contents.records.first().is_some_and(|first| {
        first.seq > revision && matches!(first.event, aot::journal::event::Event::Snapshot { .. })
    });
    if started_after {
        // The journal began from this file, and a run stopped before saving it.
        if ctx.json {
            outln!(
                "{}",
                json!({"file": ctx.label(), "agree": true, "revision": revision, "journal_ahead": ahead})
            );
        } else {
            outln!(
                "{}: not saved since its journal began; the journal has {ahead} event(s) the file lacks — any aot command (or `aot replay`) applies them",
                ctx.label()
            );
        }
        return Ok(EXIT_OK);
    }
    let Some(replayed) = journal::fold(contents.records.iter().take_while(|r| r.seq <= revision)) else {
        return Err(CliError::new(format!(
            "{} has no snapshot at or before revision {revision} of {}",
            paths.journal.display(),
            ctx.label()
        )));
    };
    let agree = replayed == doc.state;
    if ctx.json {
        outln!(
            "{}",
            json!({"file": ctx.label(), "agree": agree, "revision": revision, "journal_ahead": ahead})
        );
    } else if agree {
        outln!("{}: agrees with its journal at revision {revision}", ctx.label());
        if ahead > 0 {
            outln!("the journal has {ahead} later event(s) not yet in the file; `aot replay` applies them");
        }
    } else {
        let want = document::to_text(&replayed, format, "").map_err(CliError::new)?;
        let have = document::to_text(&doc.state, format, "").map_err(CliError::new)?;
        let diff = similar::TextDiff::from_lines(&want, &have);
        outln!("{}: differs from its journal at revision {revision}", ctx.label());
        out!(
            "{}",
            diff.unified_diff()
                .context_radius(2)
                .header("journal (replayed)", &ctx.label())
        );
    }
    Ok(if agree { EXIT_OK } else { EXIT_ERROR })
}
