//! `aot status`: the graph as a tree with each atom's status, the ready frontier,
//! bindings, the trail and the last stop — as a serializable report and as text.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::Serialize;

use aot::graph::WorkGraph;
use aot::state::{AtomStatus, Binding, RunState, StateFile, TrailEntry};

/// Everything `aot status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Report<'a> {
    /// The state file.
    pub file: String,
    /// The goal.
    pub goal: Option<&'a str>,
    /// The base-case command.
    pub base_case: Option<&'a str>,
    /// Atom counts by status.
    pub counts: Counts,
    /// Atoms ready to run now.
    pub ready: Vec<&'a str>,
    /// OR atoms waiting for a choice.
    pub choice_points: Vec<&'a str>,
    /// Every atom with its status, in file order.
    pub atoms: Vec<AtomRow<'a>>,
    /// Result summaries.
    pub bindings: &'a indexmap::IndexMap<aot::model::AtomId, Binding>,
    /// The trail.
    pub trail: &'a [TrailEntry],
    /// The run record.
    pub run: &'a RunState,
    /// The termination measure and the bound on transitions left.
    pub variant: VariantReport,
}

/// The termination measure as `aot status --json` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    /// (OR atom, alternative) pairs never chosen.
    pub untried: u64,
    /// Work left without a new choice.
    pub work: u64,
    /// At most this many graph transitions remain.
    pub remaining_bound: u64,
}

/// Atom counts by status.
#[derive(Debug, Clone, Default, Serialize)]
#[allow(missing_docs)]
pub struct Counts {
    pub total: usize,
    pub pending: usize,
    pub running: usize,
    pub solved: usize,
    pub failed: usize,
    pub blocked: usize,
    pub pruned: usize,
}

/// One atom in the report.
#[derive(Debug, Clone, Serialize)]
pub struct AtomRow<'a> {
    /// Its id.
    pub id: &'a str,
    /// `run`, `agent` or `or`.
    pub kind: &'static str,
    /// Its status.
    pub status: AtomStatus,
    /// Attempts made.
    pub attempts: u32,
    /// Its dependencies.
    pub deps: &'a [aot::model::AtomId],
    /// Its alternatives, for OR atoms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alternatives: Option<&'a [aot::model::AtomId]>,
    /// The chosen alternative, for OR atoms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen: Option<&'a str>,
}

/// Builds the report of a state.
pub fn report<'a>(file: &str, state: &'a StateFile) -> Report<'a> {
    let graph = WorkGraph::new(state);
    let count = |s| state.graph.atoms.values().filter(|a| a.status == s).count();
    // The graph's views borrow from it; the report borrows ids from the state.
    let by_id = |id: &str| state.graph.atoms.get_key_value(id).map(|(k, _)| k.as_str());
    Report {
        file: file.to_string(),
        goal: state.objective.goal.as_deref(),
        base_case: state.objective.base_case.as_ref().map(|b| b.command.as_str()),
        counts: Counts {
            total: state.graph.atoms.len(),
            pending: count(AtomStatus::Pending),
            running: count(AtomStatus::Running),
            solved: count(AtomStatus::Solved),
            failed: count(AtomStatus::Failed),
            blocked: count(AtomStatus::Blocked),
            pruned: count(AtomStatus::Pruned),
        },
        ready: graph.ready().filter_map(by_id).collect(),
        choice_points: graph.choice_points().filter_map(by_id).collect(),
        atoms: state
            .graph
            .atoms
            .iter()
            .map(|(id, atom)| AtomRow {
                id,
                kind: if atom.or.is_some() {
                    "or"
                } else if atom.agent.is_some() {
                    "agent"
                } else {
                    "run"
                },
                status: atom.status,
                attempts: atom.attempts,
                deps: &atom.deps,
                alternatives: atom.alternatives(),
                chosen: atom.chosen.as_deref(),
            })
            .collect(),
        bindings: &state.bindings,
        trail: &state.trail,
        run: &state.run,
        variant: VariantReport {
            untried: graph.variant().untried,
            work: graph.variant().work,
            remaining_bound: graph.remaining_bound(),
        },
    }
}

fn mark(status: AtomStatus) -> &'static str {
    match status {
        AtomStatus::Pending => "○",
        AtomStatus::Running => "●",
        AtomStatus::Solved => "✓",
        AtomStatus::Failed => "✗",
        AtomStatus::Blocked => "⊘",
        AtomStatus::Pruned => "–",
    }
}

