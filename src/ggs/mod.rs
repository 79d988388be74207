//! The Goal Gradient Solver: turns a failed round into a direction.
//!
//! Pure and deterministic: [`decide`] reads a [`ReplanRequest`] (the round's
//! criterion verdicts, elapsed time, replans) and the controller's [`GgsState`]
//! (the previous loss, the worsening streak, the blocked sets), and returns a
//! [`Decision`]. [`GgsState::after`] folds a decision back into the state, so the
//! journal replays the same trajectory. The engine applies the directive.
//!
//! ```text
//! D = Σ wᵢ·failᵢ / #criteria         verifiable fail: w = 1; plausible fail: w = k/N
//! P = logical / (logical + environmental)  over failed criteria (0 if none)
//! Ω = clamp(w₁·replans/max_replans + w₂·elapsed/time_budget, 0, 1)
//! L = α·D + β·(1 − Ω)·P + λ·Ω          ∇L = L − L_prev (0 on the first round)
//!
//! Ω ≥ θ                      → abandon
//! Law 2: ∇L > ε twice in a row → abandon
//! D ≤ δ                      → success
//! |∇L| < ε,  P > ρ           → break_symmetry
//! |∇L| < ε,  P ≤ ρ           → change_path
//! |∇L| ≥ ε,  P > ρ           → change_approach
//! |∇L| ≥ ε,  P ≤ ρ           → refine
//! ```
//!
//! Boundaries follow the table's inequalities: |∇L| = ε carries a signal (not a
//! plateau), D = δ is success, P = ρ counts as environmental, Ω = θ abandons. Law 2
//! counts only ∇L strictly above ε. Every quantity is rounded to 1e-9 first, so
//! that 0.6 − 0.5 is exactly 0.1.

use std::collections::BTreeSet;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod config;

pub use config::{GgsConfig, GgsParams};

use crate::model::{AtomId, Criterion, FailureClass};

/// The six macro-states of the decision table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MacroState {
    /// Stop and report: the budget is spent or the loss diverges.
    Abandon,
    /// Close enough (D ≤ δ); only the base case ends the run.
    Success,
    /// Stuck with a wrong approach: block every tried tool, demand a new one.
    BreakSymmetry,
    /// Getting worse with a wrong approach: block the failed tools.
    ChangeApproach,
    /// Stuck with a sound approach: same tool, another target.
    ChangePath,
    /// Moving with a sound approach: retry with the corrections.
    Refine,
}

impl MacroState {
    /// Every macro-state, in the table's priority order.
    pub const ALL: [MacroState; 6] = [
        MacroState::Abandon,
        MacroState::Success,
        MacroState::BreakSymmetry,
        MacroState::ChangeApproach,
        MacroState::ChangePath,
        MacroState::Refine,
    ];

    /// Returns the name as written in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            MacroState::Abandon => "abandon",
            MacroState::Success => "success",
            MacroState::BreakSymmetry => "break_symmetry",
            MacroState::ChangeApproach => "change_approach",
            MacroState::ChangePath => "change_path",
            MacroState::Refine => "refine",
        }
    }

    /// Returns the name as a person reads it: `success` on a round that
    /// failed would read as a lie, so it is shown as what it means.
    pub fn shown(self) -> &'static str {
        match self {
            MacroState::Success => "within tolerance (D ≤ δ)",
            other => other.as_str(),
        }
    }

    /// Returns whether the run goes on after this state (everything but abandon).
    pub fn continues(self) -> bool {
        self != MacroState::Abandon
    }
}

impl fmt::Display for MacroState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The direction of the loss between two rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Gradient {
    /// ∇L ≤ −ε.
    Improving,
    /// |∇L| < ε (and every first round).
    Plateau,
    /// ∇L ≥ ε.
    Worsening,
}

impl Gradient {
    /// Classifies ∇L against ε.
    pub fn of(grad_l: f64, epsilon: f64) -> Self {
        if grad_l.abs() < epsilon {
            Gradient::Plateau
        } else if grad_l > 0.0 {
            Gradient::Worsening
        } else {
            Gradient::Improving
        }
    }

    /// Returns the arrow shown beside ∇L: ↑ worsening, ↓ improving, → plateau.
    pub fn arrow(self) -> char {
        match self {
            Gradient::Improving => '↓',
            Gradient::Plateau => '→',
            Gradient::Worsening => '↑',
        }
    }
}

/// One criterion's verdict in the round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Verdict {
    /// The criterion: verifiable (a command decided it) or plausible (judged).
    pub criterion: Criterion,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<FailureClass>,
}

/// One failed attempt in an atom's trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttemptGap {
    /// The attempt.
    pub attempt: u32,
    /// The criterion that failed in it.
    pub criterion: Criterion,
    /// Why.
    pub class: FailureClass,
}

/// What one atom that finished in the round did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    /// The atom; `None` for the task's base case.
    pub atom: Option<AtomId>,
    /// Its tool label, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Whether the tool was declared (`tool:`), not inferred from the
    /// command: only a declared tool is blocked; an inferred one is a guess,
    /// and a failure counts against the atom's target alone.
    #[serde(default = "declared")]
    pub tool_declared: bool,
    /// Its target label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Whether it is solved.
    pub solved: bool,
    /// Its criteria, in order; those after the first failure were not evaluated.
    pub verdicts: Vec<Verdict>,
    /// Its failed attempts, oldest first (gives k/N for plausible criteria).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trajectory: Vec<AttemptGap>,
    /// Attempts made in total (N); at least the trajectory's length.
    #[serde(default)]
    pub attempts: u32,
    /// Declared tools that ran in the atom's subtree (itself and its dependencies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtree_tools: Vec<String>,
    /// Targets of the atoms in its subtree whose tools are inferred.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtree_targets: Vec<String>,
}

fn declared() -> bool {
    true
}

impl Outcome {
    /// Returns `atom: criterion`, or the criterion alone for the base case.
    fn describe(&self, criterion: &Criterion) -> String {
        match &self.atom {
            Some(atom) => format!("{atom}: {criterion}"),
            None => criterion.to_string(),
        }
    }

