//! The roles the engine drives, as traits only it knows.
//!
//! The engine decides *what* happens; a role decides *how*:
//!
//! - a [`Worker`] does an atom's work (a shell command, an agent CLI; later an
//!   LLM with tool calls);
//! - a [`Validator`] judges an atom's criteria once its work is done, and the
//!   base case (commands; later LLM-judged criteria);
//! - a [`Planner`] acts on a GGS directive: it changes the plan so the failed
//!   work can be solved another way (today's OR choices and backtracking; later
//!   an LLM that writes new atoms).
//!
//! The binary wires the implementations (`cli/run.rs`); the engine never names
//! a concrete one. What a role is handed is everything it needs and nothing it
//! could use to escape the rules: ids, paths and commands come from the state
//! file, never from a role's output unchecked.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ggs::Decision;
use crate::graph::WorkGraph;
use crate::journal::Reflection;
use crate::journal::event::Event;
use crate::model::time::Timestamp;
use crate::model::{Changes, Criterion};
use crate::state::{Atom, AtomId, Evidence, FailureClass, StateFile, Workers};
use crate::steer::Recall;

/// The variable naming the runner (its pid) that started a worker or the
/// base case: what a killed runner left running is found by it
/// (`workers::command::reap_orphans`).
pub const RUNNER_VAR: &str = "AOT_RUNNER_PID";

/// A boxed future a role returns (the traits stay object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One attempt at an atom: what a worker and the validators are handed.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// The atom.
    pub atom: AtomId,
    /// This attempt's number (1 = the first).
    pub attempt: u32,
    /// The atom as written, with `{{bindings}}` rendered in `run`, `agent`,
    /// `check` and `probe`.
    pub spec: Atom,
    /// Where the work runs: the atom's `cwd` under the state file's directory.
    pub cwd: PathBuf,
    /// The environment: the atom's `env`, the bindings of its dependencies,
    /// `AOT_ATOM`, `AOT_ATTEMPT`, `AOT_STATE` and, on a retry, `AOT_CORRECTION`.
    pub env: Vec<(String, String)>,
    /// The workspace's top folder for this attempt: the state file's
    /// directory (in the attempt's copy of the tree, with isolation). A
    /// built-in worker's file tools stay inside it.
    pub root: PathBuf,
    /// The state file's `workers` section.
    pub workers: Option<Workers>,
    /// The state file's `llm:` section (models and prices).
    pub llm: Option<crate::state::LlmSettings>,
    /// What an agent is told beyond its task.
    pub brief: Brief,
    /// Where the roles' records go while they work, and the budget they spend.
    pub report: Reporter,
}

/// What an agent is told about the task around its atom.
#[derive(Debug, Clone, Default)]
pub struct Brief {
    /// The goal of the whole task.
    pub goal: String,
    /// The solved dependencies' summaries.
    pub deps: Vec<(AtomId, String)>,
    /// Every earlier failed attempt at this atom, oldest first.
    pub corrections: Vec<Reflection>,
    /// GGS's blocked tools and targets, and memory's Avoid.
    pub must_not: Vec<String>,
    /// Memory's Exploit.
    pub should_prefer: Vec<String>,
    /// Attempts are isolated: a failed attempt's changes were discarded, so
    /// the tree is as the last landed work left it.
    pub isolated: bool,
    /// GGS's blocked tools: a built-in worker refuses to run them.
    pub blocked_tools: Vec<String>,
    /// Destructive commands (Law 1) may run: the user said `--yes`.
    pub confirmed: bool,
}

/// What a role reports while it works — each model call, each tool call,
/// each verdict — journaled by the engine as it comes (before the attempt's
/// end), and the [`Meter`] that keeps the task's budgets across the roles
/// working side by side.
#[derive(Clone, Default)]
pub struct Reporter {
    sender: Option<tokio::sync::mpsc::UnboundedSender<Report>>,
    meter: Arc<Meter>,
    /// Secret values (API keys, tokens) cut out of everything reported.
    secrets: Arc<Vec<String>>,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").finish_non_exhaustive()
    }
}

