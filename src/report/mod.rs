//! `aot report`: one self-contained HTML page about a task — the graph, a
//! timeline of attempts, the loss curve with GGS's directives, memory's
//! calibrations, what models cost, the stop and its evidence, the audit.
//! No script, no network: pictures are inline SVG made here, styles are
//! inline CSS for light, dark and print.
//!
//! Pure: the state, the journal's records, the audit's findings and the graph
//! picture go in; the page comes out.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::audit::Finding;
use crate::journal::event::{Event, Record};
use crate::model::AtomId;
use crate::model::time::Timestamp;
use crate::state::{AtomStatus, StateFile};

/// Rows of the timeline: one per atom up to this many, else lanes of parallel work.
pub const ROWS_PER_ATOM_MAX: usize = 80;

/// What the page is made of.
pub struct Input<'a> {
    /// The state file's name, as shown.
    pub file: &'a str,
    /// The state (folded to the journal's end).
    pub state: &'a StateFile,
    /// The journal's records.
    pub records: &'a [Record],
    /// The auditor's findings.
    pub findings: &'a [Finding],
    /// The graph as SVG (`graph::export::svg`), or why there is none.
    pub graph: Result<String, String>,
    /// Refresh the page every this many seconds (`--watch`).
    pub refresh: Option<u32>,
}

/// HTML text escaped for element content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The status colours of the graph, as CSS classes.
fn status_class(status: AtomStatus) -> &'static str {
    status.as_str()
}

/// One attempt on the timeline.
#[derive(Debug, Clone)]
struct Bar {
    atom: AtomId,
    attempt: u32,
    start: u64,
    end: Option<u64>,
    outcome: &'static str,
}

fn bars(records: &[Record]) -> Vec<Bar> {
    let mut open: HashMap<AtomId, usize> = HashMap::new();
    let mut bars: Vec<Bar> = Vec::new();
    let close = |bars: &mut Vec<Bar>, open: &mut HashMap<AtomId, usize>, atom: &AtomId, at: u64, outcome| {
        if let Some(i) = open.remove(atom) {
            bars[i].end = Some(at);
            bars[i].outcome = outcome;
        }
    };
    for r in records {
        let at = r.at.as_millis();
        match &r.event {
            Event::AtomStarted { atom, attempt } => {
                close(&mut bars, &mut open, atom, at, "cancelled");
                open.insert(atom.clone(), bars.len());
                bars.push(Bar {
                    atom: atom.clone(),
                    attempt: *attempt,
                    start: at,
                    end: None,
                    outcome: "running",
                });
            }
            Event::AtomSolved { atom, .. } => close(&mut bars, &mut open, atom, at, "solved"),
            Event::AttemptFailed { atom, .. } | Event::AtomFailed { atom, .. } => {
                close(&mut bars, &mut open, atom, at, "failed")
            }
            Event::AtomBlocked { atom, .. } => close(&mut bars, &mut open, atom, at, "blocked"),
            Event::AttemptCancelled { atom, .. } => close(&mut bars, &mut open, atom, at, "cancelled"),
            Event::RunStopped { .. } => {
                for (atom, i) in open.drain() {
                    let _ = atom;
                    bars[i].end = Some(at);
                    bars[i].outcome = "cancelled";
                }
            }
            _ => {}
        }
    }
    bars
}

