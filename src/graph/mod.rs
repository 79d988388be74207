//! The AND/OR work graph: the "recursive argument" of the loop.
//!
//! A [`WorkGraph`] is built from `graph.atoms` as a petgraph model — AND edges
//! from `deps`, OR edges from an OR atom to its alternatives — and is kept up to
//! date by folding the same effects of journal events as the state file (its
//! [`Fold`] implementation),
//! touching only the atoms an event concerns. It answers which atoms are on the
//! selected branches, which are ready, and which OR atoms await a choice; and it
//! plans transitions as events: an OR choice through an ordering hook, the
//! contraction of a solved atom into its binding, and backtracking after a
//! failure. [`WorkGraph::variant`] is the measure that strictly decreases on
//! every transition, which is why the loop terminates (docs/architecture.md).
//!
//! Pure: no I/O, no clock; events carry no time, the journal stamps them.

pub mod export;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::journal::event::Event;
use crate::journal::fold::{Effect, Fold};
use crate::memory::Calibration;
use indexmap::IndexMap;

use crate::state::{AtomId, AtomStatus, Binding, FailureClass, StateFile, TrailEntry};

/// An edge of the work graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// From an atom to one of its dependencies (AND).
    Dep,
    /// From an OR atom to one of its alternatives.
    Alt,
}

/// An alternative offered to the ordering hook, with why it is ranked where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranked {
    /// The alternative.
    pub id: AtomId,
    /// Why it comes at this rank (goes into the trail).
    pub reason: String,
    /// Ranked last only because nothing better remains (memory advised
    /// against it): a speculative race leaves it out while others can run.
    pub last_resort: bool,
}

/// A ranking of an OR atom's alternatives, and what memory said about them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ranking {
    /// Best first.
    pub ranked: Vec<Ranked>,
    /// Memory's calibration of the alternatives (journaled as `calibrated`).
    pub calibration: Option<Calibration>,
}

impl Ranking {
    /// The `calibrated` event to journal before what the ranking decided, if any.
    pub fn event(&self) -> Option<Event> {
        self.calibration.clone().map(|calibration| Event::Calibrated {
            calibration: Box::new(calibration),
        })
    }
}

/// Orders the untried alternatives of an OR atom; may drop some (e.g. those
/// using a blocked tool): GGS directives and memory calibration implement it.
pub trait ChoiceOrder {
    /// Returns `candidates` (untried, unblocked, in file order) ranked best first.
    fn rank(&self, graph: &WorkGraph, group: &str, candidates: &[&str]) -> Ranking;

    /// Says why `candidate` is left out of the ranking, if it is.
    fn refusal(&self, _graph: &WorkGraph, _candidate: &str) -> Option<String> {
        None
    }
}

/// The default order: the file's.
#[derive(Debug, Clone, Copy, Default)]
pub struct FileOrder;

impl ChoiceOrder for FileOrder {
    fn rank(&self, _: &WorkGraph, _: &str, candidates: &[&str]) -> Ranking {
        let ranked = candidates
            .iter()
            .enumerate()
            .map(|(i, id)| Ranked {
                last_resort: false,
                id: AtomId::from(*id),
                reason: if i == 0 {
                    "first untried alternative in file order".to_string()
                } else {
                    format!("untried alternative #{} in file order", i + 1)
                },
            })
            .collect();
        Ranking {
            ranked,
            calibration: None,
        }
    }
}

/// What to do after an atom failed for good.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// Switch an OR atom to another alternative: journal these events.
    Backtrack {
        /// OR atoms found exhausted on the way up (`atom_failed`), then `backtracked`.
        events: Vec<Event>,
    },
    /// No enclosing OR atom has an alternative left.
    Exhausted {
        /// The atom whose failure could not be recovered.
        atom: AtomId,
        /// The alternatives tried at each OR atom on the way up, `group: a, b`.
        tried: Vec<String>,
        /// OR atoms found exhausted on the way up (`atom_failed`), to journal.
        events: Vec<Event>,
    },
}

#[derive(Debug, Default)]
struct SwitchPlan {
    dropped: HashSet<NodeIndex>,
    reset: Vec<AtomId>,
}

/// The termination measure: compared lexicographically, it strictly decreases
/// on every engine transition of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Variant {
    /// `(OR atom, alternative)` pairs never chosen. Every choice consumes one.
    pub untried: u64,
    /// Work left without a new choice: unfinished atoms + 2 × remaining attempt
    /// budget + running atoms. Every other transition lowers it.
    pub work: u64,
}

