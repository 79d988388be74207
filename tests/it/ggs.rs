//! The Goal Gradient Solver: properties of the pure controller, and scenarios
//! with the real binary and scripted commands (directive sequences, blocked
//! tools never run again, Law 2, exhaustion, and a restart that keeps L_prev).

use std::io::BufRead;
use std::process::Stdio;

use aot::ggs::GgsConfig;
use aot::ggs::{
    self, AttemptGap, Decision, GgsState, MacroState, Outcome, ReplanRequest, Signals, Verdict, macro_state,
};
use aot::model::Criterion;
use aot::state::document;
use aot::state::{FailureClass, StopReason};
use proptest::prelude::*;

use crate::common::{TestEnv, run_aot_with};

/// A decision for tests that need one of each event.
pub fn sample_decision() -> Decision {
    let request = ReplanRequest {
        outcomes: vec![Outcome {
            atom: Some("build".into()),
            tool: Some("cargo".into()),
            tool_declared: true,
            target: Some("build".into()),
            solved: false,
            verdicts: vec![Verdict {
                criterion: "run".parse().unwrap(),
                passed: false,
                class: Some(FailureClass::Logical),
            }],
            trajectory: vec![AttemptGap {
                attempt: 1,
                criterion: "run".parse().unwrap(),
                class: FailureClass::Logical,
            }],
            attempts: 1,
            subtree_tools: vec!["cargo".into()],
            subtree_targets: Vec::new(),
        }],
        elapsed_ms: 1_000,
        time_budget_ms: 300_000,
        replans: 0,
        max_replans: 3,
        spent: 0.0,
        carried: None,
    };
    ggs::decide(&request, &GgsState::default(), &GgsConfig::default())
}

// ---------------------------------------------------------------- properties

fn class() -> impl Strategy<Value = FailureClass> {
    prop_oneof![Just(FailureClass::Logical), Just(FailureClass::Environmental)]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    (
        prop::sample::select(vec!["a", "b", "c", "d"]),
        prop::sample::select(vec!["sed", "curl", "python", "make"]),
        prop::sample::select(vec!["x", "y", "z"]),
        prop::collection::vec((any::<bool>(), class(), any::<bool>()), 1..4),
        prop::collection::vec((1..5u32, prop::sample::select(vec!["run", "check[0]"]), class()), 0..4),
        0..6u32,
        prop::collection::vec(prop::sample::select(vec!["sed", "git", "perl"]), 0..3),
    )
        .prop_map(
            |(atom, tool, target, verdicts, trajectory, attempts, subtree)| Outcome {
                atom: Some(atom.into()),
                tool: Some(tool.into()),
                tool_declared: true,
                target: Some(target.into()),
                solved: verdicts.iter().all(|(passed, _, _)| *passed),
                verdicts: verdicts
                    .into_iter()
                    .enumerate()
                    .map(|(i, (passed, class, plausible))| Verdict {
                        criterion: match (i, plausible) {
                            (0, _) => Criterion::Run,
                            (i, false) => Criterion::Check {
                                index: i - 1,
                                command: String::new(),
                            },
                            (i, true) => Criterion::Plausible {
                                index: i - 1,
                                text: String::new(),
                            },
                        },
                        passed,
                        class: (!passed).then_some(class),
                    })
                    .collect(),
                trajectory: trajectory
                    .into_iter()
                    .map(|(attempt, criterion, class)| AttemptGap {
                        attempt,
                        criterion: criterion.parse().unwrap(),
                        class,
                    })
                    .collect(),
                attempts,
                subtree_tools: subtree.into_iter().map(String::from).collect(),
                subtree_targets: Vec::new(),
            },
        )
}

fn request() -> impl Strategy<Value = ReplanRequest> {
    (
        prop::collection::vec(outcome(), 1..5),
        0..2_000_000u64,
        0..1_000_000u64,
        0..12u32,
        (0..6u32, unit(), prop::option::of((unit(), unit()))),
    )
        .prop_map(
            |(outcomes, elapsed_ms, time_budget_ms, replans, (max_replans, spent, carried))| ReplanRequest {
                outcomes,
                elapsed_ms,
                time_budget_ms,
                replans,
                max_replans,
                spent,
                carried,
            },
        )
}

fn unit() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64]
}

