//! `aot start` and `aot step`: run the loop with live output, Ctrl-C handling
//! and the stop reason's exit code.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Instant;

use aot::engine::roles::{BoxFuture, Workspace};
use aot::engine::{Ended, Engine, Observer, Options, Roles};
use aot::journal::event::{Event, Record};
use aot::planner::Alternatives;
use aot::state::{AtomStatus, CommitPolicy, Isolation, StateFile};
use aot::store::{self, Notice, Store};
use aot::workers::{CommandValidator, CommandWorker, LlmValidator, LlmWorker};
use aot::workspace::GitWorkspace;
use tokio_util::sync::CancellationToken;

use super::{CliError, Context, EXIT_OK, warn};

/// Arguments of `aot start`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// Stop after this many iterations (overrides constraints.max_iterations)
    #[arg(long, value_name = "N")]
    max_iterations: Option<u32>,

    /// Run without asking: alternatives memory marks Caution (they both worked and failed
    /// before), and destructive commands in a planner's new plan (Law 1)
    #[arg(long)]
    yes: bool,

    /// With isolation, keep each failed attempt's tree for inspection (a git worktree, listed by `aot status`)
    #[arg(long)]
    keep_failed: bool,
}

/// Arguments of `aot step`.
#[derive(Debug, clap::Args)]
pub struct StepArgs {
    /// Run without asking: Caution alternatives, and destructive commands in a planner's plan
    #[arg(long)]
    yes: bool,

    /// With isolation, keep each failed attempt's tree for inspection
    #[arg(long)]
    keep_failed: bool,
}

/// Shows the run: JSON lines (`--json` or no terminal), or on a terminal one
/// line per finished event above live lines for the running atoms and a status
/// line (iteration and counts).
enum Printer {
    Json,
    Live(Live),
}

struct Live {
    bars: indicatif::MultiProgress,
    status: indicatif::ProgressBar,
    running: std::collections::HashMap<String, indicatif::ProgressBar>,
}

impl Live {
    fn new() -> Self {
        let bars = indicatif::MultiProgress::new();
        let status = bars.add(indicatif::ProgressBar::new_spinner());
        status.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        status.enable_steady_tick(std::time::Duration::from_millis(120));
        Self {
            bars,
            status,
            running: std::collections::HashMap::new(),
        }
    }

    fn started(&mut self, atom: &str, attempt: u32) {
        let bar = self.bars.insert_from_back(1, indicatif::ProgressBar::new_spinner());
        bar.set_style(
            indicatif::ProgressStyle::with_template("  ● {msg} {elapsed:>4}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let label = if attempt > 1 {
            format!("{atom} (attempt {attempt})")
        } else {
            atom.to_string()
        };
        bar.set_message(label);
        bar.enable_steady_tick(std::time::Duration::from_millis(250));
        self.running.insert(atom.to_string(), bar);
    }

    fn finished(&mut self, atom: &str) {
        if let Some(bar) = self.running.remove(atom) {
            bar.finish_and_clear();
            self.bars.remove(&bar);
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        for bar in self.running.values() {
            bar.finish_and_clear();
        }
        self.status.finish_and_clear();
    }
}

impl Observer for Printer {
    fn warn(&mut self, message: &str) {
        match self {
            Printer::Json => {
                let line = serde_json::json!({ "warning": message });
                let _ = super::write_stdout(format_args!("{line}\n"));
            }
            Printer::Live(live) => {
                let line = format!("warning: {}", message.trim_end());
                let _ = live.bars.println(aot::model::text::inert(&line));
            }
        }
    }

    fn confirm(&mut self, question: &str) -> BoxFuture<'static, bool> {
        let Printer::Live(live) = self else {
            return Box::pin(std::future::ready(false));
        };
        if !std::io::stdin().is_terminal() {
            return Box::pin(std::future::ready(false));
        }
        // The terminal is read on a blocking thread: the loop keeps serving
        // its workers and watched files while the user thinks.
        let (bars, question) = (live.bars.clone(), question.to_string());
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || {
                bars.suspend(|| {
                    err!("{question} [y/N] ");
                    let mut answer = String::new();
                    std::io::stdin().read_line(&mut answer).is_ok() && matches!(answer.trim(), "y" | "Y" | "yes")
                })
            });
            read.await.unwrap_or(false)
        })
    }

    fn record(&mut self, record: &Record, state: &StateFile) {
        match self {
            Printer::Json => {
                if let Ok(line) = serde_json::to_string(record) {
                    let _ = super::write_stdout(format_args!("{line}\n"));
                }
            }
            Printer::Live(live) => {
                match &record.event {
                    Event::AtomStarted { atom, attempt } => live.started(atom, *attempt),
                    Event::AtomSolved { atom, .. }
                    | Event::AttemptFailed { atom, .. }
                    | Event::AtomFailed { atom, .. }
                    | Event::AtomBlocked { atom, .. } => live.finished(atom),
                    Event::AtomsReset { atoms } | Event::AtomsRefined { atoms } => {
                        atoms.iter().for_each(|a| live.finished(a))
                    }
                    Event::AttemptCancelled { atom, .. } => live.finished(atom),
                    _ => {}
                }
                if let Some(line) = super::log::describe(record, false) {
                    let _ = live.bars.println(aot::model::text::inert(&line));
                }
                let count = |s: AtomStatus| state.graph.atoms.values().filter(|a| a.status == s).count();
                live.status.set_message(format!(
                    "iteration {} · {} solved · {} running · {} pending · {} failed of {}",
                    state.run.iteration,
                    count(AtomStatus::Solved),
                    count(AtomStatus::Running),
                    count(AtomStatus::Pending),
                    count(AtomStatus::Failed),
                    state.graph.atoms.len()
                ));
            }
        }
    }
}

