//! `aot log`: the journal as a decision log — what ran, what failed, what GGS
//! decided and why, which alternative was chosen — and `--follow` for a
//! running loop. Also the line each event gets in `aot start`'s live output.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use aot::journal::event::{Event, Record};
use aot::model::text::{first_line, headline};
use aot::{journal, store};

use super::{CliError, Context, EXIT_OK, warn};

/// Arguments of `aot log`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show only GGS decisions (loss, gradient, directive, rationale, blocked sets)
    #[arg(long)]
    ggs: bool,
    /// Keep printing records as they are written, until the run stops
    #[arg(long, short)]
    follow: bool,
    /// Show only the calls to models, each with its prompt and answers as kept in .aot/llm/
    #[arg(long, conflicts_with = "ggs")]
    llm: bool,
}

/// Returns the readable line(s) for a record, if it deserves any. `verbose`
/// adds what the live display shows by other means (starts, snapshots, stops).
pub fn describe(record: &Record, verbose: bool) -> Option<String> {
    Some(match &record.event {
        Event::RunStarted { pid, yes } => format!("aot: run started (pid {pid}{})", if *yes { ", --yes" } else { "" }),
        Event::IterationStarted { iteration } => format!("── iteration {iteration}"),
        Event::AtomSolved { atom, binding } if binding.summary.trim().is_empty() => format!("  ✓ {atom}"),
        Event::AtomSolved { atom, binding } => format!("  ✓ {atom}  {}", binding.summary),
        Event::AttemptFailed {
            atom,
            attempt,
            class,
            criterion,
            message,
            ..
        } => format!(
            "  ✗ {atom} attempt {attempt}: {criterion} failed ({class:?}): {}; retrying",
            headline(message)
        ),
        Event::AtomFailed {
            atom,
            class,
            criterion,
            message,
            ..
        } => format!("  ✗ {atom} failed: {criterion} ({class:?}): {}", headline(message)),
        Event::OrChosen {
            group, chosen, reason, ..
        } => format!("  ◇ {group} → {chosen} ({reason})"),
        Event::Backtracked { group, from, to, .. } => format!("  ↺ {group}: {from} → {to} (backtrack)"),
        Event::AtomBlocked { atom, reason } => format!("  ⊘ {atom} blocked: {}", first_line(reason)),
        Event::AtomsReset { atoms } => format!("  ○ back to pending: {}", atoms.join(", ")),
        Event::AtomsRefined { atoms } => format!("  ⟳ refine: {} again, with their corrections", atoms.join(", ")),
        Event::AttemptCancelled { atom, why: None } => format!("  ○ {atom} interrupted"),
        Event::AttemptCancelled { atom, why: Some(why) } => format!("  ○ {atom} interrupted ({why})"),
        Event::GgsDecided { decision } => {
            let mut text = format!(
                "  ∇ GGS #{}  {}\n      {}",
                decision.round,
                decision.line(),
                decision.rationale
            );
            if verbose && !decision.blocked_tools.is_empty() {
                text.push_str(&format!("\n      blocked tools: {}", decision.blocked_tools.join(", ")));
            }
            if verbose && !decision.blocked_targets.is_empty() {
                text.push_str(&format!(
                    "\n      blocked targets: {}",
                    decision.blocked_targets.join(", ")
                ));
            }
            text
        }
        Event::Calibrated { calibration } => {
            let signal = calibration
                .alternatives
                .iter()
                .any(|a| a.action != aot::memory::Action::Ignore);
            if !signal && !verbose {
                return None;
            }
            let alternatives: Vec<String> = calibration
                .alternatives
                .iter()
                .map(|a| {
                    let gate = match a.confirmed {
                        Some(true) => ", confirmed",
                        Some(false) => ", not confirmed",
                        None => "",
                    };
                    format!(
                        "{} {}{gate} (M_att {:.2}, M_dec {:+.2})",
                        a.alt,
                        a.action.as_str(),
                        a.m_att,
                        a.m_dec
                    )
                })
                .collect();
            if alternatives.is_empty() {
                format!("  ⚖ memory at {}: no alternative left to rank", calibration.group)
            } else {
                format!(
                    "  ⚖ memory at {}: {} → order {}",
                    calibration.group,
                    alternatives.join(", "),
                    calibration.order.join(", ")
                )
            }
        }
        Event::BaseCaseChecked { evidence } => format!(
            "  ? base case `{}` → {} ({} ms)",
            evidence.command,
            evidence.exit_code.map_or("killed".to_string(), |c| format!("exit {c}")),
            evidence.duration_ms
        ),
        Event::AtomStarted { atom, attempt } if verbose => format!("  ▶ {atom} (attempt {attempt})"),
        Event::Snapshot { .. } if verbose => "snapshot of the whole file".to_string(),
        Event::Compacted { failures, .. } => format!(
            "journal compacted: the records up to #{} are folded into this one ({} failed attempt{} kept for retries)",
            record.seq,
            failures.len(),
            if failures.len() == 1 { "" } else { "s" }
        ),
        Event::CorrectionRecorded { correction } if verbose => {
            format!("  ✎ correction ({:?}): {}", correction.kind, correction.description)
        }
        Event::BlocksOverridden { atoms } => {
            format!("  ✎ chosen by the user, despite the blocked sets: {}", atoms.join(", "))
        }
        Event::EditRejected { why, kept } => format!("  ✎ hand edit refused, kept as {kept}: {why}"),
        Event::ChangesLanded {
            atom, changes, commit, ..
        } => match commit {
            Some(commit) => format!("  ⇣ {atom} landed {changes} (commit {})", short(commit)),
            None => format!("  ⇣ {atom} landed {changes}"),
        },
        Event::ChangesDiscarded {
            atom,
            attempt,
            changes,
            kept,
        } => {
            let mut text = format!("  ⌫ {atom} attempt {attempt}: discarded {changes}");
            if let Some(kept) = kept {
                text.push_str(&format!(" (its tree is kept in {kept})"));
            }
            text
        }
        Event::ChangesUndone {
            atom, changes, kept, ..
        } => {
            let mut text = format!("  ↶ {atom}'s changes undone (its branch was given up): {changes}");
            if !kept.is_empty() {
                text.push_str(&format!("; left as they are: {}", kept.join(", ")));
            }
            text
        }
        Event::Replanned {
            directive,
            answers,
            added,
            rationale,
            gates,
            ..
        } => format!(
            "  ✎ planner ({}): {} for {}: {}{}",
            directive.as_str(),
            added.join(", "),
            answers
                .as_deref()
                .map_or("the base case".to_string(), |a| format!("`{a}`")),
            first_line(rationale),
            if gates.is_empty() {
                String::new()
            } else {
                format!(" (with --yes: {})", gates.join("; "))
            }
        ),
        Event::PlanRefused { replan, reasons } => {
            format!("  ✗ planner's plan for replan {replan} refused: {}", reasons.join("; "))
        }
        Event::LlmCalled {
            role,
            model,
            prompt_tokens,
            completion_tokens,
            estimated,
            latency_ms,
            error,
            ..
        } if verbose => format!(
            "  ☁ {role} → {model}: {} tokens{} in {:.1} s{}",
            prompt_tokens + completion_tokens,
            if *estimated { " (estimated)" } else { "" },
            *latency_ms as f64 / 1000.0,
            error
                .as_deref()
                .map_or(String::new(), |e| format!(", failed: {}", first_line(e)))
        ),
        Event::ToolCalled {
            atom,
            attempt,
            tool,
            input,
            refused: Some(why),
            ..
        } => format!("  ⛔ {atom} attempt {attempt}: {tool} `{input}` refused: {why}"),
        Event::ToolCalled {
            atom,
            tool,
            input,
            exit_code,
            ..
        } if verbose => format!(
            "  ⚒ {atom}: {tool} `{input}`{}",
            exit_code.map_or(String::new(), |c| format!(" → exit {c}"))
        ),
        Event::AgentRan {
            atom,
            attempt,
            worker,
            turns,
            tool_calls,
            refusals,
        } if verbose => format!(
            "  {atom} attempt {attempt} worked by {worker}: {turns} turn{}, {tool_calls} tool call{}{}",
            if *turns == 1 { "" } else { "s" },
            if *tool_calls == 1 { "" } else { "s" },
            if *refusals > 0 {
                format!(" ({refusals} refused)")
            } else {
                String::new()
            }
        ),
        Event::CriterionJudged {
            atom,
            criterion,
            passed,
            evidence,
            ..
        } => format!(
            "  ⚖ {} {criterion}: {} — {}",
            atom.as_deref().unwrap_or("objective"),
            if *passed { "holds" } else { "fails" },
            first_line(evidence)
        ),
        Event::WorkspaceRecovered { changes, kept } if kept.is_empty() => format!(
            "  ↶ took back a landing a kill interrupted before it was recorded: {changes} (what it wrote is {} in git)",
            changes.before
        ),
        Event::WorkspaceRecovered { changes, kept } => format!(
            "  ↶ took back a landing a kill interrupted before it was recorded: {changes} (what it wrote is {} in git), but for {}: you changed them since, they stay as you have them",
            changes.before,
            kept.join(", ")
        ),
        Event::RunPaused {} if verbose => "aot: paused after one iteration".to_string(),
        Event::RunStopped { stop } if verbose => format!("aot: stopped ({}): {}", stop.reason.as_str(), stop.message),
        _ => return None,
    })
}

