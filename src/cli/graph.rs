//! `aot graph`: export the work graph as DOT, Mermaid or SVG.

use aot::graph::export;
use aot::state::document;

use super::{CliError, Context, EXIT_OK};

/// Output formats of `aot graph`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GraphFormat {
    /// Graphviz DOT (`aot graph | dot -Tsvg > graph.svg`)
    Dot,
    /// Mermaid flowchart (paste into Markdown)
    Mermaid,
    /// An SVG picture, laid out by aot itself (no Graphviz needed)
    Svg,
}

/// Arguments of `aot graph`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format
    #[arg(long, value_enum, default_value = "dot")]
    format: GraphFormat,
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let doc = document::read(&ctx.state)?;
    let text = match args.format {
        GraphFormat::Dot => export::dot(&doc.state),
        GraphFormat::Mermaid => export::mermaid(&doc.state),
        GraphFormat::Svg => export::svg(&doc.state).map_err(CliError::new)?,
    };
    out!("{text}");
    Ok(EXIT_OK)
}