/// Every Law 1 gate of this run, from the journal since its start: the
/// destructive commands in a planner's plans that ran because `--yes`
/// confirmed them, and the plans refused for holding one ("" when none).
fn gates(state_path: &std::path::Path) -> String {
    let journal = store::Paths::new(state_path).journal;
    let Ok(contents) = aot::journal::read(&journal) else {
        return String::new();
    };
    let start = contents
        .records
        .iter()
        .rposition(|r| matches!(r.event, aot::journal::event::Event::RunStarted { .. }))
        .unwrap_or(0);
    let mut lines = Vec::new();
    for record in &contents.records[start..] {
        match &record.event {
            aot::journal::event::Event::Replanned { gates, .. } => {
                lines.extend(gates.iter().map(|g| format!("ran with --yes: {g}")));
            }
            aot::journal::event::Event::PlanRefused { reasons, .. } => {
                lines.extend(
                    reasons
                        .iter()
                        .filter(|r| r.contains("Law 1"))
                        .map(|r| format!("refused: {r}")),
                );
            }
            _ => {}
        }
    }
    lines.iter().map(|l| format!("  law 1       {l}\n")).collect()
}

/// What this run's landings overwrote or deleted in the user's files, and
/// that `aot undo` puts it back ("" when it only added files, or nothing).
fn overwritten(state_path: &std::path::Path) -> String {
    use aot::model::ChangeKind;
    let journal = store::Paths::new(state_path).journal;
    let Ok(contents) = aot::journal::read(&journal) else {
        return String::new();
    };
    let owed = super::undo::owed(&contents.records, None);
    let (mut modified, mut deleted) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for landing in &owed {
        for file in &landing.changes.files {
            match file.change {
                ChangeKind::Modified => modified.insert(file.path.clone()),
                ChangeKind::Deleted => deleted.insert(file.path.clone()),
                ChangeKind::Added => false,
            };
        }
    }
    if modified.is_empty() && deleted.is_empty() {
        return String::new();
    }
    let listed = |set: &std::collections::BTreeSet<String>, what: &str| {
        let names: Vec<&str> = set.iter().take(3).map(String::as_str).collect();
        let more = if set.len() > 3 { ", …" } else { "" };
        format!("{} {what} ({}{more})", set.len(), names.join(", "))
    };
    let mut said = Vec::new();
    if !modified.is_empty() {
        said.push(listed(&modified, "overwritten"));
    }
    if !deleted.is_empty() {
        said.push(listed(&deleted, "deleted"));
    }
    format!("  your files  {}: `aot undo` puts them back\n", said.join(", "))
}

