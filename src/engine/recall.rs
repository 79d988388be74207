//! The engine's memory edge: calibration before every OR choice, Megram
//! writes after every GGS decision, the background writer that never blocks
//! the loop, and the background Dreamer.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use indexmap::IndexMap;

use super::{Engine, EngineError};
use crate::ggs::{Decision, MacroState, ReplanRequest};
use crate::graph::WorkGraph;
use crate::journal::event::Event;
use crate::memory::Calibration;
use crate::memory::{self, Entry, Level, Megram, MemoryFile};
use crate::state::{AtomId, AtomStatus, Binding, FailureClass};
use crate::steer::{Recall, Steer, target};

/// Appends memory records on a thread of its own, so a slow or failing disk
/// never blocks or fails the run. The first error is kept for one report.
pub(super) struct MemoryWriter {
    tx: Option<mpsc::Sender<Vec<Entry>>>,
    handle: Option<JoinHandle<()>>,
    error: Arc<Mutex<Option<String>>>,
    reported: bool,
}

impl MemoryWriter {
    pub(super) fn start(file: MemoryFile) -> Self {
        let (tx, rx) = mpsc::channel::<Vec<Entry>>();
        let error = Arc::new(Mutex::new(None));
        let slot = error.clone();
        let handle = std::thread::Builder::new()
            .name("aot-memory".into())
            .spawn(move || {
                for batch in rx {
                    if let Err(e) = file.append(&batch)
                        && let Ok(mut slot) = slot.lock()
                    {
                        slot.get_or_insert(e.to_string());
                    }
                }
            })
            .ok();
        Self {
            tx: Some(tx),
            handle,
            error,
            reported: false,
        }
    }

    pub(super) fn send(&self, entries: Vec<Entry>) {
        if let Some(tx) = &self.tx
            && !entries.is_empty()
        {
            // A closed channel means the thread could not start: nothing to do.
            let _ = tx.send(entries);
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
    pub(super) fn finish(&mut self) {
        self.tx = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The tools and targets of a Megram's index tags, for action states.
fn pair(atoms: &IndexMap<AtomId, crate::state::Atom>, id: &str) -> Option<(String, String)> {
    let atom = atoms.get(id).filter(|a| a.or.is_none())?;
    Some((atom.tool()?, target(id, atom)))
}

impl Engine<'_> {
    /// Runs `f` with the choice order every choice goes through: the blocked
    /// sets, `directive` (with the failed tools), and memory calibration. The
    /// calibrations made are journaled before what `f` returns is.
    pub(super) fn steered<R>(
        &mut self,
        directive: Option<(MacroState, &[String])>,
        f: impl FnOnce(&WorkGraph, &Steer<'_>, &IndexMap<AtomId, Binding>) -> R,
    ) -> Result<R, EngineError> {
        let now = self.clock.now();
        let yes = self.options.yes;
        let Engine {
            memory,
            observer,
            state,
            graph,
            cautions,
            ..
        } = self;
        let observer = &mut **observer;
        let mut confirm = |alt: &str, pair: &str| -> bool {
            if yes {
                return true;
            }
            *cautions.entry(pair.to_string()).or_insert_with(|| {
                observer.confirm(&format!(
                    "memory is split on {pair} (alternative `{alt}`): it both worked and failed before. Run it?"
                ))
            })
        };
        let recall = Recall::new(memory, now, &mut confirm);
        let mut steer = Steer::new(&state.graph.atoms, &state.run.ggs).with_recall(&recall);
        if let Some((directive, failed_tools)) = directive {
            steer = steer.directed(directive, failed_tools);
        }
        let result = f(graph, &steer, &state.bindings);
        drop(steer);
        let (calibrations, recalled) = recall.take();
        self.calibrated(calibrations, recalled)?;
        Ok(result)
    }

    /// Journals calibrations, keeps their constraints for agent prompts, and
    /// records the recall of the Megrams they used.
    fn calibrated(&mut self, calibrations: Vec<Calibration>, mut recalled: Vec<String>) -> Result<(), EngineError> {
        for c in &calibrations {
            self.must_not.extend(c.must_not.iter().cloned());
            self.should_prefer.extend(c.should_prefer.iter().cloned());
        }
        let events = calibrations
            .into_iter()
            .map(|calibration| Event::Calibrated {
                calibration: Box::new(calibration),
            })
            .collect();
        self.record(events)?;
        recalled.sort();
        recalled.dedup();
        if !recalled.is_empty() {
            self.remember(vec![Entry::Recalled {
                v: memory::MEMORY_VERSION,
                at: self.clock.now(),
                ids: recalled,
            }]);
        }
        Ok(())
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
        let mut seen = std::collections::HashSet::new();
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
                "`{atom}` failed {} ({meaning}) in round {} ({})",
                failed.criterion, decision.round, decision.directive
            );
            entries.extend(self.megram(tool, target, decision.directive.as_str(), row, content));
        }
        // An abandon's terminal Megram is written with the task's end (remember_end).
        if decision.directive == MacroState::Success {
            let content = format!("{}: {}", decision.directive, decision.rationale);
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
        let mut seen = std::collections::HashSet::new();
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
