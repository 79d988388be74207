//! The state file as written: the user's part (`version`, `objective`,
//! `workers`, `graph` with atom definitions only) and, at the end, the
//! engine's part under `status:` (each atom's progress, control requests,
//! corrections, bindings, trail and run record) — the spec/status split of a
//! Kubernetes object in one file. Version 1 kept the engine's record at the
//! top level and inside each atom; it is read and migrated.

use indexmap::IndexMap;

use crate::state::LlmSettings;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    Atom, AtomId, AtomStatus, Binding, Control, Correction, FORMAT_VERSION, Graph, Objective, RunState, StateFile,
    TrailEntry, Workers,
};

/// A state file as text holds it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    rename = "StateFile",
    title = "aot state file",
    description = "One piece of work driven by aot: the objective and the AND/OR graph of atoms you write, then the engine's record under `status`"
)]
pub struct StateFileOnDisk {
    /// Format version: 2 (a version-1 file is read and migrated).
    pub version: u32,
    /// What must hold at the end, and why.
    pub objective: Objective,
    /// Workers that run `agent` atoms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Workers>,
    /// Models and prices for the LLM roles (never keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSettings>,
    /// The AND/OR work graph: atom definitions.
    pub graph: Graph,
    /// The engine's record (engine-owned; aot rewrites this section, and only
    /// this section, of the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EngineSection>,
    /// Version 1 only: requests to a running loop (now `status.control`).
    #[serde(default, skip_serializing)]
    pub control: Option<Control>,
    /// Version 1 only: corrections (now `status.corrections`).
    #[serde(default, skip_serializing)]
    pub corrections: Option<Vec<Correction>>,
    /// Version 1 only: bindings (now `status.bindings`).
    #[serde(default, skip_serializing)]
    pub bindings: Option<IndexMap<AtomId, Binding>>,
    /// Version 1 only: the trail (now `status.trail`).
    #[serde(default, skip_serializing)]
    pub trail: Option<Vec<TrailEntry>>,
    /// Version 1 only: the run record (now `status.run`).
    #[serde(default, skip_serializing)]
    pub run: Option<RunState>,
}

/// The engine-owned section of a state file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Requests to a running loop (`aot stop`, `aot redirect` write these;
    /// `stop_requested: true` written here by hand stops a running loop too).
    #[serde(default)]
    pub control: Control,
    /// Each atom's progress, for atoms that made any.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub atoms: IndexMap<AtomId, Progress>,
    /// Result summaries of solved atoms, by atom id.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub bindings: IndexMap<AtomId, Binding>,
    /// OR choices, backtracks, failures and user corrections, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trail: Vec<TrailEntry>,
    /// Every redirect or accepted hand edit, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<Correction>,
    /// The run record.
    #[serde(default)]
    pub run: RunState,
}

/// An atom's progress (engine-owned).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    /// Lifecycle state.
    #[serde(default, skip_serializing_if = "is_pending")]
    pub status: AtomStatus,
    /// Attempts made so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// For `or` atoms: the alternative currently selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<AtomId>,
}

fn is_pending(status: &AtomStatus) -> bool {
    *status == AtomStatus::Pending
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Progress {
    fn of(atom: &Atom) -> Self {
        Progress {
            status: atom.status,
            attempts: atom.attempts,
            chosen: atom.chosen.clone(),
        }
    }
}

impl From<StateFileOnDisk> for StateFile {
    fn from(disk: StateFileOnDisk) -> StateFile {
        // Version 1 is migrated as it is read; any other number is kept for
        // validation to report.
        let version = if disk.version == 1 {
            FORMAT_VERSION
        } else {
            disk.version
        };
        let section = disk.status;
        let mut atoms = disk.graph.atoms;
        if let Some(section) = &section {
            for (id, atom) in &mut atoms {
                if let Some(progress) = section.atoms.get(id) {
                    atom.status = progress.status;
                    atom.attempts = progress.attempts;
                    atom.chosen = progress.chosen.clone();
                }
            }
        }
        let section = section.unwrap_or_default();
        StateFile {
            version,
            objective: disk.objective,
            control: disk.control.unwrap_or(section.control),
            workers: disk.workers,
            llm: disk.llm,
            corrections: disk.corrections.unwrap_or(section.corrections),
            graph: Graph { atoms },
            bindings: disk.bindings.unwrap_or(section.bindings),
            trail: disk.trail.unwrap_or(section.trail),
            run: disk.run.unwrap_or(section.run),
        }
    }
}

impl From<StateFile> for StateFileOnDisk {
    fn from(state: StateFile) -> StateFileOnDisk {
        let (user, section) = split(state);
        StateFileOnDisk {
            version: user.version,
            objective: user.objective,
            workers: user.workers,
            llm: user.llm,
            graph: user.graph,
            status: Some(section.status),
            control: None,
            corrections: None,
            bindings: None,
            trail: None,
            run: None,
        }
    }
}

/// The user's part of a state file, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserPart {
    /// Format version.
    pub version: u32,
    /// The objective.
    pub objective: Objective,
    /// Workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Workers>,
    /// Models and prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSettings>,
    /// Atom definitions.
    pub graph: Graph,
}

