//! `aot align`: establish the objective and the initial graph, from flags, a
//! plan file, `--atom` repeats, or prompts on a terminal.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use aot::engine::alignment_gaps;
use aot::llm::record::Keeper;
use aot::llm::{Client, Endpoint, Message, Retry, Role, Tiers};

use aot::planner::draft::{self, Draft};
use aot::planner::validate::{self as plan_check, Rules};
use aot::state::document::{self, Format};
use aot::state::{Atom, BaseCase, Objective, StateFile};
use aot::store::Store;
use indexmap::IndexMap;

use super::{CliError, Context, EXIT_OK};

/// Exit code when the objective is still not aligned.
const EXIT_GATE: i32 = 6;

/// Arguments of `aot align`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "With an LLM configured (BRAIN_MODEL or OPENAI_MODEL, with BRAIN_BASE_URL/OPENAI_BASE_URL \
and a key; see docs/llm.md), `aot align \"TEXT\"` has the planner draft what the flags do not give: \
the agreements and the atoms. Flags win over the draft; the draft is validated like a hand-written \
file, and destructive commands in it need --yes."
)]
pub struct Args {
    /// The request in your own words (kept verbatim; same as --raw-input)
    #[arg(value_name = "TEXT", conflicts_with = "raw_input")]
    text: Option<String>,
    /// What the work is for, in one line
    #[arg(long)]
    goal: Option<String>,
    /// A command whose exit code 0 means the objective is met
    #[arg(long, value_name = "CMD")]
    base_case: Option<String>,
    /// Why it matters
    #[arg(long)]
    background: Option<String>,
    /// What should be produced
    #[arg(long)]
    deliverables: Option<String>,
    /// When it is done, in words (consistent with the base case)
    #[arg(long)]
    done: Option<String>,
    /// The request as the user phrased it, kept verbatim
    #[arg(long, value_name = "TEXT")]
    raw_input: Option<String>,
    /// A YAML or JSON file with an `atoms:` map (the shape of graph.atoms)
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// A command atom, ID=CMD (repeat; atoms run in parallel unless a plan links them)
    #[arg(long = "atom", value_name = "ID=CMD")]
    atoms: Vec<String>,
    /// Overwrite an existing state file
    #[arg(long)]
    force: bool,
    /// Accept destructive commands in the planner's draft (Law 1)
    #[arg(long)]
    yes: bool,
    /// Do not ask the planner even when an LLM is configured
    #[arg(long)]
    no_llm: bool,
}

/// Asks for a missing value on the terminal; `None` when not interactive or left empty.
fn ask(question: &str) -> Option<String> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    err!("{question}: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).ok()?;
    let answer = line.trim().to_string();
    (!answer.is_empty()).then_some(answer)
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    if ctx.state.exists() && !args.force {
        return Err(CliError::new(format!("{} already exists", ctx.label()))
            .hint("edit it, or pass --force to replace it with a new alignment"));
    }
    let mut atoms: IndexMap<aot::model::AtomId, Atom> = IndexMap::new();
    if let Some(plan) = &args.plan {
        atoms = document::read_plan(plan)?.atoms;
    }
    for spec in &args.atoms {
        let Some((id, command)) = spec.split_once('=') else {
            return Err(CliError::new(format!(
                "--atom {spec}: expected ID=CMD, e.g. --atom test='cargo test'"
            )));
        };
        let id = id.trim().to_string();
        if atoms.contains_key(id.as_str()) {
            return Err(CliError::new(format!("atom `{id}` is given twice")));
        }
        atoms.insert(id.into(), Atom::command(command.trim()));
    }
    let interactive = std::io::stdin().is_terminal();
    let raw_input = args
        .text
        .clone()
        .or_else(|| args.raw_input.clone())
        .or_else(|| ask("What do you want done (your words, kept verbatim)"));
    // The model is looked for only when the draft needs one: a complete
    // `--goal … --base-case … --atom …` aligns whatever OPENAI_* is set.
    let tiers = Tiers::from_env(|name| std::env::var(name).ok());
    let given = Objective {
        goal: args.goal.clone(),
        raw_input: raw_input.clone(),
        background_intent: args.background.clone(),
        deliverables: args.deliverables.clone(),
        definition_of_done: args.done.clone(),
        base_case: args
            .base_case
            .clone()
            .map(|command| BaseCase { command, timeout: None }),
        ..Objective::default()
    };
    let unfinished = !alignment_gaps(&StateFile::new(given.clone(), atoms.clone())).is_empty();
    let wanted = (!args.no_llm && unfinished).then_some(raw_input.as_deref()).flatten();
    let planner = match (wanted, tiers.endpoint(Role::Planner)) {
        (None, _) => None,
        (Some(request), Ok(endpoint)) => Some((request, endpoint.clone())),
        (Some(_), Err(_)) if tiers.untouched(Role::Planner) => None,
        (Some(_), Err(missing)) => {
            return Err(CliError::new(missing).hint("or pass --no-llm to align without the planner"));
        }
    };
    if let Some((request, endpoint)) = planner {
        let drafted = draft(ctx, endpoint, request, &given, &atoms, args.yes)?;
        return write(
            ctx,
            StateFile::new(drafted.objective, drafted.atoms),
            args.force,
            drafted.calls,
        );
    }
    let field = |given: Option<String>, question: &str| given.or_else(|| ask(question));
    let objective = Objective {
        goal: field(args.goal, "Goal (one line)"),
        raw_input,
        background_intent: field(args.background, "Why does it matter (background)"),
        deliverables: field(args.deliverables, "What should be produced (deliverables)"),
        definition_of_done: field(args.done, "When is it done, in words"),
        base_case: field(args.base_case, "Base case: a command that exits 0 when it is done")
            .map(|command| BaseCase { command, timeout: None }),
        ..Objective::default()
    };
    if atoms.is_empty() && interactive {
        errln!("Atoms: ID=CMD, one per line, empty line to finish");
        while let Some(line) = ask("  atom") {
            match line.split_once('=') {
                Some((id, command)) => {
                    atoms.insert(id.trim().into(), Atom::command(command.trim()));
                }
                None => errln!("  expected ID=CMD"),
            }
        }
    }
    write(ctx, StateFile::new(objective, atoms), args.force, Vec::new())
}

