//! A calibration: what memory said about each alternative of an OR atom before
//! a choice (potentials and action), the order that followed, and the MUST NOT
//! and SHOULD PREFER constraints it gave. Journaled as `calibrated`.

use serde::{Deserialize, Serialize};

use super::Action;
use crate::model::AtomId;

/// One alternative as memory sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    /// The alternative.
    pub alt: AtomId,
    /// Its tool (the Megrams' space).
    pub space: String,
    /// Its target (the Megrams' entity).
    pub entity: String,
    /// Attention potential.
    pub m_att: f64,
    /// Decision potential.
    pub m_dec: f64,
    /// What memory advises.
    pub action: Action,
    /// For Caution: whether the user (or `--yes`) let it proceed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
}

/// A calibration before an OR choice: the potentials and the constraints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The OR atom.
    pub group: AtomId,
    /// Each alternative the blocked sets allow, in file order.
    pub alternatives: Vec<Recalled>,
    /// The resulting order, best first.
    pub order: Vec<AtomId>,
    /// MUST NOT: memory's Avoid pairs, blocked tools, blocked targets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub must_not: Vec<String>,
    /// SHOULD PREFER: memory's Exploit pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub should_prefer: Vec<String>,
}
