//! The loop: observe → update → verify → continue or stop.
//!
//! A run passes the gate (`gate.rs`: the objective is aligned, the graph is
//! runnable, the worker can take its atoms), verifies the base case first
//! (`verify.rs`), then works in iterations. An iteration is a *round*
//! (`round.rs`): choices are made at OR atoms, ready atoms are dispatched to the
//! [`Worker`] up to `max_parallel_agents` and replaced as they finish, their
//! criteria judged by the [`Validator`], and failed attempts retried with a
//! correction signal, until nothing is ready or an atom fails for good;
//! speculative OR atoms race their alternatives (`race.rs`). At the round's end
//! (the fan-in gate) a round with failures, or a finished graph whose base case
//! fails, goes to the Goal Gradient Solver; the [`Planner`] acts on its
//! directive (`replan.rs`). Other processes' records and hand edits of the file
//! arrive through `external.rs`; memory through `recall.rs`. The run stops with
//! exactly one reason.
//!
//! Every transition is journaled as it happens; the state file is written at
//! iteration boundaries and at most once a second in between.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::graph::WorkGraph;
use crate::journal::event::{Event, Record};
use crate::journal::{Folded, History, JournalError};
use crate::model::time::Clock;
use crate::state::{AtomId, AtomStatus, Evidence, StateFile, StopReason, StopRecord, VerifyPolicy};
use crate::store::{Committed, Compacted, Store, StoreError};

mod external;
mod gate;
mod landings;
mod race;
mod recall;
mod replan;
pub mod roles;
mod round;
mod verify;

pub use gate::alignment_gaps;
use landings::Landings;
pub use landings::owed_undos;
pub use recall::dream_once;
pub use roles::{Planner, Roles, Validator, Worker};
pub use round::{BINDING_TAIL, CorrectionSignal};

/// How a run is configured beyond the state file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Overrides `constraints.max_iterations`.
    pub max_iterations: Option<u32>,
    /// Run one iteration, then pause (`aot step`).
    pub one_iteration: bool,
    /// The memory journal (`--memory`, `AOT_MEMORY`); `None`: no memory.
    pub memory: Option<PathBuf>,
    /// Proceed with alternatives memory marks Caution without asking (`--yes`).
    pub yes: bool,
    /// How often the Dreamer runs in the background of a long run (default 5 minutes).
    pub dream_every: Option<Duration>,
    /// The journal size past which a save compacts it (default [`COMPACT_JOURNAL_PAST`]).
    pub compact_journal_past: Option<u64>,
    /// Secret values (from variables named like `API_KEY`, `GITHUB_TOKEN`)
    /// cut out of everything a worker returns before it is recorded
    /// ([`crate::model::secret`]).
    pub secrets: Vec<String>,
    /// With isolation, a failed attempt's tree is kept for inspection
    /// (`--keep-failed`) instead of discarded.
    pub keep_failed: bool,
}

/// The journal size past which the runner compacts it: 8 MiB.
pub const COMPACT_JOURNAL_PAST: u64 = 8 << 20;

/// Receives every journaled record as the run makes it.
pub trait Observer: Send {
    /// Called after a record is journaled and applied to `state`.
    fn record(&mut self, record: &Record, state: &StateFile);

    /// Called when something needs the user's attention but the run goes on
    /// (e.g. a hand edit that could not be applied and was saved aside).
    fn warn(&mut self, message: &str) {
        let _ = message;
    }

    /// Asks the user a yes/no question (memory's Caution gate); `false` when
    /// nobody can answer. The loop awaits the answer without blocking.
    fn confirm(&mut self, question: &str) -> roles::BoxFuture<'static, bool> {
        let _ = question;
        Box::pin(std::future::ready(false))
    }
}

/// Why the engine could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a run ended: a stop record, or a pause after `aot step`.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The run stopped for this reason.
    Stopped(StopRecord),
    /// One iteration ran (`aot step`); `aot step` or `aot start` continues.
    Paused,
}