fn config() -> impl Strategy<Value = GgsConfig> {
    (
        (unit(), unit(), unit(), unit(), unit(), unit()),
        (unit(), unit(), unit(), unit()),
    )
        .prop_map(
            |((alpha, beta, lambda, w1, w2, w3), (epsilon, delta, rho, theta))| GgsConfig {
                alpha,
                beta,
                lambda,
                w1,
                w2,
                w3,
                epsilon,
                delta,
                rho,
                theta,
            },
        )
}

fn state() -> impl Strategy<Value = GgsState> {
    (prop::option::of(0.0..1.5f64), 0..3u32).prop_map(|(l_prev, worsening)| GgsState {
        l_prev,
        worsening,
        ..GgsState::default()
    })
}

/// The six rows of the paper's §3.3 table, written as independent predicates.
fn rows(s: Signals, c: &GgsConfig) -> Vec<MacroState> {
    let far = s.omega < c.theta && s.d > c.delta;
    let rows = [
        (s.omega >= c.theta, MacroState::Abandon),
        (s.omega < c.theta && s.d <= c.delta, MacroState::Success),
        (
            far && s.grad_l.abs() < c.epsilon && s.p > c.rho,
            MacroState::BreakSymmetry,
        ),
        (
            far && s.grad_l.abs() >= c.epsilon && s.p > c.rho,
            MacroState::ChangeApproach,
        ),
        (
            far && s.grad_l.abs() < c.epsilon && s.p <= c.rho,
            MacroState::ChangePath,
        ),
        (far && s.grad_l.abs() >= c.epsilon && s.p <= c.rho, MacroState::Refine),
    ];
    rows.into_iter().filter(|(holds, _)| *holds).map(|(_, m)| m).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn every_input_yields_exactly_one_macro_state(
        grad_l in -1.5..1.5f64, d in unit(), p in unit(), omega in unit(), c in config()
    ) {
        let s = Signals { grad_l, d, p, omega };
        let matching = rows(s, &c);
        prop_assert_eq!(matching.len(), 1, "rows {:?} for {:?}", matching, s);
        prop_assert_eq!(macro_state(s, &c), matching[0]);
    }

    #[test]
    fn decisions_respect_the_budget_the_bounds_and_law_2(r in request(), st in state(), c in config()) {
        let d = ggs::decide(&r, &st, &c);
        prop_assert!(MacroState::ALL.contains(&d.directive));
        if d.loss.omega >= c.theta {
            prop_assert_eq!(d.directive, MacroState::Abandon, "Ω ≥ θ always abandons");
        }
        if d.worsening >= 2 {
            prop_assert_eq!(d.directive, MacroState::Abandon, "Law 2");
        }
        for (name, value) in [("D", d.loss.d), ("P", d.loss.p), ("Ω", d.loss.omega)] {
            prop_assert!((0.0..=1.0).contains(&value), "{} = {}", name, value);
        }
        let max = c.alpha + c.beta + c.lambda + 1e-9;
        prop_assert!(d.loss.l >= 0.0 && d.loss.l <= max, "L = {} not in [0, {}]", d.loss.l, max);
        if st.l_prev.is_none() {
            prop_assert_eq!(d.grad_l, 0.0, "no gradient on the first round");
        }
    }

    #[test]
    fn blocked_sets_only_grow_within_a_task(rounds in prop::collection::vec(request(), 1..8)) {
        let c = GgsConfig::default();
        let mut st = GgsState::default();
        for r in rounds {
            let d = ggs::decide(&r, &st, &c);
            let next = st.after(&d);
            prop_assert!(next.blocked_tools.is_superset(&st.blocked_tools));
            prop_assert!(next.blocked_targets.is_superset(&st.blocked_targets));
            prop_assert_eq!(next.rounds, st.rounds + 1);
            prop_assert_eq!(next.last.as_deref(), Some(&d));
            prop_assert_eq!(next.l_prev, Some(d.loss.l));
            st = next;
        }
    }
}

// ----------------------------------------------------------------- scenarios

fn aligned(base_case: &str, constraints: &str, atoms: &str) -> String {
    format!(
        "version: 1\nobjective:\n  goal: test\n  background_intent: test\n  deliverables: test\n  definition_of_done: test\n  base_case: {{ command: \"{base_case}\" }}\n  constraints: {constraints}\ngraph:\n  atoms:\n{atoms}"
    )
}

fn start(env: &TestEnv) -> crate::common::Run {
    run_aot_with(env.dir.path(), &["start"], &[("AOT_TEST_CLOCK", "1767225600000")])
}

