//! `aot audit`: the auditor's report on a task's journal (read-only over the
//! journal and the state file; it never changes the run). Each audit is
//! appended to `.aot/audit.jsonl`, a log no other command writes.

use std::fmt::Write as _;
use std::io::Write as _;

use aot::audit::{self, Finding, Severity};
use aot::store;
use serde_json::json;

use super::{CliError, Context, EXIT_OK};

/// Exit code: the audit found something at warning level or above.
pub const EXIT_FINDINGS: i32 = 9;

/// Arguments of `aot audit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show notes (info-level findings) too
    #[arg(long)]
    all: bool,
    /// Do not append this audit to .aot/audit.jsonl
    #[arg(long)]
    no_log: bool,
}

/// Audits the task's journal; the findings, and whether any is a warning or worse.
pub fn findings(ctx: &Context) -> Result<(Vec<Finding>, usize), CliError> {
    let paths = store::Paths::new(&ctx.state);
    let text = match std::fs::read(&paths.journal) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        // Never run: nothing to audit, nothing wrong.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(CliError::new(format!("{}: {e}", paths.journal.display()))),
    };
    let lines = audit::read(&text);
    let file = aot::state::document::read(&ctx.state).ok().map(|d| d.state);
    let workspace = super::folder_of(&ctx.state);
    let workspace = std::path::absolute(&workspace).unwrap_or(workspace);
    let findings = audit::audit(&audit::Input {
        lines: &lines,
        file: file.as_ref(),
        workspace: &workspace,
    });
    Ok((findings, lines.records.len()))
}

/// One finding as a line: severity, kind, message, the records it rests on.
pub fn line(f: &Finding) -> String {
    let seqs = if f.seqs.is_empty() {
        String::new()
    } else {
        format!(
            "  [record{} {}]",
            if f.seqs.len() == 1 { "" } else { "s" },
            f.seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        )
    };
    format!("{:<8} {:<12} {}{seqs}", f.severity.as_str(), f.kind.as_str(), f.message)
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    let (findings, records) = findings(ctx)?;
    let serious = findings.iter().any(|f| f.severity >= Severity::Warning);
    if !args.no_log {
        log(ctx, &findings, records);
    }
    if ctx.json {
        outln!(
            "{}",
            json!({
                "file": ctx.label(),
                "records": records,
                "summary": audit::summary(&findings),
                "findings": findings,
            })
        );
    } else {
        let mut text = if records == 0 {
            format!("{}: no journal yet (never run): nothing to audit\n", ctx.label())
        } else {
            format!(
                "{}: audited {records} journal records: {}\n",
                ctx.label(),
                audit::summary(&findings)
            )
        };
        let hidden = findings.iter().filter(|f| f.severity == Severity::Info).count();
        for f in findings.iter().filter(|f| args.all || f.severity > Severity::Info) {
            let _ = writeln!(text, "  {}", line(f));
        }
        if hidden > 0 && !args.all {
            let _ = writeln!(
                text,
                "  ({hidden} note{} left out: --all shows them)",
                if hidden == 1 { "" } else { "s" }
            );
        }
        out!("{text}");
    }
    Ok(if serious { EXIT_FINDINGS } else { EXIT_OK })
}

/// Appends this audit to `.aot/audit.jsonl` (the auditor's own log). A log
/// that cannot be written is said once; the audit still reports.
fn log(ctx: &Context, findings: &[Finding], records: usize) {
    let paths = store::Paths::new(&ctx.state);
    let path = paths.aot_dir.join("audit.jsonl");
    let entry = json!({
        "at": super::clock_from_env().now(),
        "file": ctx.label(),
        "records": records,
        "summary": audit::summary(findings),
        "findings": findings,
    });
    let written = std::fs::create_dir_all(&paths.aot_dir).and_then(|()| {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        f.write_all(format!("{entry}\n").as_bytes())
    });
    if let Err(e) = written {
        super::warn(&format!("could not append the audit to {}: {e}", path.display()));
    }
}