/// The engine's picture of the work: the state file, the work graph and the
/// correction history, folded from the same records by the one fold.
/// Every record folded is also kept, for the observer and for interrupts:
/// they see it only after the store call returns, because the store holds the
/// file lock while it folds, and an observer that blocks there (a slow
/// terminal, a test that runs `aot redirect`) would hold every other process out.
struct Views<'v> {
    state: &'v mut StateFile,
    graph: &'v mut WorkGraph,
    history: &'v mut History,
    folded: Vec<Record>,
    /// Running atoms the folded records made stale, and why.
    stale: Vec<(AtomId, String)>,
}

impl Folded for Views<'_> {
    fn state(&self) -> &StateFile {
        self.state
    }

    fn apply(&mut self, record: &Record) {
        // Judged against the state before the record: what was running, and
        // what it was defined as.
        self.stale
            .extend(crate::correct::interrupt::touched(self.state, &record.event));
        crate::journal::fold::apply_with(self.state, &mut [self.graph, self.history], record);
        self.folded.push(record.clone());
    }
}

/// The running loop over one state file.
pub struct Engine<'a> {
    store: &'a mut Store,
    state: StateFile,
    graph: WorkGraph,
    history: History,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    options: Options,
    roles: Roles,
    observer: &'a mut dyn Observer,
    cancel: CancellationToken,
    /// Cancels the current round only (a new objective); `cancel` ends the run.
    round_cancel: CancellationToken,
    /// Each running attempt's own cancel token, by atom.
    attempt_tokens: HashMap<AtomId, CancellationToken>,
    /// Attempts a correction interrupted, and why (for `attempt_cancelled`).
    interrupted: HashMap<AtomId, String>,
    last_save: Instant,
    watch: Option<crate::store::watch::Watch>,
    /// The memory as loaded, plus what this run wrote.
    memory: crate::memory::Memory,
    writer: Option<recall::MemoryWriter>,
    /// Caution answers of this run, by `space on entity`.
    cautions: HashMap<String, bool>,
    /// The user's answers about destructive commands in a planner's plans
    /// (Law 1), by command.
    gate_answers: HashMap<String, bool>,
    /// MUST NOT and SHOULD PREFER from this run's calibrations (agent prompts).
    must_not: BTreeSet<String>,
    should_prefer: BTreeSet<String>,
    megram_seq: u64,
    /// With isolation: what landed, and what a backtrack gave up and is
    /// owed an undo.
    landings: Landings,
    /// Where roles report while they work (handed to them in assignments),
    /// the records' way in, and the budget meter they spend under.
    reporter: roles::Reporter,
    reports: tokio::sync::mpsc::UnboundedReceiver<roles::Report>,
    meter: Arc<roles::Meter>,
    /// The user was told the objective's criteria are not judged.
    warned_unjudged: bool,
    /// The objective criterion the meta-validator found unmet last (its
    /// index and text): what GGS sees fail instead of the base case.
    objective_unmet: Option<(usize, String)>,
}

impl<'a> Engine<'a> {
    /// Prepares a run over `state` (as returned by `Store::open`) with `roles`.
    pub fn new(
        store: &'a mut Store,
        state: StateFile,
        clock: Arc<dyn Clock>,
        options: Options,
        roles: Roles,
        observer: &'a mut dyn Observer,
        cancel: CancellationToken,
    ) -> Self {
        // Workers get absolute paths: one that runs elsewhere (a copy of the
        // tree) still finds the state file.
        // Canonical: `..` in the path (`--state ../proj/aot.yaml`) would make
        // the workspace a prefix no resolved path has.
        let dir = std::fs::canonicalize(store.paths().dir())
            .or_else(|_| std::path::absolute(store.paths().dir()))
            .unwrap_or_else(|_| store.paths().dir().to_path_buf());
        let graph = WorkGraph::new(&state);
        let history = crate::journal::read(&store.paths().journal)
            .map(|contents| History::of(&contents.records))
            .unwrap_or_default();
        let (sender, reports) = tokio::sync::mpsc::unbounded_channel();
        let secrets = options.secrets.clone();
        let meter = Arc::new(roles::Meter::default());
        let c = &state.objective.constraints;
        meter.set(&state.run.spend, c.max_tokens, c.max_cost);
        Self {
            store,
            state,
            graph,
            history,
            dir,
            clock,
            options,
            roles,
            observer,
            cancel,
            round_cancel: CancellationToken::new(),
            attempt_tokens: HashMap::new(),
            interrupted: HashMap::new(),
            last_save: Instant::now(),
            watch: None,
            memory: crate::memory::Memory::default(),
            writer: None,
            cautions: HashMap::new(),
            gate_answers: HashMap::new(),
            must_not: BTreeSet::new(),
            should_prefer: BTreeSet::new(),
            megram_seq: 0,
            landings: Landings::default(),
            reporter: roles::Reporter::new(sender, Arc::clone(&meter), secrets),
            reports,
            meter,
            warned_unjudged: false,
            objective_unmet: None,
        }
    }

