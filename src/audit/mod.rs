//! The auditor (seed R6): reads a task's journal — never writes it, never
//! steers the loop — and reports what an operator should know: convergence
//! failures (D not falling across GGS rounds), thrashing (break_symmetry
//! after break_symmetry, retry storms, one command tried under several
//! names), boundary violations (work solved on no evidence, a blocked tool or
//! a destructive command run anyway, a write outside the workspace),
//! anomalies (gaps, reordering, a clock going backwards, duplicate ids, a
//! file that disagrees with its journal) and spend without progress.
//!
//! Pure: the records (read leniently, [`read`]), the state file as found and
//! the workspace's folder go in; findings come out, each with its severity,
//! the journal sequence numbers it rests on, and one line of explanation.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use crate::ggs::MacroState;
use crate::journal::event::{Event, Record};
use crate::model::AtomId;
use crate::state::{Objective, StateFile};

/// Rounds in a row whose D does not fall before it is a convergence failure.
pub const STALL_ROUNDS: usize = 3;

/// Failures in a row of one atom on the same criterion that make a retry storm.
pub const STORM: usize = 4;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Probably wrong: look at it.
    Warning,
    /// A rule was broken or the record is damaged.
    Error,
}

impl Severity {
    /// The name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// What kind of trouble a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// D not falling across GGS rounds.
    Convergence,
    /// Going round in circles.
    Thrashing,
    /// A rule of the loop broken.
    Boundary,
    /// The record itself is damaged or inconsistent.
    Anomaly,
    /// Money or tokens spent while nothing moved.
    Spend,
}

impl Kind {
    /// The name as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Convergence => "convergence",
            Kind::Thrashing => "thrashing",
            Kind::Boundary => "boundary",
            Kind::Anomaly => "anomaly",
            Kind::Spend => "spend",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// How serious.
    pub severity: Severity,
    /// What kind.
    pub kind: Kind,
    /// A stable name for the rule (`d_not_falling`, `retry_storm`, …).
    pub rule: &'static str,
    /// The journal sequence numbers it rests on.
    pub seqs: Vec<u64>,
    /// One line of explanation.
    pub message: String,
}

/// A journal read leniently: every record that reads, and every line that does not.
#[derive(Debug, Default)]
pub struct Lines {
    /// Records with their line numbers (from 1).
    pub records: Vec<(usize, Record)>,
    /// Lines that are not records, with why.
    pub unreadable: Vec<(usize, String)>,
}

/// Reads a journal's text line by line, keeping what reads: the auditor
/// reports damage instead of stopping at it.
pub fn read(text: &str) -> Lines {
    let mut lines = Lines::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(record) => lines.records.push((i + 1, record)),
            Err(e) => lines
                .unreadable
                .push((i + 1, crate::model::text::cut(&e.to_string(), 200))),
        }
    }
    lines
}

/// What the auditor reads.
pub struct Input<'a> {
    /// The journal, read leniently.
    pub lines: &'a Lines,
    /// The state file as found (its engine-owned part), if it reads.
    pub file: Option<&'a StateFile>,
    /// The workspace's top folder (the state file's), absolute.
    pub workspace: &'a Path,
}

/// Audits a task's journal.
pub fn audit(input: &Input<'_>) -> Vec<Finding> {
    let mut a = Auditor::new(input.workspace);
    for (line, why) in &input.lines.unreadable {
        a.push(
            Severity::Error,
            Kind::Anomaly,
            "unreadable_record",
            Vec::new(),
            format!("journal line {line} is not a record: {why}"),
        );
    }
    for (_, record) in &input.lines.records {
        a.record(record);
    }
    a.finish(input.file);
    a.findings
        .sort_by(|x, y| y.severity.cmp(&x.severity).then(x.seqs.first().cmp(&y.seqs.first())));
    a.findings
}

/// One GGS decision as the auditor keeps it.
#[derive(Clone, Copy)]
struct Round {
    seq: u64,
    d: f64,
    directive: MacroState,
    tokens: u64,
    cost: f64,
    solved: usize,
}

