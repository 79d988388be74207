//! `aot redirect`: change a piece of work — its objective, its graph, its
//! constraints or a binding — with the trail rules of each kind of correction.
//! Applied through the store (journal first, exactly once); a running loop
//! picks it up at once.

use aot::correct::{self, Change, Refused};
use aot::model::AtomId;
use aot::state::CorrectionKind;
use aot::store::{self, Store};
use serde_json::json;

use super::{CliError, Context, EXIT_OK};

/// Arguments of `aot redirect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// New goal (objective change: the trail is cleared)
    #[arg(long)]
    goal: Option<String>,
    /// New base-case command (objective change: the trail is cleared)
    #[arg(long, value_name = "CMD")]
    base_case: Option<String>,
    /// Add a command atom, ID=CMD (DAG adjustment; repeat for several)
    #[arg(long = "add-atom", value_name = "ID=CMD")]
    add_atoms: Vec<String>,
    /// Dependencies of the added atoms, comma-separated
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    deps: Vec<String>,
    /// Remove an atom (DAG adjustment)
    #[arg(long = "remove-atom", value_name = "ID")]
    remove_atoms: Vec<String>,
    /// Force an OR choice, OR_ID=ALT (DAG adjustment); overrides GGS's blocked sets for ALT and revives a failed OR atom
    #[arg(long, value_name = "OR_ID=ALT")]
    choose: Vec<String>,
    /// Re-run an atom — solved, failed, blocked or pruned — and the work that depends on it (an OR atom re-runs its choice)
    #[arg(long, value_name = "ID")]
    reset: Vec<String>,
    /// Set a constraint, KEY=VALUE: max_iterations, max_parallel_agents, max_retries, max_replans, time_budget, max_tokens, max_cost, verify, isolation, commit (these two from the next start)
    #[arg(long, value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Overwrite a binding, ID=SUMMARY (its dependents are reset)
    #[arg(long, value_name = "ID=SUMMARY")]
    bind: Vec<String>,
    /// Why, in your words (kept in the correction's description)
    #[arg(value_name = "MESSAGE")]
    message: Option<String>,
}

fn pair(flag: &str, spec: &str) -> Result<(String, String), CliError> {
    spec.split_once('=')
        .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
        .ok_or_else(|| CliError::new(format!("{flag} {spec}: expected NAME=VALUE")))
}

fn changes(args: &Args) -> Result<Vec<Change>, CliError> {
    let mut out = Vec::new();
    if let Some(goal) = &args.goal {
        out.push(Change::Goal(goal.clone()));
    }
    if let Some(command) = &args.base_case {
        out.push(Change::BaseCase(command.clone()));
    }
    for spec in &args.add_atoms {
        let (id, run) = pair("--add-atom", spec)?;
        out.push(Change::AddAtom {
            id: id.into(),
            run,
            deps: args
                .deps
                .iter()
                .map(|d| d.trim())
                .filter(|d| !d.is_empty())
                .map(AtomId::from)
                .collect(),
        });
    }
    out.extend(args.remove_atoms.iter().map(|id| Change::RemoveAtom(id.into())));
    out.extend(args.reset.iter().map(|id| Change::Reset(id.trim().into())));
    for spec in &args.choose {
        let (group, alt) = pair("--choose", spec)?;
        out.push(Change::Choose {
            group: group.into(),
            alt: alt.into(),
        });
    }
    for spec in &args.set {
        let (key, value) = pair("--set", spec)?;
        out.push(Change::Set { key, value });
    }
    for spec in &args.bind {
        let (atom, summary) = pair("--bind", spec)?;
        out.push(Change::Bind {
            atom: atom.into(),
            summary,
        });
    }
    Ok(out)
}

fn refused(refused: Refused, ctx: &Context) -> CliError {
    match refused {
        Refused::Invalid(why) => CliError::new(format!("redirect refused, nothing changed: {why}")),
        Refused::Graph(diagnostics) => CliError::rendered(
            format!(
                "{}error: redirect refused, nothing changed\n",
                diagnostics.render(ctx.color)
            ),
            1,
        ),
    }
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    if !ctx.state.exists() {
        return Err(aot::state::document::ReadError::NotFound(ctx.state.clone()).into());
    }
    let changes = changes(&args)?;
    let clock = super::clock_from_env();
    // A refused redirect must touch nothing, not even the file's formatting:
    // plan once on a read-only copy before taking the store.
    let current = aot::state::document::read(&ctx.state)?.state;
    correct::plan(&current, &changes, args.message.as_deref(), clock.now()).map_err(|r| refused(r, ctx))?;
    let mut store = Store::new(&ctx.state, clock.clone());
    let message = args.message.clone();
    let done = store
        .transact(|s| {
            correct::plan(s, &changes, message.as_deref(), clock.now()).map(|events| {
                let count = events.iter().filter(|e| e.kind() == "correction_recorded").count();
                (events, count)
            })
        })?
        .map_err(|r| refused(r, ctx))?;
    super::report_set_aside(&done.set_aside, ctx.json);
    if let (Some(before), false) = (&done.restyled, ctx.json) {
        super::warn(&format!(
            "{}'s own part could not all be kept as written (comments or layout where it changed are gone); the text as it was is kept in {}",
            ctx.label(),
            before.display()
        ));
    }
    let (state, count) = (&done.state, done.out);
    let recorded = &state.corrections[state.corrections.len().saturating_sub(count)..];
    let runner = store::running_pid(store.paths());
    if ctx.json {
        outln!(
            "{}",
            json!({"file": ctx.label(), "corrections": recorded, "runner_pid": runner, "set_aside": done.set_aside, "restyled_from": done.restyled})
        );
        return Ok(EXIT_OK);
    }
    for correction in recorded {
        let kind = match correction.kind {
            CorrectionKind::ObjectiveChange => "objective change (trail cleared)",
            CorrectionKind::DagAdjustment => "DAG adjustment (user_correction in the trail)",
            CorrectionKind::ConstraintChange => "constraint change (trail kept)",
            CorrectionKind::BindingsOverride => "bindings override (dependents reset)",
        };
        outln!("{kind}: {}", correction.description);
    }
    match runner {
        Some(pid) => outln!("the running loop (pid {pid}) picks it up now"),
        None => outln!("applied to {}; `aot start` continues with it", ctx.label()),
    }
    Ok(EXIT_OK)
}