    /// Runs a store operation that folds what it journals (and what other
    /// processes journaled) into the state, the graph and the history at once;
    /// then every record folded reaches the observer and may interrupt work.
    /// The store takes file locks and syncs to disk: it runs off the loop.
    fn with_views<R>(&mut self, f: impl FnOnce(&mut Store, &mut dyn Folded) -> R) -> R {
        let Engine {
            store,
            state,
            graph,
            history,
            ..
        } = self;
        let mut views = Views {
            state,
            graph,
            history,
            folded: Vec::new(),
            stale: Vec::new(),
        };
        let result = off_the_loop(|| f(store, &mut views));
        let (folded, stale) = (views.folded, views.stale);
        self.took_in(&folded, stale);
        result
    }

    /// Shows folded records to the observer. A stop request ends the run. A
    /// correction (a redirect, a hand edit) interrupts only the attempts it
    /// made stale (`correct::interrupt`): everything else runs on and its
    /// result is kept. A new objective or a replaced file ends the round.
    fn took_in(&mut self, records: &[Record], stale: Vec<(AtomId, String)>) {
        for record in records {
            self.observer.record(record, &self.state);
            self.track_landings(&record.event);
        }
        let corrected = records.iter().any(|r| {
            matches!(
                r.event,
                Event::CorrectionRecorded { .. } | Event::UserEdited { .. } | Event::Snapshot { .. }
            )
        });
        // The engine's own records (a race's prune) are not corrections.
        if corrected {
            let new_task = records.iter().any(|r| {
                matches!(&r.event, Event::Snapshot { .. })
                    || matches!(&r.event, Event::CorrectionRecorded { correction } if correction.trail_cleared)
            });
            if new_task {
                // A check in flight judges the old objective: it goes too.
                self.round_cancel.cancel();
            }
            for (atom, why) in stale {
                if let Some(token) = self.attempt_tokens.get(&atom)
                    && !token.is_cancelled()
                {
                    token.cancel();
                    self.interrupted.insert(atom, why);
                }
            }
        }
        if self.state.control.stop_requested {
            self.cancel.cancel();
        }
        let c = &self.state.objective.constraints;
        self.meter.set(&self.state.run.spend, c.max_tokens, c.max_cost);
    }

    /// Journals one record a role reported while it worked (and any that
    /// came with it), then releases the budget held for their calls.
    fn take_report(&mut self, first: roles::Report) -> Result<(), EngineError> {
        let mut reports = vec![first];
        while let Ok(more) = self.reports.try_recv() {
            reports.push(more);
        }
        let (events, holds): (Vec<Event>, Vec<_>) = reports.into_iter().map(|r| (r.event, r.hold)).unzip();
        self.record(events)?;
        drop(holds);
        Ok(())
    }

    /// Journals whatever roles reported and the loop has not taken in yet.
    fn take_reports(&mut self) -> Result<(), EngineError> {
        match self.reports.try_recv() {
            Ok(first) => self.take_report(first),
            Err(_) => Ok(()),
        }
    }

    /// Returns the current state.
    pub fn state(&self) -> &StateFile {
        &self.state
    }

