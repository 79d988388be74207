//! The state file (State Contract v1.2 plus the engine's sections).
//!
//! Ownership follows the Kubernetes spec/status split: the user owns `version`,
//! `objective`, `workers` and each atom's definition; the engine owns each
//! atom's `status`/`attempts`/`chosen`, `control`, `corrections`, `bindings`,
//! `trail` and `run`, which the file keeps apart under `status:` ([`disk`]).
//! In memory they are one [`StateFile`]. Values a user may leave out are
//! `Option`s resolved by accessors, and saves rewrite only the engine's
//! section (`document::to_text`), so the user's text stays as written.

pub mod diag;
pub mod disk;
pub mod document;
pub mod patch;
pub mod schema;
pub mod shell;
pub mod spans;
pub mod template;
pub mod validate;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ggs::{GgsConfig, GgsParams};
use crate::model::Criterion;
use crate::model::time::{Span, Timestamp};
pub use crate::model::{AtomId, Binding, FailureClass, StopReason};

/// The state-file format version this build writes; it also reads (and
/// migrates) version 1.
pub const FORMAT_VERSION: u32 = 2;

/// A whole state file, as the engine works on it. On disk it is a
/// [`disk::StateFileOnDisk`]: the user's part, then the engine's `status:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "disk::StateFileOnDisk", into = "disk::StateFileOnDisk")]
pub struct StateFile {
    /// Format version; must be 2 (1 is migrated when read).
    pub version: u32,
    /// What must hold at the end, and why.
    pub objective: Objective,
    /// Requests to a running loop (`aot stop`, `aot redirect` write these).
    #[serde(default)]
    pub control: Control,
    /// Workers that run `agent` atoms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Workers>,
    /// Models and their prices for the LLM roles (never keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSettings>,
    /// Every redirect or accepted hand edit, in order (engine-owned).
    #[serde(default)]
    pub corrections: Vec<Correction>,
    /// The AND/OR work graph.
    pub graph: Graph,
    /// Result summaries of solved atoms, by atom id (engine-owned).
    #[serde(default)]
    pub bindings: IndexMap<AtomId, Binding>,
    /// OR choices, backtracks, failures and user corrections, oldest first (engine-owned).
    #[serde(default)]
    pub trail: Vec<TrailEntry>,
    /// The run record (engine-owned).
    #[serde(default)]
    pub run: RunState,
}

/// The objective: the agreements `aot align` establishes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    /// The purpose, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The user's request, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<String>,
    /// Why the work matters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_intent: Option<String>,
    /// What should be produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliverables: Option<String>,
    /// Human-readable completion criteria, consistent with `base_case`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_of_done: Option<String>,
    /// The externally verifiable completion check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_case: Option<BaseCase>,
    /// Plausible criteria of the whole task, judged by the meta-validator (a
    /// model on the brain tier) once the base case holds: completion needs both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub criteria: Vec<String>,
    /// Limits of the loop.
    #[serde(default, skip_serializing_if = "Constraints::is_empty")]
    pub constraints: Constraints,
}

/// A command whose exit code 0 means the objective is met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BaseCase {
    /// Shell command run with `bash -c` in the state file's directory.
    pub command: String,
    /// Kill the command after this long (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Span>,
}

impl BaseCase {
    /// Default base-case timeout.
    pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

    /// Returns the timeout, defaulted.
    pub fn timeout(&self) -> std::time::Duration {
        self.timeout.map_or(Self::DEFAULT_TIMEOUT, |s| s.0)
    }
}

/// When the base case is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyPolicy {
    /// After every fan-in of results, while other atoms run; when it holds,
    /// work in flight is cancelled. Each check that finds it unmet ends an
    /// iteration.
    #[default]
    EveryIteration,
    /// Only once every atom on the selected branches is solved (for expensive checks).
    WhenSolved,
}

/// How attempts' file changes are kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Inside a git work tree, an attempt's changes reach the tree only when
    /// it succeeds; failed, cancelled and losing attempts leave nothing.
    /// Outside one, as `none`.
    #[default]
    Git,
    /// Attempts work in the tree as it is and what they change stays.
    None,
}

/// Whether landed work is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommitPolicy {
    /// Each atom's landed changes (and each undo) become a commit on the
    /// current branch, of exactly those files.
    PerAtom,
    /// Landed changes stay uncommitted, as the user's own work does.
    #[default]
    None,
}