struct Auditor<'w> {
    workspace: &'w Path,
    findings: Vec<Finding>,
    state: StateFile,
    prev: Option<(u64, crate::model::time::Timestamp)>,
    /// GGS decisions of the current task.
    rounds: Vec<Round>,
    /// Spend and solved atoms since the last decision.
    tokens: u64,
    cost: f64,
    solved: usize,
    /// Started attempts per atom (since its last reset).
    started: HashMap<AtomId, u32>,
    /// Failures in a row per atom: (criterion, message, seqs).
    streak: HashMap<AtomId, (String, String, Vec<u64>)>,
    /// Failed atoms by their command.
    failed_commands: HashMap<String, BTreeSet<AtomId>>,
    commands_reported: HashSet<String>,
    /// The current run was started with `--yes`.
    yes: bool,
    /// Replanned records waiting for the definitions of their atoms.
    replanned: Vec<(u64, Vec<AtomId>)>,
    /// Memory's last calibration at each OR atom.
    calibrated: HashMap<AtomId, crate::memory::Calibration>,
}

impl<'w> Auditor<'w> {
    fn new(workspace: &'w Path) -> Self {
        Self {
            workspace,
            findings: Vec::new(),
            state: StateFile::new(Objective::default(), indexmap::IndexMap::new()),
            prev: None,
            rounds: Vec::new(),
            tokens: 0,
            cost: 0.0,
            solved: 0,
            started: HashMap::new(),
            streak: HashMap::new(),
            failed_commands: HashMap::new(),
            commands_reported: HashSet::new(),
            yes: false,
            replanned: Vec::new(),
            calibrated: HashMap::new(),
        }
    }

    fn push(&mut self, severity: Severity, kind: Kind, rule: &'static str, seqs: Vec<u64>, message: String) {
        self.findings.push(Finding {
            severity,
            kind,
            rule,
            seqs,
            message,
        });
    }