/// The work graph with its incrementally maintained views.
#[derive(Debug, Clone)]
pub struct WorkGraph {
    graph: DiGraph<AtomId, Edge>,
    index: HashMap<AtomId, NodeIndex>,
    is_or: Vec<bool>,
    owner: Vec<Option<NodeIndex>>,
    status: Vec<AtomStatus>,
    attempts: Vec<u32>,
    chosen: Vec<Option<NodeIndex>>,
    tried: HashSet<(NodeIndex, NodeIndex)>,
    /// Choices in place without a trail entry (kept across an objective
    /// change, which clears the trail): tried while they stay chosen, untried
    /// again once the choice moves on, as a graph rebuilt from the file sees it.
    inherited: HashSet<(NodeIndex, NodeIndex)>,
    /// Selecting references: 1 for a root, +1 per selected dependent, +1 from
    /// the owning OR atom when selected and choosing this alternative.
    sel: Vec<u32>,
    /// Dependencies not yet solved.
    unsolved_deps: Vec<u32>,
    ready: BTreeSet<NodeIndex>,
    choice_points: BTreeSet<NodeIndex>,
    roots: Vec<NodeIndex>,
    /// Atoms failed or pruned: while there are none, no alternative is doomed.
    closed: usize,
    max_attempts: u32,
    alternatives_total: u64,
}

fn is_open(status: AtomStatus) -> bool {
    matches!(status, AtomStatus::Pending | AtomStatus::Running)
}

impl WorkGraph {
    /// Builds the graph of a valid state file (see `validate`): dangling
    /// references are ignored here because validation refuses them.
    pub fn new(state: &StateFile) -> Self {
        let atoms = &state.graph.atoms;
        let n = atoms.len();
        let mut graph = DiGraph::with_capacity(n, n * 2);
        let mut index = HashMap::with_capacity(n);
        for id in atoms.keys() {
            index.insert(id.clone(), graph.add_node(id.clone()));
        }
        let mut owner = vec![None; n];
        let mut alternatives_total = 0;
        for (i, atom) in atoms.values().enumerate() {
            let from = NodeIndex::new(i);
            for dep in &atom.deps {
                if let Some(&to) = index.get(dep) {
                    graph.add_edge(from, to, Edge::Dep);
                }
            }
            for alt in atom.or.iter().flatten() {
                if let Some(&to) = index.get(alt) {
                    graph.add_edge(from, to, Edge::Alt);
                    owner[to.index()] = Some(from);
                    alternatives_total += 1;
                }
            }
        }
        let chosen = atoms
            .values()
            .map(|a| a.chosen.as_ref().and_then(|c| index.get(c).copied()))
            .collect();
        let mut tried = HashSet::new();
        for entry in &state.trail {
            let (group, alt) = match entry {
                TrailEntry::OrChoice { group, chosen, .. } => (group, chosen),
                TrailEntry::Backtrack { group, to, .. } => (group, to),
                _ => continue,
            };
            // Only a pair that is an alternative now counts: a trail may name
            // one an edit since removed from the `or` list.
            if let (Some(&g), Some(&a)) = (index.get(group), index.get(alt))
                && owner[a.index()] == Some(g)
            {
                tried.insert((g, a));
            }
        }
        let mut this = Self {
            is_or: atoms.values().map(|a| a.or.is_some()).collect(),
            status: atoms.values().map(|a| a.status).collect(),
            attempts: atoms.values().map(|a| a.attempts).collect(),
            graph,
            index,
            owner,
            chosen,
            tried,
            inherited: HashSet::new(),
            sel: vec![0; n],
            unsolved_deps: vec![0; n],
            ready: BTreeSet::new(),
            choice_points: BTreeSet::new(),
            roots: Vec::new(),
            closed: 0,
            max_attempts: state.objective.constraints.max_retries().saturating_add(1),
            alternatives_total,
        };
        // A currently chosen alternative counts as tried even without a trail entry.
        for g in this.nodes() {
            if let Some(c) = this.chosen[g.index()]
                && this.owner[c.index()] == Some(g)
                && this.tried.insert((g, c))
            {
                this.inherited.insert((g, c));
            }
        }
        for node in this.nodes() {
            this.unsolved_deps[node.index()] = this.deps(node).filter(|d| !this.solved(*d)).count() as u32;
        }
        this.roots = this
            .nodes()
            .filter(|&v| this.graph.neighbors_directed(v, Direction::Incoming).next().is_none())
            .collect();
        for root in this.roots.clone() {
            this.select(root);
        }
        for node in this.nodes() {
            this.refresh(node);
        }
        this.closed = this
            .status
            .iter()
            .filter(|s| matches!(s, AtomStatus::Failed | AtomStatus::Pruned))
            .count();
        this
    }

    fn nodes(&self) -> impl Iterator<Item = NodeIndex> + use<> {
        (0..self.status.len()).map(NodeIndex::new)
    }

