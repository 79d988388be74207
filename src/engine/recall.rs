//! The engine's memory edge: calibration before every OR choice, Megram
//! writes after every GGS decision, the background writer that never blocks
//! the loop, and the background Dreamer.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use tokio::sync::mpsc;

use super::Engine;
use super::roles::Plan;
use crate::ggs::{Decision, MacroState, ReplanRequest};
use crate::graph::{Ranking, WorkGraph};
use crate::journal::event::Event;
use crate::memory::Calibration;
use crate::memory::{self, Entry, Level, Megram, MemoryFile};
use crate::model::time::Timestamp;
use crate::state::{AtomId, AtomStatus, Binding, FailureClass};
use crate::steer::{Recall, Steer, target, unanswered};

/// Batches of memory records queued for the writer at most.
const WRITER_QUEUE: usize = 16;

/// Appends memory records on a blocking thread of its own, so a slow or
/// failing disk never blocks or fails the run. The queue is bounded: what it
/// cannot take yet waits here and goes with the next batch. The first error
/// is kept for one report.
pub(super) struct MemoryWriter {
    tx: Option<mpsc::Sender<Vec<Entry>>>,
    pending: Vec<Entry>,
    handle: Option<tokio::task::JoinHandle<()>>,
    error: Arc<Mutex<Option<String>>>,
    reported: bool,
}

impl MemoryWriter {
    pub(super) fn start(file: MemoryFile) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<Entry>>(WRITER_QUEUE);
        let error = Arc::new(Mutex::new(None));
        let slot = error.clone();
        let handle = tokio::task::spawn_blocking(move || {
            while let Some(batch) = rx.blocking_recv() {
                if let Err(e) = file.append(&batch)
                    && let Ok(mut slot) = slot.lock()
                {
                    slot.get_or_insert(e.to_string());
                }
            }
        });
        Self {
            tx: Some(tx),
            pending: Vec::new(),
            handle: Some(handle),
            error,
            reported: false,
        }
    }

    pub(super) fn send(&mut self, entries: Vec<Entry>) {
        self.pending.extend(entries);
        let Some(tx) = &self.tx else { return };
        if self.pending.is_empty() {
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(batch)) = tx.try_send(std::mem::take(&mut self.pending)) {
            self.pending = batch;
        }
    }

    /// Returns the first write error, once.
    pub(super) fn take_error(&mut self) -> Option<String> {
        if self.reported {
            return None;
        }
        let error = self.error.lock().ok()?.clone()?;
        self.reported = true;
        Some(error)
    }

    /// Waits for every queued write.
    pub(super) async fn finish(&mut self) {
        if let Some(tx) = self.tx.take()
            && !self.pending.is_empty()
        {
            let _ = tx.send(std::mem::take(&mut self.pending)).await;
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.await;
        }
    }
}

/// The tools and targets of a Megram's index tags, for action states.
fn pair(atoms: &IndexMap<AtomId, crate::state::Atom>, id: &str) -> Option<(String, String)> {
    let atom = atoms.get(id).filter(|a| a.or.is_none())?;
    Some((atom.tool()?, target(id, atom)))
}

/// What a steered operation returns, with the calibrations it made.
pub(super) trait Calibrations {
    /// The calibrations in it.
    fn calibrations(&self) -> Vec<&Calibration>;
}

impl Calibrations for Vec<Event> {
    fn calibrations(&self) -> Vec<&Calibration> {
        self.iter()
            .filter_map(|e| match e {
                Event::Calibrated { calibration } => Some(&**calibration),
                _ => None,
            })
            .collect()
    }
}

impl Calibrations for Ranking {
    fn calibrations(&self) -> Vec<&Calibration> {
        self.calibration.iter().collect()
    }
}

impl Calibrations for Plan {
    fn calibrations(&self) -> Vec<&Calibration> {
        match self {
            Plan::Changes(events)
            | Plan::Exhausted { events, .. }
            | Plan::OverBudget { events, .. }
            | Plan::Confirm { events, .. } => events.calibrations(),
        }
    }
}

impl<T: Calibrations, U> Calibrations for (T, U) {
    fn calibrations(&self) -> Vec<&Calibration> {
        self.0.calibrations()
    }
}

