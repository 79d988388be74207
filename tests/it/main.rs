//! Integration tests: one binary, one module per area (as jj does).

mod common;
mod roundtrip;
mod schema;
mod validate;
