//! `aot validate`: report every problem of one or more state files at once.

use std::path::PathBuf;

use aot::state::document::{self, ReadError};
use serde_json::json;

use super::{CliError, Context, EXIT_ERROR, EXIT_OK};

/// Arguments of `aot validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files to check (default: the --state file)
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let files = if args.files.is_empty() {
        vec![ctx.state.clone()]
    } else {
        args.files
    };
    let mut code = EXIT_OK;
    let mut reports = Vec::new();
    for file in &files {
        let label = file.display().to_string();
        match document::read(file) {
            Ok(doc) => {
                let warnings = aot::state::validate::warnings(&doc.state);
                if ctx.json {
                    reports.push(json!({
                        "file": label,
                        "valid": true,
                        "atoms": doc.state.graph.atoms.len(),
                        "errors": [],
                        "warnings": warnings,
                    }));
                } else {
                    let n = doc.state.graph.atoms.len();
                    outln!("{label}: valid ({n} atom{})", if n == 1 { "" } else { "s" });
                    for warning in warnings {
                        errln!("warning: {label}: {warning}");
                    }
                }
            }
            Err(ReadError::Invalid(diagnostics)) => {
                code = EXIT_ERROR;
                if ctx.json {
                    reports.push(json!({"file": label, "valid": false, "errors": diagnostics.errors, "warnings": []}));
                } else {
                    super::write_stderr_styled(&diagnostics.render(ctx.color));
                }
            }
            Err(other) => {
                code = EXIT_ERROR;
                let message = match &other {
                    ReadError::NotFound(_) => "no such file".to_string(),
                    _ => other.to_string(),
                };
                if ctx.json {
                    reports
                        .push(json!({"file": label, "valid": false, "errors": [{"message": message}], "warnings": []}));
                } else {
                    errln!("error: {label}: {message}");
                }
            }
        }
    }
    if ctx.json {
        let out = if reports.len() == 1 {
            reports.remove(0)
        } else {
            json!(reports)
        };
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| CliError::new(e.to_string()))?
        );
    }
    Ok(code)
}