impl Engine<'_> {
    /// Loads the memory off the loop's task; a memory that cannot be read is
    /// reported and the run goes on without it (and does not write it either).
    pub(super) async fn open_memory(&mut self) {
        let Some(path) = self.options.memory.clone() else {
            return;
        };
        let file = MemoryFile::new(path.clone());
        let loaded = tokio::task::spawn_blocking(move || {
            let loaded = file.load();
            (file, loaded)
        })
        .await;
        match loaded {
            Ok((file, Ok(loaded))) => {
                if !loaded.skipped.is_empty() {
                    self.observer.warn(&format!(
                        "memory: {} line(s) of {} could not be read and are ignored",
                        loaded.skipped.len(),
                        path.display()
                    ));
                }
                self.memory = loaded.memory;
                self.writer = Some(MemoryWriter::start(file));
            }
            Ok((_, Err(e))) => {
                self.observer
                    .warn(&format!("memory could not be read ({e}); the run goes on without it"));
            }
            Err(e) => {
                self.observer
                    .warn(&format!("memory could not be read ({e}); the run goes on without it"));
            }
        }
    }

    /// Waits until every Megram of the run is written.
    pub(super) async fn close_memory(&mut self) {
        let Some(writer) = &mut self.writer else { return };
        writer.finish().await;
        if let Some(error) = writer.take_error() {
            self.observer.warn(&format!(
                "memory could not be written ({error}); the run went on without it"
            ));
        }
    }

    /// The memory as the choice order reads it at `now`, with this run's Caution answers.
    pub(super) fn recall(&self, now: Timestamp) -> Recall<'_> {
        Recall::new(&self.memory, now, &self.cautions, self.options.yes)
    }

    /// Runs `f` with the choice order every choice goes through: the blocked
    /// sets, `directive` (with the failed tools), and memory calibration. When
    /// a calibration meets a Caution pair nobody was asked about, the user is
    /// asked (outside the ranking) and `f` runs again with the answer.
    pub(super) async fn steered<R: Calibrations>(
        &mut self,
        directive: Option<(MacroState, &[String])>,
        f: impl Fn(&WorkGraph, &Steer<'_>, &IndexMap<AtomId, Binding>) -> R,
    ) -> R {
        let now = self.clock.now();
        loop {
            let result = {
                let mut steer = Steer::new(&self.state.graph.atoms, &self.state.run.ggs).with_recall(self.recall(now));
                if let Some((directive, failed_tools)) = directive {
                    steer = steer.directed(directive, failed_tools);
                }
                f(&self.graph, &steer, &self.state.bindings)
            };
            if !self.ask_cautions(&result).await {
                return result;
            }
        }
    }

    /// Asks about the Caution pairs `result`'s calibrations left unanswered;
    /// `false` when there were none. Each pair is asked once per run.
    pub(super) async fn ask_cautions(&mut self, result: &impl Calibrations) -> bool {
        let questions: Vec<(AtomId, String)> = result
            .calibrations()
            .into_iter()
            .flat_map(unanswered)
            .map(|(alt, pair)| (alt.clone(), pair))
            .collect();
        let mut asked = false;
        for (alt, pair) in questions {
            if self.cautions.contains_key(&pair) {
                continue;
            }
            let question =
                format!("memory is split on {pair} (alternative `{alt}`): it both worked and failed before. Run it?");
            let answer = self.observer.confirm(&question).await;
            self.cautions.insert(pair, answer);
            asked = true;
        }
        asked
    }

    /// Keeps the constraints of the calibrations among `events` for agent
    /// prompts, and records the recall of the Megrams they used.
    pub(super) fn calibrated(&mut self, events: &[Event]) {
        let mut recalled: Vec<String> = Vec::new();
        for event in events {
            let Event::Calibrated { calibration } = event else {
                continue;
            };
            self.must_not.extend(calibration.must_not.iter().cloned());
            self.should_prefer.extend(calibration.should_prefer.iter().cloned());
            recalled.extend(crate::steer::recalled(&self.memory, calibration));
        }
        recalled.sort();
        recalled.dedup();
        if !recalled.is_empty() {
            let at = self.clock.now();
            self.remember(vec![Entry::Recalled {
                v: memory::MEMORY_VERSION,
                at,
                ids: recalled,
            }]);
        }
    }

    /// Applies memory records here and hands them to the writer.
    fn remember(&mut self, entries: Vec<Entry>) {
        let Some(writer) = &mut self.writer else { return };
        for entry in &entries {
            self.memory.apply(entry.clone());
        }
        writer.send(entries);
        if let Some(error) = writer.take_error() {
            self.observer.warn(&format!(
                "memory could not be written ({error}); the run goes on without it"
            ));
        }
    }

    fn megram(&mut self, space: String, entity: String, state: &str, row: &str, content: String) -> Option<Entry> {
        let r = memory::row(row)?;
        let now = self.clock.now();
        self.megram_seq += 1;
        Some(Entry::megram(Megram {
            id: format!("{:x}-{:x}-{}", now.as_millis(), std::process::id(), self.megram_seq),
            level: Level::M,
            t: now,
            t_recalled: None,
            space,
            entity,
            content,
            state: state.to_string(),
            f: r.f,
            sigma: r.sigma,
            k: r.k,
        }))
    }

    fn terminal(&mut self, state: &str, content: String) -> Option<Entry> {
        let intent = memory::slug(self.state.objective.goal.as_deref().unwrap_or_default());
        self.megram(intent, memory::environment(), state, state, content)
    }

    /// GGS as the only writer: one Megram per (tool, target) that took part in
    /// the round, by its own outcome, and one per (intent, environment) for a
    /// terminal state.
    pub(super) fn remember_decision(&mut self, request: &ReplanRequest, decision: &Decision) {
        if self.writer.is_none() {
            return;
        }
        let mut entries = Vec::new();
        let mut seen = HashSet::new();
        for outcome in &request.outcomes {
            let Some(failed) = outcome.verdicts.iter().find(|v| !v.passed) else {
                continue;
            };
            let (Some(tool), Some(target)) = (outcome.tool.clone(), outcome.target.clone()) else {
                continue;
            };
            if !seen.insert((tool.clone(), target.clone())) {
                continue;
            }
            let (row, meaning) = match failed.class {
                Some(FailureClass::Environmental) => ("change_path", "dead end, tool unharmed"),
                _ => ("change_approach", "anti-pattern"),
            };
            let Some(atom) = &outcome.atom else { continue };
            let content = format!(
                "`{atom}` failed {} ({meaning}); GGS round {}: {}",
                failed.criterion,
                decision.round,
                decision.directive.shown()
            );
            entries.extend(self.megram(tool, target, decision.directive.as_str(), row, content));
        }
        // An abandon's terminal Megram is written with the task's end (remember_end).
        if decision.directive == MacroState::Success {
            let content = format!("{}: {}", decision.directive.shown(), decision.rationale);
            entries.extend(self.terminal(decision.directive.as_str(), content));
        }
        self.remember(entries);
    }

    /// At the end of a task (accepted or abandoned): a success-row Megram for
    /// every alternative that solved its choice point, and the terminal Megram.
    pub(super) fn remember_end(&mut self, accepted: bool, summary: &str) {
        if self.writer.is_none() {
            return;
        }
        let solved: Vec<(AtomId, AtomId)> = self
            .state
            .graph
            .atoms
            .iter()
            .filter(|(id, a)| a.status == AtomStatus::Solved && self.graph.is_selected(id))
            .filter_map(|(id, a)| Some((id.clone(), a.chosen.clone()?)))
            .collect();
        let mut entries = Vec::new();
        let mut seen = HashSet::new();
        for (group, alt) in solved {
            let Some((tool, target)) = pair(&self.state.graph.atoms, &alt) else {
                continue;
            };
            if seen.insert((tool.clone(), target.clone())) {
                let content = format!("`{alt}` solved its choice point `{group}` (best practice)");
                entries.extend(self.megram(tool, target, "success", "success", content));
            }
        }
        let state = if accepted { "accept" } else { "abandon" };
        entries.extend(self.terminal(state, summary.to_string()));
        self.remember(entries);
    }

    /// Runs the Dreamer in the background every `every`, without blocking the loop.
    pub(super) fn start_dreamer(&self, every: std::time::Duration) -> Option<tokio::task::JoinHandle<()>> {
        let path = self.options.memory.clone()?;
        let clock = self.clock.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let (path, clock) = (path.clone(), clock.clone());
                // A failed pass changes nothing and is tried again at the next tick.
                let _ = tokio::task::spawn_blocking(move || dream_once(&MemoryFile::new(path), clock.now())).await;
            }
        }))
    }
}

/// One Dreamer pass over a memory file: plan, then apply.
pub fn dream_once(file: &MemoryFile, now: crate::model::time::Timestamp) -> Result<memory::Dream, memory::MemoryError> {
    let loaded = file.load()?;
    let mut n = 0u64;
    let plan = memory::dream(&loaded.memory, now, || {
        n += 1;
        format!("{:x}-{:x}-d{n}", now.as_millis(), std::process::id())
    });
    file.apply_dream(&plan, now)?;
    Ok(plan)
}