/// A git object id as git shows it short.
fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}

/// A call to a model with its prompt and answers (`aot log --llm`), for
/// reading the decision offline; `--json` prints the record with the kept
/// conversation inline.
fn conversation(
    out: &mut impl Write,
    record: &Record,
    ctx: &Context,
    folder: &Path,
    shown: &mut std::collections::HashSet<String>,
) -> std::io::Result<()> {
    let Event::LlmCalled { kept, .. } = &record.event else {
        return Ok(());
    };
    let talk: Option<serde_json::Value> = kept
        .as_ref()
        .and_then(|k| std::fs::read(folder.join(k)).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    if ctx.json {
        let mut value = serde_json::to_value(record).unwrap_or_default();
        value["conversation"] = talk.unwrap_or(serde_json::Value::Null);
        return writeln!(out, "{value}");
    }
    if let Some(text) = describe(record, true) {
        writeln!(out, "{:>5} {}  {text}", record.seq, record.at)?;
    }
    let Some(talk) = talk else {
        return writeln!(out, "        (the prompt and answer were not kept)");
    };
    // A repair re-ask shares its conversation with the call before it.
    if !kept.as_ref().is_some_and(|k| shown.insert(k.clone())) {
        return Ok(());
    }
    let indent = |text: &str| {
        text.lines()
            .map(|l| format!("        │ {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for message in talk["messages"].as_array().into_iter().flatten() {
        writeln!(out, "      {}:", message["role"].as_str().unwrap_or("?"))?;
        writeln!(out, "{}", indent(message["content"].as_str().unwrap_or_default()))?;
    }
    for answer in talk["answers"].as_array().into_iter().flatten() {
        match answer["answer"].as_str() {
            Some(text) => {
                writeln!(out, "      answer:")?;
                writeln!(out, "{}", indent(text))?;
            }
            None => writeln!(out, "      failed: {}", answer["error"].as_str().unwrap_or("?"))?,
        }
    }
    Ok(())
}

fn wanted(record: &Record, ggs_only: bool) -> bool {
    !ggs_only || matches!(record.event, Event::GgsDecided { .. })
}

fn print(out: &mut impl Write, record: &Record, ctx: &Context, ggs_only: bool) -> std::io::Result<()> {
    if !wanted(record, ggs_only) {
        return Ok(());
    }
    if ctx.json {
        if let Ok(line) = serde_json::to_string(record) {
            writeln!(out, "{line}")?;
        }
        return Ok(());
    }
    if let Some(text) = describe(record, true) {
        writeln!(out, "{:>5} {}  {text}", record.seq, record.at)?;
    }
    Ok(())
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let paths = store::Paths::new(&ctx.state);
    if !paths.journal.exists() && !args.follow {
        return Err(CliError::new(format!("no journal at {}", paths.journal.display()))
            .hint("the journal is written by commands that change the state, such as `aot start`"));
    }
    let contents = journal::read(&paths.journal)?;
    if let Some(torn) = &contents.torn {
        warn(&format!(
            "{}: line {} is incomplete (a crash during a write) and was skipped",
            paths.journal.display(),
            torn.line
        ));
    }
    let mut out = super::InertWriter(std::io::stdout().lock());
    if args.llm {
        let folder = ctx
            .state
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut shown = std::collections::HashSet::new();
        for record in &contents.records {
            conversation(&mut out, record, ctx, folder, &mut shown).map_err(CliError::writing)?;
        }
        return Ok(EXIT_OK);
    }
    for record in &contents.records {
        print(&mut out, record, ctx, args.ggs).map_err(CliError::writing)?;
    }
    // A run that already ended, with no runner on the file, has nothing to follow.
    let ended = contents
        .records
        .last()
        .is_some_and(|r| matches!(r.event, Event::RunStopped { .. } | Event::RunPaused {}));
    if args.follow && !(ended && store::running_pid(&paths).is_none()) {
        drop(out);
        follow(ctx, &paths.journal, contents.valid_len, contents.last_seq(), args.ggs)?;
    }
    Ok(EXIT_OK)
}

/// Prints records appended after `offset` (after record `printed`) as they
/// arrive, until a run stops.
fn follow(ctx: &Context, path: &Path, mut offset: u64, mut printed: u64, ggs_only: bool) -> Result<(), CliError> {
    let mut watch = aot::store::watch::watch(&ctx.state, path)
        .map_err(|e| CliError::new(format!("cannot watch {}: {e}", path.display())))?;
    let mut pending = Vec::new();
    // The runner may compact the journal meanwhile: the file is replaced by
    // one that starts with a `compacted` record. It is read from its start
    // then, skipping what was printed already.
    let mut seen: Option<std::fs::Metadata> = std::fs::metadata(path).ok();
    loop {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(CliError::new(format!("{}: {e}", path.display()))),
        };
        let now = file.as_ref().and_then(|f| f.metadata().ok());
        if let (Some(before), Some(now)) = (&seen, &now)
            && (!aot::journal::same_file(before, now) || now.len() < offset)
        {
            offset = 0;
        }
        seen = now.or(seen);
        if let Some(file) = file.as_mut() {
            file.seek(SeekFrom::Start(offset))
                .and_then(|_| file.read_to_end(&mut pending))
                .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
        }
        // Only complete lines: a record being written is read on the next change.
        let complete = pending.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut stopped = false;
        let mut out = super::InertWriter(std::io::stdout().lock());
        for line in pending[..complete].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Record>(line) {
                Ok(record) if record.seq <= printed && !matches!(record.event, Event::Compacted { .. }) => {}
                Ok(record) => {
                    printed = printed.max(record.seq);
                    stopped |= matches!(record.event, Event::RunStopped { .. } | Event::RunPaused {});
                    print(&mut out, &record, ctx, ggs_only).map_err(CliError::writing)?;
                }
                Err(e) => warn(&format!("{}: a record could not be read: {e}", path.display())),
            }
        }
        let _ = out.flush();
        offset += complete as u64;
        pending.clear();
        if stopped {
            return Ok(());
        }
        if !watch.journal_changed_blocking() {
            return Ok(());
        }
    }
}