/// Every decision of the task, from the journal; the file holds the count and the latest.
fn decisions(env: &TestEnv) -> Vec<Decision> {
    let journal = aot::journal::read(&aot::journal::path_for(&env.path("aot.yaml"))).unwrap();
    let all: Vec<Decision> = journal
        .records
        .into_iter()
        .filter_map(|r| match r.event {
            aot::journal::event::Event::GgsDecided { decision } => Some(*decision),
            _ => None,
        })
        .collect();
    let ggs = document::read(&env.path("aot.yaml")).unwrap().state.run.ggs;
    assert_eq!(ggs.rounds as usize, all.len());
    assert_eq!(ggs.last.as_deref(), all.last());
    all
}

fn directives(env: &TestEnv) -> Vec<&'static str> {
    decisions(env).iter().map(|d| d.directive.as_str()).collect()
}

/// The decision lines as the live display and `aot log` show them.
fn lines(env: &TestEnv) -> String {
    decisions(env)
        .iter()
        .map(|d| format!("#{} {}\n   {}\n", d.round, d.line(), d.rationale))
        .collect()
}

fn started(env: &TestEnv, atom: &str) -> bool {
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    journal
        .lines()
        .any(|l| l.contains("\"atom_started\"") && l.contains(&format!("\"atom\":\"{atom}\"")))
}