/// Validates `state` and writes it, with the schema beside it, journaling
/// `calls` (the draft's `llm_called` records: what aligning spent counts
/// against the task's budgets); says what is still missing.
fn write(ctx: &Context, state: StateFile, force: bool, calls: Vec<aot::journal::Event>) -> Result<i32, CliError> {
    document::check(&state, &ctx.label()).map_err(|d| CliError::rendered(d.render(ctx.color), 1))?;

    // Editors validate the file against the schema written beside it.
    let store_paths = aot::store::Paths::new(&ctx.state);
    aot::store::aot_dir(&store_paths)?;
    let schema_path = store_paths.aot_dir.join("state.schema.json");
    aot::store::write_atomic(&schema_path, aot::state::schema::state_schema_text().as_bytes())
        .map_err(|e| CliError::new(format!("{}: {e}", schema_path.display())))?;
    let header = match Format::of(&ctx.state) {
        Format::Yaml => format!(
            "{}# Written by `aot align`; edit freely. `aot validate` checks it, `aot start` runs it.\n",
            document::schema_header(".aot/state.schema.json")
        ),
        Format::Json => String::new(),
    };
    let mut store = Store::new(&ctx.state, super::clock_from_env());
    let written = store.create(&state, &header, force, calls)?;

    let gaps = alignment_gaps(&written);
    if ctx.json {
        outln!(
            "{}",
            serde_json::json!({"file": ctx.label(), "aligned": gaps.is_empty(), "missing": gaps, "atoms": written.graph.atoms.len()})
        );
    } else if gaps.is_empty() {
        outln!(
            "{}: aligned, {} atom(s); run `aot start`",
            ctx.label(),
            written.graph.atoms.len()
        );
    } else {
        outln!("{}: written, not aligned yet; missing:", ctx.label());
        for gap in &gaps {
            outln!("  - {gap}");
        }
        outln!("fill them in the file (or rerun `aot align --force` with the flags), then `aot start`");
    }
    Ok(if gaps.is_empty() { EXIT_OK } else { EXIT_GATE })
}