    /// The state file's absolute path (`AOT_STATE`).
    fn state_path(&self) -> PathBuf {
        let state = &self.store.paths().state;
        std::path::absolute(state).unwrap_or_else(|_| state.clone())
    }

    /// Journals `events` (none: only catch up on other processes' records) and
    /// folds every new record into the views and the observer.
    fn record(&mut self, events: Vec<Event>) -> Result<Vec<Record>, EngineError> {
        self.calibrated(&events);
        Ok(self.with_views(|store, views| store.record(views, events))?)
    }

    fn save(&mut self) -> Result<(), EngineError> {
        // An edit the file holds now (an editor may be half-way through writing
        // it) is taken in by the hand-edit path once the file is quiet.
        let saved = self.with_views(|store, views| store.commit_or_defer(views, Vec::new()))?;
        self.last_save = Instant::now();
        self.report_preserved();
        let past = self.options.compact_journal_past.unwrap_or(COMPACT_JOURNAL_PAST);
        if !matches!(saved, Committed::Deferred { .. }) && self.store.journal_len() > past {
            self.compact_journal()?;
        }
        Ok(())
    }

    /// Folds the journal into one record; the observer sees that record. A
    /// file not saved at the journal's end is left for a later save.
    fn compact_journal(&mut self) -> Result<(), EngineError> {
        if let Compacted::Done(compaction) = self.with_views(|store, views| store.compact(views))? {
            self.observer.record(&compaction.record, &self.state);
        }
        Ok(())
    }

    /// Reports edits that landed while the file was being saved (kept aside).
    fn report_preserved(&mut self) {
        for kept in self.store.take_preserved() {
            self.observer.warn(&format!(
                "the file was edited while aot was saving it; that edit is kept as {} — apply it again",
                kept.display()
            ));
        }
        if let Some(before) = self.store.take_restyled() {
            self.observer.warn(&format!(
                "the state file's own part could not all be kept as written (comments or layout where it changed are gone); the text as it was is kept in {}",
                before.display()
            ));
        }
    }

    fn stop(&mut self, reason: StopReason, message: String, evidence: Option<Evidence>) -> Result<Ended, EngineError> {
        let final_result = (reason == StopReason::Completed).then(|| Box::new(self.accepted()));
        if reason == StopReason::Completed {
            self.remember_end(true, &message);
        }
        self.stop_with(reason, message, evidence, final_result)
    }

    fn stop_with(
        &mut self,
        reason: StopReason,
        message: String,
        evidence: Option<Evidence>,
        final_result: Option<Box<crate::ggs::FinalResult>>,
    ) -> Result<Ended, EngineError> {
        let stop = StopRecord {
            reason,
            at: self.clock.now(),
            message,
            evidence,
            final_result,
        };
        self.record(vec![Event::RunStopped { stop: stop.clone() }])?;
        // The last save does not wait for an editor: an edit it cannot merge is
        // left in the file, aot's document is kept aside, and the run still ends
        // with its reason (everything is in the journal).
        match self.with_views(|store, views| store.commit(views, Vec::new())) {
            Ok(_) => self.report_preserved(),
            Err(conflict @ StoreError::Conflict { .. }) => self.observer.warn(&conflict.to_string()),
            Err(other) => return Err(other.into()),
        }
        Ok(Ended::Stopped(stop))
    }

    fn stop_manual(&mut self) -> Result<Ended, EngineError> {
        let message = match &self.state.control.stop_reason {
            Some(reason) => format!("stopped by the user: {reason}"),
            None => "stopped by the user".to_string(),
        };
        self.stop(StopReason::Manual, message, None)
    }

    /// Keeps the landings a backtrack may undo: a backtrack gives up the
    /// branch it leaves, so what that branch's atoms landed is undone; a
    /// reset or an overridden binding (the user's) keeps the files.
    fn track_landings(&mut self, event: &Event) {
        self.landings.track(event);
    }

