//! GGS directives and memory calibration applied to the graph's OR choices.
//!
//! [`Steer`] is the [`ChoiceOrder`] every choice goes through: it refuses any
//! alternative whose plan (the atoms choosing it would run) uses a blocked tool
//! or target — the plan validator of SPEC §5, in code — and, under
//! `change_path`, ranks alternatives with the failed tool first. With a
//! [`Recall`], it also calibrates against memory before the choice (SPEC §6):
//! Exploit alternatives first, Avoid ones last (tried only when nothing else
//! remains), Caution ones only when confirmed. Ranking is pure: each
//! calibration is returned with the ranking it explains (for the journal), and
//! a Caution alternative nobody was asked about yet is marked unanswered — the
//! engine asks, outside any ranking, and ranks again.

use std::collections::{BTreeSet, HashMap};

use crate::ggs::{GgsState, MacroState};
use crate::graph::{ChoiceOrder, Ranked, Ranking, WorkGraph};
use crate::memory::{Action, Memory};
use crate::memory::{Calibration, Recalled};
use crate::model::time::Timestamp;
use crate::state::{Atom, AtomId};
use indexmap::IndexMap;

/// Memory for calibrating choices, with the user's answers about Caution pairs.
#[derive(Debug, Clone, Copy)]
pub struct Recall<'a> {
    memory: &'a Memory,
    now: Timestamp,
    /// Answers by `space on entity`.
    answers: &'a HashMap<String, bool>,
    /// Every Caution pair is confirmed (`--yes`).
    yes: bool,
}

impl<'a> Recall<'a> {
    /// Calibrates against `memory` at `now`; a Caution alternative runs when
    /// `answers` confirms its pair, or always with `yes`.
    pub fn new(memory: &'a Memory, now: Timestamp, answers: &'a HashMap<String, bool>, yes: bool) -> Self {
        Self {
            memory,
            now,
            answers,
            yes,
        }
    }
}

impl Recall<'_> {
    /// The (tool, target) pairs memory says to avoid now (MUST NOT), in
    /// memory's order.
    pub fn avoided(&self) -> Vec<(String, String)> {
        self.memory
            .clusters()
            .filter(|(_, megrams)| {
                crate::memory::Potentials::of(megrams.iter().copied(), self.now).action() == Action::Avoid
            })
            .map(|((space, entity), _)| (space.to_string(), entity.to_string()))
            .collect()
    }
}

/// The ids of the Megrams a calibration used (those whose pair was not ignored).
pub fn recalled(memory: &Memory, calibration: &Calibration) -> Vec<String> {
    calibration
        .alternatives
        .iter()
        .filter(|r| r.action != Action::Ignore)
        .flat_map(|r| memory.matching(&r.space, &r.entity))
        .map(|m| m.id.clone())
        .collect()
}

/// A Caution alternative nobody was asked about yet: `(alternative, "space on entity")`.
pub fn unanswered(calibration: &Calibration) -> impl Iterator<Item = (&AtomId, String)> + '_ {
    calibration
        .alternatives
        .iter()
        .filter(|r| r.action == Action::Caution && r.confirmed.is_none())
        .map(|r| (&r.alt, format!("{} on {}", r.space, r.entity)))
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Returns an atom's target label: `target`, else its id.
pub fn target(id: &str, atom: &Atom) -> String {
    atom.target.clone().unwrap_or_else(|| id.to_string())
}

/// The choice order under the task's blocked sets, the current directive and memory.
pub struct Steer<'a> {
    atoms: &'a IndexMap<AtomId, Atom>,
    blocked_tools: &'a BTreeSet<String>,
    blocked_targets: &'a BTreeSet<String>,
    allowed: &'a BTreeSet<AtomId>,
    directive: Option<MacroState>,
    failed_tools: BTreeSet<String>,
    recall: Option<Recall<'a>>,
}

impl<'a> Steer<'a> {
    /// The order for a choice outside a replan: only the blocked sets apply.
    pub fn new(atoms: &'a IndexMap<AtomId, Atom>, ggs: &'a GgsState) -> Self {
        Self {
            atoms,
            blocked_tools: &ggs.blocked_tools,
            blocked_targets: &ggs.blocked_targets,
            allowed: &ggs.allowed,
            directive: None,
            failed_tools: BTreeSet::new(),
            recall: None,
        }
    }

    /// Calibrates every choice against memory.
    pub fn with_recall(mut self, recall: Recall<'a>) -> Self {
        self.recall = Some(recall);
        self
    }

    /// The MUST NOT entries the blocked sets give.
    pub fn blocked_constraints(&self) -> Vec<String> {
        let tools = self.blocked_tools.iter().map(|t| format!("tool {t} (blocked by GGS)"));
        let targets = self
            .blocked_targets
            .iter()
            .map(|t| format!("target {t} (blocked by GGS)"));
        tools.chain(targets).collect()
    }