/// How long one planner call may take (`AOT_LLM_TIMEOUT`, seconds; default 120).
pub(super) fn llm_timeout() -> std::time::Duration {
    let seconds = std::env::var("AOT_LLM_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(120.0);
    std::time::Duration::from_secs_f64(seconds)
}

/// A plan the planner drafted, and the `llm_called` record of each call.
struct Drafted {
    objective: Objective,
    atoms: IndexMap<aot::model::AtomId, Atom>,
    calls: Vec<aot::journal::Event>,
}

/// The most tokens the planner's draft may take.
const DRAFT_MAX_TOKENS: u32 = 4000;

/// Has the planner draft the objective and atoms from `request`: the answer
/// is merged under what the user gave, checked by the plan validator and the
/// state file's own validation, re-asked once with the problems, and written
/// aside when it still fails. Returns the drafted parts and the `llm_called`
/// record of each call (the conversation kept in `.aot/llm/`).
fn draft(
    ctx: &Context,
    endpoint: Endpoint,
    request: &str,
    given: &Objective,
    atoms: &IndexMap<aot::model::AtomId, Atom>,
    yes: bool,
) -> Result<Drafted, CliError> {
    let model = endpoint.model.clone();
    let client = Client::new(endpoint, llm_timeout(), Retry::default()).map_err(CliError::new)?;
    let workspace = super::folder_of(&ctx.state);
    let mut listing: Vec<String> = std::fs::read_dir(&workspace)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if e.path().is_dir() { format!("{name}/") } else { name }
                })
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    listing.sort();
    listing.truncate(60);
    let mut messages = draft::prompt(request, given, atoms, &listing);
    let role = draft::drafter(atoms);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the async runtime: {e}")))?;
    let exists = |p: &std::path::Path| p.exists();
    let law = aot::law::Context {
        workspace: &workspace,
        exists: &exists,
        cwd: None,
    };
    let (none_tools, none_targets) = (Default::default(), Default::default());
    let mut tokens = 0;
    let mut records = Vec::new();
    let clock = super::clock_from_env();
    let paths = aot::store::Paths::new(&ctx.state);
    aot::store::aot_dir(&paths)?;
    let keeper = Keeper::new(paths.aot_dir.join("llm"), &workspace);
    let mut last_problems = Vec::new();
    let mut last_draft = None;
    for round in 0..2 {
        errln!("aot: asking the {role} ({model}) to draft the plan…");
        let asked_at = clock.now();
        let (answer, calls) = runtime.block_on(client.json::<Draft>(role, &messages, DRAFT_MAX_TOKENS));
        tokens += calls
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .map(|r| r.usage.total())
            .sum::<u64>();
        let kept = runtime.block_on(keeper.conversation(asked_at.as_millis(), role, &messages, &calls));
        records.extend(
            calls
                .iter()
                .map(|call| aot::llm::record::called(role, call, &model, None, None, kept.clone())),
        );
        let drafted = answer.map_err(|e| {
            CliError::new(format!("the planner could not draft a plan: {e}"))
                .hint("align with flags instead (--goal, --base-case, --atom …), or pass --no-llm")
        })?;
        let reply = calls
            .iter()
            .rev()
            .find_map(|c| c.as_ref().ok())
            .map(|r| r.content.clone())
            .unwrap_or_default();
        let (objective, merged) = draft::merge(given, atoms, request, drafted.clone());
        let state = StateFile::new(objective.clone(), merged.clone());
        let mut problems = Vec::new();
        // What the model wrote is held to the plan validator; the user's own atoms are not.
        let model_atoms = if atoms.is_empty() {
            merged.clone()
        } else {
            IndexMap::new()
        };
        let base = if given.base_case.is_none() {
            objective.base_case.as_ref().map(|b| b.command.as_str())
        } else {
            None
        };
        let extra: Vec<(&str, &str)> = base.map(|c| ("objective.base_case.command", c)).into_iter().collect();
        let check = |confirmed: bool| {
            plan_check::check(
                &model_atoms,
                &extra,
                &Rules {
                    blocked_tools: &none_tools,
                    blocked_targets: &none_targets,
                    tried: None,
                    avoided: &[],
                    answers_target: None,
                    confirmed: &|_| confirmed,
                    law: &law,
                    // The draft's agent atoms may run under any worker later.
                    agents_checked: false,
                },
            )
        };
        let mut verdict = check(yes);
        if !yes && !verdict.gates.is_empty() && std::io::stdin().is_terminal() {
            errln!("The draft holds destructive commands (Law 1):");
            for (place, gate) in &verdict.gates {
                errln!("  {place}: `{}` — {}", gate.command, gate.why);
            }
            if ask("Write them into the plan? [y/N]")
                .is_some_and(|a| a.eq_ignore_ascii_case("y") || a.eq_ignore_ascii_case("yes"))
            {
                verdict = check(true);
            }
        }
        problems.extend(verdict.reasons);
        if let Err(diagnostics) = document::check(&state, &ctx.label()) {
            problems.extend(diagnostics.errors.iter().map(|d| match &d.field {
                Some(field) if !d.message.contains(field.as_str()) => format!("{field}: {}", d.message),
                _ => d.message.clone(),
            }));
        }
        if problems.is_empty() {
            errln!("aot: drafted by {model} ({tokens} tokens); read it before `aot start`");
            return Ok(Drafted {
                objective,
                atoms: merged,
                calls: records,
            });
        }
        last_problems = problems.clone();
        last_draft = Some(state);
        if round == 0 {
            messages.push(Message::assistant(reply));
            messages.push(Message::user(format!(
                "The plan cannot be used:\n{}\nAnswer again with the whole JSON object, fixed.",
                problems.iter().map(|p| format!("- {p}")).collect::<Vec<_>>().join("\n")
            )));
        }
    }
    let mut error = CliError::new(format!(
        "the planner's draft is not valid, also after it was asked again:\n{}",
        last_problems
            .iter()
            .map(|p| format!("  - {p}"))
            .collect::<Vec<_>>()
            .join("\n")
    ));
    if let Some(state) = last_draft {
        let aside = aot::store::Paths::new(&ctx.state).draft(Format::of(&ctx.state));
        let text = document::render(&state, Format::of(&ctx.state), "", None)
            .map(|(text, _)| text)
            .unwrap_or_default();
        if aot::store::write_atomic(&aside, text.as_bytes()).is_ok() {
            error = error.hint(format!(
                "the draft is kept in {}: fix it and save it as {}, or align with flags",
                aside.display(),
                ctx.label()
            ));
        }
    }
    Err(error)
}