/// The auditor's summary of the journal (`aot audit` has the findings).
fn audited(ctx: &Context) -> String {
    let Ok((findings, _)) = super::audit::findings(ctx) else {
        return String::new();
    };
    let serious: Vec<&aot::audit::Finding> = findings
        .iter()
        .filter(|f| f.severity >= aot::audit::Severity::Warning)
        .collect();
    if serious.is_empty() {
        return "  audit       no warnings\n".into();
    }
    let mut out = format!(
        "  audit       {} (`aot audit` for all)\n",
        aot::audit::summary(&findings)
    );
    for f in serious.iter().take(3) {
        out.push_str(&format!("              {}\n", super::audit::line(f)));
    }
    out
}

fn summary(state: &StateFile, ended: &Ended, elapsed: std::time::Duration) -> String {
    let count = |s: AtomStatus| state.graph.atoms.values().filter(|a| a.status == s).count();
    let mut out = String::new();
    out.push_str(&format!(
        "\n  atoms       {} solved, {} failed, {} blocked, {} pruned, {} pending of {}\n",
        count(AtomStatus::Solved),
        count(AtomStatus::Failed),
        count(AtomStatus::Blocked),
        count(AtomStatus::Pruned),
        count(AtomStatus::Pending),
        state.graph.atoms.len()
    ));
    out.push_str(&format!(
        "  iterations  {}\n  elapsed     {:.1}s\n",
        state.run.iteration,
        elapsed.as_secs_f64()
    ));
    match ended {
        Ended::Stopped(stop) => {
            out.push_str(&format!("  stopped     {}: {}\n", stop.reason.as_str(), stop.message));
            if let Some(evidence) = &stop.evidence {
                out.push_str(&format!(
                    "  evidence    `{}` → {} at {}\n",
                    evidence.command,
                    evidence.exit_code.map_or("killed".to_string(), |c| format!("exit {c}")),
                    evidence.at
                ));
            }
            if let Some(result) = &stop.final_result {
                out.push_str(&format!(
                    "  loss        D={:.2} P={:.2} Ω={:.0}% L={:.2} after {} replan{}\n",
                    result.loss.d,
                    result.loss.p,
                    result.loss.omega * 100.0,
                    result.loss.l,
                    result.replans,
                    if result.replans == 1 { "" } else { "s" }
                ));
                for (i, step) in result.next_moves.iter().enumerate() {
                    let label = if i == 0 { "next moves" } else { "" };
                    out.push_str(&format!("  {label:<11} {}. {step}\n", i + 1));
                }
            }
        }
        Ended::Paused => out.push_str("  paused      after one iteration; `aot step` or `aot start` continues\n"),
    }
    // What models cost and how agent atoms were worked, as `aot status` shows it.
    let spend = super::ui::status::spend(state);
    for (i, line) in spend.trim().lines().enumerate() {
        match line.strip_prefix("spend") {
            Some(total) if i == 0 => out.push_str(&format!("  spend       {}\n", total.trim_start())),
            _ => out.push_str(&format!("              {}\n", line.trim_start())),
        }
    }
    out
}

pub fn start(ctx: &Context, args: StartArgs) -> Result<i32, CliError> {
    run(
        ctx,
        Options {
            max_iterations: args.max_iterations,
            yes: args.yes,
            keep_failed: args.keep_failed,
            ..Options::default()
        },
    )
}

pub fn step(ctx: &Context, args: StepArgs) -> Result<i32, CliError> {
    run(
        ctx,
        Options {
            one_iteration: true,
            yes: args.yes,
            keep_failed: args.keep_failed,
            ..Options::default()
        },
    )
}

/// A client for `role`'s tier as configured, or why there is none (the
/// settings to add). The file's `llm:` section names the tier's model over
/// the environment's; a model with `max_cost` set but no price is noted in
/// `unpriced` when this plan may call the role.
fn client_for(
    tiers: &aot::llm::Tiers,
    role: aot::llm::Role,
    declared: Option<&aot::state::StateFile>,
    may_call: &[aot::llm::Role],
    unpriced: &mut std::collections::BTreeSet<String>,
) -> Result<aot::llm::Client, String> {
    let endpoint = tiers.endpoint(role)?.clone();
    let settings = declared.and_then(|s| s.llm.clone()).unwrap_or_default();
    if may_call.contains(&role)
        && declared.is_some_and(|s| s.objective.constraints.max_cost.is_some())
        && !settings.prices.contains_key(&endpoint.model)
    {
        unpriced.insert(endpoint.model.clone());
    }
    aot::llm::Client::new(endpoint, super::align::llm_timeout(), aot::llm::Retry::default())
}