/// One record a role reports, with the budget it held for the call it
/// records: released once the record is journaled (and so counted).
pub struct Report {
    /// The record.
    pub event: Event,
    /// The budget held for it.
    pub hold: Option<Hold>,
}

impl Reporter {
    /// A reporter sending to `sender`, spending under `meter`, cutting
    /// `secrets` out of what it reports.
    pub fn new(sender: tokio::sync::mpsc::UnboundedSender<Report>, meter: Arc<Meter>, secrets: Vec<String>) -> Self {
        Self {
            sender: Some(sender),
            meter,
            secrets: Arc::new(secrets),
        }
    }

    /// `text` with the secrets cut out: for what a role sends a model or keeps.
    pub fn redact(&self, text: &str) -> String {
        crate::model::secret::redact(text, &self.secrets)
    }

    /// Reports `event` (secrets cut out, reasons bounded); `hold` is
    /// released once it is journaled.
    pub fn send(&self, event: Event, hold: Option<Hold>) {
        let bounded = |text: &str| crate::model::text::cut(&self.redact(text), 500);
        let event = match event {
            Event::ToolCalled {
                atom,
                attempt,
                tool,
                input,
                refused,
                exit_code,
            } => Event::ToolCalled {
                atom,
                attempt,
                tool: crate::model::text::cut(&tool, 64),
                input: bounded(&input),
                refused: refused.as_deref().map(bounded),
                exit_code,
            },
            Event::CriterionJudged {
                atom,
                attempt,
                criterion,
                passed,
                evidence,
                class,
            } => Event::CriterionJudged {
                atom,
                attempt,
                criterion,
                passed,
                evidence: crate::model::text::cut(&self.redact(&evidence), 1000),
                class,
            },
            Event::LlmCalled {
                role,
                model,
                prompt_tokens,
                completion_tokens,
                estimated,
                latency_ms,
                attempts,
                error,
                atom,
                cost,
                kept,
            } => Event::LlmCalled {
                role,
                model: crate::model::text::cut(&model, 200),
                prompt_tokens,
                completion_tokens,
                estimated,
                latency_ms,
                attempts,
                error: error.as_deref().map(bounded),
                atom,
                cost,
                kept,
            },
            other => other,
        };
        if let Some(sender) = &self.sender {
            // A run that ended no longer journals; the hold is released on drop.
            let _ = sender.send(Report { event, hold });
        }
    }

    /// Holds the worst case of a call (`tokens`, `cost` when priced) under
    /// the task's budgets. `Ok(None)`: cancelled while waiting; `Err` says
    /// which budget the call could pass even with no other call in flight.
    /// When only the worst cases of calls in flight stand in the way, it
    /// waits for them to settle: parallel roles near the budget take turns
    /// instead of ending the task.
    pub async fn hold(
        &self,
        role: &str,
        tokens: u64,
        cost: Option<f64>,
        cancel: &CancellationToken,
    ) -> Result<Option<Hold>, String> {
        loop {
            let settled = self.meter.settled.notified();
            tokio::pin!(settled);
            // Registered before the check: a release between the two is not missed.
            settled.as_mut().enable();
            match self.meter.try_hold(role, tokens, cost) {
                Ok(hold) => return Ok(Some(hold)),
                Err(Busy::Spent(message)) => return Err(message),
                Err(Busy::InFlight) => {}
            }
            tokio::select! {
                () = settled => {}
                () = cancel.cancelled() => return Ok(None),
            }
        }
    }

    /// Why no call may be made at all (a budget already spent); `None` when one may.
    pub fn spent_out(&self) -> Option<String> {
        self.meter.spent_out()
    }
}

/// Why a call cannot be held now.
enum Busy {
    /// Its worst case passes a budget even with nothing else in flight.
    Spent(String),
    /// Calls in flight hold what it needs: wait for them.
    InFlight,
}

/// The task's model budgets (`max_tokens`, `max_cost`) across roles that
/// call side by side: what the journal counts as spent, plus the worst case
/// of every call in flight. A call is made only when its worst case fits.
#[derive(Debug, Default)]
pub struct Meter {
    metered: std::sync::Mutex<Metered>,
    /// Signalled when a hold is released or the spend is updated.
    settled: tokio::sync::Notify,
}

