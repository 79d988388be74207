//! No dead ends: the natural two-patch plan reaches its second patch with
//! default labels, the user's explicit choice beats GGS's blocked sets, a
//! solved or failed atom can be re-run, and every next move aot prints works
//! when followed literally.

use std::process::Command;

use aot::state::{AtomStatus, StopReason};

use crate::common::TestEnv;

fn aligned(base_case: &str, extra: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n{extra}"
    )
}

fn state(env: &TestEnv) -> aot::state::StateFile {
    aot::state::document::read(&env.path("aot.yaml")).unwrap().state
}

/// A git repository with a bug in `a.py` and two patches: one wrong, one right.
fn two_patches(env: &TestEnv) {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(env.path("."))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    env.write("a.py", "def add(a, b):\n    return a - b\n");
    git(&["add", "a.py"]);
    git(&["commit", "-qm", "bug"]);
    env.write("a.py", "def add(a, b):\n    return a * b\n");
    env.write("wrong.patch", &git(&["diff"]));
    env.write("a.py", "def add(a, b):\n    return a + b\n");
    env.write("right.patch", &git(&["diff"]));
    git(&["checkout", "-q", "--", "a.py"]);
}

const PATCHES: &str = "graph:
  atoms:
    fix: { or: [patch-a, patch-b] }
    patch-a:
      run: git checkout -- a.py && git apply wrong.patch
      check: [\"grep -q 'a + b' a.py\"]
    patch-b:
      run: git checkout -- a.py && git apply right.patch
      check: [\"grep -q 'a + b' a.py\"]
";

#[test]
fn the_two_patch_or_reaches_the_second_patch_with_default_labels() {
    let env = TestEnv::new();
    two_patches(&env);
    env.write("aot.yaml", &aligned("grep -q 'a + b' a.py", PATCHES));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(std::fs::read_to_string(env.path("a.py")).unwrap().contains("a + b"));
    let state = state(&env);
    assert_eq!(state.graph.atoms["patch-b"].status, AtomStatus::Solved);
    let last = state.run.ggs.last.expect("GGS decided after patch-a failed");
    assert!(
        last.blocked_tools.is_empty(),
        "an inferred tool is not blocked: {last:?}"
    );
    assert_eq!(last.blocked_targets, vec!["patch-a".to_string()]);
    assert!(
        last.rationale.contains("`git` inferred from the command"),
        "{}",
        last.rationale
    );
}

/// The next moves of the last stop, each with the `aot …` commands it names.
fn next_moves(env: &TestEnv) -> Vec<(String, Vec<Vec<String>>)> {
    let stop = state(env).run.stop.expect("the run stopped");
    let result = stop.final_result.expect("a closing report");
    result
        .next_moves
        .into_iter()
        .map(|text| {
            let commands = text
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|code| code.strip_prefix("aot "))
                .map(|args| args.split_whitespace().map(String::from).collect())
                .collect();
            (text, commands)
        })
        .collect()
}

/// Runs every command of the move that mentions `needle`, as printed.
fn follow(env: &TestEnv, needle: &str) {
    let moves = next_moves(env);
    let (text, commands) = moves
        .iter()
        .find(|(text, _)| text.contains(needle))
        .unwrap_or_else(|| panic!("a move with `{needle}` among {moves:#?}"));
    assert!(!commands.is_empty(), "the move names its command: {text}");
    for args in commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = env.aot(&args);
        if args[0] == "start" {
            assert_eq!(
                run.code,
                0,
                "`aot {}` as printed in `{text}`: {}",
                args.join(" "),
                run.transcript()
            );
        } else {
            assert_eq!(run.code, 0, "`aot {}` as printed: {}", args.join(" "), run.transcript());
        }
    }
}

#[test]
fn a_refused_alternative_runs_when_the_user_chooses_it_as_printed() {
    let env = TestEnv::new();
    two_patches(&env);
    // Declared labels: the user says both patches are the same tool.
    let declared = PATCHES
        .replace("    patch-a:\n", "    patch-a:\n      tool: git\n")
        .replace("    patch-b:\n", "    patch-b:\n      tool: git\n");
    env.write("aot.yaml", &aligned("grep -q 'a + b' a.py", &declared));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 5, "exhausted: {}", run.transcript());
    follow(&env, "--choose fix=patch-b");
    let state = state(&env);
    assert_eq!(state.run.stop.unwrap().reason, StopReason::Completed);
    assert!(state.run.ggs.allowed.contains("patch-b"), "the override is recorded");
    assert!(
        state
            .corrections
            .iter()
            .any(|c| c.description.contains("overrides GGS's blocked sets")),
        "{:?}",
        state.corrections
    );
}

#[test]
fn a_hand_edited_label_revives_a_failed_choice() {
    let env = TestEnv::new();
    two_patches(&env);
    let declared = PATCHES
        .replace("    patch-a:\n", "    patch-a:\n      tool: git\n")
        .replace("    patch-b:\n", "    patch-b:\n      tool: git\n");
    env.write("aot.yaml", &aligned("grep -q 'a + b' a.py", &declared));
    assert_eq!(env.aot(&["start"]).code, 5);
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let at = text.find("patch-b:\n").unwrap();
    let tool = at + text[at..].find("tool: git").unwrap();
    let edited = format!("{}tool: git-apply{}", &text[..tool], &text[tool + "tool: git".len()..]);
    std::fs::write(env.path("aot.yaml"), edited).unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = state(&env);
    assert!(
        state
            .corrections
            .iter()
            .any(|c| c.description.contains("reopens `fix`")),
        "{:?}",
        state.corrections
    );
}