/// Loop limits. Unset fields take the seed defaults (see the accessors).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// Stop with `iteration_limit` after this many iterations (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Atoms run at once (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_agents: Option<u32>,
    /// Retries per atom in the fast loop (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// GGS decisions that may let the run go on; the next one abandons (default 3). Also weighs in Omega.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replans: Option<u32>,
    /// Wall-clock budget: GGS Omega (default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget: Option<Span>,
    /// Tokens the LLM roles may spend on the task (prompt and reply); a call
    /// that could pass it is not made, and GGS abandons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// US dollars the LLM roles may spend (prices from `llm.prices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// When to run the base case (default every_iteration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyPolicy>,
    /// Workspace isolation for attempts (default git, inside a git work tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// With isolation: commit each atom's landed changes (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitPolicy>,
    /// GGS hyper-parameters (defaults from the paper's Appendix B).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ggs: Option<GgsParams>,
}

impl Constraints {
    /// Seed default for `max_iterations`.
    pub const DEFAULT_MAX_ITERATIONS: u32 = 50;
    /// Seed default for `max_parallel_agents`.
    pub const DEFAULT_MAX_PARALLEL_AGENTS: u32 = 3;
    /// Seed default for `max_retries`.
    pub const DEFAULT_MAX_RETRIES: u32 = 2;
    /// Seed default for `max_replans`.
    pub const DEFAULT_MAX_REPLANS: u32 = 3;
    /// Seed default for `time_budget`.
    pub const DEFAULT_TIME_BUDGET: std::time::Duration = std::time::Duration::from_secs(300);

    fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Returns `max_iterations`, defaulted.
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations.unwrap_or(Self::DEFAULT_MAX_ITERATIONS)
    }

    /// Returns `max_parallel_agents`, defaulted.
    pub fn max_parallel_agents(&self) -> u32 {
        self.max_parallel_agents.unwrap_or(Self::DEFAULT_MAX_PARALLEL_AGENTS)
    }

    /// Returns `max_retries`, defaulted.
    pub fn max_retries(&self) -> u32 {
        self.max_retries.unwrap_or(Self::DEFAULT_MAX_RETRIES)
    }

    /// Returns `max_replans`, defaulted.
    pub fn max_replans(&self) -> u32 {
        self.max_replans.unwrap_or(Self::DEFAULT_MAX_REPLANS)
    }

    /// Returns `time_budget`, defaulted.
    pub fn time_budget(&self) -> std::time::Duration {
        self.time_budget.map_or(Self::DEFAULT_TIME_BUDGET, |s| s.0)
    }

    /// Returns `verify`, defaulted.
    pub fn verify(&self) -> VerifyPolicy {
        self.verify.unwrap_or_default()
    }

    /// Returns `isolation`, defaulted.
    pub fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or_default()
    }

    /// Returns `commit`, defaulted.
    pub fn commit(&self) -> CommitPolicy {
        self.commit.unwrap_or_default()
    }

    /// Returns the limits that must be at least 1, by field name, as written.
    pub fn positive_limits(&self) -> [(&'static str, Option<u32>); 3] {
        [
            ("max_iterations", self.max_iterations),
            ("max_parallel_agents", self.max_parallel_agents),
            ("max_replans", self.max_replans),
        ]
    }

    /// Returns the GGS hyper-parameters with every default filled in.
    pub fn ggs(&self) -> GgsConfig {
        self.ggs.clone().unwrap_or_default().resolve()
    }
}

/// Requests to a running loop.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Set by `aot stop`: the loop cancels in-flight work, saves and exits.
    #[serde(default)]
    pub stop_requested: bool,
    /// Why the stop was requested.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Set by `aot redirect` while a correction is being applied.
    #[serde(default)]
    pub redirect_requested: bool,
}

/// The `llm:` section: which models the LLM roles call and what they cost.
/// Keys are never written here: they come from the environment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// The model of the brain tier (perceiver, planner), over `BRAIN_MODEL`/`OPENAI_MODEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brain: Option<String>,
    /// The model of the tool tier (worker, validator), over `TOOL_MODEL`/`OPENAI_MODEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Prices in US dollars per million tokens, by model name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub prices: IndexMap<String, Price>,
}

/// A model's price, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million reply tokens.
    pub output: f64,
}

impl Price {
    /// What `prompt` and `completion` tokens cost, in dollars.
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.input + completion as f64 * self.output) / 1e6
    }
}

/// How `agent` atoms are run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workers {
    /// The external agent worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentWorker>,
}

