//! The plan validator: what a model drafts is untrusted input, checked here
//! in code before anything runs (the seeds say code-enforced; a prompt only
//! asks). A drafted atom may not carry the engine's own fields, set a `cwd`
//! outside the workspace, use a tool or target GGS blocked, repeat a command
//! already tried when the directive is `break_symmetry`, or hold a
//! destructive command (Law 1) nobody confirmed. The graph itself is checked
//! by the state file's own validation, as a hand-written plan is. Pure.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use indexmap::IndexMap;

use crate::law::{self, Gate};
use crate::state::{Atom, AtomId, AtomStatus};

/// What a drafted plan is held to.
pub struct Rules<'a> {
    /// Tools GGS blocked (and memory's Avoid).
    pub blocked_tools: &'a BTreeSet<String>,
    /// Targets GGS blocked.
    pub blocked_targets: &'a BTreeSet<String>,
    /// Under `break_symmetry`: the commands already tried, none of which may recur.
    pub tried: Option<&'a BTreeSet<String>>,
    /// (tool, target) pairs memory says to avoid; an atom's target here is
    /// its own and, for a replan, the failed atom's (`answers_target`).
    pub avoided: &'a [(String, String)],
    /// The target of the atom a replan answers, if any.
    pub answers_target: Option<&'a str>,
    /// Whether a destructive command was confirmed (`--yes`, or a yes on a
    /// terminal to that command).
    pub confirmed: &'a dyn Fn(&Gate) -> bool,
    /// Where the work happens, and what exists there.
    pub law: &'a law::Context<'a>,
    /// Agent atoms are worked by aot's built-in worker, which checks every
    /// command at dispatch (Law 1, blocked tools): an agent atom needs no
    /// confirmation up front. Otherwise an agent CLI runs commands no one
    /// reads, and a model's agent atom is a Law 1 gate.
    pub agents_checked: bool,
}

/// Why a drafted plan may not run; empty reasons and gates: it may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Each rule broken, naming the atom and field.
    pub reasons: Vec<String>,
    /// Destructive commands (Law 1), with where they are; reasons too unless confirmed.
    pub gates: Vec<(String, Gate)>,
}

