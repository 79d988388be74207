//! GGS directives applied to the graph's OR choices.
//!
//! [`Steer`] is the [`ChoiceOrder`] every choice goes through: it refuses any
//! alternative whose plan (the atoms choosing it would run) uses a blocked tool
//! or target — the plan validator of SPEC §5, in code — and, under
//! `change_path`, ranks alternatives with the failed tool first.

use std::collections::BTreeSet;

use indexmap::IndexMap;

use crate::ggs::{GgsState, MacroState};
use crate::graph::{ChoiceOrder, Ranked, WorkGraph};
use crate::state::{Atom, AtomId};

/// Returns an atom's target label: `target`, else its id.
pub fn target(id: &str, atom: &Atom) -> String {
    atom.target.clone().unwrap_or_else(|| id.to_string())
}

/// The choice order under the task's blocked sets and the current directive.
pub struct Steer<'a> {
    atoms: &'a IndexMap<AtomId, Atom>,
    blocked_tools: &'a BTreeSet<String>,
    blocked_targets: &'a BTreeSet<String>,
    directive: Option<MacroState>,
    failed_tools: BTreeSet<String>,
}

impl<'a> Steer<'a> {
    /// The order for a choice outside a replan: only the blocked sets apply.
    pub fn new(atoms: &'a IndexMap<AtomId, Atom>, ggs: &'a GgsState) -> Self {
        Self {
            atoms,
            blocked_tools: &ggs.blocked_tools,
            blocked_targets: &ggs.blocked_targets,
            directive: None,
            failed_tools: BTreeSet::new(),
        }
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
    fn rank(&self, graph: &WorkGraph, _group: &str, candidates: &[&str]) -> Vec<Ranked> {
        let allowed: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| self.refusal(graph, c).is_none())
            .collect();
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
        let mut ranked: Vec<&str> = allowed.clone();
        if self.directive == Some(MacroState::ChangePath) {
            // A stable partition: the failed tool's other targets come first.
            ranked.sort_by_key(|alt| !self.same_tool(alt));
        }
        ranked
            .into_iter()
            .enumerate()
            .map(|(i, alt)| Ranked {
                id: alt.to_string(),
                reason: reason(alt, i),
            })
            .collect()
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

    fn ids(ranked: Vec<Ranked>) -> Vec<String> {
        ranked.into_iter().map(|r| r.id).collect()
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
        assert_eq!(ranked[0].reason, "change_path: same tool, another target");
        let python_first = Steer::new(&s.graph.atoms, &ggs).directed(MacroState::ChangePath, &["python".into()]);
        assert_eq!(ids(python_first.rank(&graph, "root", &["a2", "b"])), ["b", "a2"]);
    }
}
