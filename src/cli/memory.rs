//! `aot memory`: list the Megrams of the folder's memory, query the potentials
//! of a (space, entity) pair, and run the Dreamer.

use aot::memory::{self, Level, Memory, MemoryFile, Potentials};
use aot::model::time::Timestamp;
use serde_json::json;

use super::{CliError, Context, EXIT_OK, warn};

/// `aot memory` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List every Megram: level, space, entity, f, σ, k, age, and its live share of M_att/M_dec
    List,
    /// Show the potentials of a (space, entity) pair, the action they advise, and the matching Megrams
    Query {
        /// The space: a tool (action states) or a task-intent slug (terminal states)
        #[arg(long)]
        space: String,
        /// The entity: a target (action states) or the environment (terminal states)
        #[arg(long)]
        entity: String,
    },
    /// Forget faded Megrams, demote contradicted common sense, consolidate strong clusters
    Dream {
        /// Show what the pass would do and change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

fn load(ctx: &Context) -> Result<(MemoryFile, Memory), CliError> {
    let file = MemoryFile::new(ctx.memory_path());
    let loaded = file.load().map_err(|e| CliError::new(e.to_string()))?;
    if !loaded.skipped.is_empty() {
        warn(&format!(
            "{}: line(s) {} could not be read and are ignored",
            file.path().display(),
            loaded
                .skipped
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok((file, loaded.memory))
}

fn now() -> Timestamp {
    super::clock_from_env().now()
}

fn age(now: Timestamp, then: Timestamp) -> String {
    let secs = now.since(then).as_secs();
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

fn level(l: Level) -> &'static str {
    match l {
        Level::M => "M",
        Level::K => "K",
        Level::C => "C",
        Level::T => "T",
    }
}

pub fn run(ctx: &Context, command: Command) -> Result<i32, CliError> {
    match command {
        Command::List => list(ctx),
        Command::Query { space, entity } => query(ctx, &space, &entity),
        Command::Dream { dry_run } => dream(ctx, dry_run),
    }
}

fn list(ctx: &Context) -> Result<i32, CliError> {
    let (file, memory) = load(ctx)?;
    let now = now();
    if ctx.json {
        let rows: Vec<_> = memory
            .megrams()
            .iter()
            .map(|m| json!({ "megram": m, "m_att": m.attention(now), "m_dec": m.decision(now) }))
            .collect();
        outln!("{}", json!({ "memory": file.path(), "megrams": rows }));
        return Ok(EXIT_OK);
    }
    if memory.is_empty() {
        outln!(
            "{}: no Megrams yet (GGS writes them as runs decide)",
            file.path().display()
        );
        return Ok(EXIT_OK);
    }
    outln!(
        "{:<3} {:<24} {:<24} {:>5} {:>5} {:>5} {:>5} {:>7} {:>7}  state",
        "lvl",
        "space",
        "entity",
        "f",
        "σ",
        "k",
        "age",
        "M_att",
        "M_dec"
    );
    for m in memory.megrams() {
        outln!(
            "{:<3} {:<24} {:<24} {:>5.2} {:>+5.1} {:>5.2} {:>5} {:>7.3} {:>+7.3}  {}",
            level(m.level),
            m.space,
            m.entity,
            m.f,
            m.sigma,
            m.k,
            age(now, m.t),
            m.attention(now),
            m.decision(now),
            shown_state(m)
        );
    }
    Ok(EXIT_OK)
}

fn query(ctx: &Context, space: &str, entity: &str) -> Result<i32, CliError> {
    let (_, memory) = load(ctx)?;
    let now = now();
    let matching = memory.matching(space, entity);
    let p = Potentials::of(matching.iter().copied(), now);
    let action = p.action();
    if ctx.json {
        outln!(
            "{}",
            json!({ "space": space, "entity": entity, "m_att": p.m_att, "m_dec": p.m_dec, "action": action, "megrams": matching })
        );
        return Ok(EXIT_OK);
    }
    let meaning = match action {
        memory::Action::Ignore => "no constraint",
        memory::Action::Exploit => "SHOULD PREFER",
        memory::Action::Avoid => "MUST NOT",
        memory::Action::Caution => "proceed only with confirmation (`aot start --yes` or a prompt)",
    };
    outln!("{space} on {entity}");
    outln!("  M_att {:.3}  M_dec {:+.3}  → {action:?}: {meaning}", p.m_att, p.m_dec);
    for m in matching {
        outln!(
            "  {} {} {:>5} f {:.2} σ {:+.1} k {:.2}  {}",
            level(m.level),
            shown_state(m),
            age(now, m.t),
            m.f,
            m.sigma,
            m.k,
            m.content
        );
    }
    Ok(EXIT_OK)
}

fn dream(ctx: &Context, dry_run: bool) -> Result<i32, CliError> {
    let now = now();
    let plan = if dry_run {
        let (_, memory) = load(ctx)?;
        let mut n = 0;
        memory::dream(&memory, now, || {
            n += 1;
            format!("dry-run-{n}")
        })
    } else {
        let file = MemoryFile::new(ctx.memory_path());
        aot::engine::dream_once(&file, now).map_err(|e| CliError::new(e.to_string()))?
    };
    if ctx.json {
        outln!("{}", json!({ "dry_run": dry_run, "dream": plan }));
        return Ok(EXIT_OK);
    }
    let verb = if dry_run { "would" } else { "did" };
    outln!(
        "the Dreamer {verb} forget {} faded Megram(s), demote {} and consolidate {}",
        plan.forget.len(),
        plan.demote.len(),
        plan.consolidate.len()
    );
    for m in &plan.consolidate {
        outln!("  + C {} on {}: {}", m.space, m.entity, m.content);
    }
    for id in &plan.demote {
        outln!("  ↓ {id}: C → K (k 0.05)");
    }
    Ok(EXIT_OK)
}

/// A Megram's state as a person reads it: a failure written in a round GGS
/// judged within tolerance is not a "success".
fn shown_state(m: &memory::Megram) -> &str {
    if m.state == "success" && m.sigma < 0.0 {
        "within tolerance (D ≤ δ)"
    } else {
        &m.state
    }
}