    fn deps(&self, node: NodeIndex) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph
            .edges_directed(node, Direction::Outgoing)
            .filter(|e| *e.weight() == Edge::Dep)
            .map(|e| e.target())
    }

    fn alternatives_of(&self, node: NodeIndex) -> Vec<NodeIndex> {
        // petgraph lists outgoing edges newest first; file order is the reverse.
        let mut alts: Vec<NodeIndex> = self
            .graph
            .edges_directed(node, Direction::Outgoing)
            .filter(|e| *e.weight() == Edge::Alt)
            .map(|e| e.target())
            .collect();
        alts.reverse();
        alts
    }

    fn dependents(&self, node: NodeIndex) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph
            .edges_directed(node, Direction::Incoming)
            .filter(|e| *e.weight() == Edge::Dep)
            .map(|e| e.source())
    }

    fn solved(&self, node: NodeIndex) -> bool {
        self.status[node.index()] == AtomStatus::Solved
    }

    fn node(&self, id: &str) -> Option<NodeIndex> {
        self.index.get(id).copied()
    }

    /// Returns an atom's id.
    pub fn id(&self, node: NodeIndex) -> &str {
        &self.graph[node]
    }

    /// Returns the petgraph model (node weights are atom ids).
    pub fn petgraph(&self) -> &DiGraph<AtomId, Edge> {
        &self.graph
    }

    /// Adds a selecting reference; on 0 → 1 the atom's own references follow.
    fn select(&mut self, node: NodeIndex) {
        let mut stack = vec![node];
        while let Some(v) = stack.pop() {
            self.sel[v.index()] += 1;
            if self.sel[v.index()] == 1 {
                stack.extend(self.deps(v));
                stack.extend(self.chosen[v.index()]);
                self.refresh(v);
            }
        }
    }

    /// Removes a selecting reference; on 1 → 0 the atom's own references follow.
    /// Returns the atoms that became unselected.
    fn deselect(&mut self, node: NodeIndex) -> Vec<NodeIndex> {
        let mut dropped = Vec::new();
        let mut stack = vec![node];
        while let Some(v) = stack.pop() {
            self.sel[v.index()] = self.sel[v.index()].saturating_sub(1);
            if self.sel[v.index()] == 0 {
                dropped.push(v);
                stack.extend(self.deps(v));
                stack.extend(self.chosen[v.index()]);
                self.refresh(v);
            }
        }
        dropped
    }

    /// Recomputes whether an atom is ready or a choice point.
    fn refresh(&mut self, node: NodeIndex) {
        let i = node.index();
        let selected = self.sel[i] > 0;
        let pending = self.status[i] == AtomStatus::Pending;
        if pending && selected && !self.is_or[i] && self.unsolved_deps[i] == 0 {
            self.ready.insert(node);
        } else {
            self.ready.remove(&node);
        }
        if pending && selected && self.is_or[i] && self.chosen[i].is_none() {
            self.choice_points.insert(node);
        } else {
            self.choice_points.remove(&node);
        }
    }

    fn set_status(&mut self, node: NodeIndex, status: AtomStatus) {
        let closed = |s: AtomStatus| matches!(s, AtomStatus::Failed | AtomStatus::Pruned);
        match (closed(self.status[node.index()]), closed(status)) {
            (false, true) => self.closed += 1,
            (true, false) => self.closed -= 1,
            _ => {}
        }
        let was_solved = self.solved(node);
        self.status[node.index()] = status;
        let now_solved = self.solved(node);
        if was_solved != now_solved {
            let dependents: Vec<NodeIndex> = self.dependents(node).collect();
            for m in dependents {
                let count = &mut self.unsolved_deps[m.index()];
                *count = if now_solved {
                    count.saturating_sub(1)
                } else {
                    *count + 1
                };
                self.refresh(m);
            }
        }
        self.refresh(node);
    }

    fn set_chosen(&mut self, group: NodeIndex, choice: Option<NodeIndex>) {
        let old = self.chosen[group.index()];
        if let Some(new) = choice
            && self.owner[new.index()] == Some(group)
        {
            // Chosen now, and on the trail: tried for good.
            self.tried.insert((group, new));
            self.inherited.remove(&(group, new));
        }
        if old == choice {
            return;
        }
        let selected = self.sel[group.index()] > 0;
        self.chosen[group.index()] = choice;
        if let Some(new) = choice
            && selected
        {
            self.select(new);
        }
        if let Some(old) = old
            && self.inherited.remove(&(group, old))
        {
            self.tried.remove(&(group, old));
        }
        if let (Some(old), true) = (old, selected) {
            self.deselect(old);
        }
        self.refresh(group);
    }

    fn reset(&mut self, node: NodeIndex) {
        self.attempts[node.index()] = 0;
        self.set_chosen(node, None);
        self.set_status(node, AtomStatus::Pending);
    }

    fn refill(&mut self, node: NodeIndex) {
        self.attempts[node.index()] = 0;
        self.set_status(node, AtomStatus::Pending);
    }

    /// Returns the atoms ready to run, in file order: pending, on a selected
    /// branch, not an OR atom, every dependency solved.
    pub fn ready(&self) -> impl Iterator<Item = &str> + '_ {
        self.ready.iter().map(|&v| self.id(v))
    }

    /// Returns the selected OR atoms that have no alternative chosen, in file order.
    pub fn choice_points(&self) -> impl Iterator<Item = &str> + '_ {
        self.choice_points.iter().map(|&v| self.id(v))
    }

    /// Returns the OR atoms still open (pending or running), in file order.
    pub fn choice_groups(&self) -> impl Iterator<Item = &str> + '_ {
        self.nodes()
            .filter(|v| self.is_or[v.index()] && is_open(self.status[v.index()]))
            .map(|v| self.id(v))
    }

    /// Returns whether an atom is on a selected branch.
    pub fn is_selected(&self, id: &str) -> bool {
        self.node(id).is_some_and(|v| self.sel[v.index()] > 0)
    }

    /// Returns whether every root is solved: the graph is done.
    pub fn all_solved(&self) -> bool {
        self.roots.iter().all(|&v| self.solved(v))
    }

    /// Returns the atoms nothing refers to (the graph's goals), in file order.
    pub fn roots(&self) -> impl Iterator<Item = &str> + '_ {
        self.roots.iter().map(|&v| self.id(v))
    }

    /// Returns whether every atom on the selected branches is solved (the
    /// condition under which a failing base case counts against the graph).
    pub fn selected_solved(&self) -> bool {
        self.nodes().filter(|v| self.sel[v.index()] > 0).all(|v| self.solved(v))
    }

    /// Returns an atom's status as the graph knows it.
    pub fn status(&self, id: &str) -> Option<AtomStatus> {
        self.node(id).map(|v| self.status[v.index()])
    }

    /// Returns the untried alternatives of an OR atom that can still succeed
    /// (pending, running, or already solved as another branch's dependency, and
    /// not needing an atom that failed), in file order.
    pub fn untried(&self, group: &str) -> Vec<&str> {
        let Some(g) = self.node(group) else { return Vec::new() };
        self.alternatives_of(g)
            .into_iter()
            .filter(|&a| {
                !self.tried.contains(&(g, a))
                    && matches!(
                        self.status[a.index()],
                        AtomStatus::Pending | AtomStatus::Running | AtomStatus::Solved
                    )
                    && !self.needs_failed(a)
            })
            .map(|a| self.id(a))
            .collect()
    }

    /// Returns the atoms that choosing `alt` would run: it and its dependencies,
    /// and the alternatives already chosen below it, except what is solved.
    pub fn plan(&self, alt: &str) -> Vec<&str> {
        let Some(start) = self.node(alt) else { return Vec::new() };
        let mut seen = HashSet::new();
        let mut stack = vec![start];
        let mut out = Vec::new();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || self.solved(v) {
                continue;
            }
            out.push(self.id(v));
            stack.extend(self.deps(v));
            stack.extend(self.chosen[v.index()]);
        }
        out
    }

    /// Returns whether selecting `start` would select an atom that already
    /// failed: its unsolved dependencies (and the alternatives already chosen
    /// below it) include a failure, so choosing it would repeat a failed action.
    fn needs_failed(&self, start: NodeIndex) -> bool {
        if self.closed == 0 {
            return false;
        }
        let mut seen = HashSet::new();
        let mut stack = vec![start];
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || self.solved(v) {
                continue;
            }
            if matches!(self.status[v.index()], AtomStatus::Failed | AtomStatus::Pruned) {
                return true;
            }
            stack.extend(self.deps(v));
            stack.extend(self.chosen[v.index()]);
        }
        false
    }

    /// Returns the failed atoms on the selected branches (none, once every
    /// failure has been recovered from).
    pub fn selected_failures(&self) -> impl Iterator<Item = &str> + '_ {
        self.nodes()
            .filter(|v| self.sel[v.index()] > 0 && self.status[v.index()] == AtomStatus::Failed)
            .map(|v| self.id(v))
    }

    /// Plans the choice at an OR atom: the hook ranks the untried alternatives
    /// and the best one is chosen; if it is already solved, the OR atom is
    /// contracted at once. Without an `or_chosen` event when nothing is left to
    /// choose (a memory calibration is still returned).
    pub fn choose(&self, group: &str, order: &dyn ChoiceOrder, bindings: &IndexMap<AtomId, Binding>) -> Vec<Event> {
        let candidates = self.untried(group);
        let ranking = order.rank(self, group, &candidates);
        let mut events: Vec<Event> = ranking.event().into_iter().collect();
        let ranked = ranking.ranked;
        let (Some(best), Some(g)) = (ranked.first(), self.node(group)) else {
            return events;
        };
        let Some(to) = self.node(&best.id).filter(|_| candidates.contains(&best.id.as_str())) else {
            return events;
        };
        let remaining = ranked.iter().skip(1).map(|r| r.id.clone()).collect();
        events.push(Event::OrChosen {
            group: group.into(),
            chosen: best.id.clone(),
            remaining,
            reason: best.reason.clone(),
        });
        events.extend(self.contract_choice(g, to, bindings));
        events
    }

    /// Returns the events that solve `group` (and the OR atoms above it) when
    /// its new choice `to` is already solved.
    fn contract_choice(&self, group: NodeIndex, to: NodeIndex, bindings: &IndexMap<AtomId, Binding>) -> Vec<Event> {
        match bindings.get(self.id(to)) {
            Some(binding) if self.solved(to) => self.solve_chain(group, binding, Some((group, to))),
            _ => Vec::new(),
        }
    }

    /// Plans a choice forced by the user: `alt` is chosen at `group`, switching
    /// from the current alternative (resetting what it owned exclusively) if
    /// there is one. `None` when `alt` is not one of `group`'s alternatives.
    pub fn force_choice(&self, group: &str, alt: &str, bindings: &IndexMap<AtomId, Binding>) -> Option<Vec<Event>> {
        let (g, to) = (self.node(group)?, self.node(alt)?);
        if !self.alternatives_of(g).contains(&to) {
            return None;
        }
        let mut events = match self.chosen[g.index()] {
            Some(from) if from == to => return Some(Vec::new()),
            Some(from) => {
                let mut events = vec![Event::Backtracked {
                    group: group.into(),
                    from: self.id(from).into(),
                    to: alt.into(),
                    reset: self.switch_plan(g, from, to, &HashSet::new()).reset,
                }];
                // What was built on the old choice is stale: the group's own
                // binding (it was solved through `from`) and the work above
                // it. It waits for the new alternative again.
                let stale: Vec<NodeIndex> = self
                    .above(g)
                    .into_iter()
                    .filter(|&u| {
                        if u == g {
                            self.status[u.index()] != AtomStatus::Pending
                        } else {
                            self.sel[u.index()] > 0
                                && (self.status[u.index()] != AtomStatus::Pending || self.attempts[u.index()] > 0)
                        }
                    })
                    .collect();
                if !stale.is_empty() {
                    events.push(Event::AtomsReset {
                        atoms: stale.iter().map(|&v| AtomId::from(self.id(v))).collect(),
                    });
                    for &v in &stale {
                        let kept = if v == g { Some(to) } else { self.chosen[v.index()] };
                        if let Some(c) = kept.filter(|_| self.is_or[v.index()]) {
                            events.push(Event::OrChosen {
                                group: self.id(v).into(),
                                chosen: self.id(c).into(),
                                remaining: Vec::new(),
                                reason: format!("kept: `{alt}` now chosen at `{group}`"),
                            });
                        }
                    }
                }
                events
            }
            None => vec![Event::OrChosen {
                group: group.into(),
                chosen: alt.into(),
                remaining: Vec::new(),
                reason: "chosen by the user".to_string(),
            }],
        };
        events.extend(self.contract_choice(g, to, bindings));
        Some(events)
    }

    /// `start` and every atom above it: its dependents, directly or not, and
    /// the OR atoms that chose it (or chose an atom above it), nearest first.
    fn above(&self, start: NodeIndex) -> Vec<NodeIndex> {
        let mut seen = HashSet::from([start]);
        let mut stack = vec![start];
        let mut out = vec![start];
        while let Some(v) = stack.pop() {
            let mut parents: Vec<NodeIndex> = self.dependents(v).collect();
            if let Some(g) = self.owner[v.index()].filter(|g| self.chosen[g.index()] == Some(v)) {
                parents.push(g);
            }
            for p in parents {
                if seen.insert(p) {
                    out.push(p);
                    stack.push(p);
                }
            }
        }
        out
    }

    /// Plans putting atoms back to pending as a user asks it: each goes back
    /// with no attempts and no binding, and an OR atom among them keeps its
    /// choice (re-chosen, said to be the user's).
    fn user_reset(&self, nodes: &[NodeIndex], why: &str) -> Vec<Event> {
        if nodes.is_empty() {
            return Vec::new();
        }
        let mut events = vec![Event::AtomsReset {
            atoms: nodes.iter().map(|&v| AtomId::from(self.id(v))).collect(),
        }];
        for &v in nodes {
            if let Some(c) = self.chosen[v.index()].filter(|_| self.is_or[v.index()]) {
                events.push(Event::OrChosen {
                    group: self.id(v).into(),
                    chosen: self.id(c).into(),
                    remaining: Vec::new(),
                    reason: why.to_string(),
                });
            }
        }
        events
    }

    /// Plans re-running `atom` (`aot redirect --reset`): it and every atom
    /// above it on a selected branch that holds work or is closed (solved,
    /// failed, blocked, pruned, running or attempted) go back to pending —
    /// their bindings dropped, OR atoms keeping their choice. An alternative
    /// that was given up (not chosen) stays as it is. For an OR atom, its
    /// chosen alternative is re-run. `None` when there is no such atom.
    pub fn rerun(&self, atom: &str) -> Option<Vec<Event>> {
        let v = self.node(atom)?;
        let start = self.chosen[v.index()].filter(|_| self.is_or[v.index()]).unwrap_or(v);
        let touched: Vec<NodeIndex> = self
            .above(start)
            .into_iter()
            .filter(|&u| {
                u == start
                    || (self.sel[u.index()] > 0
                        && (self.status[u.index()] != AtomStatus::Pending || self.attempts[u.index()] > 0))
            })
            .collect();
        Some(self.user_reset(&touched, &format!("kept: `{atom}` re-run by the user")))
    }

    /// Plans reopening what a user's choice at `group` must revive: `group`
    /// and the atoms above it that failed or were blocked, and (given `alt`)
    /// the atoms of `alt`'s plan that are closed. `group` goes back to
    /// waiting for a choice: apply the choice after these events.
    pub fn reopen_for_choice(&self, group: &str, alt: Option<&str>) -> Vec<Event> {
        let Some(g) = self.node(group) else {
            return Vec::new();
        };
        let closed = |v: &NodeIndex| {
            matches!(
                self.status[v.index()],
                AtomStatus::Failed | AtomStatus::Blocked | AtomStatus::Pruned
            )
        };
        let mut nodes: Vec<NodeIndex> = self.above(g).into_iter().filter(closed).collect();
        for id in alt.map(|alt| self.plan(alt)).unwrap_or_default() {
            if let Some(v) = self.node(id).filter(|v| closed(v) && !nodes.contains(v)) {
                nodes.push(v);
            }
        }
        // The group's own choice is the user's to make next: not re-chosen here.
        let mut events = self.user_reset(&nodes, &format!("kept above `{group}`, which the user chose again"));
        events.retain(|e| !matches!(e, Event::OrChosen { group: grp, .. } if grp == group));
        events
    }

    /// Returns the atoms that depend on `atom`, directly or not, and hold work
    /// (solved, running or attempted): what a new binding of `atom` invalidates.
    pub fn dependents_with_work(&self, atom: &str) -> Vec<AtomId> {
        let Some(start) = self.node(atom) else {
            return Vec::new();
        };
        let mut seen = HashSet::from([start]);
        let mut stack = vec![start];
        let mut out = Vec::new();
        while let Some(v) = stack.pop() {
            let mut parents: Vec<NodeIndex> = self.dependents(v).collect();
            if let Some(g) = self.owner[v.index()].filter(|g| self.chosen[g.index()] == Some(v)) {
                parents.push(g);
            }
            for p in parents {
                if seen.insert(p) {
                    let i = p.index();
                    if self.status[i] != AtomStatus::Pending || self.attempts[i] > 0 {
                        out.push(p);
                    }
                    stack.push(p);
                }
            }
        }
        out.sort();
        out.into_iter().map(|v| AtomId::from(self.id(v))).collect()
    }

    /// Plans the contraction of a solved atom: its binding, and the same binding
    /// for every still-open OR atom that it solves by being the chosen alternative.
    pub fn solve(&self, atom: &str, binding: Binding) -> Vec<Event> {
        match self.node(atom) {
            Some(v) => self.solve_chain(v, &binding, None),
            None => Vec::new(),
        }
    }

    /// Solves `start` and walks up through OR atoms that chose it; `pending_choice`
    /// is a choice planned but not yet applied.
    fn solve_chain(
        &self,
        start: NodeIndex,
        binding: &Binding,
        pending_choice: Option<(NodeIndex, NodeIndex)>,
    ) -> Vec<Event> {
        let chosen = |g: NodeIndex| match pending_choice {
            Some((pg, to)) if pg == g => Some(to),
            _ => self.chosen[g.index()],
        };
        let mut events = Vec::new();
        let mut current = Some(start);
        while let Some(v) = current {
            events.push(Event::AtomSolved {
                atom: self.id(v).into(),
                binding: binding.clone(),
            });
            // An OR atom already closed (pruned or failed on an abandoned branch)
            // is not reopened by an alternative that another branch still needed.
            current = self.owner[v.index()]
                .filter(|&g| chosen(g) == Some(v) && self.status[g.index()] == AtomStatus::Pending);
        }
        events
    }

    /// Plans what follows the definitive failure of `atom` (already applied as
    /// `atom_failed`). Goes up the selected branches, nearest first, to an OR
    /// atom whose chosen alternative leads to the failure and that has an
    /// untried, unblocked alternative the hook accepts, *and* whose switch takes
    /// the failed atom off the selected branches (an atom that another branch
    /// still needs cannot be escaped by switching here). The switch resets only
    /// what the abandoned alternative owned exclusively. OR atoms passed on the
    /// way with nothing left fail too.
    pub fn recover(
        &self,
        atom: &str,
        class: FailureClass,
        order: &dyn ChoiceOrder,
        bindings: &IndexMap<AtomId, Binding>,
    ) -> Recovery {
        let mut events = Vec::new();
        let mut tried_report = Vec::new();
        let Some(start) = self.node(atom) else {
            return Recovery::Exhausted {
                atom: atom.into(),
                tried: tried_report,
                events,
            };
        };
        let mut failing = HashSet::new();
        let mut seen = HashSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            // Parents through which v is selected: selected dependents, and the
            // owning OR atom if v is its chosen alternative.
            let mut parents: Vec<NodeIndex> = self.dependents(v).filter(|p| self.sel[p.index()] > 0).collect();
            parents.sort();
            if let Some(g) = self.owner[v.index()].filter(|g| self.chosen[g.index()] == Some(v)) {
                let group = self.id(g);
                let candidates = self.untried(group);
                let ranking = order.rank(self, group, &candidates);
                events.extend(ranking.event());
                let ranked: Vec<Ranked> = ranking
                    .ranked
                    .into_iter()
                    .filter(|r| candidates.contains(&r.id.as_str()))
                    .collect();
                for best in &ranked {
                    let Some(to) = self.node(&best.id) else { continue };
                    let plan = self.switch_plan(g, v, to, &failing);
                    if plan.dropped.contains(&start) {
                        events.push(Event::Backtracked {
                            group: group.into(),
                            from: self.id(v).into(),
                            to: best.id.clone(),
                            reset: plan.reset,
                        });
                        events.extend(self.contract_choice(g, to, bindings));
                        return Recovery::Backtrack { events };
                    }
                }
                if ranked.is_empty() {
                    let tried: Vec<&str> = self
                        .alternatives_of(g)
                        .into_iter()
                        .filter(|a| self.tried.contains(&(g, *a)))
                        .map(|a| self.id(a))
                        .collect();
                    let refused: Vec<String> = candidates
                        .iter()
                        .map(|c| match order.refusal(self, c) {
                            Some(why) => format!("{c} ({why})"),
                            None => c.to_string(),
                        })
                        .collect();
                    let message = if refused.is_empty() {
                        tried_report.push(format!("{group}: {}", tried.join(", ")));
                        format!("every alternative failed ({})", tried.join(", "))
                    } else {
                        tried_report.push(format!(
                            "{group}: tried {}; refused {}",
                            tried.join(", "),
                            refused.join(", ")
                        ));
                        format!(
                            "no alternative left that may run (tried {}; refused {})",
                            tried.join(", "),
                            refused.join(", ")
                        )
                    };
                    if is_open(self.status[g.index()]) {
                        failing.insert(g);
                        events.push(Event::AtomFailed {
                            atom: group.into(),
                            class,
                            criterion: crate::model::Criterion::Or,
                            message,
                            ended: Default::default(),
                        });
                    }
                }
                parents.insert(0, g);
            }
            for p in parents {
                if seen.insert(p) {
                    queue.push_back(p);
                }
            }
        }
        Recovery::Exhausted {
            atom: atom.into(),
            tried: tried_report,
            events,
        }
    }

    /// Simulates switching `group` from `from` to `to` on a sparse delta of the
    /// selection counts (cost: the atoms touched, not the graph size). Returns the
    /// atoms left unselected, and among them those holding work to discard
    /// (solved, running, attempted, or an OR choice), `from` and the OR atoms
    /// `failing` in this recovery excluded. Failed and blocked atoms keep their
    /// status: what failed is not tried again.
    fn switch_plan(
        &self,
        group: NodeIndex,
        from: NodeIndex,
        to: NodeIndex,
        failing: &HashSet<NodeIndex>,
    ) -> SwitchPlan {
        let mut delta: HashMap<NodeIndex, i64> = HashMap::new();
        let count = |delta: &HashMap<NodeIndex, i64>, v: NodeIndex| {
            self.sel[v.index()] as i64 + delta.get(&v).copied().unwrap_or(0)
        };
        let chosen = |v: NodeIndex| if v == group { Some(to) } else { self.chosen[v.index()] };
        if self.sel[group.index()] == 0 {
            return SwitchPlan::default();
        }
        // Select the new branch first, so atoms both branches need stay selected.
        let mut stack = vec![to];
        while let Some(v) = stack.pop() {
            *delta.entry(v).or_insert(0) += 1;
            if count(&delta, v) == 1 {
                stack.extend(self.deps(v));
                stack.extend(chosen(v));
            }
        }
        let mut dropped = Vec::new();
        let mut stack = vec![from];
        while let Some(v) = stack.pop() {
            *delta.entry(v).or_insert(0) -= 1;
            if count(&delta, v) == 0 {
                dropped.push(v);
                stack.extend(self.deps(v));
                stack.extend(self.chosen[v.index()]);
            }
        }
        dropped.sort();
        let reset = dropped
            .iter()
            .copied()
            .filter(|&v| v != from && !failing.contains(&v))
            .filter(|&v| {
                let i = v.index();
                matches!(self.status[i], AtomStatus::Solved | AtomStatus::Running)
                    || (self.status[i] == AtomStatus::Pending && (self.attempts[i] > 0 || self.chosen[i].is_some()))
            })
            .map(|v| AtomId::from(self.id(v)))
            .collect();
        SwitchPlan {
            dropped: dropped.into_iter().collect(),
            reset,
        }
    }

    /// Returns the termination measure (see [`Variant`]).
    pub fn variant(&self) -> Variant {
        let untried = self.alternatives_total - self.tried.len() as u64;
        let mut work = 0u64;
        for i in 0..self.status.len() {
            if is_open(self.status[i]) {
                work += 1;
                if !self.is_or[i] {
                    work += 2 * u64::from(self.max_attempts.saturating_sub(self.attempts[i]));
                }
            }
            if self.status[i] == AtomStatus::Running {
                work += 1;
            }
        }
        Variant { untried, work }
    }

    fn max_work(&self) -> u64 {
        self.status.len() as u64 * (2 + 2 * u64::from(self.max_attempts))
    }

    /// Returns an upper bound on the number of transitions any run can make:
    /// `(alternatives + 1) × (largest work + 1)`.
    pub fn transition_bound(&self) -> u64 {
        (self.alternatives_total + 1) * (self.max_work() + 1)
    }

    /// Returns an upper bound on the transitions left from here: the current
    /// work, plus a full refill of work after each remaining choice.
    pub fn remaining_bound(&self) -> u64 {
        let v = self.variant();
        v.work + v.untried * (self.max_work() + 1)
    }
}

