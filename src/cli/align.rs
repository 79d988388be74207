//! `aot align`: establish the objective and the initial graph, from flags, a
//! plan file, `--atom` repeats, or prompts on a terminal.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use aot::engine::alignment_gaps;
use aot::model::time::SystemClock;
use aot::state::document::{self, Format};
use aot::state::{Atom, BaseCase, Objective, StateFile};
use aot::store::Store;
use indexmap::IndexMap;

use super::{CliError, Context, EXIT_OK};

/// Exit code when the objective is still not aligned.
const EXIT_GATE: i32 = 6;

/// Arguments of `aot align`.
#[derive(Debug, clap::Args)]
pub struct Args {
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
        .raw_input
        .clone()
        .or_else(|| ask("What do you want done (your words, kept verbatim)"));
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
    let state = StateFile::new(objective, atoms);
    document::check(&state, &ctx.label()).map_err(|d| CliError::rendered(d.render(ctx.color), 1))?;

    // Editors validate the file against the schema written beside it.
    let store_paths = aot::store::Paths::new(&ctx.state);
    aot::model::file::real_dir(&store_paths.aot_dir)
        .map_err(|e| CliError::new(format!("{}: {e}", store_paths.aot_dir.display())))?;
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
    let mut store = Store::new(&ctx.state, Arc::new(SystemClock));
    let written = store.create(&state, &header, args.force)?;

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
