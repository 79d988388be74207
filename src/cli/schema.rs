//! `aot schema`: print the state file's JSON Schema.

use super::{CliError, Context, EXIT_OK};

/// Arguments of `aot schema`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_ctx: &Context, _args: Args) -> Result<i32, CliError> {
    out!("{}", aot::state::schema::state_schema_text());
    Ok(EXIT_OK)
}
