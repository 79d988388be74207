//! `aot status`: the graph, frontier, bindings, trail and last stop.

use aot::state::document;
use aot::{journal, store};

use super::ui::status;

use super::{CliError, Context, EXIT_OK, warn};

/// Arguments of `aot status`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(ctx: &Context, _args: Args) -> Result<i32, CliError> {
    let doc = document::read(&ctx.state)?;
    let state = &doc.state;
    let paths = store::Paths::new(&ctx.state);
    let journal = journal::read(&paths.journal).ok();
    let unsaved = journal
        .as_ref()
        .map_or(0, |j| j.last_seq().saturating_sub(state.run.revision));
    let runner = store::running_pid(&paths);
    if ctx.json {
        let mut value =
            serde_json::to_value(status::report(&ctx.label(), state)).map_err(|e| CliError::new(e.to_string()))?;
        if let Some(map) = value.as_object_mut() {
            map.insert("runner_pid".into(), runner.into());
            map.insert("journal_ahead".into(), unsaved.into());
        }
        outln!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| CliError::new(e.to_string()))?
        );
        return Ok(EXIT_OK);
    }
    out!("{}", status::render(&ctx.label(), state));
    if let Some(pid) = runner {
        outln!("\nrunner     pid {pid}");
    }
    if unsaved > 0 && runner.is_none() {
        warn(&format!(
            "the journal has {unsaved} event(s) not yet in {} (a run was interrupted); `aot replay` applies them",
            ctx.label()
        ));
    }
    Ok(EXIT_OK)
}