/// An external agent CLI that reads its prompt on stdin: a command, a
/// template for a known CLI, or both (the command run, its output read as
/// the template's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentWorker {
    /// Shell command that runs the agent (overridden by `AOT_AGENT_CMD`);
    /// default: the template's command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A known agent CLI: its headless command line, its environmental exit
    /// codes, and its JSON output read for the final message, tokens and cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<AgentTemplate>,
}

/// The agent CLIs aot knows (`docs/workers.md` has the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentTemplate {
    /// Anthropic's Claude Code (`claude -p`).
    Claude,
    /// OpenAI's Codex CLI (`codex exec`).
    Codex,
    /// Aider.
    Aider,
    /// Block's goose (`goose run`).
    Goose,
    /// Google's Gemini CLI.
    Gemini,
    /// opencode (`opencode run`).
    Opencode,
}

impl AgentTemplate {
    /// The name as written in the file (`claude`, …).
    pub fn name(self) -> &'static str {
        match self {
            AgentTemplate::Claude => "claude",
            AgentTemplate::Codex => "codex",
            AgentTemplate::Aider => "aider",
            AgentTemplate::Goose => "goose",
            AgentTemplate::Gemini => "gemini",
            AgentTemplate::Opencode => "opencode",
        }
    }
}

/// The kind of a correction, which decides its effect on the trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CorrectionKind {
    /// Goal, base case, background or deliverables changed: the trail is cleared.
    ObjectiveChange,
    /// Atoms added or removed, or an OR choice forced: `user_correction` appended.
    DagAdjustment,
    /// Limits changed: the trail is kept.
    ConstraintChange,
    /// A binding overwritten: only its dependents are reset.
    BindingsOverride,
}

/// One applied redirect or hand edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Correction {
    /// When it was applied.
    pub at: Timestamp,
    /// What kind of change it was.
    #[serde(rename = "type")]
    pub kind: CorrectionKind,
    /// What changed, in words.
    pub description: String,
    /// Whether the trail was cleared.
    pub trail_cleared: bool,
}

/// The AND/OR work graph.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Graph {
    /// Atoms by id, in the order written.
    pub atoms: IndexMap<AtomId, Atom>,
}

/// An atom's engine-owned lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AtomStatus {
    /// Not yet solved; runs when its dependencies are solved.
    #[default]
    Pending,
    /// A worker is on it.
    Running,
    /// Done; its binding holds the result.
    Solved,
    /// Failed for good (retries used).
    Failed,
    /// Cannot run until the user fixes something (environment down).
    Blocked,
    /// On an abandoned OR branch; will not run.
    Pruned,
}

impl AtomStatus {
    /// Returns the status's name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            AtomStatus::Pending => "pending",
            AtomStatus::Running => "running",
            AtomStatus::Solved => "solved",
            AtomStatus::Failed => "failed",
            AtomStatus::Blocked => "blocked",
            AtomStatus::Pruned => "pruned",
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_pending(s: &AtomStatus) -> bool {
    *s == AtomStatus::Pending
}

/// A work item: a shell command (`run`), a prompt for an agent (`agent`), or a
/// choice between alternatives (`or`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Atom {
    /// Shell command, run with `bash -c`; exit 0 = success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Prompt for the agent worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Alternatives: exactly one must succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub or: Option<Vec<AtomId>>,
    /// For `or` atoms: run the alternatives at once, first success wins.
    #[serde(default, skip_serializing_if = "is_false")]
    pub speculative: bool,
    /// Atoms that must be solved first (AND).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<AtomId>,
    /// Verifiable criteria: commands that must exit 0 after `run`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check: Vec<String>,
    /// Plausible criteria, judged by an LLM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub criteria: Vec<String>,
    /// Read-only feasibility command, consulted after an environmental failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// The atom only investigates (a probe, in the seeds' words): the
    /// built-in worker gets the reading tools only, and with isolation what
    /// its work changed is discarded, never landed. Its summary is its result.
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    /// Tool label for GGS and memory (default: the program name of `run`,
    /// inferred: then a failure blocks the atom's target, not the tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Target label for GGS and memory (default: the atom's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Kill the worker after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Span>,
    /// Extra environment variables for the worker.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// Working directory, relative to the state file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Exit codes that mean "environment failed", not "logic failed"
    /// (default 75, 69, 124, 126, 127).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environmental_exit_codes: Option<Vec<i32>>,
    /// Where a planner's atom came from (planner-owned): the GGS decision
    /// it answers. Kept as the rest of the definition is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Planned>,
    /// Lifecycle state (engine-owned).
    #[serde(default, skip_serializing_if = "is_pending")]
    pub status: AtomStatus,
    /// Attempts made so far (engine-owned).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// For `or` atoms: the alternative currently selected (engine-owned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<AtomId>,
}