    /// Returns an atom's (space, entity) tags for memory: tool and target.
    fn tags(&self, alt: &str) -> Option<(String, String)> {
        let atom = self.atoms.get(alt)?;
        Some((atom.tool()?, target(alt, atom)))
    }

    /// Calibrates `allowed` (in file order) against memory: returns them ranked
    /// Exploit first (strongest first), Avoid last, with the calibration.
    fn calibrate<'c>(
        &self,
        recall: &Recall<'_>,
        group: &str,
        allowed: Vec<&'c str>,
    ) -> (Vec<(&'c str, Option<Recalled>)>, Calibration) {
        let mut rows = Vec::new();
        for alt in allowed {
            let Some((space, entity)) = self.tags(alt) else {
                rows.push((alt, None));
                continue;
            };
            let matching = recall.memory.matching(&space, &entity);
            let p = crate::memory::Potentials::of(matching.iter().copied(), recall.now);
            let action = p.action();
            // Unanswered (`None`) until the engine has asked.
            let confirmed = match action {
                Action::Caution if recall.yes => Some(true),
                Action::Caution => recall.answers.get(&format!("{space} on {entity}")).copied(),
                _ => None,
            };
            rows.push((
                alt,
                Some(Recalled {
                    alt: alt.into(),
                    space,
                    entity,
                    m_att: round4(p.m_att),
                    m_dec: round4(p.m_dec),
                    action,
                    confirmed,
                }),
            ));
        }
        let rank = |r: &Option<Recalled>| match r {
            Some(r) if r.action == Action::Exploit => 0,
            Some(r) if r.action == Action::Avoid || r.confirmed == Some(false) => 2,
            _ => 1,
        };
        let mut ranked = rows.clone();
        // Stable: file order (and change_path's same tool first) within a rank.
        ranked.sort_by(|a, b| {
            rank(&a.1).cmp(&rank(&b.1)).then_with(|| match (&a.1, &b.1) {
                (Some(x), Some(y)) if rank(&a.1) == 0 => y.m_dec.total_cmp(&x.m_dec),
                _ => std::cmp::Ordering::Equal,
            })
        });
        let pair = |r: &Recalled| format!("{} on {}", r.space, r.entity);
        let mut must_not: Vec<String> = rows
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .filter(|r| r.action == Action::Avoid || r.confirmed == Some(false))
            .map(|r| format!("{} (memory: {})", pair(r), r.action.as_str()))
            .collect();
        must_not.extend(self.blocked_constraints());
        let should_prefer = rows
            .iter()
            .filter_map(|(_, r)| r.as_ref())
            .filter(|r| r.action == Action::Exploit)
            .map(|r| format!("{} (memory: M_dec {:+.2})", pair(r), r.m_dec))
            .collect();
        let calibration = Calibration {
            group: group.into(),
            alternatives: rows.iter().filter_map(|(_, r)| r.clone()).collect(),
            order: ranked.iter().map(|(alt, _)| AtomId::from(*alt)).collect(),
            must_not,
            should_prefer,
        };
        (ranked, calibration)
    }

    /// The order for the recovery a directive asks for (`failed_tools`: the
    /// tools of the failed atoms, which change_path keeps).
    pub fn directed(mut self, directive: MacroState, failed_tools: &[String]) -> Self {
        self.directive = Some(directive);
        self.failed_tools = failed_tools.iter().cloned().collect();
        self
    }

    /// Returns why running `atom_id` would break the blocked sets, if it would.
    pub fn blocked(&self, atom_id: &str) -> Option<String> {
        // The user's explicit choice overrides the blocked sets.
        if self.allowed.contains(atom_id) {
            return None;
        }
        let atom = self.atoms.get(atom_id)?;
        if let Some(tool) = atom.tool().filter(|t| self.blocked_tools.contains(t)) {
            return Some(format!("`{atom_id}` uses blocked tool {tool}"));
        }
        let target = target(atom_id, atom);
        self.blocked_targets
            .contains(&target)
            .then(|| format!("`{atom_id}` uses blocked target {target}"))
    }

    fn same_tool(&self, alt: &str) -> bool {
        self.atoms
            .get(alt)
            .and_then(Atom::tool)
            .is_some_and(|t| self.failed_tools.contains(&t))
    }
}