#[derive(Debug, Default, Clone, Copy)]
struct Metered {
    spent_tokens: u64,
    spent_cost: f64,
    held_tokens: u64,
    held_cost: f64,
    max_tokens: Option<u64>,
    max_cost: Option<f64>,
}

impl Meter {
    /// What the journal counts as spent, and the budgets as the file has them now.
    pub fn set(&self, spend: &crate::state::Spend, max_tokens: Option<u64>, max_cost: Option<f64>) {
        if let Ok(mut m) = self.metered.lock() {
            m.spent_tokens = spend.tokens;
            m.spent_cost = spend.cost;
            m.max_tokens = max_tokens;
            m.max_cost = max_cost;
        }
        self.settled.notify_waiters();
    }

    fn try_hold(self: &Arc<Self>, role: &str, tokens: u64, cost: Option<f64>) -> Result<Hold, Busy> {
        let Ok(mut m) = self.metered.lock() else {
            return Err(Busy::Spent("the budget meter is unusable".into()));
        };
        if let Some(max) = m.max_tokens {
            if m.spent_tokens.saturating_add(tokens) > max {
                return Err(Busy::Spent(format!(
                    "the token budget would not cover the {role}'s next call: {} of max_tokens {max} spent, and the call could take up to {tokens} (`aot redirect --set max_tokens=N` raises it)",
                    m.spent_tokens
                )));
            }
            if m.spent_tokens.saturating_add(m.held_tokens).saturating_add(tokens) > max {
                return Err(Busy::InFlight);
            }
        }
        if let (Some(max), Some(cost)) = (m.max_cost, cost) {
            if m.spent_cost + cost > max {
                return Err(Busy::Spent(format!(
                    "the dollar budget would not cover the {role}'s next call: ${:.4} of max_cost ${max} spent, and the call could cost up to ${cost:.4} (`aot redirect --set max_cost=N` raises it)",
                    m.spent_cost
                )));
            }
            if m.spent_cost + m.held_cost + cost > max {
                return Err(Busy::InFlight);
            }
        }
        let cost = cost.unwrap_or(0.0);
        m.held_tokens = m.held_tokens.saturating_add(tokens);
        m.held_cost += cost;
        Ok(Hold {
            meter: Arc::clone(self),
            tokens,
            cost,
        })
    }

    fn spent_out(&self) -> Option<String> {
        let m = self.metered.lock().ok()?;
        if let Some(max) = m.max_tokens
            && m.spent_tokens >= max
        {
            return Some(format!(
                "the token budget is spent: {} of max_tokens {max} (`aot redirect --set max_tokens=N` raises it)",
                m.spent_tokens
            ));
        }
        if let Some(max) = m.max_cost
            && m.spent_cost >= max
        {
            return Some(format!(
                "the dollar budget is spent: ${:.4} of max_cost ${max} (`aot redirect --set max_cost=N` raises it)",
                m.spent_cost
            ));
        }
        None
    }
}

/// A call's worst case, held under the budgets until its record is journaled.
#[derive(Debug)]
pub struct Hold {
    meter: Arc<Meter>,
    tokens: u64,
    cost: f64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Ok(mut m) = self.meter.metered.lock() {
            m.held_tokens = m.held_tokens.saturating_sub(self.tokens);
            m.held_cost = (m.held_cost - self.cost).max(0.0);
        }
        self.meter.settled.notify_waiters();
    }
}

/// How a worker's attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Worked {
    /// The work is done; the validators judge it next.
    Done {
        /// One line on what was done.
        summary: String,
        /// The end of the work's output.
        output: String,
    },
    /// A call the work needed could pass the task's token or dollar
    /// budget, so it was not made: GGS abandons the task.
    OverBudget {
        /// Which budget and by how much.
        message: String,
    },
    /// The work failed.
    Failed {
        /// Logical (the approach) or environmental (the tools).
        class: FailureClass,
        /// What was wrong, from the work's output.
        message: String,
        /// Exit code or signal, and what the work said it did.
        ended: crate::model::Ended,
        /// Independent evidence that the environment is down (a failed
        /// probe): the atom is blocked instead of retried.
        blocked: Option<String>,
    },
    /// The attempt was cancelled (a stop or a redirect).
    Cancelled,
}