/// Where a planner's atom came from: the replan that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Planned {
    /// The replan's number in the task (1 = the first).
    pub replan: u32,
    /// The GGS directive the plan answers.
    pub directive: crate::ggs::MacroState,
    /// The failed atom the plan is a new way to solve (none: the base case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<AtomId>,
    /// The planner's reason, in its words.
    pub rationale: String,
}

impl Atom {
    /// Default exit codes classed as environmental failures.
    pub const DEFAULT_ENVIRONMENTAL_EXIT_CODES: [i32; 5] = [75, 69, 124, 126, 127];

    /// Returns a command atom.
    pub fn command(run: impl Into<String>) -> Self {
        Self {
            run: Some(run.into()),
            ..Self::default()
        }
    }

    /// Returns the atom's definition with the engine-owned fields reset.
    pub fn definition(&self) -> Atom {
        Atom {
            status: AtomStatus::Pending,
            attempts: 0,
            chosen: None,
            ..self.clone()
        }
    }

    /// Returns whether the definitions (everything but the engine-owned
    /// fields) are equal, without copying either atom.
    pub fn same_definition(&self, other: &Atom) -> bool {
        let Atom {
            run,
            agent,
            or,
            speculative,
            deps,
            check,
            criteria,
            probe,
            read_only,
            tool,
            target,
            timeout,
            env,
            cwd,
            environmental_exit_codes,
            planned,
            status: _,
            attempts: _,
            chosen: _,
        } = self;
        *run == other.run
            && *agent == other.agent
            && *or == other.or
            && *speculative == other.speculative
            && *deps == other.deps
            && *check == other.check
            && *criteria == other.criteria
            && *probe == other.probe
            && *read_only == other.read_only
            && *tool == other.tool
            && *target == other.target
            && *timeout == other.timeout
            && *env == other.env
            && *cwd == other.cwd
            && *environmental_exit_codes == other.environmental_exit_codes
            && *planned == other.planned
    }

    /// Returns whether the engine-owned fields differ between `self` and `other`.
    pub fn engine_fields_differ(&self, other: &Atom) -> bool {
        self.status != other.status || self.attempts != other.attempts || self.chosen != other.chosen
    }

    /// Returns a criterion's text as the user wrote it: the command of a
    /// `check`, a plausible criterion, else the atom's `run` (or `agent:` task).
    pub fn criterion_text(&self, criterion: &Criterion) -> String {
        match criterion {
            Criterion::Check { command, .. } => command.clone(),
            Criterion::Plausible { text, .. } => text.clone(),
            Criterion::Merge => "its changes merge with the work that landed while it ran".into(),
            _ => self
                .run
                .clone()
                .or_else(|| self.agent.as_ref().map(|task| format!("agent: {task}")))
                .unwrap_or_default(),
        }
    }

    /// Returns the criteria the atom is judged by, in order: an OR atom's one
    /// criterion, else its action, its checks, and its plausible criteria.
    pub fn criteria(&self) -> Vec<Criterion> {
        if self.or.is_some() {
            return vec![Criterion::Or];
        }
        let checks = self.check.iter().enumerate().map(|(index, command)| Criterion::Check {
            index,
            command: command.clone(),
        });
        let plausible = self
            .criteria
            .iter()
            .enumerate()
            .map(|(index, text)| Criterion::Plausible {
                index,
                text: text.clone(),
            });
        std::iter::once(Criterion::Run).chain(checks).chain(plausible).collect()
    }

    /// Returns the alternatives if this is an OR atom.
    pub fn alternatives(&self) -> Option<&[AtomId]> {
        self.or.as_deref()
    }

    /// Returns the tool label: `tool`, else the program name of `run`, else `agent`.
    pub fn tool(&self) -> Option<String> {
        if let Some(tool) = &self.tool {
            return Some(tool.clone());
        }
        if let Some(run) = &self.run {
            return run
                .split_whitespace()
                .find(|word| !word.contains('='))
                .map(|program| program.rsplit('/').next().unwrap_or(program).to_string());
        }
        self.agent.as_ref().map(|_| "agent".to_string())
    }
}