#[test]
fn environmental_failures_change_path_to_the_same_tools_other_targets() {
    let env = TestEnv::new();
    // Fails with EX_TEMPFAIL (75) the first two times it runs, then succeeds.
    env.write(
        "flaky.sh",
        "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\n[ $n -gt 2 ] || exit 75\ntouch fetched\n",
    );
    env.write(
        "aot.yaml",
        &aligned(
            "test -f fetched",
            "{ max_retries: 0, max_parallel_agents: 1 }",
            "    fetch: { or: [mirror-a, git-clone, mirror-b, mirror-c] }
    mirror-a: { run: sh flaky.sh, tool: curl, target: a.example }
    git-clone: { run: sh flaky.sh, tool: git, target: git.example }
    mirror-b: { run: sh flaky.sh, tool: curl, target: b.example }
    mirror-c: { run: sh flaky.sh, tool: curl, target: c.example }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(directives(&env), ["change_path", "change_path"]);
    let s = document::read(&env.path("aot.yaml")).unwrap().state;
    let blocked: Vec<&String> = s.run.ggs.blocked_targets.iter().collect();
    assert_eq!(blocked, ["a.example", "b.example"]);
    assert!(
        s.run.ggs.blocked_tools.is_empty(),
        "an environmental failure blames no tool"
    );
    assert!(
        !started(&env, "git-clone"),
        "change_path keeps the tool: curl's other targets first"
    );
    assert_eq!(s.bindings.keys().collect::<Vec<_>>(), ["mirror-c", "fetch"]);
    insta::assert_snapshot!(lines(&env));
}

#[test]
fn a_logical_failure_breaks_symmetry_and_the_blocked_tool_never_runs_again() {
    let env = TestEnv::new();
    env.write("input.txt", "broken\n");
    env.write(
        "aot.yaml",
        &aligned(
            "grep -q fixed input.txt",
            "{ max_retries: 2, max_parallel_agents: 1 }",
            "    fix: { or: [sed-a, sed-b, python-fix] }
    sed-a: { run: sed -n p input.txt, check: [grep -q fixed input.txt], tool: sed }
    sed-b: { run: sed -n p input.txt > sed-b-ran, check: [grep -q fixed input.txt], tool: sed }
    python-fix: { run: echo fixed > input.txt, tool: python }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 0, "{}", run.transcript());
    // The check failed identically twice, so no third attempt; then one decision.
    let journal = std::fs::read_to_string(env.path("aot.yaml.journal.jsonl")).unwrap();
    assert_eq!(journal.matches("\"attempt_failed\"").count(), 1);
    assert_eq!(directives(&env), ["break_symmetry"]);
    let d = &decisions(&env)[0];
    assert_eq!(d.blocked_tools, ["sed"]);
    assert_eq!(
        d.failed_criterion.as_deref(),
        Some("sed-a: check[0]: grep -q fixed input.txt")
    );
    assert!(!started(&env, "sed-b"), "sed-b shares the blocked tool");
    assert!(!env.path("sed-b-ran").exists());
    let s = document::read(&env.path("aot.yaml")).unwrap().state;
    assert!(s.trail.iter().any(|t| matches!(t,
        aot::state::TrailEntry::Backtrack { from, to, .. } if from == "sed-a" && to == "python-fix")));
    insta::assert_snapshot!(lines(&env));
}

#[test]
fn nothing_that_qualifies_stops_exhausted_naming_what_was_tried_and_refused() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "{ max_retries: 0 }",
            "    fix: { or: [sed-a, sed-b] }
    sed-a: { run: sed -n p /dev/null, check: [\"false\"], tool: sed }
    sed-b: { run: sed -n p /dev/null, tool: sed }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 5, "{}", run.transcript());
    assert!(!started(&env, "sed-b"));
    let stop = document::read(&env.path("aot.yaml")).unwrap().state.run.stop.unwrap();
    assert_eq!(stop.reason, StopReason::Exhausted);
    assert!(stop.message.contains("`sed-a`"), "{}", stop.message);
    assert!(stop.message.contains("break_symmetry"), "{}", stop.message);
    assert!(
        stop.message.contains("refused sed-b (`sed-b` uses blocked tool sed)"),
        "{}",
        stop.message
    );
}

const DIVERGING: &str = "    fix: { or: [one, two, three, four] }
    one: { run: 'true', tool: t1, check: ['true', 'false'] }
    two: { run: 'true', tool: t2, check: ['false'] }
    three: { run: THREE, tool: t3 }
    four: { run: 'true', tool: t4 }
";

#[test]
fn two_worsening_rounds_abandon_with_a_final_result() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "{ max_retries: 0, max_parallel_agents: 1 }",
            &DIVERGING.replace("THREE", "'false'"),
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 4, "{}", run.transcript());
    assert_eq!(directives(&env), ["break_symmetry", "change_approach", "abandon"]);
    let history = decisions(&env);
    assert!(history[2].law2);
    assert!(!started(&env, "four"), "the run stopped before trying more");
    let s = document::read(&env.path("aot.yaml")).unwrap().state;
    let stop = s.run.stop.unwrap();
    assert_eq!(stop.reason, StopReason::Abandoned);
    let result = stop.final_result.unwrap();
    assert!(!result.accepted);
    assert!(result.loss.d > 0.0);
    assert!((2..=3).contains(&result.next_moves.len()), "{:#?}", result.next_moves);
    assert!(
        result.next_moves[0].contains("`three` fails (run: exit 1"),
        "{:#?}",
        result.next_moves
    );
    assert!(
        result.next_moves[1].contains("aot redirect --choose fix=four"),
        "{:#?}",
        result.next_moves
    );
    assert!(result.next_moves[2].contains("rose in each of the last two rounds"));
    insta::assert_snapshot!(lines(&env));
    // `aot log --ggs` shows the same history.
    let log = env.aot(&["log", "--ggs"]);
    assert_eq!(log.code, 0, "{}", log.transcript());
    assert_eq!(log.stdout.matches("∇ GGS #").count(), 3, "{}", log.stdout);
    assert!(log.stdout.contains("→ abandon"));
}

#[test]
fn a_restarted_run_continues_the_same_trajectory() {
    let env = TestEnv::new();
    // `three` waits until the test lets it fail, so the runner can be killed
    // right after the second decision with `three` in flight.
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "{ max_retries: 0, max_parallel_agents: 1 }",
            &DIVERGING.replace("THREE", "'while [ ! -e go ]; do sleep 0.02; done; false'"),
        ),
    );
    let mut child = env
        .command()
        .args(["--json", "start"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut seen = 0;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.contains("\"ggs_decided\"") {
            seen += 1;
        }
        if seen == 2 && line.contains("\"atom_started\"") && line.contains("\"three\"") {
            break;
        }
    }
    assert_eq!(seen, 2, "the runner ended before its second decision");
    child.kill().unwrap();
    child.wait().unwrap();
    env.write("go", "");
    // A worker the killed runner was spawning at that instant may hold the
    // runner lock until it has exec'd or exited: wait (bounded) for it.
    let paths = aot::store::Paths::new(&env.path("aot.yaml"));
    env.wait_until("the runner lock is released", || {
        aot::store::running_pid(&paths).is_none()
    });

    let run = start(&env);
    assert_eq!(run.code, 4, "{}", run.transcript());
    let history = decisions(&env);
    assert_eq!(history.len(), 3);
    // ∇L of the third round is measured against the second round's saved loss:
    // without it the third round would be a first round (∇L = 0, a plateau).
    let expected = ((history[2].loss.l - history[1].loss.l) * 1e9).round() / 1e9;
    assert_eq!(history[2].grad_l, expected);
    assert!(history[2].grad_l > 0.1, "{}", history[2].line());
    assert_eq!(history[2].directive, MacroState::Abandon);
    assert!(history[2].law2);
    insta::assert_snapshot!(lines(&env));
}