/// The timeline as SVG: a row per atom (or, for large graphs, per lane of
/// parallel work), a bar per attempt coloured by how it ended.
fn timeline(records: &[Record], atoms: usize) -> String {
    let bars = bars(records);
    if bars.is_empty() {
        return "<p class=\"none\">No attempt has run yet.</p>".into();
    }
    let t0 = bars.iter().map(|b| b.start).min().unwrap_or(0);
    let last = records.last().map_or(t0, |r| r.at.as_millis());
    let t1 = bars
        .iter()
        .map(|b| b.end.unwrap_or(last))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let by_atom = atoms <= ROWS_PER_ATOM_MAX;
    // Rows: each atom in order of first start, or lanes filled greedily.
    let mut rows: Vec<String> = Vec::new();
    let mut row_of: Vec<usize> = Vec::with_capacity(bars.len());
    if by_atom {
        let mut index: HashMap<&str, usize> = HashMap::new();
        for b in &bars {
            let n = index.len();
            let row = *index.entry(b.atom.as_str()).or_insert(n);
            if row == rows.len() {
                rows.push(b.atom.to_string());
            }
            row_of.push(row);
        }
    } else {
        let mut lane_end: Vec<u64> = Vec::new();
        for b in &bars {
            let end = b.end.unwrap_or(last);
            let lane = match lane_end.iter().position(|e| *e <= b.start) {
                Some(lane) => lane,
                None => {
                    lane_end.push(0);
                    rows.push(format!("lane {}", lane_end.len()));
                    lane_end.len() - 1
                }
            };
            lane_end[lane] = end.max(b.start + 1);
            row_of.push(lane);
        }
    }
    let (label_w, width, row_h) = (160.0, 900.0, 18.0);
    let height = rows.len() as f64 * row_h + 30.0;
    let x = |t: u64| label_w + (t - t0) as f64 / (t1 - t0) as f64 * (width - label_w - 10.0);
    let mut svg = format!(
        "<svg id=\"timeline\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"timeline of attempts\">"
    );
    for (i, row) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let _ = write!(
            svg,
            "<text class=\"label\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            label_w - 6.0,
            y + 12.0,
            esc(&crate::model::text::cut(row, 24))
        );
    }
    for (b, row) in bars.iter().zip(&row_of) {
        let y = *row as f64 * row_h + 4.0;
        let (a, z) = (x(b.start), x(b.end.unwrap_or(last)));
        let w = (z - a).max(2.0);
        let ms = b.end.unwrap_or(last) - b.start;
        let _ = write!(
            svg,
            "<rect class=\"bar {}\" x=\"{a:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\"><title>{} attempt {}: {} after {} ms</title></rect>",
            b.outcome,
            row_h - 4.0,
            esc(&b.atom),
            b.attempt,
            b.outcome,
            ms
        );
    }
    let _ = write!(
        svg,
        "<text class=\"axis\" x=\"{label_w}\" y=\"{:.1}\">0</text><text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></svg>",
        height - 6.0,
        width - 10.0,
        height - 6.0,
        duration(t1 - t0)
    );
    svg
}

/// A directive as the log shows it: `success` on a round with failures
/// reads as a lie, so it is "within tolerance".
fn directive(d: crate::ggs::MacroState) -> &'static str {
    match d {
        crate::ggs::MacroState::Success => "within tolerance",
        other => other.as_str(),
    }
}