#[test]
fn a_failed_atom_runs_again_after_the_printed_fix_and_reset() {
    let env = TestEnv::new();
    let atoms = "  constraints: { max_retries: 0 }
graph:
  atoms:
    build: { run: 'cat input.txt > out.txt' }
    report: { run: 'cp out.txt report.txt', deps: [build] }
";
    env.write("aot.yaml", &aligned("test -s report.txt", atoms));
    let run = env.aot(&["start"]);
    assert_ne!(run.code, 0, "{}", run.transcript());
    env.write("input.txt", "data\n");
    follow(&env, "--reset build");
    assert_eq!(std::fs::read_to_string(env.path("report.txt")).unwrap(), "data\n");
}

#[test]
fn reset_reruns_a_solved_atom_and_its_dependents() {
    let env = TestEnv::new();
    let atoms = "graph:
  atoms:
    gen: { run: 'echo $AOT_ATTEMPT >> gen.log; echo data > data.txt' }
    use: { run: 'cp data.txt copy.txt', deps: [gen] }
    other: { run: 'echo x >> other.log' }
";
    env.write("aot.yaml", &aligned("test -f copy.txt", atoms));
    assert_eq!(env.aot(&["start"]).code, 0);
    std::fs::remove_file(env.path("copy.txt")).unwrap();
    std::fs::remove_file(env.path("data.txt")).unwrap();
    let run = env.aot(&["redirect", "--reset", "gen"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = state(&env);
    for id in ["gen", "use"] {
        assert_eq!(state.graph.atoms[id].status, AtomStatus::Pending, "{id}");
        assert!(!state.bindings.contains_key(id), "{id}");
    }
    assert_eq!(
        state.graph.atoms["other"].status,
        AtomStatus::Solved,
        "unrelated work is kept"
    );
    assert_eq!(
        state.corrections.last().unwrap().kind,
        aot::state::CorrectionKind::DagAdjustment
    );
    assert_eq!(env.aot(&["start"]).code, 0);
    assert!(env.path("copy.txt").exists());
    assert_eq!(
        std::fs::read_to_string(env.path("other.log")).unwrap(),
        "x\n",
        "other ran once"
    );

    let run = env.aot(&["redirect", "--reset", "nope"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no atom `nope`"), "{}", run.stderr);
}

#[test]
fn reset_keeps_a_given_up_alternative_given_up() {
    let env = TestEnv::new();
    let atoms = "  constraints: { max_retries: 0 }
graph:
  atoms:
    gen: { run: 'echo data > data.txt' }
    fix: { or: [alt-a, alt-b] }
    alt-a: { run: 'echo a >> a.log; exit 1', deps: [gen], tool: tool-a }
    alt-b: { run: 'echo b >> b.log; cp data.txt out.txt', deps: [gen], tool: tool-b }
";
    env.write("aot.yaml", &aligned("test -f out.txt", atoms));
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    std::fs::remove_file(env.path("out.txt")).unwrap();
    let run = env.aot(&["redirect", "--reset", "gen"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = state(&env);
    assert_eq!(
        state.graph.atoms["alt-a"].status,
        AtomStatus::Failed,
        "given up stays given up"
    );
    for id in ["gen", "alt-b", "fix"] {
        assert_eq!(state.graph.atoms[id].status, AtomStatus::Pending, "{id}");
    }
    assert_eq!(env.aot(&["start"]).code, 0);
    assert_eq!(
        std::fs::read_to_string(env.path("a.log")).unwrap(),
        "a\n",
        "alt-a ran once"
    );
    assert_eq!(std::fs::read_to_string(env.path("b.log")).unwrap(), "b\nb\n");
}

#[test]
fn after_an_abandon_the_untried_alternative_and_the_budget_moves_work_as_printed() {
    for needle in ["--choose fix=c", "--set max_replans="] {
        let env = TestEnv::new();
        let atoms = "  constraints: { max_retries: 0, max_replans: 2 }
graph:
  atoms:
    fix: { or: [a, b, d, c] }
    a: { run: 'exit 1' }
    b: { run: 'exit 1' }
    d: { run: 'exit 1' }
    c: { run: 'touch done' }
";
        env.write("aot.yaml", &aligned("test -f done", atoms));
        let run = env.aot(&["start"]);
        assert_eq!(run.code, 4, "abandoned: {}", run.transcript());
        follow(&env, needle);
        assert!(env.path("done").exists(), "{needle}");
    }
}

#[test]
fn at_the_iteration_limit_the_printed_move_raises_it_and_the_run_goes_on() {
    let env = TestEnv::new();
    // In a git work tree a chain's next atom waits for the check of the one
    // before it: one iteration is exactly one atom (without git, the next
    // could run beside a slow check and the goal be met within the limit).
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(env.path("."))
        .status();
    assert!(init.is_ok_and(|s| s.success()));
    env.write(
        "aot.yaml",
        &aligned(
            "test -f c.done",
            "  constraints: { max_iterations: 1 }\ngraph:\n  atoms:\n    a: { run: 'touch a.done' }\n    b: { run: 'touch b.done', deps: [a] }\n    c: { run: 'touch c.done', deps: [b] }\n",
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 8, "{}", run.transcript());
    assert!(run.stderr.contains("next moves"), "{}", run.stderr);
    // Started again as it is, it stops at once: the limit counts the task's iterations.
    assert_eq!(env.aot(&["start"]).code, 8);
    follow(&env, "aot redirect --set max_iterations=");
    assert_eq!(state(&env).run.stop.map(|s| s.reason), Some(StopReason::Completed));
    assert!(env.path("c.done").exists());
}