/// Renders a state as the text of `aot status`.
pub fn render(file: &str, state: &StateFile) -> String {
    let report = report(file, state);
    let mut out = String::new();
    let _ = writeln!(out, "{}", report.file);
    if let Some(goal) = report.goal {
        let _ = writeln!(out, "  goal       {goal}");
    }
    if let Some(base) = report.base_case {
        let _ = writeln!(out, "  base case  {base}");
    }
    let c = &report.counts;
    let _ = writeln!(
        out,
        "  atoms      {} total: {} solved, {} running, {} pending, {} failed, {} blocked, {} pruned",
        c.total, c.solved, c.running, c.pending, c.failed, c.blocked, c.pruned
    );
    let run = report.run;
    let status = match run.status {
        aot::state::RunStatus::Idle => "idle (never started)".to_string(),
        aot::state::RunStatus::Running => format!("running, iteration {}", run.iteration),
        aot::state::RunStatus::Paused => format!("paused after iteration {}", run.iteration),
        aot::state::RunStatus::Stopped => format!("stopped after iteration {}", run.iteration),
    };
    let _ = writeln!(out, "  run        {status}, revision {}", run.revision);
    let graph = WorkGraph::new(state);
    let v = graph.variant();
    let _ = writeln!(
        out,
        "  variant    {} untried alternatives, work {} → at most {} more graph transitions",
        v.untried,
        v.work,
        graph.remaining_bound()
    );

    out.push_str("\ngraph\n");
    let mut shown = HashSet::new();
    for root in graph.roots() {
        let Some((id, _)) = state.graph.atoms.get_key_value(root) else {
            continue;
        };
        tree(state, id, "  ", &mut shown, &mut out);
    }

    let list = |ids: &[&str]| {
        if ids.is_empty() {
            "(none)".to_string()
        } else {
            ids.join(", ")
        }
    };
    let _ = writeln!(out, "\nready      {}", list(&report.ready));
    if !report.choice_points.is_empty() {
        let _ = writeln!(
            out,
            "choose     {} (OR atoms waiting for a choice)",
            list(&report.choice_points)
        );
    }

    if !state.bindings.is_empty() {
        out.push_str("\nbindings\n");
        for (id, binding) in &state.bindings {
            let summary = if binding.summary.is_empty() {
                "(no summary)"
            } else {
                binding.summary.as_str()
            };
            let _ = writeln!(out, "  {id}: {summary} (attempt {}, {})", binding.attempt, binding.at);
        }
    }
    if !state.trail.is_empty() {
        out.push_str("\ntrail\n");
        for entry in &state.trail {
            // A failure's evidence spans lines: they stay under their entry.
            let _ = writeln!(out, "  {}", trail_line(entry).replace('\n', "\n      "));
        }
    }
    let ggs = &run.ggs;
    if let Some(last) = &ggs.last {
        let _ = writeln!(
            out,
            "\nggs        {} decision{}, {} replan{}, L_prev {:.2}, worsening streak {}",
            ggs.rounds,
            if ggs.rounds == 1 { "" } else { "s" },
            run.replans,
            if run.replans == 1 { "" } else { "s" },
            ggs.l_prev.unwrap_or_default(),
            ggs.worsening
        );
        let set = |items: &std::collections::BTreeSet<String>| {
            items.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
        };
        if !ggs.blocked_tools.is_empty() {
            let _ = writeln!(out, "  blocked tools    {}", set(&ggs.blocked_tools));
        }
        if !ggs.blocked_targets.is_empty() {
            let _ = writeln!(out, "  blocked targets  {}", set(&ggs.blocked_targets));
        }
        let _ = writeln!(out, "  #{} {}", last.round, last.line());
        if ggs.rounds > 1 {
            let _ = writeln!(out, "  (every decision: aot log --ggs)");
        }
    }
    if let Some(stop) = &run.stop {
        let _ = writeln!(
            out,
            "\nlast stop  {} at {}: {}",
            stop.reason.as_str(),
            stop.at,
            stop.message
        );
        if let Some(result) = stop.final_result.as_ref().filter(|r| !r.next_moves.is_empty()) {
            for (i, step) in result.next_moves.iter().enumerate() {
                let _ = writeln!(out, "  {}. {step}", i + 1);
            }
        }
        if let Some(evidence) = &stop.evidence {
            let code = evidence.exit_code.map_or("killed".to_string(), |c| format!("exit {c}"));
            let _ = writeln!(
                out,
                "  evidence `{}` → {code} in {} ms",
                evidence.command, evidence.duration_ms
            );
        }
    }
    out
}

