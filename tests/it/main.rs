//! Integration tests: one binary, one module per area (as jj does).

mod align;
mod child;
mod cli;
mod common;
mod crash;
mod engine;
mod fake_llm;
mod fold;
mod ggs;
mod graph;
mod graph_props;
mod hostile;
mod isolation;
mod journal;
mod llm;
mod memory;
mod moves;
mod polish;
mod replan;
mod roundtrip;
mod run;
mod schema;
mod status;
mod steer;
mod store;
mod validate;
