//! Speculative OR atoms: every eligible alternative runs at once, the first
//! to succeed wins and the others are cancelled and discarded.

use super::round::Dispatch;
use super::{Engine, EngineError};
use crate::graph::ChoiceOrder;
use crate::journal::event::Event;
use crate::state::{AtomId, AtomStatus};

impl Engine<'_> {
    /// Starts the racers of every speculative OR atom waiting for a choice, up
    /// to `parallel` in flight.
    pub(super) async fn start_races(&mut self, d: &mut Dispatch, parallel: usize) -> Result<(), EngineError> {
        for group in self.speculative_choice_points() {
            if !d.race_plans.contains_key(&group) {
                let field = self.race_field(&group).await?;
                d.race_plans.insert(group.clone(), field);
            }
            let untried = self.graph.untried(&group);
            let racers: Vec<AtomId> = d.race_plans[&group]
                .iter()
                .filter(|alt| untried.contains(&alt.as_str()))
                .filter(|alt| self.graph.status(alt) == Some(AtomStatus::Pending) && self.deps_solved(alt))
                .filter(|alt| !d.in_flight.contains(*alt))
                .cloned()
                .collect();
            let claim = d.group_claims.entry(group.clone()).or_default().clone();
            for alt in racers {
                if d.in_flight.len() >= parallel {
                    break;
                }
                d.race_claims.insert(alt.clone(), claim.clone());
                let token = self.cancel.child_token();
                if self.start(d, &alt, token.clone())? {
                    d.races.entry(group.clone()).or_default().insert(alt, token);
                }
            }
        }
        Ok(())
    }

    /// The race's field, calibrated once: alternatives the blocked sets refuse
    /// never run, and memory's last resorts only when nothing else may.
    async fn race_field(&mut self, group: &AtomId) -> Result<Vec<AtomId>, EngineError> {
        let ranking = self
            .steered(None, |graph, steer, _| {
                let candidates = graph.untried(group);
                steer.rank(graph, group, &candidates)
            })
            .await;
        self.record(ranking.event().into_iter().collect())?;
        let preferred: Vec<AtomId> = ranking
            .ranked
            .iter()
            .filter(|r| !r.last_resort)
            .map(|r| r.id.clone())
            .collect();
        Ok(if preferred.is_empty() {
            ranking.ranked.into_iter().map(|r| r.id).collect()
        } else {
            preferred
        })
    }

    /// Returns the speculative OR atoms waiting for a choice.
    fn speculative_choice_points(&self) -> Vec<AtomId> {
        self.graph
            .choice_points()
            .filter(|g| self.state.graph.atoms.get(*g).is_some_and(|a| a.speculative))
            .map(AtomId::from)
            .collect()
    }

    /// When `atom` is a racer that succeeded: it wins its race, the others are
    /// cancelled, and the choice is journaled.
    pub(super) fn race_won(&mut self, d: &mut Dispatch, atom: &AtomId) -> Result<(), EngineError> {
        let Some(group) = d
            .races
            .iter()
            .find(|(_, r)| r.contains_key(atom))
            .map(|(g, _)| g.clone())
        else {
            return Ok(());
        };
        let racers = d.races.remove(&group).unwrap_or_default();
        for (other, token) in &racers {
            if other != atom {
                token.cancel();
            }
        }
        let remaining: Vec<AtomId> = self
            .graph
            .untried(&group)
            .into_iter()
            .filter(|a| *a != atom.as_str())
            .map(AtomId::from)
            .collect();
        self.record(vec![Event::OrChosen {
            group,
            chosen: atom.clone(),
            remaining,
            reason: "first to succeed in a speculative race".into(),
        }])?;
        Ok(())
    }

    /// Takes a racer that failed for good out of its race; `true` if it was one.
    pub(super) fn race_lost(&mut self, d: &mut Dispatch, atom: &AtomId) -> bool {
        let racer = d.races.values_mut().any(|r| r.remove(atom).is_some());
        d.races.retain(|_, r| !r.is_empty());
        racer
    }
}