    /// Undoes what abandoned branches landed, the latest landing first.
    /// (See [`owed_undos`] for the undos a start owes.)
    async fn undo_abandoned(&mut self) -> Result<(), EngineError> {
        let Some(workspace) = self.roles.workspace.clone() else {
            self.landings.forget_owed();
            return Ok(());
        };
        while let Some((atom, changes)) = self.landings.next_owed() {
            let message = format!("aot: undo {atom} (its branch was given up)");
            match workspace.undo(&changes, &message).await {
                Ok((undone, kept)) => {
                    if let Some(note) = &undone.note {
                        self.observer
                            .warn(&format!("undoing `{atom}`'s changes; committing the undo: {note}"));
                    }
                    if !kept.is_empty() {
                        self.observer.warn(&format!(
                            "undoing `{atom}`'s changes left {} as they are: later work changed them too",
                            kept.join(", ")
                        ));
                    }
                    if !undone.changes.is_empty() || !kept.is_empty() {
                        self.record(vec![Event::ChangesUndone {
                            atom,
                            changes: undone.changes,
                            kept,
                            commit: undone.commit,
                        }])?;
                    }
                }
                Err(error) => self
                    .observer
                    .warn(&format!("could not undo `{atom}`'s changes ({changes}): {error}")),
            }
        }
        Ok(())
    }

    /// With isolation: the work tree is put back from a killed run, and the
    /// landings of solved atoms are known again (from their bindings).
    async fn open_workspace(&mut self) -> Result<(), EngineError> {
        let Some(workspace) = self.roles.workspace.clone() else {
            return Ok(());
        };
        let journaled = self.state.bound_attempts();
        match workspace.open(&journaled).await {
            Ok(recovered) => {
                if recovered.copies > 0 {
                    self.observer.warn(&format!(
                        "removed {} cop{} of the work tree a killed run left (their attempts had not landed)",
                        recovered.copies,
                        if recovered.copies == 1 { "y" } else { "ies" }
                    ));
                }
                for interrupted in recovered.landings {
                    self.interrupted_landing(interrupted)?;
                }
            }
            Err(error) => {
                self.observer.warn(&format!("isolation is off for this run: {error}"));
                self.roles.workspace = None;
                return Ok(());
            }
        }
        self.landings = Landings::of(&self.state.bindings);
        // A branch given up while no loop ran (`aot redirect --choose`), or
        // by a run killed before its undo: what it landed is undone now.
        let journal = self.store.paths().journal.clone();
        if let Ok(contents) = off_the_loop(|| crate::journal::read(&journal)) {
            self.landings.owe(owed_undos(&contents.records));
            self.undo_abandoned().await?;
        }
        Ok(())
    }

    /// Says how a landing a kill interrupted was settled, and journals one
    /// that was taken back (its atom runs again).
    fn interrupted_landing(&mut self, interrupted: crate::engine::roles::Interrupted) -> Result<(), EngineError> {
        let crate::engine::roles::Interrupted {
            atom,
            attempt,
            finished,
            changes,
            kept,
        } = interrupted;
        let yours = if kept.is_empty() {
            String::new()
        } else {
            format!("; {} you changed since stay as you have them", kept.join(", "))
        };
        if finished {
            if !changes.is_empty() {
                self.observer.warn(&format!(
                    "the landing of `{atom}` (attempt {attempt}) was interrupted (a kill) after the run recorded it: finished ({changes}){yours}"
                ));
            }
            return Ok(());
        }
        self.observer.warn(&format!(
            "the landing of `{atom}` (attempt {attempt}) was interrupted (a kill, or the run ended while it landed) before the run recorded it: taken back ({changes}), and `{atom}` runs again{yours}"
        ));
        if !changes.is_empty() || !kept.is_empty() {
            self.record(vec![Event::WorkspaceRecovered { changes, kept }])?;
        }
        Ok(())
    }