#[test]
fn refine_re_dispatches_a_failed_atom_with_its_correction() {
    let env = TestEnv::new();
    // `b` fails environmentally until it is re-dispatched with a correction.
    env.write(
        "b.sh",
        "if [ -n \"$AOT_CORRECTION\" ]; then printf '%s' \"$AOT_CORRECTION\" > correction.json; echo ok; else exit 75; fi\n",
    );
    env.write(
        "aot.yaml",
        &aligned(
            "test -f correction.json",
            "{ max_retries: 0, max_parallel_agents: 3 }",
            "    fetch: { or: [a, b] }
    a: { run: exit 75, tool: curl, target: a.example }
    b: { run: sh b.sh, tool: curl, target: b.example }
    c: { run: 'true' }
    d: { run: 'true' }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 0, "{}", run.transcript());
    // Round 1: a fails beside two successes (D = 1/3). Round 2: b alone fails
    // (D = 1): the loss rises with environmental failures, so b is refined.
    assert_eq!(directives(&env), ["change_path", "refine"]);
    let correction: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("correction.json")).unwrap()).unwrap();
    assert_eq!(correction["atom"], "b");
    assert_eq!(correction["class"], "environmental");
    assert!(
        correction["message"].as_str().unwrap().contains("exit 75"),
        "{correction}"
    );
    let s = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(s.run.replans, 2);
    insta::assert_snapshot!(lines(&env));
}

#[test]
fn success_never_ends_a_run_only_the_base_case_does() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "{ max_retries: 0, max_parallel_agents: 5 }",
            "    a: { run: 'true' }
    b: { run: 'true' }
    c: { run: 'true' }
    d: { run: 'true' }
    x: { or: [x1, x2] }
    x1: { run: 'false', tool: t1 }
    x2: { run: 'true', tool: t2 }
",
        ),
    );
    let run = start(&env);
    // One failed criterion among five (D = 0.2 ≤ δ) is "success", yet the run
    // goes on: x2 replaces x1, and with the base case failing the run ends
    // exhausted, not completed.
    assert_eq!(run.code, 5, "{}", run.transcript());
    let history = decisions(&env);
    assert_eq!(history[0].directive, MacroState::Success, "{}", history[0].line());
    assert_eq!(history[0].loss.d, 0.2);
    assert!(started(&env, "x2"));
    let stop = document::read(&env.path("aot.yaml")).unwrap().state.run.stop.unwrap();
    assert_eq!(stop.reason, StopReason::Exhausted);
    assert!(
        stop.message
            .contains("every atom is solved but the base case still fails"),
        "{}",
        stop.message
    );
}

#[test]
fn a_spent_budget_abandons_and_says_how_to_raise_it() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "false",
            "{ max_retries: 0, max_replans: 1, ggs: { theta: 0.5 } }",
            "    x: { or: [x1, x2, x3] }
    x1: { run: 'false', tool: t1 }
    x2: { run: 'false', tool: t2 }
    x3: { run: 'false', tool: t3 }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 4, "{}", run.transcript());
    // The first decision makes one replan: Ω = 0.6·1/1 ≥ θ = 0.5 at the second.
    assert_eq!(directives(&env), ["break_symmetry", "abandon"]);
    let d = &decisions(&env)[1];
    assert!(!d.law2);
    assert!(d.rationale.contains("budget is spent"), "{}", d.rationale);
    let result = document::read(&env.path("aot.yaml"))
        .unwrap()
        .state
        .run
        .stop
        .unwrap()
        .final_result
        .unwrap();
    assert!(
        result
            .next_moves
            .iter()
            .any(|m| m.contains("`aot redirect --set max_replans=3 --set time_budget=600s`, then `aot start`")),
        "{:#?}",
        result.next_moves
    );
    assert!(!started(&env, "x3"));
}

#[test]
fn log_follow_prints_a_running_loop_until_it_stops() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f done",
            "{ max_retries: 0 }",
            "    x: { or: [x1, x2] }
    x1: { run: 'false', tool: t1 }
    x2: { run: touch done, tool: t2 }
",
        ),
    );
    // The follower starts before the journal exists and ends with the run.
    let follower = env
        .command()
        .args(["log", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(start(&env).code, 0);
    let output = follower.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("∇ GGS #1"), "{text}");
    assert!(text.contains("blocked tools: t1"), "{text}");
    assert!(
        text.lines().last().unwrap_or("").contains("aot: stopped (completed)"),
        "{text}"
    );
}