/// The engine's part of a state file, as written: one `status:` key.
#[derive(Debug, Clone, Serialize)]
pub struct EnginePart {
    /// The section.
    pub status: EngineSection,
}

impl UserPart {
    /// Returns whether this user part says what `state`'s says (without
    /// copying the state: this runs on every save).
    pub fn says_same_as(&self, state: &StateFile) -> bool {
        self.version == state.version
            && self.objective == state.objective
            && self.workers == state.workers
            && self.llm == state.llm
            && same_atoms(&self.graph.atoms, &state.graph.atoms)
    }
}

/// Whether two states' user parts say the same (without copying either).
pub fn same_user_part(a: &StateFile, b: &StateFile) -> bool {
    a.version == b.version
        && a.objective == b.objective
        && a.workers == b.workers
        && a.llm == b.llm
        && same_atoms(&a.graph.atoms, &b.graph.atoms)
}

/// Whether two atom maps hold the same definitions, in the same order.
pub fn same_atoms(a: &IndexMap<AtomId, Atom>, b: &IndexMap<AtomId, Atom>) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((i, x), (j, y))| i == j && x.same_definition(y))
}

impl UserPart {
    /// Returns `state` saying what this user part says: its objective,
    /// workers, models and atom definitions, each atom keeping the progress
    /// `state` has for it (a new atom is pending).
    pub fn applied_to(&self, state: &StateFile) -> StateFile {
        let mut out = state.clone();
        out.version = self.version;
        out.objective = self.objective.clone();
        out.workers = self.workers.clone();
        out.llm = self.llm.clone();
        out.graph.atoms = self
            .graph
            .atoms
            .iter()
            .map(|(id, definition)| {
                let mut atom = definition.definition();
                if let Some(progress) = state.graph.atoms.get(id) {
                    atom.status = progress.status;
                    atom.attempts = progress.attempts;
                    atom.chosen = progress.chosen.clone();
                }
                (id.clone(), atom)
            })
            .collect();
        out
    }

    /// The three-way merge of two edits of `base`: `ours` (the engine's: a
    /// redirect) and `theirs` (the user's hand edit, from an older buffer).
    /// What only one side changed is taken from it; where both changed the
    /// same value differently the user's edit wins. `None` when the merge
    /// does not read as a user part.
    pub fn merged(base: &UserPart, ours: &UserPart, theirs: &UserPart) -> Option<UserPart> {
        let value = |part: &UserPart| serde_json::to_value(part).ok();
        let merged = merge3(&value(base)?, &value(ours)?, &value(theirs)?);
        serde_json::from_value(merged).ok()
    }
}

/// Merges JSON values key by key: `theirs` in its order, then what only
/// `ours` added.
fn merge3(base: &serde_json::Value, ours: &serde_json::Value, theirs: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    if theirs == base {
        return ours.clone();
    }
    if ours == base || ours == theirs {
        return theirs.clone();
    }
    let (Value::Object(b), Value::Object(o), Value::Object(t)) = (base, ours, theirs) else {
        return theirs.clone();
    };
    let mut out = serde_json::Map::new();
    for (key, their) in t {
        match (b.get(key), o.get(key)) {
            (Some(was), Some(our)) => {
                out.insert(key.clone(), merge3(was, our, their));
            }
            // We removed it; they left it alone: removed.
            (Some(was), None) if was == their => {}
            _ => {
                out.insert(key.clone(), their.clone());
            }
        }
    }
    for (key, our) in o.iter().filter(|(k, _)| !t.contains_key(*k)) {
        // Added by us: kept. Removed by them: removed, whatever we did to it.
        if !b.contains_key(key) {
            out.insert(key.clone(), our.clone());
        }
    }
    Value::Object(out)
}

/// The engine's part of a state, borrowed for writing.
#[derive(Serialize)]
pub struct EnginePartOf<'a> {
    status: EngineSectionOf<'a>,
}

#[derive(Serialize)]
struct EngineSectionOf<'a> {
    control: &'a Control,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    atoms: IndexMap<&'a AtomId, Progress>,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    bindings: &'a IndexMap<AtomId, Binding>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    trail: &'a Vec<TrailEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    corrections: &'a Vec<Correction>,
    run: &'a RunState,
}