    /// Runs the loop until a stop reason (or one iteration, for `aot step`).
    pub async fn run(mut self) -> Result<Ended, EngineError> {
        self.open_memory().await;
        let dreamer = self.start_dreamer(self.options.dream_every.unwrap_or(Duration::from_secs(300)));
        let mut ended = self.run_loop().await;
        if let Err(EngineError::Store(StoreError::Journal(JournalError::Rewound { .. }))) = &ended {
            ended = self.restore_journal().and(ended);
        }
        if let Some(dreamer) = dreamer {
            dreamer.abort();
        }
        if let Some(workspace) = self.roles.workspace.clone() {
            let journaled = self.state.bound_attempts();
            for interrupted in workspace.close(&journaled).await {
                let said = self.interrupted_landing(interrupted);
                ended = ended.and_then(|ended| said.map(|()| ended));
            }
        }
        // Every Megram of the run is written before the run reports its end.
        self.close_memory().await;
        ended
    }

    /// The journal was cut, replaced or deleted under the run: this run's
    /// state (which folds every record it saw) becomes the journal again and
    /// is saved, so every solved binding survives; the run still ends with
    /// the error, since someone meant to change the journal.
    fn restore_journal(&mut self) -> Result<(), EngineError> {
        let failures = self.history.failures();
        let state = self.state.clone();
        let kept = off_the_loop(|| self.store.restore_journal(&state, failures))?;
        let found = kept.map_or_else(
            || "the journal was gone".to_string(),
            |kept| format!("the journal found was kept as {}", kept.display()),
        );
        self.observer.warn(&format!(
            "{found}; the run's own record (through record {}) is the journal again and the state file was saved from it",
            self.state.run.revision
        ));
        Ok(())
    }

    async fn run_loop(&mut self) -> Result<Ended, EngineError> {
        let paths = self.store.paths().clone();
        // Without a watch (an unsupported file system), requests are still seen
        // at the loop's next journal write.
        self.watch = crate::store::watch::watch(&paths.state, &paths.journal).ok();
        if let Some(ended) = self.gate()? {
            return Ok(ended);
        }
        self.begin()?;
        self.open_workspace().await?;
        // The base case may already hold: then there is nothing to do.
        if let Some(evidence) = self.verify().await?
            && evidence.exit_code == Some(0)
            && let Ok(ended) = self.on_held(evidence).await?
        {
            return Ok(ended);
        }
        if self.cancel.is_cancelled() {
            return self.stop_manual();
        }
        // A failure the last run did not get to recover from goes to GGS first.
        let unrecovered = self.unrecovered();
        if !unrecovered.is_empty()
            && let Some(ended) = self.replan(&[], unrecovered, None).await?
        {
            return Ok(ended);
        }
        let max_iterations = self.max_iterations();
        loop {
            if self.state.run.iteration >= max_iterations {
                return self.stop_at_limit();
            }
            if let Some(ended) = self.iteration().await? {
                return Ok(ended);
            }
            if self.options.one_iteration {
                self.record(vec![Event::RunPaused {}])?;
                self.save()?;
                return Ok(Ended::Paused);
            }
        }
    }

    /// Stops at the iteration limit, saying how to go on.
    fn stop_at_limit(&mut self) -> Result<Ended, EngineError> {
        let max = self.max_iterations();
        let message = format!(
            "{max} iteration{} done and the base case does not hold",
            if max == 1 { "" } else { "s" }
        );
        let result = self.at_limit(max, &message);
        self.stop_with(StopReason::IterationLimit, message, None, Some(Box::new(result)))
    }

    /// The iteration limit: `--max-iterations`, else the file's constraint.
    fn max_iterations(&self) -> u32 {
        self.options
            .max_iterations
            .unwrap_or_else(|| self.state.objective.constraints.max_iterations())
    }

