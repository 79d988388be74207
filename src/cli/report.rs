//! `aot report`: one self-contained HTML page about the task (`report`),
//! written to a file or printed; `--watch` writes it again each time the
//! journal grows, and the page refreshes itself.

use std::path::PathBuf;

use aot::{report, store};

use super::{CliError, Context, EXIT_OK};

/// Atoms laid out as a graph picture; more are shown as a grid by status.
pub const LAYOUT_MAX: usize = 300;

/// Arguments of `aot report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write the page to FILE (default: print it)
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the page again each time the journal grows (needs -o; Ctrl-C ends); the page refreshes itself every 2 s
    #[arg(long, requires = "output")]
    watch: bool,
}

/// The page as of now.
fn page(ctx: &Context, refresh: Option<u32>) -> Result<String, CliError> {
    let paths = store::Paths::new(&ctx.state);
    let records = aot::journal::read(&paths.journal)?.records;
    // The journal's fold is the latest picture (the file is saved at most once a second).
    let state = match aot::journal::fold(&records) {
        Some(state) => state,
        None => aot::state::document::read(&ctx.state)?.state,
    };
    let (findings, _) = super::audit::findings(ctx).unwrap_or_default();
    let graph = if state.graph.atoms.len() <= LAYOUT_MAX {
        aot::graph::export::svg(&state)
    } else {
        Err(format!(
            "{} atoms are too many to lay out as a picture: each is a square below, in file order (`aot graph --format svg` draws them all)",
            state.graph.atoms.len()
        ))
    };
    Ok(report::html(&report::Input {
        file: &ctx.label(),
        state: &state,
        records: &records,
        findings: &findings,
        graph,
        refresh,
    }))
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let Some(output) = args.output else {
        out!("{}", page(ctx, None)?);
        return Ok(EXIT_OK);
    };
    let write = |html: &str| {
        store::write_atomic(&output, html.as_bytes()).map_err(|e| CliError::new(format!("{}: {e}", output.display())))
    };
    let refresh = args.watch.then_some(2);
    write(&page(ctx, refresh)?)?;
    outln!("wrote {}", output.display());
    if !args.watch {
        return Ok(EXIT_OK);
    }
    let paths = store::Paths::new(&ctx.state);
    let mut watch = store::watch::watch(&ctx.state, &paths.journal)
        .map_err(|e| CliError::new(format!("cannot watch {}: {e}", paths.journal.display())))?;
    while watch.journal_changed_blocking() {
        // A journal caught mid-write is read again at its next change.
        if let Ok(html) = page(ctx, refresh) {
            write(&html)?;
        }
    }
    Ok(EXIT_OK)
}