/// The engine's part of `state`, to write without copying the state.
pub fn engine_part(state: &StateFile) -> EnginePartOf<'_> {
    EnginePartOf {
        status: EngineSectionOf {
            control: &state.control,
            atoms: state
                .graph
                .atoms
                .iter()
                .map(|(id, atom)| (id, Progress::of(atom)))
                .filter(|(_, p)| *p != Progress::default())
                .collect(),
            bindings: &state.bindings,
            trail: &state.trail,
            corrections: &state.corrections,
            run: &state.run,
        },
    }
}

/// Splits a state into what its user owns and what the engine owns.
pub fn split(state: StateFile) -> (UserPart, EnginePart) {
    let progress: IndexMap<AtomId, Progress> = state
        .graph
        .atoms
        .iter()
        .map(|(id, atom)| (id.clone(), Progress::of(atom)))
        .filter(|(_, p)| *p != Progress::default())
        .collect();
    let atoms = state
        .graph
        .atoms
        .into_iter()
        .map(|(id, atom)| (id, atom.definition()))
        .collect();
    (
        UserPart {
            version: state.version,
            objective: state.objective,
            workers: state.workers,
            llm: state.llm,
            graph: Graph { atoms },
        },
        EnginePart {
            status: EngineSection {
                control: state.control,
                atoms: progress,
                bindings: state.bindings,
                trail: state.trail,
                corrections: state.corrections,
                run: state.run,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(goal: &str, atoms: &[(&str, &str)]) -> UserPart {
        let mut state = StateFile::new(
            Objective {
                goal: Some(goal.into()),
                ..Objective::default()
            },
            atoms
                .iter()
                .map(|(id, run)| ((*id).into(), Atom::command(*run)))
                .collect(),
        );
        state.version = crate::state::FORMAT_VERSION;
        split(state).0
    }

    fn ids(part: &UserPart) -> Vec<&str> {
        part.graph.atoms.keys().map(|k| k.as_str()).collect()
    }

    #[test]
    fn a_merge_keeps_what_each_side_changed_alone() {
        let base = part("g", &[("a", "true")]);
        let ours = part("g", &[("a", "true"), ("extra", "echo")]);
        let theirs = part("mine", &[("a", "true")]);
        let merged = UserPart::merged(&base, &ours, &theirs).unwrap();
        assert_eq!(merged.objective.goal.as_deref(), Some("mine"));
        assert_eq!(ids(&merged), ["a", "extra"]);
    }

    #[test]
    fn where_both_changed_a_value_the_users_edit_wins() {
        let base = part("g", &[("a", "true")]);
        let ours = part("ours", &[("a", "false")]);
        let theirs = part("theirs", &[("a", "true")]);
        let merged = UserPart::merged(&base, &ours, &theirs).unwrap();
        assert_eq!(merged.objective.goal.as_deref(), Some("theirs"));
        assert_eq!(
            merged.graph.atoms["a"].run.as_deref(),
            Some("false"),
            "only ours changed a's run"
        );
    }

    #[test]
    fn a_removal_on_either_side_stays_removed() {
        let base = part("g", &[("a", "true"), ("b", "true")]);
        let ours = part("g", &[("a", "true")]);
        let theirs = part("mine", &[("a", "true"), ("b", "true")]);
        assert_eq!(ids(&UserPart::merged(&base, &ours, &theirs).unwrap()), ["a"]);
        let ours = part("g", &[("a", "true"), ("b", "changed")]);
        let theirs = part("g", &[("a", "true")]);
        assert_eq!(ids(&UserPart::merged(&base, &ours, &theirs).unwrap()), ["a"]);
    }

    #[test]
    fn the_users_order_comes_first_then_what_only_ours_added() {
        let base = part("g", &[("a", "true"), ("b", "true")]);
        let ours = part("g", &[("a", "true"), ("b", "true"), ("x", "true")]);
        let theirs = part("g", &[("b", "true"), ("a", "true"), ("y", "true")]);
        assert_eq!(
            ids(&UserPart::merged(&base, &ours, &theirs).unwrap()),
            ["b", "a", "y", "x"]
        );
    }

    #[test]
    fn applied_to_keeps_each_atoms_progress_and_starts_new_ones_pending() {
        let mut state = StateFile::new(
            Objective::default(),
            [("a".into(), Atom::command("true"))].into_iter().collect(),
        );
        state.graph.atoms["a"].status = AtomStatus::Solved;
        state.graph.atoms["a"].attempts = 2;
        let applied = part("g", &[("a", "true"), ("n", "true")]).applied_to(&state);
        assert_eq!(applied.graph.atoms["a"].status, AtomStatus::Solved);
        assert_eq!(applied.graph.atoms["a"].attempts, 2);
        assert_eq!(applied.graph.atoms["n"].status, AtomStatus::Pending);
        assert_eq!(applied.objective.goal.as_deref(), Some("g"));
    }
}