    fn failed(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| !v.passed)
    }

    /// Returns the weight of a failed criterion: 1 if verifiable, k/N if plausible.
    fn weight(&self, verdict: &Verdict) -> f64 {
        match verdict.criterion {
            Criterion::Plausible { .. } => {
                let n = self.attempts.max(self.trajectory.len() as u32);
                let k = self
                    .trajectory
                    .iter()
                    .filter(|g| g.criterion == verdict.criterion)
                    .count() as f64;
                if n == 0 { 1.0 } else { (k / f64::from(n)).min(1.0) }
            }
            _ => 1.0,
        }
    }
}

/// The fan-in gate's report of a round (seed R4b's ReplanRequest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplanRequest {
    /// Every atom that finished in the round, and the base case when it counts.
    pub outcomes: Vec<Outcome>,
    /// Active time spent on the task so far.
    pub elapsed_ms: u64,
    /// The task's time budget.
    pub time_budget_ms: u64,
    /// Replans made before this round.
    pub replans: u32,
    /// The replan budget.
    pub max_replans: u32,
    /// The share of the LLM budget spent, in [0, 1] (0 without a budget).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub spent: f64,
    /// D and P as the last decision measured them, for a decision made again
    /// with nothing new observed (a restart facing failures a stopped run
    /// left): the outcomes then hold only the failures, and measuring them
    /// afresh would read as the loss rising.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<(f64, f64)>,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

/// The loss and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Loss {
    /// Intent-result distance, in [0, 1].
    #[serde(rename = "D")]
    pub d: f64,
    /// Process implausibility, in [0, 1].
    #[serde(rename = "P")]
    pub p: f64,
    /// Resource cost, in [0, 1].
    #[serde(rename = "Omega")]
    pub omega: f64,
    /// α·D + β·(1 − Ω)·P + λ·Ω.
    #[serde(rename = "L")]
    pub l: f64,
}

/// What the failed criteria have in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureMix {
    /// Every failure was logical.
    Logical,
    /// Every failure was environmental.
    Environmental,
    /// Both kinds.
    Mixed,
}

/// GGS's answer to a round (seed R7's PlanDirective, plus the trajectory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The decision's number in the task, from 1.
    pub round: u32,
    /// The loss of this round.
    pub loss: Loss,
    /// ∇L = L − L_prev; 0 on the first round.
    pub grad_l: f64,
    /// The gradient's direction.
    pub gradient: Gradient,
    /// The macro-state chosen.
    pub directive: MacroState,
    /// Whether the Law 2 kill switch chose it (two rounds in a row with ∇L > ε).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub law2: bool,
    /// Rounds in a row with ∇L > ε, this one included.
    #[serde(default)]
    pub worsening: u32,
    /// The failed atoms of the round.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<AtomId>,
    /// Whether the base case failed with every selected atom solved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base_case_failed: bool,
    /// The failed criterion driving D (`atom: criterion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_criterion: Option<String>,
    /// Logical, environmental or mixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureMix>,
    /// Tools no plan may use for the rest of the task (after this decision).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_tools: Vec<String>,
    /// Targets no plan may use for the rest of the task (after this decision).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_targets: Vec<String>,
    /// The tools of the failed atoms, for change_path (same tool first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_tools: Vec<String>,
    /// Replans made before this decision.
    pub replans: u32,
    /// Active time spent on the task.
    pub elapsed_ms: u64,
    /// Why, in one sentence.
    pub rationale: String,
    /// The directive's row of the memory quantization matrix (f, σ, k).
    pub row: crate::memory::Row,
}

impl Decision {
    /// The decision as older files and journal version 1 wrote it meant: a
    /// failing base case was listed as a failed atom named `base_case`.
    pub fn without_v1_sentinel(mut self) -> Decision {
        let before = self.failed.len();
        self.failed.retain(|a| a.as_str() != "base_case");
        self.base_case_failed |= self.failed.len() != before;
        self
    }

    /// Returns the one-line display: `D=0.50 P=1.00 ∇L=+0.12 ↑ Ω=35% → change_approach`.
    pub fn line(&self) -> String {
        format!(
            "D={:.2} P={:.2} ∇L={:+.2} {} Ω={:.0}% → {}",
            self.loss.d,
            self.loss.p,
            self.grad_l,
            self.gradient.arrow(),
            self.loss.omega * 100.0,
            self.directive.shown()
        )
    }
}

/// The controller's memory across rounds of one task: engine-owned, in the
/// state file under `run.ggs` and rebuilt from the journal. It holds what the
/// next decision needs, so its size does not grow with the rounds; every
/// decision is in the journal (`aot log --ggs`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, from = "GgsStateOnDisk")]
pub struct GgsState {
    /// The previous round's loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l_prev: Option<f64>,
    /// Rounds in a row with ∇L > ε.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub worsening: u32,
    /// Tools no plan may use (logical failures); only grows within a task.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub blocked_tools: BTreeSet<String>,
    /// Targets no plan may use (environmental failures); only grows within a task.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub blocked_targets: BTreeSet<String>,
    /// Atoms the user chose explicitly (`aot redirect --choose`): the blocked
    /// sets do not refuse them. Only grows within a task.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub allowed: BTreeSet<crate::model::AtomId>,
    /// Decisions made in the task so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rounds: u32,
    /// The latest decision (Law 2 compares its ∇L with the next one's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Box<Decision>>,
}

/// `run.ggs` as files hold it: files written by older builds list every
/// decision under `history`, read as the count and the latest one.
/// The schema is this type's: it describes what aot reads.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "GgsState")]
struct GgsStateOnDisk {
    /// The previous round's loss.
    #[serde(default)]
    l_prev: Option<f64>,
    /// Rounds in a row with ∇L > ε.
    #[serde(default)]
    worsening: u32,
    /// Tools no plan may use (logical failures); only grows within a task.
    #[serde(default)]
    blocked_tools: BTreeSet<String>,
    /// Targets no plan may use (environmental failures); only grows within a task.
    #[serde(default)]
    blocked_targets: BTreeSet<String>,
    /// Atoms the user chose explicitly (`aot redirect --choose`): the blocked
    /// sets do not refuse them. Only grows within a task.
    #[serde(default)]
    allowed: BTreeSet<crate::model::AtomId>,
    /// Decisions made in the task so far.
    #[serde(default)]
    rounds: u32,
    /// The latest decision (Law 2 compares its ∇L with the next one's).
    #[serde(default)]
    last: Option<Box<Decision>>,
    /// Deprecated: every decision, as older files listed them. Read
    /// as `rounds` and `last`; never written.
    #[serde(default)]
    #[deprecated = "read as `rounds` and `last`"]
    history: Vec<Decision>,
}

