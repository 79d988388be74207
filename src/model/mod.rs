//! The leaf types every layer speaks: atom ids, criteria, failure classes, stop
//! reasons, bindings, and time; and the atomic replacement of a file. Nothing
//! here depends on another module.

pub mod changes;
mod criterion;
pub mod file;
mod id;
pub mod process;
pub mod secret;
pub mod text;
pub mod time;

pub use changes::{ChangeKind, Changes};
pub use criterion::Criterion;
pub use id::AtomId;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use self::time::Timestamp;

/// Logical (the approach is wrong) or environmental (the world got in the way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Ran and produced a wrong result.
    Logical,
    /// Could not run properly: missing program, timeout, killed, EX_TEMPFAIL.
    Environmental,
}

/// How a failed attempt ended, beyond its message: what a correction tells
/// the next attempt besides the evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// The failing command's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// What the worker said it did (its `summary:` line), when it said anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// With isolation: what the attempt had changed, discarded with it (a
    /// short diff stat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discarded: Option<String>,
}

/// Why a run stopped. Each reason has its own exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The base case holds.
    Completed,
    /// `aot stop` (or Ctrl-C).
    Manual,
    /// GGS gave up: budget spent or loss diverging.
    Abandoned,
    /// No alternative left to try.
    Exhausted,
    /// Not aligned, or no graph.
    Gate,
    /// Only blocked atoms remain: the user must fix the environment.
    Blocked,
    /// `max_iterations` reached.
    IterationLimit,
}

impl StopReason {
    /// Returns the process exit code documented for this reason.
    pub fn exit_code(self) -> i32 {
        match self {
            StopReason::Completed => 0,
            StopReason::Manual => 3,
            StopReason::Abandoned => 4,
            StopReason::Exhausted => 5,
            StopReason::Gate => 6,
            StopReason::Blocked => 7,
            StopReason::IterationLimit => 8,
        }
    }

    /// Returns the reason's name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Manual => "manual",
            StopReason::Abandoned => "abandoned",
            StopReason::Exhausted => "exhausted",
            StopReason::Gate => "gate",
            StopReason::Blocked => "blocked",
            StopReason::IterationLimit => "iteration_limit",
        }
    }
}

/// A solved atom's result, standing in for the atom from now on (contraction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// One-line result summary, available to dependents as `{{bindings.ID.summary}}`.
    pub summary: String,
    /// The end of the worker's output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
    /// Files or other artifacts produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// When the atom was solved.
    pub at: Timestamp,
    /// Which attempt solved it (1 = first).
    pub attempt: u32,
    /// What its work changed in the work tree, when attempts are isolated
    /// (a backtrack undoes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
}
