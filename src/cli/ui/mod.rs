//! What the user sees: the live printer of a run, the decision-log lines of
//! the journal, and the status report.

pub mod status;