    fn law(&self) -> impl Fn(&str) -> (Vec<crate::law::Gate>, Vec<String>) + '_ {
        move |command: &str| {
            let exists = |p: &Path| p.exists();
            let ctx = crate::law::Context {
                workspace: self.workspace,
                exists: &exists,
                cwd: None,
            };
            (crate::law::classify(command, &ctx), crate::law::programs(command, &ctx))
        }
    }

    fn record(&mut self, record: &Record) {
        let seq = record.seq;
        if let Some((prev_seq, prev_at)) = self.prev {
            if seq <= prev_seq {
                self.push(
                    Severity::Error,
                    Kind::Anomaly,
                    "reordered",
                    vec![prev_seq, seq],
                    format!("record {seq} comes after record {prev_seq}: the journal is out of order"),
                );
            } else if seq != prev_seq + 1 && !matches!(record.event, Event::Compacted { .. }) {
                self.push(
                    Severity::Error,
                    Kind::Anomaly,
                    "gap",
                    vec![prev_seq, seq],
                    format!(
                        "records {}–{} are missing between {prev_seq} and {seq}",
                        prev_seq + 1,
                        seq - 1
                    ),
                );
            }
            if record.at < prev_at {
                self.push(
                    Severity::Warning,
                    Kind::Anomaly,
                    "clock_backwards",
                    vec![prev_seq, seq],
                    format!(
                        "the clock went backwards: record {seq} at {} after {prev_at}",
                        record.at
                    ),
                );
            }
        }
        self.prev = Some((seq, record.at));
        self.before(record);
        crate::journal::apply(&mut self.state, record);
        self.after(record);
    }

    /// Checks that need the state before the record.
    fn before(&mut self, record: &Record) {
        let seq = record.seq;
        match &record.event {
            Event::Replanned { added, .. } => {
                let clash: Vec<&AtomId> = added
                    .iter()
                    .filter(|id| self.state.graph.atoms.contains_key(*id))
                    .collect();
                if !clash.is_empty() {
                    self.push(
                        Severity::Error,
                        Kind::Anomaly,
                        "duplicate_id",
                        vec![seq],
                        format!(
                            "a replan added {} that already existed",
                            clash.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
                self.replanned.push((seq, added.clone()));
            }
            Event::AtomSolved { atom, .. } => {
                let is_or = self.state.graph.atoms.get(atom).is_some_and(|a| a.or.is_some());
                if !is_or && self.started.get(atom).copied().unwrap_or(0) == 0 {
                    self.push(
                        Severity::Error,
                        Kind::Boundary,
                        "solved_unstarted",
                        vec![seq],
                        format!("`{atom}` was recorded solved without an attempt having started"),
                    );
                }
                if let Some(a) = self.state.graph.atoms.get(atom)
                    && a.agent.is_some()
                    && a.check.is_empty()
                    && a.criteria.is_empty()
                {
                    self.push(
                        Severity::Info,
                        Kind::Boundary,
                        "unchecked_agent",
                        vec![seq],
                        format!("`{atom}` was solved on its agent's word alone: no check or criterion judged it"),
                    );
                }
            }
            _ => {}
        }
    }

    /// Checks that read the record with the state after it.
    fn after(&mut self, record: &Record) {
        let seq = record.seq;
        match &record.event {
            Event::Snapshot { .. } => self.new_task(),
            Event::CorrectionRecorded { correction } if correction.trail_cleared => self.new_task(),
            Event::RunStarted { yes, .. } => self.yes = *yes,
            Event::AtomStarted { atom, .. } => *self.started.entry(atom.clone()).or_default() += 1,
            Event::AtomsReset { atoms } => {
                for atom in atoms {
                    self.started.remove(atom);
                    self.streak.remove(atom);
                }
            }
            Event::AtomSolved { atom, .. } => {
                self.solved += 1;
                self.streak.remove(atom);
            }
            Event::AttemptFailed {
                atom,
                criterion,
                message,
                ..
            }
            | Event::AtomFailed {
                atom,
                criterion,
                message,
                ..
            } => self.failed(seq, atom, &criterion.to_string(), message),
            Event::LlmCalled {
                prompt_tokens,
                completion_tokens,
                cost,
                ..
            } => {
                self.tokens += prompt_tokens + completion_tokens;
                self.cost += cost.unwrap_or(0.0);
            }
            Event::GgsDecided { decision } => self.decided(seq, decision),
            Event::Calibrated { calibration } => {
                self.calibrated
                    .insert(calibration.group.clone(), (**calibration).clone());
            }
            Event::OrChosen { group, chosen, .. } => self.chose(seq, group, chosen),
            Event::UserEdited { .. } => self.planned_atoms(),
            Event::ToolCalled {
                atom,
                tool,
                input,
                refused: None,
                ..
            } => self.tool_ran(seq, atom, tool, input),
            Event::Replanned { gates, .. } if !gates.is_empty() && !self.yes => {
                self.push(
                    Severity::Error,
                    Kind::Boundary,
                    "unconfirmed_destructive",
                    vec![seq],
                    format!(
                        "a replan ran destructive commands though the run had no --yes: {}",
                        gates.join("; ")
                    ),
                );
            }
            Event::ChangesLanded { atom, changes, .. } => {
                for file in &changes.files {
                    if outside(Path::new(&file.path)) {
                        self.push(
                            Severity::Error,
                            Kind::Boundary,
                            "write_outside",
                            vec![seq],
                            format!("`{atom}` landed a change outside the workspace: {}", file.path),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    fn new_task(&mut self) {
        self.rounds.clear();
        self.tokens = 0;
        self.cost = 0.0;
        self.solved = 0;
    }

    fn failed(&mut self, seq: u64, atom: &AtomId, criterion: &str, message: &str) {
        let headline = crate::model::text::headline(message);
        let entry = self
            .streak
            .entry(atom.clone())
            .or_insert_with(|| (criterion.to_string(), headline.clone(), Vec::new()));
        if entry.0 != criterion || entry.1 != headline {
            *entry = (criterion.to_string(), headline.clone(), Vec::new());
        }
        entry.2.push(seq);
        if entry.2.len() >= STORM {
            let seqs = entry.2.clone();
            let message = format!(
                "`{atom}` failed {} times in a row on {criterion} with the same evidence ({}): the retries learn nothing",
                seqs.len(),
                crate::model::text::cut(&headline, 80)
            );
            // One finding per streak, grown as the streak goes on.
            let open = self
                .findings
                .iter_mut()
                .rev()
                .find(|f| f.rule == "retry_storm" && f.seqs.first() == seqs.first());
            match open {
                Some(f) => {
                    f.seqs = seqs;
                    f.message = message;
                }
                None => self.push(Severity::Warning, Kind::Thrashing, "retry_storm", seqs, message),
            }
        }
        if let Some(command) = self.state.graph.atoms.get(atom).and_then(|a| a.run.clone()) {
            let command = command.trim().to_string();
            let atoms = self.failed_commands.entry(command.clone()).or_default();
            atoms.insert(atom.clone());
            if atoms.len() >= 2 && self.commands_reported.insert(command.clone()) {
                let names: Vec<String> = atoms.iter().map(|a| format!("`{a}`")).collect();
                self.push(
                    Severity::Warning,
                    Kind::Thrashing,
                    "same_command",
                    vec![seq],
                    format!(
                        "the same command failed under different names ({}): `{}`",
                        names.join(", "),
                        crate::model::text::cut(&command, 80)
                    ),
                );
            }
        }
    }

    fn decided(&mut self, seq: u64, decision: &crate::ggs::Decision) {
        self.rounds.push(Round {
            seq,
            d: decision.loss.d,
            directive: decision.directive,
            tokens: std::mem::take(&mut self.tokens),
            cost: std::mem::take(&mut self.cost),
            solved: std::mem::take(&mut self.solved),
        });
        let n = self.rounds.len();
        let rounds = self.rounds.clone();
        // A streak of rounds each meeting `holds` with the round before it:
        // how many rounds it spans (1: none).
        let streak = |holds: &dyn Fn(&Round, &Round) -> bool| {
            let mut len = 1;
            while len < n && holds(&rounds[n - len - 1], &rounds[n - len]) {
                len += 1;
            }
            len
        };
        let flat = |a: &Round, b: &Round| b.d >= a.d && a.d > 0.0;
        let stall = streak(&flat);
        let symmetry = streak(&|a, b| {
            flat(a, b) && a.directive == MacroState::BreakSymmetry && b.directive == MacroState::BreakSymmetry
        });
        let idle = streak(&|a, b| flat(a, b) && (b.tokens > 0 || b.cost > 0.0) && b.solved == 0);
        let span = |len: usize| rounds[n - len..].to_vec();
        if stall >= STALL_ROUNDS {
            let last = span(stall);
            self.streak_finding(
                Severity::Warning,
                Kind::Convergence,
                "d_not_falling",
                &last,
                format!(
                    "D did not fall over {stall} GGS rounds ({}): the loop is not converging",
                    last.iter()
                        .map(|r| format!("{:.2}", r.d))
                        .collect::<Vec<_>>()
                        .join(" → ")
                ),
            );
        }
        if symmetry >= 2 {
            let last = span(symmetry);
            self.streak_finding(
                Severity::Warning,
                Kind::Thrashing,
                "repeated_break_symmetry",
                &last,
                format!(
                    "break_symmetry {symmetry} times in a row without D falling (D={:.2}): every new approach fails the same way",
                    last[last.len() - 1].d
                ),
            );
        }
        if idle >= 2 {
            let last = span(idle);
            let tokens: u64 = last[1..].iter().map(|r| r.tokens).sum();
            let cost: f64 = last[1..].iter().map(|r| r.cost).sum();
            let cost = if cost > 0.0 {
                format!(", ${cost:.4}")
            } else {
                String::new()
            };
            self.streak_finding(
                Severity::Warning,
                Kind::Spend,
                "spend_without_progress",
                &last,
                format!(
                    "{tokens} tokens{cost} spent over {} GGS rounds with nothing solved and D not falling (D={:.2})",
                    idle - 1,
                    last[last.len() - 1].d
                ),
            );
        }
    }

    /// A finding over a streak of rounds: the same streak's earlier finding
    /// (it starts at the same round) grows instead of a new one.
    fn streak_finding(
        &mut self,
        severity: Severity,
        kind: Kind,
        rule: &'static str,
        rounds: &[Round],
        message: String,
    ) {
        let seqs: Vec<u64> = rounds.iter().map(|r| r.seq).collect();
        let open = self
            .findings
            .iter_mut()
            .rev()
            .find(|f| f.rule == rule && f.seqs.first() == seqs.first());
        match open {
            Some(f) => {
                f.seqs = seqs;
                f.message = message;
            }
            None => self.push(severity, kind, rule, seqs, message),
        }
    }

    /// An OR choice against memory's advice (Avoid, or Caution the user did
    /// not confirm), unless the user chose that alternative explicitly.
    fn chose(&mut self, seq: u64, group: &AtomId, chosen: &AtomId) {
        if self.state.run.ggs.allowed.contains(chosen) {
            return;
        }
        let Some(advice) = self
            .calibrated
            .get(group)
            .and_then(|c| c.alternatives.iter().find(|a| &a.alt == chosen))
        else {
            return;
        };
        let against = match (advice.action, advice.confirmed) {
            (crate::memory::Action::Avoid, _) => Some("Avoid (MUST NOT)"),
            (crate::memory::Action::Caution, Some(false)) => Some("Caution, not confirmed"),
            _ => None,
        };
        if let Some(against) = against {
            self.push(
                Severity::Error,
                Kind::Boundary,
                "against_memory",
                vec![seq],
                format!(
                    "`{group}` chose `{chosen}` though memory advised {against} for `{}` on `{}`",
                    advice.space, advice.entity
                ),
            );
        }
    }

    /// After a replan's definitions arrive: its atoms must not use a blocked tool.
    fn planned_atoms(&mut self) {
        let blocked = self.state.run.ggs.blocked_tools.clone();
        for (seq, added) in std::mem::take(&mut self.replanned) {
            for id in &added {
                let Some(atom) = self.state.graph.atoms.get(id) else {
                    continue;
                };
                if let Some(tool) = atom.tool().filter(|t| blocked.contains(t)) {
                    self.push(
                        Severity::Error,
                        Kind::Boundary,
                        "blocked_tool_planned",
                        vec![seq],
                        format!("the planner's `{id}` uses `{tool}`, which GGS had blocked"),
                    );
                }
            }
        }
    }

    fn tool_ran(&mut self, seq: u64, atom: &AtomId, tool: &str, input: &str) {
        match tool {
            "shell" => {
                let (gates, programs) = self.law()(input);
                let blocked: Vec<&String> = programs
                    .iter()
                    .filter(|p| self.state.run.ggs.blocked_tools.contains(*p))
                    .collect();
                if !blocked.is_empty() && !self.state.run.ggs.allowed.contains(atom) {
                    let names = blocked.iter().map(|b| format!("`{b}`")).collect::<Vec<_>>().join(", ");
                    self.push(
                        Severity::Error,
                        Kind::Boundary,
                        "blocked_tool_ran",
                        vec![seq],
                        format!("`{atom}` ran {names}, which GGS had blocked: `{input}`"),
                    );
                }
                if !gates.is_empty() && !self.yes {
                    self.push(
                        Severity::Error,
                        Kind::Boundary,
                        "unconfirmed_destructive",
                        vec![seq],
                        format!(
                            "`{atom}` ran a destructive command without a recorded confirmation (Law 1): `{input}`"
                        ),
                    );
                }
            }
            "write_file" => {
                let path = Path::new(input);
                if (path.is_absolute() && !path.starts_with(self.workspace)) || outside(path) {
                    self.push(
                        Severity::Error,
                        Kind::Boundary,
                        "write_outside",
                        vec![seq],
                        format!("`{atom}` wrote outside the workspace: {input}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// The file against the fold of its journal.
    fn finish(&mut self, file: Option<&StateFile>) {
        let Some(file) = file else { return };
        let Some((last, _)) = self.prev else { return };
        let revision = file.run.revision;
        if revision > last {
            self.push(
                Severity::Error,
                Kind::Anomaly,
                "file_ahead",
                vec![last],
                format!("the file says revision {revision} but the journal ends at {last}: records are missing"),
            );
            return;
        }
        if revision < last {
            // Saved at most once a second while a loop runs; a crash leaves it behind.
            self.push(
                Severity::Info,
                Kind::Anomaly,
                "file_behind",
                vec![revision, last],
                format!(
                    "the file reflects record {revision}, the journal goes on to {last} (a run in progress or killed: the next command catches up)"
                ),
            );
            return;
        }
        let mut differ = Vec::new();
        for (id, atom) in &self.state.graph.atoms {
            match file.graph.atoms.get(id) {
                None => differ.push(format!("`{id}` is missing from the file")),
                Some(a) if a.status != atom.status || a.attempts != atom.attempts => differ.push(format!(
                    "`{id}` is {} ({} attempts) in the file, {} ({}) by the journal",
                    a.status.as_str(),
                    a.attempts,
                    atom.status.as_str(),
                    atom.attempts
                )),
                Some(_) => {}
            }
        }
        for id in file.graph.atoms.keys() {
            if !self.state.graph.atoms.contains_key(id) {
                differ.push(format!("`{id}` is in the file but not in the journal"));
            }
        }
        if file.run.status != self.state.run.status {
            differ.push(format!(
                "the run is {:?} in the file, {:?} by the journal",
                file.run.status, self.state.run.status
            ));
        }
        if !differ.is_empty() {
            let more = differ.len().saturating_sub(3);
            let mut message = format!(
                "replaying the journal does not give the file: {}",
                differ.into_iter().take(3).collect::<Vec<_>>().join("; ")
            );
            if more > 0 {
                message.push_str(&format!(" (and {more} more)"));
            }
            self.push(Severity::Error, Kind::Anomaly, "replay_disagrees", vec![last], message);
        }
    }
}

/// Whether a relative path climbs out of where it starts.
fn outside(path: &Path) -> bool {
    let mut depth: i64 = 0;
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::RootDir | std::path::Component::Prefix(_) => return false,
            std::path::Component::CurDir => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Counts by severity, for a summary line.
pub fn counts(findings: &[Finding]) -> (usize, usize, usize) {
    let of = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    (of(Severity::Error), of(Severity::Warning), of(Severity::Info))
}

/// `2 errors, 1 warning, no info` style summary.
pub fn summary(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no findings".into();
    }
    let (e, w, i) = counts(findings);
    let part = |n: usize, what: &str| match n {
        0 => None,
        1 => Some(format!("1 {what}")),
        n => Some(format!("{n} {what}s")),
    };
    [part(e, "error"), part(w, "warning"), part(i, "note")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_climb_out_are_outside() {
        assert!(outside(Path::new("../x")));
        assert!(outside(Path::new("a/../../x")));
        assert!(!outside(Path::new("a/../x")));
        assert!(!outside(Path::new("src/lib.rs")));
    }

    #[test]
    fn unreadable_lines_are_findings_not_failures() {
        let lines = read("not json\n\n{\"v\":8}\n");
        assert_eq!(lines.unreadable.len(), 2);
        let findings = audit(&Input {
            lines: &lines,
            file: None,
            workspace: Path::new("/w"),
        });
        assert_eq!(findings.len(), 2);
        assert!(
            findings
                .iter()
                .all(|f| f.severity == Severity::Error && f.rule == "unreadable_record")
        );
        assert_eq!(summary(&findings), "2 errors");
    }
}