/// One entry of the trail: the history of OR choices and what happened to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TrailEntry {
    /// An alternative was selected at an OR atom.
    OrChoice {
        /// When.
        at: Timestamp,
        /// The OR atom.
        group: AtomId,
        /// The alternative selected.
        chosen: AtomId,
        /// Alternatives still untried.
        remaining: Vec<AtomId>,
        /// Why this one.
        reason: String,
    },
    /// The search went back to an OR atom and switched alternatives.
    Backtrack {
        /// When.
        at: Timestamp,
        /// The OR atom.
        group: AtomId,
        /// The alternative given up.
        from: AtomId,
        /// The alternative now selected.
        to: AtomId,
        /// Atoms reset to pending by the switch.
        reset: Vec<AtomId>,
    },
    /// An atom failed for good.
    Failure {
        /// When.
        at: Timestamp,
        /// The atom.
        atom: AtomId,
        /// Logical or environmental.
        class: FailureClass,
        /// The criterion that failed.
        criterion: crate::model::Criterion,
        /// What went wrong, from the tool's output.
        message: String,
    },
    /// The user changed the graph.
    UserCorrection {
        /// When.
        at: Timestamp,
        /// What the user changed.
        description: String,
    },
}

/// Proof that a command ran: what ran, how it ended, and what it printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The command.
    pub command: String,
    /// Its exit code (none if it was killed or could not start).
    pub exit_code: Option<i32>,
    /// The end of its output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
    /// When it finished.
    pub at: Timestamp,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
}

/// How and why a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRecord {
    /// The stop reason.
    pub reason: StopReason,
    /// When.
    pub at: Timestamp,
    /// What happened, in words (what the user must do, for `blocked`).
    pub message: String,
    /// The base-case run that proved completion, for `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// GGS's closing report: the final loss, the partial result and, after an
    /// abandon, what to do next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_result: Option<Box<crate::ggs::FinalResult>>,
}

/// Whether a loop is working on this file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// No run has started yet.
    #[default]
    Idle,
    /// A loop is (or was, if it crashed) running.
    Running,
    /// `aot step` ran one iteration; `aot step` or `aot start` continues.
    Paused,
    /// The last run stopped; see `run.stop`.
    Stopped,
}

/// The engine's run record.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunState {
    /// Idle, running or stopped.
    #[serde(default)]
    pub status: RunStatus,
    /// The sequence number of the last journal event this file reflects.
    #[serde(default)]
    pub revision: u64,
    /// Iterations completed.
    #[serde(default)]
    pub iteration: u32,
    /// Replans made (GGS Omega).
    #[serde(default)]
    pub replans: u32,
    /// When the current run started (cleared when it stops or pauses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// The last base-case run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verify: Option<Evidence>,
    /// Active time of earlier runs of this task, in milliseconds (GGS Omega).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub active_ms: u64,
    /// The Goal Gradient Solver's state: previous loss, streak, blocked sets, decisions.
    #[serde(default, skip_serializing_if = "is_default_ggs")]
    pub ggs: crate::ggs::GgsState,
    /// How the last run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopRecord>,
    /// What calls to models cost the task so far.
    #[serde(default, skip_serializing_if = "Spend::is_empty")]
    pub spend: Spend,
    /// How each agent atom's attempts were worked: by which worker, with how
    /// many model turns and tool calls.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub agents: IndexMap<AtomId, AgentTally>,
}

/// How an agent atom's attempts were worked, in all.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentTally {
    /// The worker of the last attempt: `llm`, a template's name, or `command`.
    pub worker: String,
    /// Attempts worked.
    pub attempts: u32,
    /// Model turns.
    pub turns: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Tool calls refused.
    pub refusals: u32,
}

/// Tokens and dollars spent on models, in all and by role and atom.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spend {
    /// Calls made.
    pub calls: u32,
    /// Prompt and reply tokens.
    pub tokens: u64,
    /// US dollars, for the calls whose model has a price.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost: f64,
    /// Whether some of the tokens are aot's estimate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// By role (`planner`, `worker`, …).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub by_role: IndexMap<String, Tally>,
    /// By the atom a call worked for.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub by_atom: IndexMap<AtomId, Tally>,
}

/// One line of [`Spend`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    /// Calls made.
    pub calls: u32,
    /// Prompt and reply tokens.
    pub tokens: u64,
    /// US dollars.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost: f64,
}

impl Tally {
    fn add(&mut self, tokens: u64, cost: f64) {
        self.calls = self.calls.saturating_add(1);
        self.tokens = self.tokens.saturating_add(tokens);
        self.cost += cost;
    }
}