/// The roles a plan may call a model for: the planner always (once the
/// written alternatives run out), the built-in worker for `agent` atoms no
/// agent CLI takes, the validator for plausible criteria, the meta-validator
/// for the objective's.
fn roles_called(state: &StateFile, agent_cli: bool) -> Vec<aot::llm::Role> {
    use aot::llm::Role;
    let atoms = &state.graph.atoms;
    let mut roles = vec![Role::Planner];
    if !agent_cli && atoms.values().any(|a| a.agent.is_some() && a.run.is_none()) {
        roles.push(Role::Worker);
    }
    if atoms.values().any(|a| !a.criteria.is_empty()) {
        roles.push(Role::Validator);
    }
    if !state.objective.criteria.is_empty() {
        roles.push(Role::MetaValidator);
    }
    roles
}

/// `aot start`'s one line on models: each role this plan may call and how
/// its tier stands, so nobody learns mid-run that one is missing.
fn models_line(roles: &[aot::llm::Role], tiers: &aot::llm::Tiers) -> String {
    use aot::llm::Role;
    let shown: Vec<String> = roles
        .iter()
        .map(|&role| {
            let label = match role {
                Role::Planner => "planner (once the written alternatives run out)",
                Role::Worker => "built-in worker",
                Role::Validator => "validator (plausible criteria)",
                Role::MetaValidator => "meta-validator (the objective's criteria)",
                Role::Perceiver => "perceiver",
            };
            format!("{label}: {}", tiers.shown(role))
        })
        .collect();
    format!("models this plan may call — {}", shown.join("; "))
}