/// Does an atom's work.
pub trait Worker: Send + Sync {
    /// Does one attempt; ends promptly with [`Worked::Cancelled`] once `cancel` fires.
    fn work<'a>(&'a self, assignment: &'a Assignment, cancel: &'a CancellationToken) -> BoxFuture<'a, Worked>;

    /// Ends what attempt `attempt` of `atom` left running outside its
    /// process group (a `setsid` daemon, a double fork). Blocking: called
    /// off the async threads.
    fn end_leftovers(&self, atom: &str, attempt: u32) {
        let _ = (atom, attempt);
    }
}

/// A validator's verdict on one criterion.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    /// The criterion holds.
    Passed,
    /// It does not.
    Failed {
        /// Logical or environmental.
        class: FailureClass,
        /// Why, from the evidence.
        message: String,
        /// The check's exit code or signal.
        ended: crate::model::Ended,
    },
    /// This validator cannot judge this kind of criterion (a `check` index
    /// a hand edit removed): it does not count either way.
    NotJudged,
    /// Judging would pass the task's budget: not done; GGS abandons.
    OverBudget(String),
    /// Judging was cancelled.
    Cancelled,
}

/// The base case to check.
#[derive(Debug, Clone)]
pub struct BaseCaseRun {
    /// The command whose exit 0 means done.
    pub command: String,
    /// The state file's directory.
    pub cwd: PathBuf,
    /// `AOT_STATE`.
    pub env: Vec<(String, String)>,
    /// Kill after this long.
    pub timeout: Duration,
}

/// What checking the base case showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The exit code (`None`: killed or timed out).
    pub exit_code: Option<i32>,
    /// The end of its output.
    pub output: String,
    /// How long it ran.
    pub duration: Duration,
}

/// What the worker said of its finished work, for the validators.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Work {
    /// Its summary line.
    pub summary: String,
    /// The end of its output.
    pub output: String,
}

/// The objective's plausible criteria to judge once the base case holds.
#[derive(Debug, Clone)]
pub struct ObjectiveCheck {
    /// The objective (goal, deliverables, definition of done, criteria).
    pub objective: crate::state::Objective,
    /// The base case's evidence (it held).
    pub evidence: Evidence,
    /// The solved atoms' summaries.
    pub work: Vec<(AtomId, String)>,
    /// The `llm:` section (prices).
    pub llm: Option<crate::state::LlmSettings>,
    /// Where the verdicts and the calls are reported.
    pub report: Reporter,
}

/// What the meta-validator found of the objective's criteria.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectiveJudged {
    /// Every criterion holds (or there are none).
    Holds,
    /// Some do not: the first unmet (its index and text), and a line for
    /// each with its evidence.
    Unmet {
        /// The first unmet criterion: its index in `objective.criteria` and its text.
        first: (usize, String),
        /// Each unmet criterion with the meta-validator's evidence.
        lines: Vec<String>,
    },
    /// The meta-validator could not judge (its provider failed, its answer
    /// did not read): environmental, the criteria are not known to fail.
    Failed(String),
    /// No validator here can judge them: why (the settings to add).
    NotJudged(String),
    /// The call could pass the task's budget: not made.
    OverBudget(String),
    /// Judging was cancelled.
    Cancelled,
}

/// Judges criteria and the base case.
pub trait Validator: Send + Sync {
    /// Judges one criterion (never [`Criterion::Run`], which is the worker's)
    /// of an atom whose work is done.
    fn judge<'a>(
        &'a self,
        criterion: &'a Criterion,
        assignment: &'a Assignment,
        work: &'a Work,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Judgement>;