impl Spend {
    /// Whether nothing was spent.
    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }

    /// Counts one call.
    pub fn add(&mut self, role: &str, atom: Option<&AtomId>, tokens: u64, cost: f64, estimated: bool) {
        self.calls = self.calls.saturating_add(1);
        self.tokens = self.tokens.saturating_add(tokens);
        self.cost += cost;
        self.estimated |= estimated;
        self.by_role.entry(role.to_string()).or_default().add(tokens, cost);
        if let Some(atom) = atom {
            self.by_atom.entry(atom.clone()).or_default().add(tokens, cost);
        }
    }
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_default_ggs(g: &crate::ggs::GgsState) -> bool {
    *g == crate::ggs::GgsState::default()
}

impl StateFile {
    /// The share of the LLM budget spent, in [0, 1]: the larger of tokens
    /// against `max_tokens` and dollars against `max_cost`; 0 without either.
    pub fn spent_share(&self) -> f64 {
        let c = &self.objective.constraints;
        let spend = &self.run.spend;
        let tokens = c.max_tokens.map_or(0.0, |max| {
            if max == 0 {
                1.0
            } else {
                spend.tokens as f64 / max as f64
            }
        });
        let cost = c
            .max_cost
            .map_or(0.0, |max| if max <= 0.0 { 1.0 } else { spend.cost / max });
        tokens.max(cost).clamp(0.0, 1.0)
    }

    /// Returns a minimal, valid state file with the given objective and graph.
    pub fn new(objective: Objective, atoms: IndexMap<AtomId, Atom>) -> Self {
        Self {
            version: FORMAT_VERSION,
            objective,
            control: Control::default(),
            workers: None,
            llm: None,
            corrections: Vec::new(),
            graph: Graph { atoms },
            bindings: IndexMap::new(),
            trail: Vec::new(),
            run: RunState::default(),
        }
    }

    /// An atom's last failure in the trail: class, criterion, message.
    pub fn last_failure(&self, id: &str) -> Option<(FailureClass, &Criterion, &str)> {
        self.trail.iter().rev().find_map(|t| match t {
            TrailEntry::Failure {
                atom,
                class,
                criterion,
                message,
                ..
            } if atom == id => Some((*class, criterion, message.as_str())),
            _ => None,
        })
    }

    /// The landings the bindings record, as (atom, attempt): what a start
    /// settles an interrupted landing against (finished when its attempt is
    /// bound, taken back when not).
    pub fn bound_attempts(&self) -> Vec<(String, u32)> {
        self.bindings
            .iter()
            .map(|(atom, binding)| (atom.to_string(), binding.attempt))
            .collect()
    }

    /// Returns "`id` (criterion): first line of the message" from the atom's
    /// last failure, for a stop message.
    pub fn failure_line(&self, id: &str) -> String {
        match self.last_failure(id) {
            Some((_, criterion, message)) => {
                format!("`{id}` ({criterion}): {}", crate::model::text::headline(message))
            }
            None => format!("`{id}`"),
        }
    }

    /// Returns the engine-owned fields that differ between `self` and `other`,
    /// as dotted paths (`bindings`, `graph.atoms.fetch.status`, ...).
    pub fn engine_differences(&self, other: &StateFile) -> Vec<String> {
        let mut out = Vec::new();
        if self.corrections != other.corrections {
            out.push("corrections".to_string());
        }
        if self.bindings != other.bindings {
            out.push("bindings".to_string());
        }
        if self.trail != other.trail {
            out.push("trail".to_string());
        }
        if self.run != other.run {
            out.push("run".to_string());
        }
        for (id, atom) in &self.graph.atoms {
            if let Some(theirs) = other.graph.atoms.get(id)
                && atom.engine_fields_differ(theirs)
            {
                out.push(format!("graph.atoms.{id} (status/attempts/chosen)"));
            }
        }
        out
    }

    /// Returns whether the user-owned parts (version, objective, control, workers,
    /// atom definitions and their order) are equal.
    pub fn user_part_eq(&self, other: &StateFile) -> bool {
        self.version == other.version
            && self.objective == other.objective
            && self.control == other.control
            && self.workers == other.workers
            && self.llm == other.llm
            && self.graph.atoms.len() == other.graph.atoms.len()
            && self
                .graph
                .atoms
                .iter()
                .zip(&other.graph.atoms)
                .all(|((a, x), (b, y))| a == b && x.same_definition(y))
    }
}