/// A duration as a person reads it: `56 ms`, `4.2 s`, `3 min 5 s`.
fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// The loss curve: D, L and Ω per GGS decision, with each directive.
fn loss_curve(records: &[Record]) -> String {
    let points: Vec<(u64, &crate::ggs::Decision)> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::GgsDecided { decision } => Some((r.seq, decision.as_ref())),
            _ => None,
        })
        .collect();
    if points.is_empty() {
        return "<p class=\"none\">GGS made no decision: no round failed.</p>".into();
    }
    let (width, height, left, right, top, bottom) = (900.0, 240.0, 80.0, 70.0, 20.0, 40.0);
    let n = points.len();
    let x = |i: usize| {
        if n == 1 {
            left + (width - left - right) / 2.0
        } else {
            left + i as f64 / (n - 1) as f64 * (width - left - right)
        }
    };
    let y = |v: f64| top + (1.0 - v.clamp(0.0, 1.0)) * (height - top - bottom);
    let mut svg = format!(
        "<svg id=\"loss\" class=\"chart\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"loss per GGS decision\">"
    );
    for v in [0.0, 0.5, 1.0] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
            width - right,
            y(v),
            y(v),
            left - 4.0,
            y(v) + 4.0
        );
    }
    for (name, value) in [
        (
            "d",
            (|d: &crate::ggs::Decision| d.loss.d) as fn(&crate::ggs::Decision) -> f64,
        ),
        ("l", |d| d.loss.l),
        ("omega", |d| d.loss.omega),
    ] {
        let line: Vec<String> = points
            .iter()
            .enumerate()
            .map(|(i, (_, d))| format!("{:.1},{:.1}", x(i), y(value(d))))
            .collect();
        let _ = write!(svg, "<polyline class=\"series {name}\" points=\"{}\"/>", line.join(" "));
    }
    for (i, (seq, d)) in points.iter().enumerate() {
        // Every series has its points: one decision is a point, not an invisible line.
        for (name, v) in [("d", d.loss.d), ("omega", d.loss.omega)] {
            let _ = write!(
                svg,
                "<circle class=\"dot {name}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\"/>",
                x(i),
                y(v)
            );
        }
        let _ = write!(
            svg,
            "<circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\"><title>round {} (record {seq}): {} — D={:.2} P={:.2} Ω={:.2} L={:.2}</title></circle><text class=\"directive\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x(i),
            y(d.loss.l),
            d.round,
            directive(d.directive),
            d.loss.d,
            d.loss.p,
            d.loss.omega,
            d.loss.l,
            x(i),
            height - 14.0,
            esc(directive(d.directive))
        );
    }
    svg.push_str("</svg><p class=\"legend\"><span class=\"key d\"></span>D (distance) <span class=\"key l\"></span>L (loss) <span class=\"key omega\"></span>Ω (resources)</p>");
    svg
}