    /// Checks the base case; `None` when cancelled.
    fn base_case<'a>(&'a self, run: &'a BaseCaseRun, cancel: &'a CancellationToken) -> BoxFuture<'a, Option<Checked>>;

    /// Whether plausible criteria can be judged: `Err` says why not (the
    /// settings to add), and an atom that has them fails before its work
    /// runs, blocked — an unjudged criterion never passes.
    fn plausible_judge(&self) -> Result<(), String> {
        Err("plausible criteria need a model for the validator (TOOL_MODEL or OPENAI_MODEL; docs/llm.md)".into())
    }

    /// Judges the objective's plausible criteria once the base case holds
    /// (seed R4b): completion needs both.
    fn objective<'a>(
        &'a self,
        check: &'a ObjectiveCheck,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ObjectiveJudged> {
        let _ = (check, cancel);
        Box::pin(std::future::ready(ObjectiveJudged::NotJudged(
            "no model on the brain tier (BRAIN_MODEL or OPENAI_MODEL)".into(),
        )))
    }
}

/// What a planner is asked after a GGS directive other than abandon.
pub struct PlanRequest<'a> {
    /// The decision, with its directive and the failed atoms' tools.
    pub decision: &'a Decision,
    /// The atoms that failed for good and still need another way, with their class.
    pub failures: &'a [(AtomId, FailureClass)],
    /// The base case's evidence when every atom is solved but it fails.
    pub base_case: Option<&'a Evidence>,
    /// The state as it is.
    pub state: &'a StateFile,
    /// The work graph of `state`.
    pub graph: &'a WorkGraph,
    /// Memory, for calibrating choices (`None`: no memory).
    pub recall: Option<Recall<'a>>,
    /// Now, for the records the plan makes.
    pub at: Timestamp,
    /// The user's answers about destructive commands (Law 1) in a planner's
    /// plan, by command: asked on a terminal after [`Plan::Confirm`].
    pub gate_answers: &'a std::collections::HashMap<String, bool>,
}

/// A planner's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Apply these events, in order; the run goes on.
    Changes(Vec<Event>),
    /// No way forward: apply these events (what was tried), then stop
    /// `exhausted` with this message.
    Exhausted {
        /// Events to journal before stopping.
        events: Vec<Event>,
        /// Why nothing is left, for the user.
        message: String,
    },
    /// The plan holds destructive commands (Law 1) nobody answered about:
    /// journal these events (the calls made), ask the user about each of
    /// `gates` (by command), then plan again with the answers.
    Confirm {
        /// Events to journal first.
        events: Vec<Event>,
        /// The commands to ask about, each with why it is destructive.
        gates: Vec<(String, String)>,
    },
    /// The next call to a model could pass the task's token or dollar
    /// budget, so it was not made: apply these events, then GGS abandons.
    OverBudget {
        /// Events to journal before stopping.
        events: Vec<Event>,
        /// Which budget and by how much, for the user.
        message: String,
    },
}

/// Changes the plan after a GGS directive.
pub trait Planner: Send + Sync {
    /// Plans the recovery the directive asks for.
    fn plan<'a>(&'a self, request: PlanRequest<'a>) -> BoxFuture<'a, Plan>;
}

/// Where an attempt works: the user's tree itself, or a copy of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Which place (for [`Workspace::land`] and [`Workspace::discard`]).
    pub id: u64,
    /// The user's tree's top folder.
    pub top: PathBuf,
    /// The copy's top folder (`None` only for a place without a copy).
    pub copy: Option<PathBuf>,
}

impl Place {
    /// Where `path` (in the user's tree) is for this attempt.
    pub fn map(&self, path: &std::path::Path) -> PathBuf {
        let Some(copy) = &self.copy else {
            return path.to_path_buf();
        };
        let full = path
            .canonicalize()
            .or_else(|_| std::path::absolute(path))
            .unwrap_or_else(|_| path.to_path_buf());
        match full.strip_prefix(&self.top) {
            Ok(rest) => copy.join(rest),
            Err(_) => path.to_path_buf(),
        }
    }
}

