//! `aot status`: the graph, frontier, bindings, trail and last stop — live
//! while a loop runs (the file folded with the journal records it has not
//! saved yet), and what replay gives after a crash.

use std::fmt::Write as _;

use aot::model::time::Timestamp;
use aot::state::RunStatus;
use aot::store;
use aot::store::observe::{self, FileNote, Observed, Source};
use serde_json::json;

use super::ui::status;

use super::{CliError, Context, EXIT_OK, warn};

/// Arguments of `aot status`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(ctx: &Context, _args: Args) -> Result<i32, CliError> {
    let paths = store::Paths::new(&ctx.state);
    let seen = observe::observe(&paths).map_err(|e| match e {
        observe::ObserveError::Read(e) => CliError::from(e),
        observe::ObserveError::Journal(e) => CliError::from(e),
        e @ observe::ObserveError::Nothing(_) => CliError::new(e.to_string()),
    })?;
    if let Some(torn) = &seen.torn {
        warn(&format!(
            "{}: line {} is incomplete (a crash during a write) and was skipped",
            paths.journal.display(),
            torn.line
        ));
    }
    let now = super::clock_from_env().now();
    let kept = aot::workspace::kept_trees(&ctx.state);
    if ctx.json {
        let mut value = serde_json::to_value(status::report(&ctx.label(), &seen.state))
            .map_err(|e| CliError::new(e.to_string()))?;
        if let Some(map) = value.as_object_mut() {
            for (key, field) in facts(&seen, now) {
                map.insert(key.into(), field);
            }
            let kept: Vec<_> = kept
                .iter()
                .map(|(name, path)| json!({"name": name, "path": path}))
                .collect();
            map.insert("kept_trees".into(), kept.into());
            let c = &seen.state.objective.constraints;
            map.insert(
                "spend".into(),
                json!({
                    "calls": seen.state.run.spend.calls,
                    "tokens": seen.state.run.spend.tokens,
                    "cost": seen.state.run.spend.cost,
                    "estimated": seen.state.run.spend.estimated,
                    "max_tokens": c.max_tokens,
                    "max_cost": c.max_cost,
                    "by_role": seen.state.run.spend.by_role,
                    "by_atom": seen.state.run.spend.by_atom,
                }),
            );
        }
        outln!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| CliError::new(e.to_string()))?
        );
        return Ok(EXIT_OK);
    }
    out!("{}", status::render(&ctx.label(), &seen.state));
    out!("{}", provenance(&seen, now));
    out!("{}", status::spend(&seen.state));
    if !kept.is_empty() {
        let mut text = String::from(
            "\nkept       failed attempts' trees (--keep-failed), to inspect; `git worktree remove PATH` when done:\n",
        );
        for (name, path) in &kept {
            let _ = writeln!(text, "  {name}  {}", path.display());
        }
        out!("{text}");
    }
    Ok(EXIT_OK)
}

/// The facts about where the picture comes from, as `--json` fields.
fn facts(seen: &Observed, now: Timestamp) -> Vec<(&'static str, serde_json::Value)> {
    let (source, pid) = match seen.source {
        Source::File => ("file", None),
        Source::Live { pid } => ("live", Some(pid)),
        Source::Replayed => ("journal", None),
    };
    let running: Vec<_> = seen
        .running
        .iter()
        .map(|r| {
            json!({
                "atom": r.atom,
                "attempt": r.attempt,
                "elapsed_ms": r.since.map(|at| now.since(at).as_millis() as u64),
            })
        })
        .collect();
    let file = match &seen.file {
        FileNote::InStep => json!({"state": "in_step", "revision": seen.file_revision}),
        FileNote::PendingEdit => json!({"state": "pending_edit", "revision": seen.file_revision}),
        FileNote::Invalid(problems) => json!({"state": "invalid", "problems": problems}),
    };
    let rejected: Vec<_> = seen
        .rejected
        .iter()
        .map(|r| json!({"at": r.at, "why": r.why, "kept": r.kept}))
        .collect();
    vec![
        ("source", source.into()),
        ("runner_pid", pid.into()),
        ("journal_ahead", seen.journal_ahead.into()),
        ("running_atoms", running.into()),
        ("state_file", file),
        ("rejected_edits", rejected.into()),
    ]
}

/// Says where the picture comes from, so it is never stale without saying so.
fn provenance(seen: &Observed, now: Timestamp) -> String {
    let mut out = String::new();
    let ahead = seen.journal_ahead;
    let records = |n: u64| format!("{n} journal record{}", if n == 1 { "" } else { "s" });
    match seen.source {
        Source::Live { pid } => {
            let _ = write!(
                out,
                "\nlive       aot runs (pid {pid}), iteration {}",
                seen.state.run.iteration
            );
            if ahead > 0 {
                let _ = write!(out, "; shown with the {} the file has not saved yet", records(ahead));
            }
            out.push('\n');
            for running in &seen.running {
                let elapsed = running
                    .since
                    .map_or("since before the journal's start".to_string(), |at| {
                        format!("for {}", seconds(now.since(at)))
                    });
                let _ = writeln!(
                    out,
                    "  ● {} attempt {}, running {elapsed}",
                    running.atom, running.attempt
                );
            }
        }
        Source::Replayed => {
            let _ = writeln!(
                out,
                "\nreplayed   no loop runs, and the journal holds {} the file lacks (a run killed before it saved, \
                 or an older copy of the file put back): this is what `aot replay` — or the next command — gives",
                records(ahead)
            );
            if seen.state.run.status == RunStatus::Running {
                let _ = writeln!(out, "  the run was interrupted; `aot start` resumes it");
            }
        }
        Source::File => {
            if seen.state.run.status == RunStatus::Running {
                let _ = writeln!(
                    out,
                    "\nnot live   the file says running, but no loop holds it (killed?); `aot start` resumes"
                );
            }
        }
    }
    match &seen.file {
        FileNote::InStep => {}
        FileNote::PendingEdit => {
            let when = if matches!(seen.source, Source::Live { .. }) {
                "the loop takes it within a moment"
            } else {
                "the next command merges it"
            };
            let _ = writeln!(out, "\nfile       holds a hand edit not in the journal yet: {when}");
        }
        FileNote::Invalid(problems) => {
            let _ = writeln!(
                out,
                "\nfile       does not validate; shown is the journal's last good state. The file's problems:"
            );
            for line in problems.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    for rejected in &seen.rejected {
        let _ = writeln!(out, "\nrejected   a hand edit at {} was refused:", rejected.at);
        for line in rejected.why.lines() {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(
            out,
            "  it is kept as {}: fix it and copy it back, or delete it",
            rejected.kept.display()
        );
    }
    out
}

fn seconds(d: std::time::Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1} s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}