/// The OR choices and backtracks, in order.
fn choices(records: &[Record]) -> String {
    let mut rows = String::new();
    for r in records {
        let (group, what) = match &r.event {
            Event::OrChosen {
                group, chosen, reason, ..
            } => (group, format!("chose `{chosen}`: {reason}")),
            Event::Backtracked { group, from, to, reset } => {
                let reset = if reset.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (reset: {})",
                        reset.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
                    )
                };
                (group, format!("backtracked from `{from}` to `{to}`{reset}"))
            }
            _ => continue,
        };
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.seq,
            esc(group),
            esc(&what)
        );
    }
    if rows.is_empty() {
        return "<p class=\"none\">No OR choice was made.</p>".into();
    }
    format!(
        "<table id=\"choices\"><thead><tr><th>record</th><th>OR atom</th><th>what happened</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

/// Memory's calibrations at OR choices: what it advised and the order it gave.
fn calibrations(records: &[Record]) -> String {
    let mut rows = String::new();
    for r in records {
        if let Event::Calibrated { calibration } = &r.event
            && !calibration.alternatives.is_empty()
        {
            let advice: Vec<String> = calibration
                .alternatives
                .iter()
                .map(|a| {
                    format!(
                        "{} {} (M_att {:.2}, M_dec {:+.2})",
                        a.alt,
                        a.action.as_str(),
                        a.m_att,
                        a.m_dec
                    )
                })
                .collect();
            let _ = write!(
                rows,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                r.seq,
                esc(&calibration.group),
                esc(&advice.join("; ")),
                esc(&calibration
                    .order
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(" → "))
            );
        }
    }
    if rows.is_empty() {
        return "<p class=\"none\">No OR choice was calibrated by memory.</p>".into();
    }
    format!(
        "<table><thead><tr><th>record</th><th>OR atom</th><th>memory's advice</th><th>order</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

/// Tokens and dollars by role and by atom, with how agent atoms were worked.
fn spend(state: &StateFile) -> String {
    let s = &state.run.spend;
    if s.is_empty() && state.run.agents.is_empty() {
        return "<p class=\"none\">No model was called.</p>".into();
    }
    let row = |name: &str, calls: u32, tokens: u64, cost: f64, extra: &str| {
        format!(
            "<tr><td>{}</td><td class=\"n\">{calls}</td><td class=\"n\">{tokens}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(name),
            if cost > 0.0 {
                format!("${cost:.4}")
            } else {
                "—".into()
            },
            esc(extra)
        )
    };
    let mut out = String::from(
        "<table><thead><tr><th>role / atom</th><th>calls</th><th>tokens</th><th>cost</th><th>worked by</th></tr></thead><tbody>",
    );
    out.push_str(&row(
        "all",
        s.calls,
        s.tokens,
        s.cost,
        if s.estimated { "some tokens estimated" } else { "" },
    ));
    for (role, t) in &s.by_role {
        out.push_str(&row(role, t.calls, t.tokens, t.cost, ""));
    }
    for (atom, t) in &s.by_atom {
        let agent = state
            .run
            .agents
            .get(atom)
            .map(|a| {
                format!(
                    "{}: {} attempts, {} turns, {} tool calls, {} refused",
                    a.worker, a.attempts, a.turns, a.tool_calls, a.refusals
                )
            })
            .unwrap_or_default();
        out.push_str(&row(&format!("for {atom}"), t.calls, t.tokens, t.cost, &agent));
    }
    out.push_str("</tbody></table>");
    out
}

fn stop(state: &StateFile) -> String {
    let Some(stop) = &state.run.stop else {
        return format!(
            "<p class=\"stop\">Not stopped: the run is {}.</p>",
            esc(&format!("{:?}", state.run.status).to_lowercase())
        );
    };
    let mut out = format!(
        "<p class=\"stop {}\"><strong>{}</strong> at {}: {}</p>",
        stop.reason.as_str(),
        stop.reason.as_str(),
        stop.at,
        esc(&stop.message)
    );
    if let Some(e) = &stop.evidence {
        let _ = write!(
            out,
            "<p>Evidence: <code>{}</code> → {} after {} ms</p>",
            esc(&e.command),
            e.exit_code.map_or("killed".to_string(), |c| format!("exit {c}")),
            e.duration_ms
        );
        if !e.output_tail.trim().is_empty() {
            let _ = write!(out, "<pre>{}</pre>", esc(&e.output_tail));
        }
    }
    if let Some(result) = &stop.final_result {
        let _ = write!(
            out,
            "<p>Loss at the end: D={:.2} P={:.2} Ω={:.0}% L={:.2} after {}.</p>",
            result.loss.d,
            result.loss.p,
            result.loss.omega * 100.0,
            result.loss.l,
            counted(u64::from(result.replans), "replan")
        );
        if !result.next_moves.is_empty() {
            out.push_str("<ol class=\"moves\">");
            for m in &result.next_moves {
                let _ = write!(out, "<li>{}</li>", esc(m));
            }
            out.push_str("</ol>");
        }
    }
    out
}

fn findings(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "<p class=\"none ok\">The auditor found nothing.</p>".into();
    }
    let mut out = String::from(
        "<table><thead><tr><th>severity</th><th>kind</th><th>finding</th><th>records</th></tr></thead><tbody>",
    );
    for f in findings {
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.severity.as_str(),
            f.severity.as_str(),
            f.kind.as_str(),
            esc(&f.message),
            f.seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// A compact picture for graphs too large to lay out: a square per atom in
/// file order, coloured by status.
pub fn status_grid(state: &StateFile) -> String {
    let n = state.graph.atoms.len();
    let cols = 100usize;
    let rows = n.div_ceil(cols).max(1);
    let (cell, width) = (9.0, cols as f64 * 9.0);
    let mut svg = format!(
        "<svg id=\"graph-grid\" class=\"chart\" viewBox=\"0 0 {width} {}\" width=\"{width}\" height=\"{}\" role=\"img\" aria-label=\"atoms by status\">",
        rows as f64 * cell,
        rows as f64 * cell
    );
    for (i, (id, atom)) in state.graph.atoms.iter().enumerate() {
        let _ = write!(
            svg,
            "<rect class=\"cell {}\" x=\"{:.0}\" y=\"{:.0}\" width=\"8\" height=\"8\"><title>{}: {}</title></rect>",
            status_class(atom.status),
            (i % cols) as f64 * cell,
            (i / cols) as f64 * cell,
            esc(id),
            atom.status.as_str()
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Strips what an SVG document carries that a page does not need: the XML
/// prolog and the namespace (a URL, which the page must not hold).
fn inline_svg(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    body.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1).replacen(
        "<svg ",
        "<svg id=\"graph\" class=\"chart\" ",
        1,
    )
}

const STYLE: &str = r#"
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1d1d1f; --muted: #666; --line: #d0d0d0;
  --pending: #e0e0e0; --running: #90caf9; --solved: #a5d6a7; --failed: #ef9a9a; --blocked: #ffcc80; --pruned: #f5f5f5; --cancelled: #bdbdbd; }
@media (prefers-color-scheme: dark) { :root { --bg: #16181c; --fg: #e8e8e8; --muted: #a0a0a0; --line: #3a3d44;
  --pending: #5f6368; --running: #1e6bb8; --solved: #2e7d32; --failed: #c62828; --blocked: #ef6c00; --pruned: #3a3d44; --cancelled: #616161; } }
body { background: var(--bg); color: var(--fg); font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid var(--line); }
.meta, .none, .legend { color: var(--muted); } code, pre { font: 13px ui-monospace, monospace; } pre { white-space: pre-wrap; background: color-mix(in srgb, var(--fg) 6%, transparent); padding: .6rem; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; } td.n { text-align: right; }
tr.error td:first-child { color: #d32f2f; font-weight: 600; } tr.warning td:first-child { color: #f57c00; font-weight: 600; }
.scroll { overflow: auto; max-height: 70vh; border: 1px solid var(--line); }
.chart { max-width: 100%; height: auto; } .chart text { fill: var(--fg); font: 11px system-ui, sans-serif; } .chart .axis { fill: var(--muted); }
.bar.solved, .cell.solved { fill: var(--solved); } .bar.failed, .cell.failed { fill: var(--failed); } .bar.blocked, .cell.blocked { fill: var(--blocked); }
.bar.cancelled { fill: var(--cancelled); } .bar.running, .cell.running { fill: var(--running); } .cell.pending { fill: var(--pending); } .cell.pruned { fill: var(--pruned); }
.grid { stroke: var(--line); } .series { fill: none; stroke-width: 2; } .series.d { stroke: #e53935; } .series.l { stroke: #1e88e5; } .series.omega { stroke: #8e24aa; stroke-dasharray: 4 3; }
.point { fill: #1e88e5; } .dot.d { fill: #e53935; } .dot.omega { fill: #8e24aa; } .directive { fill: var(--muted); font-size: 10px; }
.key { display: inline-block; width: 14px; height: 3px; margin: 0 4px 3px 10px; } .key.d { background: #e53935; } .key.l { background: #1e88e5; } .key.omega { background: #8e24aa; }
.stop.completed strong { color: #2e7d32; } .stop strong { color: #c62828; }
@media print { body { margin: 0; max-width: none; font-size: 11pt; } .scroll { max-height: none; overflow: visible; border: 0; } h2 { break-after: avoid; } table, svg { break-inside: avoid; } }
"#;

/// The page.
pub fn html(input: &Input<'_>) -> String {
    let state = input.state;
    let goal = state.objective.goal.as_deref().unwrap_or("(no goal)");
    let mut page = String::with_capacity(64 * 1024);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    if let Some(seconds) = input.refresh {
        let _ = write!(page, "<meta http-equiv=\"refresh\" content=\"{seconds}\">");
    }
    let _ = write!(
        page,
        "<title>aot report: {}</title><style>{STYLE}</style></head><body>",
        esc(goal)
    );
    let count = |s: AtomStatus| state.graph.atoms.values().filter(|a| a.status == s).count();
    let first = input.records.first().map(|r| r.at);
    let last = input.records.last().map(|r| r.at);
    let span = match (first, last) {
        (Some(a), Some(b)) => format!(
            ", {} from the first record to the last",
            duration(b.as_millis().saturating_sub(a.as_millis()))
        ),
        _ => String::new(),
    };
    let _ = write!(
        page,
        "<header><h1>{}</h1><p class=\"meta\"><code>{}</code> · {} atoms: {} solved, {} failed, {} blocked, {} pruned, {} pending · {}, {} · {}{span}{}</p></header>",
        esc(goal),
        esc(input.file),
        state.graph.atoms.len(),
        count(AtomStatus::Solved),
        count(AtomStatus::Failed),
        count(AtomStatus::Blocked),
        count(AtomStatus::Pruned),
        count(AtomStatus::Pending),
        counted(state.run.iteration.into(), "iteration"),
        counted(u64::from(state.run.replans), "replan"),
        counted(input.records.len() as u64, "journal record"),
        if input.refresh.is_some() {
            " · reloads every few seconds while `aot report --watch` runs"
        } else {
            ""
        }
    );
    let _ = write!(
        page,
        "<section id=\"stop-section\"><h2>How it ended</h2>{}</section>",
        stop(state)
    );
    page.push_str("<section id=\"graph-section\"><h2>The graph</h2><div class=\"scroll\">");
    match &input.graph {
        Ok(svg) => page.push_str(&inline_svg(svg)),
        Err(why) => {
            let _ = write!(page, "<p class=\"none\">{}</p>", esc(why));
            page.push_str(&status_grid(state));
        }
    }
    page.push_str("</div><p class=\"legend\">Each atom coloured by its status; OR alternatives are dashed edges, the chosen one plain.</p></section>");
    let _ = write!(
        page,
        "<section id=\"timeline-section\"><h2>Attempts over time</h2><div class=\"scroll\">{}</div><p class=\"legend\">A bar per attempt: solved, failed, blocked, cancelled. Bars side by side ran in parallel.</p></section>",
        timeline(input.records, state.graph.atoms.len())
    );
    let _ = write!(
        page,
        "<section id=\"choices-section\"><h2>OR choices and backtracks</h2>{}</section>",
        choices(input.records)
    );
    let _ = write!(
        page,
        "<section id=\"loss-section\"><h2>Loss per GGS decision</h2>{}</section>",
        loss_curve(input.records)
    );
    let _ = write!(
        page,
        "<section id=\"memory-section\"><h2>Memory's calibrations</h2>{}</section>",
        calibrations(input.records)
    );
    let _ = write!(
        page,
        "<section id=\"spend-section\"><h2>What models cost</h2>{}</section>",
        spend(state)
    );
    // Notes (a file behind its journal while a loop runs, …) are for `aot audit --all`.
    let serious: Vec<Finding> = input
        .findings
        .iter()
        .filter(|f| f.severity > crate::audit::Severity::Info)
        .cloned()
        .collect();
    let _ = write!(
        page,
        "<section id=\"audit-section\"><h2>The audit</h2>{}</section>",
        findings(&serious)
    );
    let generated = last.unwrap_or(Timestamp::from_millis(0));
    let _ = writeln!(
        page,
        "<footer class=\"meta\"><p>aot {} · as of record {} ({generated})</p></footer></body></html>",
        env!("CARGO_PKG_VERSION"),
        state.run.revision
    );
    page
}

/// `n noun`, with the noun's plural for every count but one.
fn counted(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn an_svg_document_becomes_an_inline_picture_without_a_url() {
        let svg = "<?xml version=\"1.0\"?><svg width=\"1\" xmlns=\"http://www.w3.org/2000/svg\"><g/></svg>";
        let inline = inline_svg(svg);
        assert!(inline.starts_with("<svg id=\"graph\""), "{inline}");
        assert!(!inline.contains("http"), "{inline}");
    }
}