impl ChoiceOrder for Steer<'_> {
    fn rank(&self, graph: &WorkGraph, group: &str, candidates: &[&str]) -> Ranking {
        let mut allowed: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| self.refusal(graph, c).is_none())
            .collect();
        if self.directive == Some(MacroState::ChangePath) {
            // A stable partition: the failed tool's other targets come first.
            allowed.sort_by_key(|alt| !self.same_tool(alt));
        }
        let reason = |alt: &str, i: usize| -> String {
            match self.directive {
                Some(MacroState::ChangePath) if self.same_tool(alt) => {
                    "change_path: same tool, another target".to_string()
                }
                Some(MacroState::ChangePath) => {
                    "change_path: no alternative with the failed tool left; the next unblocked one".to_string()
                }
                Some(d @ (MacroState::ChangeApproach | MacroState::BreakSymmetry)) => {
                    format!("{d}: first alternative using no blocked tool")
                }
                Some(d) => format!("{d}: next untried alternative"),
                None if i == 0 => "first untried alternative in file order".to_string(),
                None => format!("untried alternative #{} in file order", i + 1),
            }
        };
        let memory = |r: &Option<Recalled>| match r {
            Some(r) if r.action == Action::Exploit => format!("memory: exploit, M_dec {:+.2}; ", r.m_dec),
            Some(r) if r.action == Action::Avoid => {
                format!("memory: avoid, M_dec {:+.2}, and nothing else remains; ", r.m_dec)
            }
            Some(r) if r.confirmed == Some(false) => {
                "memory: caution, not confirmed, and nothing else remains; ".into()
            }
            Some(r) if r.confirmed == Some(true) => "memory: caution, confirmed; ".to_string(),
            _ => String::new(),
        };
        let (ranked, calibration) = match &self.recall {
            Some(recall) => {
                let (ranked, calibration) = self.calibrate(recall, group, allowed);
                (ranked, Some(calibration))
            }
            None => (allowed.into_iter().map(|alt| (alt, None)).collect(), None),
        };
        let ranked = ranked
            .into_iter()
            .enumerate()
            .map(|(i, (alt, recalled))| Ranked {
                last_resort: recalled
                    .as_ref()
                    .is_some_and(|r| r.action == Action::Avoid || r.confirmed == Some(false)),
                id: alt.into(),
                reason: format!("{}{}", memory(&recalled), reason(alt, i)),
            })
            .collect();
        Ranking { ranked, calibration }
    }

    fn refusal(&self, graph: &WorkGraph, candidate: &str) -> Option<String> {
        graph.plan(candidate).into_iter().find_map(|atom| self.blocked(atom))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Objective, StateFile};

    fn state(yaml: &str) -> StateFile {
        let atoms: IndexMap<AtomId, Atom> = serde_saphyr::from_str(yaml).expect("test yaml");
        StateFile::new(Objective::default(), atoms)
    }

    const SHAPE: &str = "
root: { or: [a1, a2, b, c] }
a1: { run: 'sed -i s/x/y/ f', target: f }
a2: { run: 'sed -i s/x/z/ g', target: g }
b: { run: 'python fix.py', deps: [prep] }
prep: { run: 'sed -n p f', target: prep }
c: { run: 'perl fix.pl', target: f }
";

    fn ids(ranking: Ranking) -> Vec<AtomId> {
        ranking.ranked.into_iter().map(|r| r.id).collect()
    }

    #[test]
    fn blocked_tools_refuse_every_plan_that_runs_them() {
        let s = state(SHAPE);
        let graph = WorkGraph::new(&s);
        let ggs = GgsState {
            blocked_tools: ["sed".to_string()].into(),
            ..GgsState::default()
        };
        let steer = Steer::new(&s.graph.atoms, &ggs);
        let all = ["a1", "a2", "b", "c"];
        assert_eq!(
            ids(steer.rank(&graph, "root", &all)),
            ["c"],
            "b needs prep, which runs sed"
        );
        assert_eq!(
            steer.refusal(&graph, "b").as_deref(),
            Some("`prep` uses blocked tool sed")
        );
    }

    #[test]
    fn the_users_choice_overrides_the_blocked_sets() {
        let s = state(SHAPE);
        let graph = WorkGraph::new(&s);
        let ggs = GgsState {
            blocked_tools: ["sed".to_string()].into(),
            allowed: ["a1".into()].into(),
            ..GgsState::default()
        };
        let steer = Steer::new(&s.graph.atoms, &ggs);
        assert_eq!(steer.blocked("a1"), None, "chosen by the user");
        assert_eq!(steer.refusal(&graph, "a1"), None);
        assert!(steer.blocked("a2").is_some(), "the block stands for the rest");
        assert_eq!(ids(steer.rank(&graph, "root", &["a1", "a2", "b", "c"])), ["a1", "c"]);
    }

    #[test]
    fn blocked_targets_refuse_plans_and_change_path_keeps_the_tool_first() {
        let s = state(SHAPE);
        let graph = WorkGraph::new(&s);
        let ggs = GgsState {
            blocked_targets: ["f".to_string()].into(),
            ..GgsState::default()
        };
        let steer = Steer::new(&s.graph.atoms, &ggs).directed(MacroState::ChangePath, &["sed".into()]);
        // a1 and c use target f; b runs prep (sed, target prep) and python.
        let ranked = steer.rank(&graph, "root", &["a2", "b", "c"]);
        assert_eq!(ids(ranked.clone()), ["a2", "b"]);
        assert_eq!(ranked.ranked[0].reason, "change_path: same tool, another target");
        let python_first = Steer::new(&s.graph.atoms, &ggs).directed(MacroState::ChangePath, &["python".into()]);
        assert_eq!(ids(python_first.rank(&graph, "root", &["a2", "b"])), ["b", "a2"]);
    }
}