fn run(ctx: &Context, mut options: Options) -> Result<i32, CliError> {
    // Atoms inherit aot's environment: a secret in it must not come back
    // through their output into the file, the journal or the memory.
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    options.secrets = aot::model::secret::secret_values(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut roles = Roles {
        worker: Arc::new(CommandWorker::default()),
        validator: Arc::new(CommandValidator),
        planner: Arc::new(Alternatives),
        workspace: None,
    };
    // Model settings are read here but only a role that calls a model needs
    // them: a plan of commands runs whatever OPENAI_* the shell exports. With
    // a model for the brain tier, the planner asks it once the written
    // alternatives run out; with one for the tool tier, agent atoms without
    // an agent command are worked by the built-in worker.
    let declared = aot::state::document::read(&ctx.state).ok().map(|d| d.state);
    let named = declared.as_ref().and_then(|s| s.llm.clone()).unwrap_or_default();
    let tiers = aot::llm::Tiers::resolve(
        |name| std::env::var(name).ok(),
        named.brain.as_deref(),
        named.tool.as_deref(),
    );
    let folder = super::folder_of(&ctx.state);
    let kept = store::Paths::new(&ctx.state).aot_dir.join("llm");
    let mut unpriced = std::collections::BTreeSet::new();
    let agent_override = std::env::var("AOT_AGENT_CMD").ok().filter(|c| !c.trim().is_empty());
    let agent_cli = agent_override.is_some()
        || declared
            .as_ref()
            .and_then(|s| s.workers.as_ref()?.agent.as_ref())
            .is_some_and(|a| a.command.is_some() || a.template.is_some());
    let may_call = declared
        .as_ref()
        .map(|s| roles_called(s, agent_cli))
        .unwrap_or_default();
    let client = |role, unpriced: &mut _| client_for(&tiers, role, declared.as_ref(), &may_call, unpriced);
    let builtin_worker = tiers.for_role(aot::llm::Role::Worker).is_some() && agent_override.is_none();
    roles.planner = match client(aot::llm::Role::Planner, &mut unpriced) {
        Ok(client) => Arc::new(
            aot::planner::llm::LlmPlanner::new(client, folder.clone(), options.yes)
                .keeping(kept.clone(), &folder)
                .checking_agents(builtin_worker),
        ),
        Err(why) => Arc::new(aot::planner::WithoutModel { why }),
    };
    let (llm, no_llm) = match client(aot::llm::Role::Worker, &mut unpriced) {
        Ok(client) => {
            let turns = std::env::var("AOT_WORKER_TURNS")
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(aot::workers::llm::MAX_TURNS);
            (
                Some(Arc::new(LlmWorker::new(client, turns).keeping(kept.clone(), &folder))),
                None,
            )
        }
        Err(why) => (None, Some(why)),
    };
    roles.worker = Arc::new(CommandWorker {
        agent_override,
        llm,
        no_llm,
    });
    // Plausible criteria are judged by the tool tier, the objective's by the brain tier.
    let validator = client(aot::llm::Role::Validator, &mut unpriced);
    let meta = client(aot::llm::Role::MetaValidator, &mut unpriced);
    roles.validator = Arc::new(LlmValidator::new(validator, meta).keeping(kept.clone(), &folder));
    for model in unpriced {
        warn(&format!(
            "max_cost is set but llm.prices has no price for `{model}`: its calls count against max_tokens only"
        ));
    }
    options.memory = Some(ctx.memory_path());
    // For tests: the Dreamer's period in milliseconds (default 5 minutes).
    options.dream_every = std::env::var("AOT_DREAM_INTERVAL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(std::time::Duration::from_millis);
    let json = ctx.json || !std::io::stdout().is_terminal();
    let clock = super::clock_from_env();
    if !ctx.state.exists() {
        // Report the missing file before taking locks, which would create `.aot/`.
        return Err(aot::state::document::ReadError::NotFound(ctx.state.clone()).into());
    }
    let mut store = Store::new(&ctx.state, clock.clone());
    let _runner = store::acquire_runner(store.paths(), std::process::id())?;
    // A killed run's workers may still run and write (in their copies);
    // stop them before the copies are removed.
    let absolute = std::path::absolute(&ctx.state).unwrap_or_else(|_| ctx.state.clone());
    let orphans = aot::workers::command::reap_orphans(&absolute);
    if orphans > 0 {
        warn(&format!(
            "stopped {orphans} process{} a killed run of this file had left running",
            if orphans == 1 { "" } else { "es" }
        ));
    }
    let (state, notices) = store.open()?;
    for notice in notices {
        match notice {
            Notice::TornTail(t) => warn(&format!(
                "the journal's line {} was incomplete (a crash during a write) and was dropped",
                t.line
            )),
            Notice::Recovered { records } => warn(&format!(
                "the file's record was {records} journal record(s) behind (a run killed before it saved, or an older copy of the file put back): brought level with the journal"
            )),
            Notice::MergedEdit => {}
            Notice::EngineFieldsEdited(fields) => warn(&format!(
                "engine-owned fields were edited by hand ({}); recorded as they are",
                fields.join(", ")
            )),
            Notice::JournalStarted => {}
            Notice::JournalRestarted { revision } => warn(&format!(
                "{} had no journal beside it (its record is at revision {revision}): a new journal starts from what the file says",
                ctx.label()
            )),
        }
    }
    for warning in aot::state::validate::warnings(&state) {
        warn(&format!("{}: {warning}", ctx.label()));
    }
    errln!("aot: {}", models_line(&roles_called(&state, agent_cli), &tiers));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // The state file is re-read on these threads: the main thread's
        // 8 MiB, not the default 2, whatever the build's frame sizes.
        .thread_stack_size(8 << 20)
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))?;
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let mut printer = if json {
        Printer::Json
    } else {
        Printer::Live(Live::new())
    };
    // An attempt's double-forked orphans stay below this process, to be
    // ended with the run; and no process of the same user reads this one's
    // memory or environment (`/proc/<aot>/environ`, where the model keys are).
    aot::workers::command::adopt_orphans();
    aot::workers::command::not_dumpable();
    let result = runtime.block_on(async {
        let interrupt = cancel.clone();
        tokio::spawn(async move {
            // Ctrl-C, `kill` and a closed terminal all stop the run the same
            // way: in-flight work cancelled (its process groups killed), the
            // state saved. A second signal kills the workers and exits at once.
            let mut signals = Signals::new();
            if let Some(name) = signals.next().await {
                errln!("\naot: {name}: stopping (Ctrl-C again to kill at once)");
                interrupt.cancel();
                if signals.next().await.is_some() {
                    aot::workers::command::kill_all();
                    std::process::exit(130);
                }
            }
        });
        roles.workspace = workspace(&ctx.state, &state, &options).await;
        let engine = Engine::new(&mut store, state, clock, options, roles, &mut printer, cancel);
        engine.run().await
    });
    drop(printer);
    // No process an attempt started outlives the run.
    let left = aot::workers::command::kill_run_leftovers();
    if left > 0 {
        warn(&format!(
            "stopped {left} process{} the run's attempts had left running",
            if left == 1 { "" } else { "es" }
        ));
    }
    let ended = result.map_err(|e| CliError::new(e.to_string()))?;
    let (final_state, _) = store.open()?;
    if !json {
        out!(
            "{}",
            summary(&final_state, &ended, started.elapsed())
                + &gates(&ctx.state)
                + &overwritten(&ctx.state)
                + &audited(ctx)
        );
    } else if !ctx.json {
        // Records go to a pipe or a file: the person who started the run
        // still reads how it ended, on stderr.
        errln!(
            "{}",
            summary(&final_state, &ended, started.elapsed())
                + &gates(&ctx.state)
                + &overwritten(&ctx.state)
                + &audited(ctx)
        );
    }
    Ok(match ended {
        Ended::Stopped(stop) => stop.reason.exit_code(),
        Ended::Paused => EXIT_OK,
    })
}

