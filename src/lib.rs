//! aot drives a piece of work to a verifiable end and can prove it will stop.
//!
//! The library is the engine; it never prints. Its folders are its layers,
//! each depending only on those above it in this list:
//!
//! - [`model`]: leaf types (atom ids, criteria, failure classes, time), atomic file replacement.
//! - [`memory`]: MKCT memory — Megrams, potentials, the Dreamer, the file.
//! - [`ggs`]: the Goal Gradient Solver — loss, decision table, final result.
//! - [`state`]: the state file — types, text, validation, schema, templates.
//! - [`journal`]: domain events, their wire records, the one fold, the file and its compaction.
//! - [`law`]: Law 1 — which shell commands destroy what cannot be put back.
//! - [`llm`]: the LLM roles' transport — chat client, tiers, cleaning of answers, the record a call leaves.
//! - [`graph`]: the AND/OR work graph — readiness, choice, recovery, variant.
//! - [`steer`]: the choice order under GGS's blocked sets and memory.
//! - [`correct`]: user corrections — redirects and the hand-edit classifier.
//! - [`store`]: the state file and its journal as one durable unit.
//! - [`engine`]: the loop, and the role traits it drives (worker, validator, planner).
//! - [`planner`]: the planners — pre-written OR alternatives under GGS directives, and a model's replans.
//! - [`workers`]: the workers and validators — commands, agent CLIs (templates), and models with tools.
//! - [`audit`]: the auditor — what a journal shows of convergence, thrashing, broken rules and damage.
//! - [`report`]: the HTML report — graph, timeline, loss curve, memory, spend, stop, audit.
//!
//! The `aot` binary (`src/cli/`) wires the implementations and does all I/O
//! with the user.
//!
//! Where things happen: an atom is dispatched in `engine/round.rs` (`start`,
//! then the [`engine::roles::Worker`]) and its criteria judged there through
//! the [`engine::roles::Validator`]; a GGS decision is made in
//! `engine/replan.rs` and applied by the [`engine::roles::Planner`]; a hand
//! edit is classified by [`correct::from_edit`]; a Megram is written in
//! `engine/recall.rs`. `docs/architecture.md` has the full table.

#![warn(missing_docs)]

pub mod audit;
pub mod correct;
pub mod engine;
pub mod ggs;
pub mod graph;
pub mod journal;
pub mod law;
pub mod llm;
pub mod memory;
pub mod model;
pub mod planner;
pub mod report;
pub mod state;
pub mod steer;
pub mod store;
pub mod workers;
pub mod workspace;