/// Changes that landed in the user's tree (or an undo of them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Landed {
    /// What changed in the tree as landed.
    pub changes: Changes,
    /// The commit made of them (`constraints.commit: per_atom`).
    pub commit: Option<String>,
    /// Why no commit was made though one was asked for.
    pub note: Option<String>,
}

/// How an attempt's changes landed in the user's tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Landing {
    /// They are there now.
    Landed(Landed),
    /// They conflict with work that landed first, or with the user's edits
    /// made while the attempt ran: the attempt fails, nothing is written.
    Conflict {
        /// The files both changed, with why they do not merge.
        files: Vec<String>,
    },
}

/// What a run's start found of a run that was killed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recovered {
    /// Copies of the tree it left that were removed.
    pub copies: usize,
    /// Landings the kill interrupted, settled.
    pub landings: Vec<Interrupted>,
}

/// A landing a kill interrupted, settled by the next start from its
/// write-ahead record: finished when the run had journaled it, else taken
/// back (the atom runs again) — never applied twice.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupted {
    /// Whose landing it was.
    pub atom: AtomId,
    /// Which attempt.
    pub attempt: u32,
    /// Finished (`true`) or taken back.
    pub finished: bool,
    /// What settling it changed in the user's tree.
    pub changes: Changes,
    /// Files the user changed since: left as they are.
    pub kept: Vec<String>,
}

/// Isolates attempts: what an attempt changes reaches the user's tree only
/// when it succeeds; what fails, is cancelled or loses a race leaves nothing.
pub trait Workspace: Send + Sync {
    /// Before a run: settles a landing a kill interrupted (finished when
    /// `landed` — the landings the journal holds, by atom and attempt —
    /// has it, else taken back), removes stray copies, then takes the tree
    /// as it is as the starting point.
    fn open<'a>(&'a self, landed: &'a [(String, u32)]) -> BoxFuture<'a, Result<Recovered, String>>;

    /// A place for one attempt: a copy of the tree as landed so far, the
    /// user's edits made meanwhile taken in.
    fn enter(&self) -> BoxFuture<'_, Result<Place, String>>;

    /// The attempt succeeded: its changes land in the user's tree, merged
    /// with what landed since it began and with the user's files as they are
    /// now. `message` describes the work; `atom` and `attempt` name it in
    /// the landing's write-ahead record.
    fn land<'a>(
        &'a self,
        place: &'a Place,
        message: &'a str,
        atom: &'a str,
        attempt: u32,
    ) -> BoxFuture<'a, Result<Landing, String>>;

    /// The run has journaled the landing of `place`: its write-ahead record
    /// goes.
    fn settle(&self, place: u64) -> BoxFuture<'_, ()>;

    /// The attempt failed or was cancelled: its changes are discarded (their
    /// tree stays in git's object store). `keep`: a copy stays for
    /// inspection, named after this label (`<atom>-<attempt>`) and in the answer.
    fn discard<'a>(
        &'a self,
        place: &'a Place,
        keep: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(Changes, Option<PathBuf>), String>>;

    /// Undoes changes that landed (a backtrack gave their branch up): the
    /// answer is what was undone and the files left as they are because
    /// later work changed them too.
    fn undo<'a>(
        &'a self,
        changes: &'a Changes,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(Landed, Vec<String>), String>>;

    /// After a run: copies removed (the user's tree is as the run left it);
    /// a landing whose task was stopped before the run took it in is
    /// settled as [`Workspace::open`] would (`landed`: the journal's).
    fn close<'a>(&'a self, landed: &'a [(String, u32)]) -> BoxFuture<'a, Vec<Interrupted>>;
}

/// The implementations a run uses, wired by the binary.
#[derive(Clone)]
pub struct Roles {
    /// Does atoms' work.
    pub worker: Arc<dyn Worker>,
    /// Judges criteria and the base case.
    pub validator: Arc<dyn Validator>,
    /// Acts on GGS directives.
    pub planner: Arc<dyn Planner>,
    /// Isolates attempts (`None`: attempts work in the user's tree and what
    /// they change stays, `constraints.isolation: none`).
    pub workspace: Option<Arc<dyn Workspace>>,
}