#[allow(deprecated)]
impl From<GgsStateOnDisk> for GgsState {
    fn from(disk: GgsStateOnDisk) -> GgsState {
        let rounds = disk.rounds.max(u32::try_from(disk.history.len()).unwrap_or(u32::MAX));
        let last = disk.last.or_else(|| {
            disk.history
                .into_iter()
                .last()
                .map(Decision::without_v1_sentinel)
                .map(Box::new)
        });
        GgsState {
            l_prev: disk.l_prev,
            worsening: disk.worsening,
            blocked_tools: disk.blocked_tools,
            blocked_targets: disk.blocked_targets,
            allowed: disk.allowed,
            rounds,
            last,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl GgsState {
    /// Returns the state after `decision` (the journal's fold).
    pub fn after(&self, decision: &Decision) -> GgsState {
        let mut next = self.clone();
        next.l_prev = Some(decision.loss.l);
        next.worsening = decision.worsening;
        next.blocked_tools.extend(decision.blocked_tools.iter().cloned());
        next.blocked_targets.extend(decision.blocked_targets.iter().cloned());
        next.rounds = decision.round;
        next.last = Some(Box::new(decision.clone()));
        next
    }
}

/// The four signals the table reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Signals {
    /// ∇L.
    pub grad_l: f64,
    /// D.
    pub d: f64,
    /// P.
    pub p: f64,
    /// Ω.
    pub omega: f64,
}

/// The priority cascade of the decision table (without Law 2, which needs history).
pub fn macro_state(s: Signals, c: &GgsConfig) -> MacroState {
    let plateau = s.grad_l.abs() < c.epsilon;
    let logical = s.p > c.rho;
    if s.omega >= c.theta {
        MacroState::Abandon
    } else if s.d <= c.delta {
        MacroState::Success
    } else {
        match (plateau, logical) {
            (true, true) => MacroState::BreakSymmetry,
            (true, false) => MacroState::ChangePath,
            (false, true) => MacroState::ChangeApproach,
            (false, false) => MacroState::Refine,
        }
    }
}

/// Rounds to 1e-9, so that the table's boundaries are met exactly.
fn round9(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

/// D over the round's criteria.
pub fn distance(request: &ReplanRequest) -> f64 {
    let mut total = 0usize;
    let mut failed = 0.0;
    for outcome in &request.outcomes {
        total += outcome.verdicts.len();
        failed += outcome.failed().map(|v| outcome.weight(v)).sum::<f64>();
    }
    if total == 0 {
        0.0
    } else {
        round9((failed / total as f64).clamp(0.0, 1.0))
    }
}

fn failed_classes(request: &ReplanRequest) -> (usize, usize) {
    let classes = request.outcomes.iter().flat_map(Outcome::failed).map(|v| v.class);
    classes.fold((0, 0), |(logical, environmental), class| match class {
        Some(FailureClass::Environmental) => (logical, environmental + 1),
        _ => (logical + 1, environmental),
    })
}

/// P over the round's failed criteria.
pub fn process(request: &ReplanRequest) -> f64 {
    match failed_classes(request) {
        (0, 0) => 0.0,
        (logical, environmental) => round9(logical as f64 / (logical + environmental) as f64),
    }
}

/// Ω from the replans made and the time spent.
pub fn omega(replans: u32, max_replans: u32, elapsed_ms: u64, time_budget_ms: u64, spent: f64, c: &GgsConfig) -> f64 {
    let ratio = |used: f64, budget: f64| if budget > 0.0 { used / budget } else { 1.0 };
    let value = c.w1 * ratio(f64::from(replans), f64::from(max_replans))
        + c.w2 * ratio(elapsed_ms as f64, time_budget_ms as f64)
        + c.w3 * spent.clamp(0.0, 1.0);
    round9(value.clamp(0.0, 1.0))
}

/// L = α·D + β·(1 − Ω)·P + λ·Ω.
pub fn loss(d: f64, p: f64, omega: f64, c: &GgsConfig) -> Loss {
    let beta_eff = c.beta * (1.0 - omega);
    Loss {
        d,
        p,
        omega,
        l: round9(c.alpha * d + beta_eff * p + c.lambda * omega),
    }
}

/// Decides what to do after a failed round.
pub fn decide(request: &ReplanRequest, state: &GgsState, c: &GgsConfig) -> Decision {
    let (d, p) = request.carried.unwrap_or_else(|| (distance(request), process(request)));
    let omega = omega(
        request.replans,
        request.max_replans,
        request.elapsed_ms,
        request.time_budget_ms,
        request.spent,
        c,
    );
    let loss = loss(d, p, omega, c);
    let grad_l = state.l_prev.map_or(0.0, |prev| round9(loss.l - prev));
    let worsening = if grad_l > c.epsilon { state.worsening + 1 } else { 0 };
    let table = macro_state(Signals { grad_l, d, p, omega }, c);
    let law2 = table != MacroState::Abandon && worsening >= 2;
    // The third way the medium loop ends (paper §6): the replan budget is spent.
    let spent = table != MacroState::Abandon && !law2 && request.replans >= request.max_replans;
    let directive = if law2 || spent { MacroState::Abandon } else { table };

    let failed_outcomes: Vec<&Outcome> = request
        .outcomes
        .iter()
        .filter(|o| o.failed().next().is_some())
        .collect();
    let failed_tools: BTreeSet<String> = failed_outcomes.iter().filter_map(|o| o.tool.clone()).collect();
    let mut blocked_tools = state.blocked_tools.clone();
    let mut blocked_targets = state.blocked_targets.clone();
    let mut newly = Vec::new();
    let mut block_target = |target: &String, newly: &mut Vec<String>| {
        if blocked_targets.insert(target.clone()) {
            newly.push(format!("target {target}"));
        }
    };
    let mut block_tool = |tool: &String, newly: &mut Vec<String>| {
        if blocked_tools.insert(tool.clone()) {
            newly.push(tool.clone());
        }
    };
    // An inferred tool (the program a command starts with) is not evidence
    // against every command starting with it: its failure blocks the target.
    let mut spared = BTreeSet::new();
    match directive {
        MacroState::ChangePath => {
            for target in failed_outcomes.iter().filter_map(|o| o.target.as_ref()) {
                block_target(target, &mut newly);
            }
        }
        MacroState::ChangeApproach | MacroState::BreakSymmetry => {
            for o in &failed_outcomes {
                match (&o.tool, &o.target) {
                    (Some(tool), _) if o.tool_declared => block_tool(tool, &mut newly),
                    (tool, Some(target)) => {
                        spared.extend(tool.iter().cloned());
                        block_target(target, &mut newly);
                    }
                    (Some(tool), None) => block_tool(tool, &mut newly),
                    (None, None) => {}
                }
                if directive == MacroState::BreakSymmetry {
                    for tool in &o.subtree_tools {
                        block_tool(tool, &mut newly);
                    }
                    for target in &o.subtree_targets {
                        block_target(target, &mut newly);
                    }
                }
            }
        }
        MacroState::Abandon | MacroState::Success | MacroState::Refine => {}
    }
    spared.retain(|tool| !blocked_tools.contains(tool));

    let failed_criterion = failed_outcomes
        .iter()
        .flat_map(|o| o.failed().map(move |v| (o, v)))
        .fold(None::<(f64, String)>, |best, (o, v)| {
            let w = o.weight(v);
            match best {
                Some((bw, _)) if bw >= w => best,
                _ => Some((w, o.describe(&v.criterion))),
            }
        })
        .map(|(_, name)| name);
    let failure_class = match failed_classes(request) {
        (0, 0) => None,
        (_, 0) => Some(FailureMix::Logical),
        (0, _) => Some(FailureMix::Environmental),
        _ => Some(FailureMix::Mixed),
    };
    let gradient = Gradient::of(grad_l, c.epsilon);
    let already = !(state.blocked_tools.is_empty() && state.blocked_targets.is_empty());
    let mut rationale = rationale(
        directive,
        law2,
        Signals { grad_l, d, p, omega },
        c,
        state,
        &newly,
        already,
    );
    if spent {
        rationale = format!(
            "The replan budget is spent ({} of max_replans={} made): stop and report what was solved.",
            request.replans, request.max_replans
        );
    }
    if !spared.is_empty() {
        let tools: Vec<String> = spared.iter().map(|t| format!("`{t}`")).collect();
        rationale.push_str(&format!(
            " ({} inferred from the command, not declared with `tool:`: the failure counts against the failed target, not every command starting with it.)",
            tools.join(", ")
        ));
    }
    Decision {
        round: state.rounds + 1,
        loss,
        grad_l,
        gradient,
        directive,
        law2,
        worsening,
        failed: failed_outcomes.iter().filter_map(|o| o.atom.clone()).collect(),
        base_case_failed: failed_outcomes.iter().any(|o| o.atom.is_none()),
        failed_criterion,
        failure_class,
        blocked_tools: blocked_tools.into_iter().collect(),
        blocked_targets: blocked_targets.into_iter().collect(),
        failed_tools: failed_tools.into_iter().collect(),
        replans: request.replans,
        elapsed_ms: request.elapsed_ms,
        rationale,
        row: crate::memory::row(directive.as_str()).unwrap_or(crate::memory::Row {
            f: 0.0,
            sigma: 0.0,
            k: 0.0,
        }),
    }
}

fn rationale(
    directive: MacroState,
    law2: bool,
    s: Signals,
    c: &GgsConfig,
    state: &GgsState,
    newly: &[String],
    already: bool,
) -> String {
    let blocked = |what: &str| match (newly.is_empty(), already) {
        (false, _) => format!("block {}", newly.join(", ")),
        (true, true) => format!("nothing new to block ({what} already blocked)"),
        (true, false) => {
            "nothing to block (no failed atom names a tool or target: the base case failed on solved work)".to_string()
        }
    };
    // What the next plan must differ in: a tool when a tool was blocked, else a target.
    let demand = if newly.iter().any(|b| !b.starts_with("target ")) {
        " and demand a tool not tried here"
    } else if !newly.is_empty() {
        " and demand a target not tried here"
    } else {
        ""
    };
    match directive {
        MacroState::Abandon if law2 => format!(
            "The loss rose twice in a row (∇L={:+.2} after {:+.2}, both > ε={:.2}): the run diverges, so stop (Law 2).",
            s.grad_l,
            state.last.as_ref().map_or(0.0, |d| d.grad_l),
            c.epsilon
        ),
        MacroState::Abandon => format!(
            "The budget is spent (Ω={:.2} ≥ θ={:.2}): stop and report what was solved.",
            s.omega, c.theta
        ),
        MacroState::Success => format!(
            "Close enough (D={:.2} ≤ δ={:.2}): keep the approach and recover the failure; only the base case ends the run.",
            s.d, c.delta
        ),
        MacroState::BreakSymmetry => format!(
            "Local minimum (|∇L|={:.2} < ε, D={:.2} > δ) with logical failures (P={:.2} > ρ): {}{demand}.",
            s.grad_l.abs(),
            s.d,
            s.p,
            blocked("every tried tool and target")
        ),
        MacroState::ChangeApproach => format!(
            "Loss {} (∇L={:+.2}) with logical failures (P={:.2} > ρ): {} and switch to another tool.",
            if s.grad_l > 0.0 { "rising" } else { "falling, yet" },
            s.grad_l,
            s.p,
            blocked("the failed tools")
        ),
        MacroState::ChangePath => format!(
            "Plateau (|∇L|={:.2} < ε, D={:.2} > δ) with environmental failures (P={:.2} ≤ ρ): same approach, another target; {}.",
            s.grad_l.abs(),
            s.d,
            s.p,
            blocked("the failed targets")
        ),
        MacroState::Refine if s.grad_l < 0.0 => format!(
            "Loss decreasing (∇L={:+.2}) on a sound approach (P={:.2} ≤ ρ): retry the failed atoms with their corrections.",
            s.grad_l, s.p
        ),
        MacroState::Refine => format!(
            "Loss rising (∇L={:+.2}) from environmental failures (P={:.2} ≤ ρ): retry the failed atoms with their corrections.",
            s.grad_l, s.p
        ),
    }
}

/// The end of a task as GGS reports it (seed R7's FinalResult).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinalResult {
    /// Accepted (D = 0, the base case holds) or abandoned.
    pub accepted: bool,
    /// What happened, in one sentence.
    pub summary: String,
    /// The final loss (D = 0 when accepted).
    pub loss: Loss,
    /// The last gradient.
    pub grad_l: f64,
    /// Replans made.
    pub replans: u32,
    /// Solved atoms and their summaries: the partial result.
    #[serde(default, skip_serializing_if = "indexmap::IndexMap::is_empty")]
    pub partial: indexmap::IndexMap<AtomId, String>,
    /// What the user can do next (abandon only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_moves: Vec<String>,
}

/// The accept path: the base case holds, so D = 0 and P = 0.
pub fn accept(state: &GgsState, omega: f64, replans: u32, c: &GgsConfig) -> FinalResult {
    let loss = loss(0.0, 0.0, omega, c);
    FinalResult {
        accepted: true,
        summary: "the base case holds".to_string(),
        loss,
        grad_l: state.l_prev.map_or(0.0, |prev| round9(loss.l - prev)),
        replans,
        partial: indexmap::IndexMap::new(),
        next_moves: Vec::new(),
    }
}

/// What [`next_moves`] derives the moves from.
#[derive(Debug, Clone, Default)]
pub struct Situation {
    /// The latest failures: atom, criterion, first line of the error, and
    /// whether the environment (not the work) failed.
    pub failures: Vec<(AtomId, String, String, bool)>,
    /// OR atoms with alternatives not tried yet.
    pub untried: Vec<Untried>,
    /// The solved atoms at the bottom of the selected plan (no dependencies):
    /// re-running them re-runs the plan.
    pub foundations: Vec<AtomId>,
    /// The `max_replans` constraint in force.
    pub max_replans: u32,
    /// The `time_budget` constraint in force, in seconds.
    pub time_budget_s: u64,
}

/// An open OR atom's alternatives not tried yet.
#[derive(Debug, Clone, Default)]
pub struct Untried {
    /// The OR atom.
    pub group: AtomId,
    /// Alternatives a plan may still use.
    pub usable: Vec<AtomId>,
    /// Alternatives refused by the blocked sets, with why.
    pub refused: Vec<(AtomId, String)>,
}

/// Two or three concrete moves after an abandon or a dead end, derived from
/// the failures. Every command in them works as printed.
pub fn next_moves(decision: &Decision, situation: &Situation) -> Vec<String> {
    let mut moves = Vec::new();
    if decision.base_case_failed && situation.failures.is_empty() && !situation.foundations.is_empty() {
        let resets: Vec<String> = situation.foundations.iter().map(|a| format!("--reset {a}")).collect();
        let names: Vec<String> = situation.foundations.iter().map(|a| format!("`{a}`")).collect();
        moves.push(format!(
            "The base case fails though every atom is solved: if work they did is gone (a file deleted, a checkout), run it again: `aot redirect {}`, then `aot start` ({} and every atom that depends on {} run again). If the plan cannot reach the goal, add an atom or an alternative to the state file.",
            resets.join(" "),
            names.join(", "),
            if names.len() == 1 { "it" } else { "them" }
        ));
    }
    match situation.failures.first() {
        Some((atom, criterion, error, true)) => moves.push(format!(
            "`{atom}` failed because its environment did ({criterion}: {error}) — a tool, a service, a key or a rate limit, not its work: fix that or wait, then run it again: `aot redirect --reset {atom}`, then `aot start`."
        )),
        Some((atom, criterion, error, false)) => moves.push(format!(
            "Fix why `{atom}` fails ({criterion}: {error}) — in the files it works on, or its command in the state file — then run it again: `aot redirect --reset {atom}`, then `aot start`."
        )),
        None => {}
    }
    let open = situation
        .untried
        .iter()
        .find(|u| !u.usable.is_empty() || !u.refused.is_empty());
    if let Some(Untried { group, usable, refused }) = open {
        if let Some(alt) = usable.first() {
            moves.push(format!(
                "Try the untried alternative `{alt}` at `{group}`: `aot redirect --choose {group}={alt}`, then `aot start`."
            ));
        } else if let Some((alt, why)) = refused.first() {
            moves.push(format!(
                "`{alt}` at `{group}` was not tried ({why}); if that block is wrong, run it anyway — your choice overrides it: `aot redirect --choose {group}={alt}`, then `aot start`."
            ));
        }
    }
    if decision.law2 {
        moves.push(format!(
            "The loss rose in each of the last two rounds (now L={:.2}): rethink the approach (add an alternative or edit the atoms) before `aot start`.",
            decision.loss.l
        ));
    } else if decision.directive == MacroState::Abandon {
        moves.push(format!(
            "Raise the budget (Ω={:.0}%: {} of max_replans={} replans, {}s of time_budget={}s): `aot redirect --set max_replans={} --set time_budget={}s`, then `aot start`.",
            decision.loss.omega * 100.0,
            decision.replans,
            situation.max_replans,
            decision.elapsed_ms / 1000,
            situation.time_budget_s,
            (situation.max_replans.max(1) * 2).max(decision.replans + 2),
            (situation.time_budget_s.max(1) * 2).max(decision.elapsed_ms / 1000 * 2),
        ));
    }
    moves.truncate(3);
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECISION: &str = "  loss: { D: 0.5, P: 1.0, Omega: 0.1, L: 0.6 }
  grad_l: 0.25
  gradient: worsening
  directive: change_approach
  replans: 0
  elapsed_ms: 5
  rationale: r
  row: { f: 0.5, sigma: 0.5, k: 0.1 }
";

    #[test]
    fn an_older_files_decision_list_reads_as_the_count_and_the_latest() {
        let old = format!(
            "l_prev: 0.6\nhistory:\n- round: 1\n  failed: [a]\n{}- round: 2\n  failed: [b, base_case]\n{}",
            DECISION, DECISION
        );
        let ggs: GgsState = serde_saphyr::from_str(&old).expect("an older file reads");
        assert_eq!(ggs.rounds, 2);
        let last = ggs.last.as_deref().expect("the latest decision");
        assert_eq!(last.round, 2);
        assert_eq!(last.failed, [AtomId::from("b")], "the sentinel is not an atom");
        assert!(last.base_case_failed);
        // Written back, it has the new shape, and reads as itself.
        let text = serde_saphyr::to_string(&ggs).expect("serialize");
        assert!(!text.contains("history"), "{text}");
        assert_eq!(serde_saphyr::from_str::<GgsState>(&text).expect("reads"), ggs);
    }

    #[test]
    fn the_state_after_a_decision_keeps_the_count_and_only_the_latest() {
        let d: Decision = serde_saphyr::from_str(&format!("round: 1\n{}", DECISION.replace("\n  ", "\n").trim_start()))
            .expect("decision");
        let once = GgsState::default().after(&d);
        let twice = once.after(&Decision { round: 2, ..d.clone() });
        assert_eq!((once.rounds, twice.rounds), (1, 2));
        assert_eq!(twice.last.as_deref().map(|d| d.round), Some(2));
        assert_eq!(twice.l_prev, Some(0.6));
    }

    fn c() -> GgsConfig {
        GgsConfig::default()
    }

    fn signals(grad_l: f64, d: f64, p: f64, omega: f64) -> Signals {
        Signals { grad_l, d, p, omega }
    }

    /// Appendix A, one row per cell: ∇L band, D, P, Ω, expected state. Values
    /// sit well inside each band: below −ε −0.3, plateau 0.0, above +ε 0.3;
    /// D 0.1 or 0.9; P 0.2 or 0.9; Ω 0.1 or 0.9.
    #[test]
    fn appendix_a_all_24_cells() {
        use MacroState::*;
        let (down, flat, up) = (-0.3, 0.0, 0.3);
        let (d_lo, d_hi, p_lo, p_hi, o_lo, o_hi) = (0.1, 0.9, 0.2, 0.9, 0.1, 0.9);
        let cells = [
            (
                "01 improving, close, environmental, budget left",
                down,
                d_lo,
                p_lo,
                o_lo,
                Success,
            ),
            (
                "02 improving, close, logical, budget left",
                down,
                d_lo,
                p_hi,
                o_lo,
                Success,
            ),
            (
                "03 improving, close, environmental, budget spent",
                down,
                d_lo,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "04 improving, close, logical, budget spent",
                down,
                d_lo,
                p_hi,
                o_hi,
                Abandon,
            ),
            (
                "05 improving, far, environmental, budget left",
                down,
                d_hi,
                p_lo,
                o_lo,
                Refine,
            ),
            (
                "06 improving, far, logical, budget left",
                down,
                d_hi,
                p_hi,
                o_lo,
                ChangeApproach,
            ),
            (
                "07 improving, far, environmental, budget spent",
                down,
                d_hi,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "08 improving, far, logical, budget spent",
                down,
                d_hi,
                p_hi,
                o_hi,
                Abandon,
            ),
            (
                "09 plateau, close, environmental, budget left",
                flat,
                d_lo,
                p_lo,
                o_lo,
                Success,
            ),
            (
                "10 plateau, close, logical, budget left",
                flat,
                d_lo,
                p_hi,
                o_lo,
                Success,
            ),
            (
                "11 plateau, close, environmental, budget spent",
                flat,
                d_lo,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "12 plateau, close, logical, budget spent",
                flat,
                d_lo,
                p_hi,
                o_hi,
                Abandon,
            ),
            (
                "13 plateau, far, environmental, budget left",
                flat,
                d_hi,
                p_lo,
                o_lo,
                ChangePath,
            ),
            (
                "14 plateau, far, logical, budget left",
                flat,
                d_hi,
                p_hi,
                o_lo,
                BreakSymmetry,
            ),
            (
                "15 plateau, far, environmental, budget spent",
                flat,
                d_hi,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "16 plateau, far, logical, budget spent",
                flat,
                d_hi,
                p_hi,
                o_hi,
                Abandon,
            ),
            (
                "17 worsening, close, environmental, budget left",
                up,
                d_lo,
                p_lo,
                o_lo,
                Success,
            ),
            (
                "18 worsening, close, logical, budget left",
                up,
                d_lo,
                p_hi,
                o_lo,
                Success,
            ),
            (
                "19 worsening, close, environmental, budget spent",
                up,
                d_lo,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "20 worsening, close, logical, budget spent",
                up,
                d_lo,
                p_hi,
                o_hi,
                Abandon,
            ),
            (
                "21 worsening, far, environmental, budget left",
                up,
                d_hi,
                p_lo,
                o_lo,
                Refine,
            ),
            (
                "22 worsening, far, logical, budget left",
                up,
                d_hi,
                p_hi,
                o_lo,
                ChangeApproach,
            ),
            (
                "23 worsening, far, environmental, budget spent",
                up,
                d_hi,
                p_lo,
                o_hi,
                Abandon,
            ),
            (
                "24 worsening, far, logical, budget spent",
                up,
                d_hi,
                p_hi,
                o_hi,
                Abandon,
            ),
        ];
        assert_eq!(cells.len(), 24);
        for (name, g, d, p, o, expected) in cells {
            assert_eq!(macro_state(signals(g, d, p, o), &c()), expected, "cell {name}");
        }
    }

    /// The conventions at each threshold (documented in the module and docs/ggs.md).
    #[test]
    fn boundaries() {
        use MacroState::*;
        let c = c();
        let cases = [
            (
                "|∇L| = ε carries a signal: logical",
                signals(0.1, 0.9, 0.9, 0.1),
                ChangeApproach,
            ),
            (
                "|∇L| = ε carries a signal: environmental",
                signals(0.1, 0.9, 0.2, 0.1),
                Refine,
            ),
            ("∇L = −ε carries a signal", signals(-0.1, 0.9, 0.2, 0.1), Refine),
            (
                "just under ε is a plateau",
                signals(0.099_999_999, 0.9, 0.9, 0.1),
                BreakSymmetry,
            ),
            ("D = δ is success", signals(0.0, 0.3, 0.9, 0.1), Success),
            (
                "just over δ is not",
                signals(0.0, 0.300_000_001, 0.9, 0.1),
                BreakSymmetry,
            ),
            ("P = ρ counts as environmental", signals(0.0, 0.9, 0.5, 0.1), ChangePath),
            (
                "just over ρ is logical",
                signals(0.0, 0.9, 0.500_000_001, 0.1),
                BreakSymmetry,
            ),
            ("Ω = θ abandons", signals(0.0, 0.1, 0.2, 0.8), Abandon),
            ("just under θ does not", signals(0.0, 0.1, 0.2, 0.799_999_999), Success),
        ];
        for (name, s, expected) in cases {
            assert_eq!(macro_state(s, &c), expected, "{name}");
        }
    }

    fn outcome(atom: &str, tool: &str, verdicts: &[(bool, FailureClass)]) -> Outcome {
        Outcome {
            atom: Some(atom.into()),
            tool: Some(tool.into()),
            tool_declared: true,
            target: Some(format!("{atom}-target")),
            solved: verdicts.iter().all(|(passed, _)| *passed),
            verdicts: verdicts
                .iter()
                .enumerate()
                .map(|(i, (passed, class))| Verdict {
                    criterion: if i == 0 {
                        Criterion::Run
                    } else {
                        Criterion::Check {
                            index: i - 1,
                            command: format!("check {}", i - 1),
                        }
                    },
                    passed: *passed,
                    class: (!passed).then_some(*class),
                })
                .collect(),
            trajectory: Vec::new(),
            attempts: 1,
            subtree_tools: Vec::new(),
            subtree_targets: Vec::new(),
        }
    }

    fn request(outcomes: Vec<Outcome>, replans: u32) -> ReplanRequest {
        ReplanRequest {
            outcomes,
            elapsed_ms: 0,
            time_budget_ms: 300_000,
            replans,
            max_replans: 3,
            spent: 0.0,
            carried: None,
        }
    }

    const L: FailureClass = FailureClass::Logical;
    const E: FailureClass = FailureClass::Environmental;

    #[test]
    fn first_round_has_no_gradient_and_is_a_plateau() {
        let r = request(vec![outcome("a", "sed", &[(true, L), (false, L)])], 0);
        let d = decide(&r, &GgsState::default(), &c());
        assert_eq!(d.grad_l, 0.0);
        assert_eq!(d.gradient, Gradient::Plateau);
        assert_eq!(d.loss.d, 0.5);
        assert_eq!(d.loss.p, 1.0);
        assert_eq!(d.directive, MacroState::BreakSymmetry);
        assert_eq!(d.blocked_tools, vec!["sed".to_string()]);
        assert_eq!(d.failed_criterion.as_deref(), Some("a: check[0]: check 0"));
        assert_eq!(d.failure_class, Some(FailureMix::Logical));
        assert_eq!(d.round, 1);
        assert_eq!(d.line(), "D=0.50 P=1.00 ∇L=+0.00 → Ω=0% → break_symmetry");
    }

    #[test]
    fn law2_abandons_after_two_worsening_rounds() {
        let c = c();
        // L1 = .6·(1/3) + .3·1 = .5 ; L2 = .6·(2/3) + .3·.8 + .4·.2 = .72 ; L3 = .6 + .3·.6 + .4·.4 = .94
        let r1 = request(vec![outcome("a", "t1", &[(true, L), (true, L), (false, L)])], 0);
        let d1 = decide(&r1, &GgsState::default(), &c);
        assert_eq!(
            (d1.directive, d1.loss.l, d1.worsening),
            (MacroState::BreakSymmetry, 0.5, 0)
        );
        let s1 = GgsState::default().after(&d1);
        let r2 = request(vec![outcome("b", "t2", &[(true, L), (false, L), (false, L)])], 1);
        let d2 = decide(&r2, &s1, &c);
        assert_eq!(
            (d2.directive, d2.loss.l, d2.grad_l, d2.worsening),
            (MacroState::ChangeApproach, 0.72, 0.22, 1)
        );
        assert!(!d2.law2);
        let s2 = s1.after(&d2);
        assert_eq!(s2.blocked_tools.iter().collect::<Vec<_>>(), ["t1", "t2"]);
        let r3 = request(vec![outcome("c", "t3", &[(false, L)])], 2);
        let d3 = decide(&r3, &s2, &c);
        assert_eq!(
            (d3.directive, d3.loss.l, d3.grad_l, d3.worsening),
            (MacroState::Abandon, 0.94, 0.22, 2)
        );
        assert!(d3.law2);
        assert!(d3.rationale.contains("Law 2"), "{}", d3.rationale);
        // The same third round without the saved L_prev is a plateau, not an abandon.
        let forgetful = GgsState {
            l_prev: None,
            ..s2.clone()
        };
        assert_eq!(decide(&r3, &forgetful, &c).directive, MacroState::BreakSymmetry);
    }

    #[test]
    fn a_round_that_does_not_worsen_resets_the_streak() {
        let c = c();
        let state = GgsState {
            l_prev: Some(0.5),
            worsening: 1,
            ..GgsState::default()
        };
        // L = .6·.5 + .3·1 = .6 → ∇L = +.1 = ε: a signal, but not "> ε" for Law 2.
        let r = request(vec![outcome("a", "t", &[(true, L), (false, L)])], 0);
        let d = decide(&r, &state, &c);
        assert_eq!(d.grad_l, 0.1);
        assert_eq!(d.worsening, 0);
        assert_eq!(d.directive, MacroState::ChangeApproach);
    }

    #[test]
    fn change_path_blocks_failed_targets_and_keeps_tools() {
        let r = request(vec![outcome("fetch-a", "curl", &[(false, E)])], 0);
        let d = decide(&r, &GgsState::default(), &c());
        assert_eq!(d.directive, MacroState::ChangePath);
        assert_eq!(d.loss.p, 0.0);
        assert_eq!(d.blocked_targets, vec!["fetch-a-target".to_string()]);
        assert!(d.blocked_tools.is_empty());
        assert_eq!(d.failed_tools, vec!["curl".to_string()]);
        assert_eq!(d.failure_class, Some(FailureMix::Environmental));
    }

    #[test]
    fn mixed_failures_and_plausible_weights() {
        let mut o = outcome("a", "llm", &[(true, L), (false, L)]);
        let judged = Criterion::Plausible {
            index: 0,
            text: "reads well".into(),
        };
        o.verdicts[1].criterion = judged.clone();
        o.attempts = 4;
        o.trajectory = (1..=4)
            .map(|attempt| AttemptGap {
                attempt,
                criterion: if attempt % 2 == 0 {
                    judged.clone()
                } else {
                    Criterion::Run
                },
                class: L,
            })
            .collect();
        // The plausible criterion failed in 2 of 4 attempts: weight .5 over 2 criteria.
        let env = outcome("b", "curl", &[(false, E)]);
        let r = request(vec![o, env], 0);
        assert_eq!(distance(&r), round9(1.5 / 3.0));
        assert_eq!(process(&r), 0.5);
        let d = decide(&r, &GgsState::default(), &c());
        assert_eq!(d.failure_class, Some(FailureMix::Mixed));
        assert_eq!(
            d.failed_criterion.as_deref(),
            Some("b: run"),
            "the heavier failure drives D"
        );
    }

    #[test]
    fn omega_counts_replans_and_time_and_is_clamped() {
        let c = c();
        assert_eq!(omega(0, 3, 0, 300_000, 0.0, &c), 0.0);
        assert_eq!(omega(3, 3, 0, 300_000, 0.0, &c), 0.6);
        assert_eq!(omega(3, 3, 150_000, 300_000, 0.0, &c), 0.8);
        assert_eq!(omega(9, 3, 900_000, 300_000, 0.0, &c), 1.0);
        assert_eq!(omega(0, 0, 0, 0, 0.0, &c), 1.0, "a zero budget is spent");
        assert_eq!(omega(0, 3, 0, 300_000, 0.5, &c), 0.2, "half the LLM budget spent");
    }

    #[test]
    fn accept_has_zero_distance() {
        let state = GgsState {
            l_prev: Some(0.5),
            ..GgsState::default()
        };
        let f = accept(&state, 0.2, 1, &c());
        assert!(f.accepted);
        assert_eq!(f.loss.d, 0.0);
        assert_eq!(f.loss.l, 0.08);
        assert_eq!(f.grad_l, -0.42);
    }

    #[test]
    fn a_spent_replan_budget_abandons_though_omega_is_below_theta() {
        let failed = || vec![outcome("a", "sed", &[(false, L)])];
        let d = decide(&request(failed(), 2), &GgsState::default(), &c());
        assert_ne!(
            d.directive,
            MacroState::Abandon,
            "2 of 3 replans made: one more is allowed"
        );
        let d = decide(&request(failed(), 3), &GgsState::default(), &c());
        assert!(d.loss.omega < c().theta, "Ω alone would go on: {}", d.loss.omega);
        assert_eq!(d.directive, MacroState::Abandon);
        assert!(!d.law2);
        assert_eq!(
            d.rationale,
            "The replan budget is spent (3 of max_replans=3 made): stop and report what was solved."
        );
        let moves = next_moves(&d, &Situation::default());
        assert!(moves.iter().any(|m| m.contains("--set max_replans=")), "{moves:#?}");
    }

    #[test]
    fn a_base_case_failing_on_solved_work_suggests_running_its_foundations_again() {
        let base_case = Outcome {
            atom: None,
            verdicts: vec![Verdict {
                criterion: Criterion::BaseCase {
                    command: "test -f out".into(),
                },
                passed: false,
                class: Some(L),
            }],
            tool: None,
            tool_declared: false,
            target: None,
            solved: false,
            ..outcome("x", "t", &[])
        };
        let d = decide(&request(vec![base_case], 0), &GgsState::default(), &c());
        assert!(d.base_case_failed && d.failed.is_empty());
        assert!(
            d.rationale
                .contains("nothing to block (no failed atom names a tool or target"),
            "{}",
            d.rationale
        );
        assert!(!d.rationale.contains("demand"), "{}", d.rationale);
        let situation = Situation {
            foundations: vec!["gen".into(), "fetch".into()],
            ..Situation::default()
        };
        let moves = next_moves(&d, &situation);
        assert!(
            moves[0].contains("`aot redirect --reset gen --reset fetch`, then `aot start`"),
            "{moves:#?}"
        );
    }

    #[test]
    fn next_moves_name_the_failure_the_alternatives_and_the_budget() {
        let r = request(vec![outcome("c", "t3", &[(false, L)])], 5);
        let d = decide(&r, &GgsState::default(), &c());
        assert_eq!(d.directive, MacroState::Abandon);
        let situation = Situation {
            failures: vec![("c".into(), "run".into(), "exit 1: boom".into(), false)],
            untried: vec![Untried {
                group: "fix".into(),
                usable: vec![],
                refused: vec![("b2".into(), "uses blocked tool t2".into())],
            }],
            ..Situation::default()
        };
        let moves = next_moves(&d, &situation);
        assert_eq!(moves.len(), 3, "{moves:#?}");
        assert!(moves[0].contains("`c` fails (run: exit 1: boom)"));
        assert!(moves[1].contains("aot redirect --choose fix=b2"));
        assert!(moves[2].contains("max_replans"));
        // An environmental failure is not the work's: the advice says so.
        let environmental = Situation {
            failures: vec![("c".into(), "run".into(), "429 rate limit".into(), true)],
            ..Situation::default()
        };
        let moves = next_moves(&d, &environmental);
        assert!(
            moves[0].contains("its environment did") && moves[0].contains("rate limit"),
            "{moves:#?}"
        );
    }
}