#[test]
fn a_choice_made_before_a_tool_was_blocked_is_switched_before_it_runs() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f later-done",
            "{ max_retries: 0, max_parallel_agents: 1 }",
            "    fix: { or: [first, first-py] }
    first: { run: 'false', tool: sed }
    first-py: { run: 'true', tool: python }
    later: { or: [sed-alt, py-alt] }
    sed-alt: { run: touch later-done, tool: sed }
    py-alt: { run: touch later-done, tool: python }
",
        ),
    );
    let run = start(&env);
    assert_eq!(run.code, 0, "{}", run.transcript());
    // `later` chose sed-alt in round 1, before `first` failed and sed was blocked.
    let s = document::read(&env.path("aot.yaml")).unwrap().state;
    assert!(s.trail.iter().any(|t| matches!(t,
        aot::state::TrailEntry::OrChoice { group, chosen, .. } if group == "later" && chosen == "sed-alt")));
    assert!(!started(&env, "sed-alt"), "the blocked tool never runs");
    assert!(started(&env, "py-alt"));
    assert_eq!(s.run.ggs.blocked_tools.iter().collect::<Vec<_>>(), ["sed"]);
}

#[test]
fn after_an_abandon_a_new_start_takes_up_the_unrecovered_failure() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &aligned(
            "test -f four-ran",
            "{ max_retries: 0, max_parallel_agents: 1 }",
            &DIVERGING.replace("THREE", "'false'").replace(
                "four: { run: 'true', tool: t4 }",
                "four: { run: touch four-ran, tool: t4 }",
            ),
        ),
    );
    assert_eq!(start(&env).code, 4);
    // The third decision abandoned before `three`'s failure was recovered from.
    let again = start(&env);
    assert_eq!(again.code, 0, "{}", again.transcript());
    let history = decisions(&env);
    assert_eq!(history.len(), 4);
    // Measured against the saved L_prev: the same failure, a little more budget
    // spent, so a plateau — not a third worsening round.
    assert_eq!(
        history[3].gradient,
        aot::ggs::Gradient::Plateau,
        "{}",
        history[3].line()
    );
    assert_eq!(history[3].directive, MacroState::BreakSymmetry);
    assert!(started(&env, "four"));
}

#[test]
fn a_start_facing_an_unmet_base_case_with_everything_solved_decides_on_the_loss_it_left() {
    let env = TestEnv::new();
    let atoms = "    a: { run: 'true' }\n    b: { run: 'true', deps: [a] }\n";
    env.write("aot.yaml", &aligned("test -f never", "{ max_retries: 0 }", atoms));
    assert_eq!(start(&env).code, 5, "exhausted");
    assert_eq!(start(&env).code, 5, "exhausted again");
    let history = decisions(&env);
    assert_eq!(history.len(), 2, "{}", lines(&env));
    assert_eq!(
        history[1].loss.d,
        history[0].loss.d,
        "nothing new was observed: {}",
        lines(&env)
    );
    assert_eq!(history[1].worsening, 0, "{}", lines(&env));
    assert_ne!(history[1].directive, MacroState::ChangeApproach, "{}", lines(&env));
}

#[test]
fn a_start_facing_the_last_runs_failures_decides_on_the_loss_it_left() {
    let env = TestEnv::new();
    // `good` and `bad` finish in one round: D = 0.5. `bad` has no way left.
    let atoms = "    top: { run: 'true', deps: [good, bad] }\n    good: { run: 'true' }\n    bad: { run: 'false' }\n";
    env.write("aot.yaml", &aligned("test -f done", "{ max_retries: 0 }", atoms));
    assert_eq!(start(&env).code, 5, "exhausted");
    let first = decisions(&env);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].loss.d, 0.5);
    // Started again as it is: `bad` is still failed, so GGS decides again
    // before anything runs, on nothing new.
    for round in 2..=3 {
        assert_eq!(start(&env).code, 5, "exhausted again");
        let history = decisions(&env);
        assert_eq!(history.len(), round, "{}", lines(&env));
        let last = &history[round - 1];
        assert_eq!(last.loss.d, 0.5, "nothing new was observed: {}", lines(&env));
        assert_eq!(last.worsening, 0, "a restart is no worsening: {}", lines(&env));
        assert!(!last.law2, "{}", lines(&env));
    }
}