impl Verdict {
    /// Whether the plan may run.
    pub fn passed(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// Checks drafted atoms (named as the model named them) and any other
/// model-written commands (`extra`: e.g. a drafted base case, as `(where, command)`).
pub fn check(atoms: &IndexMap<AtomId, Atom>, extra: &[(&str, &str)], rules: &Rules<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    for (id, atom) in atoms {
        let place = |field: &str| format!("atom `{id}` {field}");
        if atom.status != AtomStatus::Pending || atom.attempts != 0 || atom.chosen.is_some() || atom.planned.is_some() {
            verdict.reasons.push(format!(
                "atom `{id}` sets fields only the engine writes (status, attempts, chosen, planned)"
            ));
        }
        if let Some(cwd) = &atom.cwd
            && !stays_inside(cwd)
        {
            verdict
                .reasons
                .push(format!("{}: `{cwd}` leaves the workspace", place("cwd")));
        }
        if let Some(tool) = atom.tool()
            && rules.blocked_tools.contains(&tool)
        {
            verdict.reasons.push(format!(
                "atom `{id}` uses the tool `{tool}`, which is blocked (MUST NOT)"
            ));
        }
        // A label is the model's word; the programs its commands run are not:
        // `run: "env git apply p"` with `tool: patch` still runs `git`.
        for (field, command) in commands(atom) {
            for program in law::programs(command, rules.law) {
                if rules.blocked_tools.contains(&program) && atom.tool().as_deref() != Some(program.as_str()) {
                    verdict.reasons.push(format!(
                        "{}: runs `{program}`, a tool that is blocked (MUST NOT)",
                        place(field)
                    ));
                }
            }
        }
        for name in atom.env.keys() {
            if !safe_env_name(name) {
                verdict.reasons.push(format!(
                    "{}: `{name}` changes how the shell or the programs start; a model's plan may not set it",
                    place("env")
                ));
            }
        }
        if let Some(agent) = atom.agent.as_ref().filter(|_| !rules.agents_checked) {
            // What an agent will run is known only when it runs.
            verdict.gates.push((
                place("agent"),
                Gate {
                    command: format!("agent: {}", crate::model::text::first_line(agent)),
                    why: "lets an agent run commands no one has read".into(),
                },
            ));
        }
        let target = crate::steer::target(id, atom);
        if rules.blocked_targets.contains(&target) {
            verdict.reasons.push(format!(
                "atom `{id}` works on the target `{target}`, which is blocked (MUST NOT)"
            ));
        }
        if let Some(tool) = atom.tool() {
            let avoided = rules.avoided.iter().find(|(space, entity)| {
                *space == tool && (*entity == target || rules.answers_target == Some(entity.as_str()))
            });
            if let Some((space, entity)) = avoided {
                verdict.reasons.push(format!(
                    "atom `{id}` uses `{space}` on `{entity}`, which memory says to avoid (MUST NOT)"
                ));
            }
        }
        // Relative paths in its commands resolve from its own `cwd`.
        let here = law::Context {
            cwd: atom.cwd.as_deref(),
            ..*rules.law
        };
        for (field, command) in commands(atom) {
            if let Some(tried) = rules.tried
                && tried.contains(command.trim())
            {
                verdict.reasons.push(format!(
                    "{}: `{command}` was already tried, and break_symmetry asks for something not tried",
                    place(field)
                ));
            }
            for gate in law::classify(command, &here) {
                verdict.gates.push((place(field), gate));
            }
        }
    }
    for (place, command) in extra {
        for gate in law::classify(command, rules.law) {
            verdict.gates.push((place.to_string(), gate));
        }
    }
    for (place, gate) in &verdict.gates {
        if !(rules.confirmed)(gate) {
            verdict.reasons.push(format!(
                "{place}: `{}` {} (Law 1: destructive commands written by a model need --yes)",
                gate.command, gate.why
            ));
        }
    }
    verdict
}

/// Whether every reason a verdict gives is a destructive command not yet
/// confirmed (a yes could let the plan run as it is).
pub fn only_gates(verdict: &Verdict) -> bool {
    !verdict.reasons.is_empty() && verdict.reasons.iter().all(|r| r.contains("(Law 1: "))
}

/// Whether a model may set the environment variable `name` on its atoms:
/// plain names, never ones that change how bash or the dynamic linker start
/// (`BASH_ENV`, `BASH_FUNC_*`, `PATH`, `LD_PRELOAD`, …) or aot's own.
fn safe_env_name(name: &str) -> bool {
    const DENIED: [&str; 12] = [
        "PATH",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "CDPATH",
        "GLOBIGNORE",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
    ];
    let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    plain
        && !DENIED.contains(&name)
        && !["BASH_FUNC", "LD_", "DYLD_", "AOT_", "GIT_"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The commands an atom runs, with the field each is in.
fn commands(atom: &Atom) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    if let Some(run) = &atom.run {
        out.push(("run", run.as_str()));
    }
    for check in &atom.check {
        out.push(("check", check.as_str()));
    }
    if let Some(probe) = &atom.probe {
        out.push(("probe", probe.as_str()));
    }
    out
}

/// Whether a relative `cwd` stays inside the workspace.
fn stays_inside(cwd: &str) -> bool {
    let path = Path::new(cwd);
    if path.is_absolute() || cwd.starts_with('~') || cwd.contains('$') {
        return false;
    }
    let mut depth = 0i32;
    for component in path.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atoms(yaml: &str) -> IndexMap<AtomId, Atom> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn verdict(plan: &str, blocked_tools: &[&str], tried: Option<&[&str]>, confirmed: bool) -> Verdict {
        let exists = |p: &Path| p.ends_with("README.md");
        let law = law::Context {
            workspace: Path::new("/w"),
            exists: &exists,
            cwd: None,
        };
        let tools: BTreeSet<String> = blocked_tools.iter().map(|s| s.to_string()).collect();
        let targets: BTreeSet<String> = ["legacy".to_string()].into();
        let tried: Option<BTreeSet<String>> = tried.map(|t| t.iter().map(|s| s.to_string()).collect());
        let avoided = [("curl".to_string(), "mirror".to_string())];
        let rules = Rules {
            blocked_tools: &tools,
            blocked_targets: &targets,
            tried: tried.as_ref(),
            avoided: &avoided,
            answers_target: Some("mirror"),
            confirmed: &|_| confirmed,
            law: &law,
            agents_checked: false,
        };
        check(&atoms(plan), &[], &rules)
    }

    /// Rules that block nothing and confirm nothing.
    fn no_rules<'a>(law: &'a law::Context<'a>, none: &'a BTreeSet<String>) -> Rules<'a> {
        Rules {
            blocked_tools: none,
            blocked_targets: none,
            tried: None,
            avoided: &[],
            answers_target: None,
            confirmed: &|_| false,
            law,
            agents_checked: false,
        }
    }

    #[test]
    fn relative_paths_resolve_from_the_atoms_cwd() {
        // README.md "exists" in the fake world (any folder): from `sub`, too.
        let v = verdict("a: { run: 'echo x > README.md', cwd: sub }", &[], None, false);
        assert!(!v.passed(), "{v:?}");
        let exists = |p: &Path| p == Path::new("/w/sub/only-here.txt");
        let law = law::Context {
            workspace: Path::new("/w"),
            exists: &exists,
            cwd: None,
        };
        let none = BTreeSet::new();
        let rules = no_rules(&law, &none);
        assert!(!check(&atoms("a: { run: 'echo x > only-here.txt', cwd: sub }"), &[], &rules).passed());
        assert!(check(&atoms("a: { run: 'echo x > only-here.txt' }"), &[], &rules).passed());
    }

    #[test]
    fn a_plain_plan_passes() {
        let v = verdict(
            "fix: { run: 'sed -i s/a/b/ x.py', check: ['pytest -q'] }",
            &["git"],
            None,
            false,
        );
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn blocked_tools_and_targets_are_refused_with_labels_derived_as_for_users_atoms() {
        let v = verdict(
            "a: { run: 'git apply p.patch' }\nb: { run: 'true', tool: git }",
            &["git"],
            None,
            false,
        );
        assert_eq!(v.reasons.len(), 2, "{v:?}");
        assert!(v.reasons[0].contains("atom `a` uses the tool `git`"), "{v:?}");
        let v = verdict(
            "legacy: { run: 'true' }\nc: { run: 'true', target: legacy }",
            &[],
            None,
            false,
        );
        assert_eq!(v.reasons.len(), 2, "{v:?}");
    }

    #[test]
    fn a_tool_memory_says_to_avoid_on_the_failed_target_is_refused() {
        let v = verdict("get: { run: 'curl -O https://x' }", &[], None, false);
        assert!(v.reasons[0].contains("memory says to avoid"), "{v:?}");
        assert!(verdict("get: { run: 'wget https://x' }", &[], None, false).passed());
    }

    #[test]
    fn labels_do_not_hide_a_blocked_program_and_env_cannot_change_the_shell() {
        let v = verdict(
            "a: { run: 'env git apply p.patch', tool: patch }",
            &["git"],
            None,
            false,
        );
        assert!(v.reasons.iter().any(|r| r.contains("runs `git`")), "{v:?}");
        let v = verdict("a: { run: 'for f in x; do git apply $f; done' }", &["git"], None, false);
        assert!(!v.passed(), "{v:?}");
        for name in [
            "BASH_ENV",
            "BASH_FUNC_make%%",
            "PATH",
            "LD_PRELOAD",
            "AOT_STATE",
            "GIT_DIR",
        ] {
            let plan = format!("a: {{ run: 'make test', env: {{ '{name}': x }} }}");
            assert!(!verdict(&plan, &[], None, false).passed(), "{name}");
        }
        assert!(verdict("a: { run: 'make test', env: { RUST_LOG: debug } }", &[], None, false).passed());
    }

    #[test]
    fn an_agent_atom_from_a_model_needs_a_confirmation() {
        let v = verdict("a: { agent: 'fix the bug' }", &[], None, false);
        assert!(v.reasons.iter().any(|r| r.contains("agent")), "{v:?}");
        assert!(verdict("a: { agent: 'fix the bug' }", &[], None, true).passed());
        // Worked by the built-in worker, every command it runs is checked then.
        let exists = |_: &Path| false;
        let law = law::Context {
            workspace: Path::new("/w"),
            exists: &exists,
            cwd: None,
        };
        let none = BTreeSet::new();
        let mut rules = Rules {
            agents_checked: true,
            ..no_rules(&law, &none)
        };
        assert!(check(&atoms("a: { agent: 'fix the bug' }"), &[], &rules).passed());
        rules.agents_checked = false;
        assert!(!check(&atoms("a: { agent: 'fix the bug' }"), &[], &rules).passed());
    }

    #[test]
    fn break_symmetry_refuses_a_command_already_tried() {
        let v = verdict("a: { run: 'make test ' }", &[], Some(&["make test"]), false);
        assert!(v.reasons[0].contains("already tried"), "{v:?}");
        assert!(verdict("a: { run: 'make check' }", &[], Some(&["make test"]), false).passed());
    }

    #[test]
    fn destructive_commands_need_a_confirmation() {
        let plan = "a: { run: 'rm -rf build && make' }\nb: { run: 'true', check: ['echo x > README.md'] }";
        let refused = verdict(plan, &[], None, false);
        assert_eq!(refused.gates.len(), 2);
        assert_eq!(refused.reasons.len(), 2);
        assert!(
            refused.reasons[0].contains("atom `a` run: `rm -rf build`"),
            "{refused:?}"
        );
        assert!(refused.reasons[0].contains("--yes"));
        let confirmed = verdict(plan, &[], None, true);
        assert!(confirmed.passed());
        assert_eq!(confirmed.gates.len(), 2, "a confirmed gate is still listed");
    }

    #[test]
    fn engine_fields_and_a_cwd_outside_the_workspace_are_refused() {
        for plan in [
            "a: { run: 'true', status: solved }",
            "a: { run: 'true', attempts: 3 }",
            "a: { run: 'true', cwd: /etc }",
            "a: { run: 'true', cwd: '../..' }",
            "a: { run: 'true', cwd: 'src/../../x' }",
            "a: { run: 'true', cwd: '~/x' }",
        ] {
            assert!(!verdict(plan, &[], None, false).passed(), "{plan}");
        }
        assert!(verdict("a: { run: 'true', cwd: 'src/../lib' }", &[], None, false).passed());
    }
}