    /// A round (whose checks, with `verify: every_iteration`, may end
    /// iterations and the run inside it), the fan-in gate, the base case
    /// per the verify policy, and the check that something can still run.
    async fn iteration(&mut self) -> Result<Option<Ended>, EngineError> {
        let iteration = self.state.run.iteration + 1;
        self.record(vec![Event::IterationStarted { iteration }])?;
        let round = self.round().await?;
        // The objective's criteria found unmet after the base case held.
        let mut unmet = None;
        if let Some(evidence) = round.completed {
            match self.on_held(evidence).await? {
                Ok(ended) => return Ok(Some(ended)),
                Err(evidence) => unmet = Some(evidence),
            }
        }
        if let Some(message) = round.over_budget {
            return self.over_budget(&message).map(Some);
        }
        if round.cancelled {
            return self.stop_manual().map(Some);
        }
        if round.limit_reached {
            return self.stop_at_limit().map(Some);
        }
        if !round.failures.is_empty()
            && let Some(ended) = self.replan(&round.finished, round.failures, None).await?
        {
            return Ok(Some(ended));
        }
        // The base case is verified on the tree without what a backtrack gave up.
        self.undo_abandoned().await?;
        self.save()?;
        let policy = self.state.objective.constraints.verify();
        let graph_done = self.graph.selected_solved();
        // With every_iteration a check already ran if nothing came in since it.
        let checked = match (policy, round.unchecked, round.last_check) {
            _ if unmet.is_some() => unmet.map(Ok),
            (VerifyPolicy::EveryIteration, false, Some(evidence)) => Some(Ok(evidence)),
            (VerifyPolicy::EveryIteration, false, None) if !graph_done => None,
            (VerifyPolicy::EveryIteration, _, _) => self.verify().await.transpose(),
            (VerifyPolicy::WhenSolved, ..) if graph_done => self.verify().await.transpose(),
            (VerifyPolicy::WhenSolved, ..) => None,
        };
        if let Some(mut evidence) = checked.transpose()? {
            if evidence.exit_code == Some(0) {
                match self.on_held(evidence).await? {
                    Ok(ended) => return Ok(Some(ended)),
                    Err(unmet) => evidence = unmet,
                }
            }
            if graph_done {
                if let Some(ended) = self.replan(&round.finished, Vec::new(), Some(&evidence)).await? {
                    return Ok(Some(ended));
                }
                self.save()?;
            }
        }
        if self.cancel.is_cancelled() {
            return self.stop_manual().map(Some);
        }
        if self.graph.ready().next().is_none() && self.graph.choice_points().next().is_none() {
            return self.dead_end().map(Some);
        }
        Ok(None)
    }

    /// The base case held: the run completes, unless the objective's
    /// criteria are judged unmet (`Err`: the evidence, for GGS).
    async fn on_held(&mut self, evidence: Evidence) -> Result<Result<Ended, Evidence>, EngineError> {
        let judged = !self.state.objective.criteria.is_empty();
        Ok(match self.accept(evidence).await? {
            verify::Accepted::Complete(evidence) => {
                let message = if judged && !self.warned_unjudged {
                    "the base case holds, and the meta-validator finds the objective's criteria met"
                } else {
                    "the base case holds"
                };
                Ok(self.stop(StopReason::Completed, message.into(), Some(evidence))?)
            }
            verify::Accepted::Unmet(evidence) => Err(evidence),
            verify::Accepted::OverBudget(message) => Ok(self.over_budget(&message)?),
            verify::Accepted::Cancelled => Ok(self.stop_manual()?),
        })
    }

    /// A role's next call could pass the task's budget: GGS abandons.
    fn over_budget(&mut self, message: &str) -> Result<Ended, EngineError> {
        let message = format!("GGS abandoned the task: {message}");
        self.remember_end(false, &message);
        self.stop(StopReason::Abandoned, message, None)
    }

