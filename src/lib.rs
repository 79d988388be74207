//! aot drives a piece of work to a verifiable end and can prove it will stop.
//!
//! This library holds the engine: the state file's types ([`state`]), its text
//! form and validation ([`document`], [`validate`]), the event journal
//! ([`event`], [`journal`]) and the store that keeps the two in step
//! ([`store`]). It never prints; the `aot` binary is a thin layer over it.

#![warn(missing_docs)]

pub mod contract;
pub mod correct;
pub mod diag;
pub mod directive;
pub mod document;
pub mod engine;
pub mod event;
pub mod export;
pub mod ggs;
pub mod graph;
pub mod journal;
pub mod memory;
pub mod schema;
pub mod spans;
pub mod state;
pub mod status;
pub mod store;
pub mod time;
pub mod validate;
pub mod watch;
pub mod worker;