fn tree<'a>(state: &'a StateFile, id: &'a str, indent: &str, shown: &mut HashSet<&'a str>, out: &mut String) {
    let Some(atom) = state.graph.atoms.get(id) else { return };
    if !shown.insert(id) {
        let _ = writeln!(out, "{indent}{} {id} (see above)", mark(atom.status));
        return;
    }
    let mut line = format!("{indent}{} {id}", mark(atom.status));
    if let Some(alternatives) = &atom.or {
        let _ = write!(line, "  or: one of {}", alternatives.join(" | "));
        if let Some(chosen) = &atom.chosen {
            let _ = write!(line, " (chosen: {chosen})");
        }
        if atom.speculative {
            line.push_str(" [speculative]");
        }
    } else if let Some(binding) = state
        .bindings
        .get(id)
        .filter(|b| atom.status == AtomStatus::Solved && !b.summary.is_empty())
    {
        let _ = write!(line, "  → {}", binding.summary);
    } else {
        let what = atom.run.as_deref().or(atom.agent.as_deref()).unwrap_or_default();
        let mut lines = what.lines().filter(|l| !l.trim().is_empty());
        let first = lines.next().unwrap_or_default();
        let more = lines.count();
        let kind = if atom.agent.is_some() { "agent" } else { "run" };
        let _ = write!(line, "  {kind}: {}", ellipsize(first, 60));
        if more > 0 {
            let _ = write!(line, " (+{more} line{})", if more == 1 { "" } else { "s" });
        }
        if atom.attempts > 0 {
            let _ = write!(line, " (attempts: {})", atom.attempts);
        }
    }
    out.push_str(&line);
    out.push('\n');
    // A solved atom stands for its whole sub-graph: its binding is all dependents need.
    if atom.status == AtomStatus::Solved {
        return;
    }
    let child_indent = format!("{indent}  ");
    for child in atom.or.iter().flatten().chain(&atom.deps) {
        tree(state, child, &child_indent, shown, out);
    }
}

fn ellipsize(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    }
}

/// Renders one trail entry as a line.
pub fn trail_line(entry: &TrailEntry) -> String {
    match entry {
        TrailEntry::OrChoice {
            at,
            group,
            chosen,
            remaining,
            reason,
        } if remaining.is_empty() => format!("{at} or_choice {group} → {chosen} ({reason})"),
        TrailEntry::OrChoice {
            at,
            group,
            chosen,
            remaining,
            reason,
        } => format!(
            "{at} or_choice {group} → {chosen} (remaining: {}; {reason})",
            remaining.join(", ")
        ),
        TrailEntry::Backtrack {
            at,
            group,
            from,
            to,
            reset,
        } if reset.is_empty() => format!("{at} backtrack {group}: {from} → {to}"),
        TrailEntry::Backtrack {
            at,
            group,
            from,
            to,
            reset,
        } => format!("{at} backtrack {group}: {from} → {to} (reset: {})", reset.join(", ")),
        TrailEntry::Failure {
            at,
            atom,
            class,
            criterion,
            message,
        } => format!("{at} failure {atom} [{class:?}] {criterion}: {message}"),
        TrailEntry::UserCorrection { at, description } => format!("{at} user_correction {description}"),
    }
}

/// What calls to models cost, in all, by role and by atom, with how each
/// agent atom was worked (worker, turns, tool calls, refusals); "" when no
/// model was called and no agent worked.
pub fn spend(state: &StateFile) -> String {
    let spend = &state.run.spend;
    let agents = &state.run.agents;
    if spend.is_empty() && agents.is_empty() {
        return String::new();
    }
    let c = &state.objective.constraints;
    let tally = |calls: u32, tokens: u64, cost: f64| {
        let mut t = format!("{calls} call{}, {tokens} tokens", if calls == 1 { "" } else { "s" });
        if cost > 0.0 {
            let _ = write!(t, ", ${cost:.4}");
        }
        t
    };
    let mut out = format!(
        "
spend      {}",
        tally(spend.calls, spend.tokens, spend.cost)
    );
    if spend.estimated {
        out.push_str(" (some tokens estimated)");
    }
    let mut limits = Vec::new();
    if let Some(max) = c.max_tokens {
        limits.push(format!("max_tokens {max}"));
    }
    if let Some(max) = c.max_cost {
        limits.push(format!("max_cost ${max}"));
    }
    if !limits.is_empty() {
        let _ = write!(out, " of {}", limits.join(", "));
    }
    out.push('\n');
    for (role, t) in &spend.by_role {
        let _ = writeln!(out, "  {role:<10} {}", tally(t.calls, t.tokens, t.cost));
    }
    let atoms = spend
        .by_atom
        .keys()
        .chain(agents.keys().filter(|a| !spend.by_atom.contains_key(*a)));
    for atom in atoms {
        let mut line = format!("  for {atom}:");
        if let Some(t) = spend.by_atom.get(atom) {
            let _ = write!(line, " {}", tally(t.calls, t.tokens, t.cost));
        }
        if let Some(a) = agents.get(atom) {
            let _ = write!(line, "{} {}", if line.ends_with(':') { "" } else { ";" }, agent_line(a));
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// How an agent atom was worked: `llm, 2 attempts, 7 turns, 5 tool calls (1 refused)`.
pub fn agent_line(a: &aot::state::AgentTally) -> String {
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mut line = format!("{}, {}", a.worker, plural(a.attempts, "attempt"));
    if a.turns > 0 {
        let _ = write!(line, ", {}", plural(a.turns, "turn"));
    }
    if a.tool_calls > 0 {
        let _ = write!(line, ", {}", plural(a.tool_calls, "tool call"));
        if a.refusals > 0 {
            let _ = write!(line, " ({} refused)", a.refusals);
        }
    }
    line
}