    /// Stops when nothing can run: `blocked` if blocked atoms are why, else `exhausted`.
    fn dead_end(&mut self) -> Result<Ended, EngineError> {
        let selected_with = |status: AtomStatus| -> Vec<AtomId> {
            let atoms = &self.state.graph.atoms;
            atoms
                .iter()
                .filter(|(id, a)| a.status == status && self.graph.is_selected(id))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let blocked = selected_with(AtomStatus::Blocked);
        if !blocked.is_empty() {
            let reasons: Vec<String> = blocked.iter().map(|id| self.block_reason(id)).collect();
            let message = format!("{}; fix the environment, then `aot start` again", reasons.join("; "));
            return self.stop(StopReason::Blocked, message, None);
        }
        let failed: Vec<String> = selected_with(AtomStatus::Failed)
            .iter()
            .map(|id| self.state.failure_line(id))
            .collect();
        let message = if failed.is_empty() {
            "nothing left that can run".to_string()
        } else {
            format!("nothing left that can run; failed: {}", failed.join("; "))
        };
        self.stop(StopReason::Exhausted, message, None)
    }

    fn block_reason(&self, id: &str) -> String {
        self.history
            .of_atom(id)
            .last()
            .map_or_else(|| format!("`{id}` is blocked"), |r| format!("`{id}`: {}", r.message))
    }
}

/// Runs blocking file work (a lock wait, an fsync, a rename) from the loop's
/// task without stalling the runtime: on a multi-threaded runtime the thread
/// first hands its other tasks (workers, timers, the watch) to another thread.
/// On a current-thread runtime there is no other thread to hand them to.
fn off_the_loop<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::owed_undos;
    use crate::journal::event::{Event, RECORD_VERSION, Record};
    use crate::model::Changes;
    use crate::model::time::Timestamp;

    fn records(events: Vec<Event>) -> Vec<Record> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Record {
                v: RECORD_VERSION,
                seq: i as u64 + 1,
                at: Timestamp::from_millis(i as u64),
                event,
            })
            .collect()
    }

    fn changes(after: &str) -> Changes {
        Changes {
            before: "b".into(),
            after: after.into(),
            ..Changes::default()
        }
    }

    fn landed(atom: &str, after: &str) -> Event {
        Event::ChangesLanded {
            atom: atom.into(),
            attempt: 1,
            changes: changes(after),
            commit: None,
        }
    }

    fn given_up(from: &str) -> Event {
        Event::Backtracked {
            group: "fix".into(),
            from: from.into(),
            to: "other".into(),
            reset: Vec::new(),
        }
    }

    fn undone(atom: &str) -> Event {
        Event::ChangesUndone {
            atom: atom.into(),
            changes: changes("reverse"),
            kept: Vec::new(),
            commit: None,
        }
    }

    #[test]
    fn a_start_owes_the_undos_of_given_up_landings_and_nothing_else() {
        let owed = |events| {
            owed_undos(&records(events))
                .into_iter()
                .map(|(a, c)| (a.to_string(), c.after))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            owed(vec![landed("pa", "t1"), given_up("pa")]),
            [("pa".to_string(), "t1".to_string())]
        );
        assert!(
            owed(vec![landed("pa", "t1"), given_up("pa"), undone("pa")]).is_empty(),
            "settled"
        );
        assert!(
            owed(vec![landed("pa", "t1"), given_up("pb")]).is_empty(),
            "pa was not given up"
        );
        assert!(
            owed(vec![landed("pa", "t1"), given_up("pa"), landed("pa", "t2")]).is_empty(),
            "landing again supersedes the old landing"
        );
        assert_eq!(
            owed(vec![
                landed("pa", "t1"),
                landed("pa", "t2"),
                given_up("pa"),
                undone("pa")
            ]),
            [("pa".to_string(), "t1".to_string())],
            "one undo settles one landing, the latest"
        );
        assert!(
            owed(vec![
                landed("pa", "t1"),
                Event::AtomsReset {
                    atoms: vec!["pa".into()]
                },
                given_up("pa")
            ])
            .is_empty(),
            "a reset keeps the files"
        );
    }

    /// On a runtime with one worker thread, a task blocked in store work must
    /// not hold up another task: here the blocked task waits for the other.
    #[test]
    fn blocking_store_work_leaves_the_runtime_free_for_other_tasks() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("runtime");
        let waited = runtime.block_on(async {
            tokio::spawn(async {
                let (tx, rx) = mpsc::channel();
                tokio::spawn(async move { tx.send(()) });
                super::off_the_loop(|| rx.recv_timeout(Duration::from_secs(10)))
            })
            .await
        });
        assert!(matches!(waited, Ok(Ok(()))), "the other task never ran: {waited:?}");
    }
}