impl Fold for WorkGraph {
    /// Takes in one effect, touching only the atoms it names; a replaced
    /// document (snapshot, user edit) rebuilds the graph from the state after it.
    fn effect(&mut self, effect: &Effect<'_>, after: &StateFile) {
        let node = |graph: &Self, id: &AtomId| graph.node(id.as_str());
        match effect {
            Effect::Replace(_) | Effect::Redefine { .. } => *self = WorkGraph::new(after),
            Effect::Status(id, status) => {
                if let Some(v) = node(self, id) {
                    self.set_status(v, *status);
                }
            }
            Effect::Attempts(id, n) => {
                if let Some(v) = node(self, id) {
                    self.attempts[v.index()] = *n;
                }
            }
            Effect::AttemptUndone(id) => {
                if let Some(v) = node(self, id) {
                    self.attempts[v.index()] = self.attempts[v.index()].saturating_sub(1);
                }
            }
            Effect::Interrupted(id) => {
                if let Some(v) = node(self, id)
                    && self.status[v.index()] == AtomStatus::Running
                {
                    self.set_status(v, AtomStatus::Pending);
                }
            }
            Effect::Reset(id) => {
                if let Some(v) = node(self, id) {
                    self.reset(v);
                }
            }
            Effect::Refill(id) => {
                if let Some(v) = node(self, id) {
                    self.refill(v);
                }
            }
            Effect::PruneUnlessClosed(id) => {
                if let Some(v) = node(self, id)
                    && !matches!(self.status[v.index()], AtomStatus::Failed | AtomStatus::Blocked)
                {
                    self.set_status(v, AtomStatus::Pruned);
                }
            }
            Effect::Chosen(group, alt) => {
                if let (Some(g), Some(a)) = (node(self, group), node(self, alt)) {
                    self.set_chosen(g, Some(a));
                }
            }
            Effect::NewTask => {
                // The trail was the record of what was tried; what remains is the present choices.
                self.tried = self
                    .nodes()
                    .filter_map(|g| self.chosen[g.index()].map(|c| (g, c)))
                    .collect();
                self.inherited = self.tried.clone();
            }
            Effect::Bind(..)
            | Effect::Allow(_)
            | Effect::Failed { .. }
            | Effect::Trail(_)
            | Effect::Correction(_)
            | Effect::Control(_)
            | Effect::RunStarted
            | Effect::Iteration(_)
            | Effect::Spent { .. }
            | Effect::Worked { .. }
            | Effect::Decided(_)
            | Effect::Verified(_)
            | Effect::Paused
            | Effect::Stopped(_) => {}
        }
    }
}