/// Isolation for the run: git inside a git work tree unless the file says
/// `isolation: none`; said once when it is off for lack of a work tree.
async fn workspace(path: &std::path::Path, state: &StateFile, options: &Options) -> Option<Arc<dyn Workspace>> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let others: Vec<std::path::PathBuf> = options.memory.iter().cloned().chain(own_outputs()).collect();
    let folder = absolute
        .parent()
        .map_or_else(|| absolute.display().to_string(), |p| p.display().to_string());
    if state.objective.constraints.isolation() == Isolation::None {
        // An earlier isolated run's marks must not outlive this run's work:
        // a later isolated start would put the tree back to before it.
        if let Ok(Some(workspace)) = GitWorkspace::discover(&absolute, &others).await {
            let landed = state.bound_attempts();
            match workspace.stand_down(&landed).await {
                Ok(settled) => {
                    for interrupted in settled {
                        errln!(
                            "aot: a kill interrupted the landing of `{}` (attempt {}): {} ({})",
                            interrupted.atom,
                            interrupted.attempt,
                            if interrupted.finished { "finished" } else { "taken back" },
                            interrupted.changes
                        );
                    }
                }
                Err(error) => errln!(
                    "aot: could not clear what an earlier isolated run left in git: {}",
                    error.message.lines().next().unwrap_or_default()
                ),
            }
        }
        return None;
    }
    match GitWorkspace::discover(&absolute, &others).await {
        Ok(Some(workspace)) => {
            let per_atom = state.objective.constraints.commit() == CommitPolicy::PerAtom;
            let copies = state.objective.constraints.max_parallel_agents() as usize;
            Some(Arc::new(workspace.committing(per_atom).pooling(copies)))
        }
        Ok(None) => {
            errln!(
                "aot: isolation: none — {folder} is not in a git work tree, so what attempts change stays even when they fail, and your edits made while they run are not protected (`git init` to isolate them; `isolation: none` says this is meant)"
            );
            None
        }
        Err(error) => {
            errln!(
                "aot: isolation: none — git cannot work in {folder}, so what attempts change stays even when they fail: {}",
                error.message.lines().next().unwrap_or_default()
            );
            None
        }
    }
}

/// The regular files this process writes its output to (`aot start > run.log
/// 2>&1` inside the work tree): aot's own writes, never an attempt's changes
/// (a failed attempt's restore would otherwise rewrite the log under it).
fn own_outputs() -> Vec<std::path::PathBuf> {
    if !cfg!(target_os = "linux") {
        return Vec::new();
    }
    let mut outputs: Vec<std::path::PathBuf> = ["/proc/self/fd/1", "/proc/self/fd/2"]
        .iter()
        .filter_map(|fd| std::fs::read_link(fd).ok())
        .filter(|target| target.is_absolute() && target.is_file())
        .collect();
    outputs.dedup();
    outputs
}

/// The signals that stop a run: SIGINT (Ctrl-C), and on Unix SIGTERM (`kill`,
/// a service manager, `timeout`) and SIGHUP (the terminal closed).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                hup: signal(SignalKind::hangup()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// What the next signal means; `None` when none can be received any more.
    async fn next(&mut self) -> Option<&'static str> {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
                match signal {
                    Some(signal) => signal.recv().await,
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.ok().map(|()| "interrupted"),
                Some(()) = recv(&mut self.term) => Some("terminated (SIGTERM)"),
                Some(()) = recv(&mut self.hup) => Some("hung up (SIGHUP)"),
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await.ok().map(|()| "interrupted")
    }
}
