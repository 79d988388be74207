//! Load → save → load gives equal values for every example.

use aot::state::document;

use crate::common::{TestEnv, examples};

#[test]
fn every_example_round_trips_through_the_store() {
    for example in examples() {
        let env = TestEnv::new();
        let name = example.file_name().unwrap().to_str().unwrap();
        let path = env.example(name);
        let before = document::read(&path).unwrap().state;
        let mut store = env.store(&path);
        let (mut opened, _) = store.open().unwrap();
        // Saving with no new events rewrites the file from the types.
        store.commit(&mut opened, Vec::new()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let after = document::read(&path).unwrap().state;
        let mut expected = before.clone();
        expected.run.revision = after.run.revision;
        assert_eq!(after, expected, "{name} changed in a round trip:\n{text}");
        assert!(
            text.starts_with("# yaml-language-server: $schema="),
            "{name} lost its schema line:\n{text}"
        );
    }
}

#[test]
fn literal_block_scalars_stay_literal() {
    let env = TestEnv::new();
    let path = env.example("single.yaml");
    let mut store = env.store(&path);
    let (mut state, _) = store.open().unwrap();
    store.commit(&mut state, Vec::new()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("      run: |\n        mkdir -p out\n        echo \"hello from aot\" > out/hello.txt\n"),
        "the multi-line command must stay a literal block:\n{text}"
    );
}

/// The user's text of a state file: comments, flow style, key order, blank lines.
const COMMENTED: &str = "# My plan. Comments stay where I put them.
version: 2
objective:
  goal: test   # an inline comment
  background_intent: test
  deliverables: test
  definition_of_done: test
  base_case: { command: 'test -f c.done' }

graph:
  atoms:
    # the first step
    a: { run: \"echo 'summary: a done'\" }
    b: { run: 'touch b.done', deps: [a] }   # flow style

    c:
      deps: [b]
      run: touch c.done
";

/// The text above the engine's marker, which aot must never change.
fn user_part(text: &str) -> &str {
    let marker = format!("\n{}\n", aot::state::document::ENGINE_MARKER);
    text.find(&marker).map_or(text, |i| &text[..i])
}

#[test]
fn a_commented_flow_styled_file_run_to_completion_keeps_its_user_part_byte_for_byte() {
    let env = TestEnv::new();
    env.write("aot.yaml", COMMENTED);
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(user_part(&text), COMMENTED, "the whole file:\n{text}");
    let state = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.graph.atoms["c"].status, aot::state::AtomStatus::Solved);
    assert!(text.contains("\nstatus:\n"), "{text}");
    // The engine's section is the file's end, and the only thing after the user's part.
    assert_eq!(text.matches(aot::state::document::ENGINE_MARKER).count(), 1);

    // A redirect of the engine's part (a re-run) leaves the user's part as written.
    let run = env.aot(&["redirect", "--reset", "a"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!run.stderr.contains("written afresh"), "{}", run.stderr);
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(user_part(&text), COMMENTED);
    assert!(!env.path(".aot").read_dir().unwrap().any(|e| {
        let name = e.unwrap().file_name();
        name.to_string_lossy().contains(".before-")
    }));

    // A constraint is the user's: it is written in, and the rest of the part
    // stays as written.
    let run = env.aot(&["redirect", "--set", "max_retries=2"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!run.stderr.contains("could not all be kept"), "{}", run.stderr);
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let with_constraint = COMMENTED.replace(
        "  base_case: { command: 'test -f c.done' }\n",
        "  base_case: { command: 'test -f c.done' }\n  constraints:\n    max_retries: 2\n",
    );
    assert_eq!(user_part(&text), with_constraint);
    let run = env.aot(&["redirect", "--set", "max_retries=3", "--goal", "test # not a comment"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let changed = with_constraint
        .replace("max_retries: 2", "max_retries: 3")
        .replace("goal: test   #", "goal: \"test # not a comment\"   #");
    assert_eq!(user_part(&text), changed);

    // An atom added and removed: the atom's lines come and go, nothing else.
    let run = env.aot(&["redirect", "--add-atom", "d=touch d.done", "--deps", "c"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let added = format!("{changed}    d:\n      run: touch d.done\n      deps:\n      - c\n");
    assert_eq!(user_part(&text), added);
    let run = env.aot(&["redirect", "--remove-atom", "d"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(user_part(&text), changed);
    assert!(!env.path(".aot").read_dir().unwrap().any(|e| {
        let name = e.unwrap().file_name();
        name.to_string_lossy().contains(".before-")
    }));

    // A change that cannot be made in place (an atom removed where another
    // is added) writes the part afresh: the text as it was is kept, and
    // said where.
    let run = env.aot(&["redirect", "--remove-atom", "c", "--add-atom", "e=true"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert!(!user_part(&text).contains("# the first step"), "{text}");
    let kept = run
        .stderr
        .split("the text as it was is kept in ")
        .nth(1)
        .unwrap_or_else(|| panic!("says where the old text is: {}", run.stderr))
        .trim();
    assert!(kept.contains(".aot/aot.yaml.before-"), "{kept}");
    // (`path` joins a relative path to the test folder; an absolute one stays.)
    let kept = std::fs::read_to_string(env.path(kept)).unwrap_or_else(|e| panic!("{kept}: {e}"));
    assert_eq!(kept, changed, "the words as written, comments and all");

    // Written afresh once, the part has nothing more to lose: no more copies.
    let run = env.aot(&["redirect", "--set", "max_retries=4"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!run.stderr.contains("could not all be kept"), "{}", run.stderr);
}

#[test]
fn a_hand_edit_becomes_the_text_that_is_kept() {
    let env = TestEnv::new();
    env.write("aot.yaml", COMMENTED);
    assert_eq!(env.aot(&["start"]).code, 0);
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let edited = text.replacen(
        "    c:\n",
        "    # added by hand\n    d: { run: 'touch d.done', deps: [c] }\n\n    c:\n",
        1,
    );
    // ...and ask for the new atom's output, so the run does work and saves.
    let edited = edited.replacen("test -f c.done", "test -f d.done", 1);
    std::fs::write(env.path("aot.yaml"), &edited).unwrap();
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(
        user_part(&text),
        user_part(&edited),
        "the edited text is the user's part now"
    );
    assert!(env.path("d.done").exists());
}

#[test]
fn a_version_1_file_is_migrated_keeping_its_text_or_moving_the_engines_fields() {
    // Written by hand: the text is kept, only the version line changes.
    let env = TestEnv::new();
    let v1 = COMMENTED.replace("version: 2", "version: 1");
    env.write("aot.yaml", &v1);
    assert_eq!(env.aot(&["start"]).code, 0);
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert_eq!(user_part(&text), COMMENTED, "{text}");

    // Written by an older aot, with its record inline: moved under `status:`.
    let env = TestEnv::new();
    let old = "version: 1
objective:
  goal: test
  background_intent: test
  deliverables: test
  definition_of_done: test
  base_case: { command: 'test -f b.done' }
control:
  stop_requested: true
  stop_reason: lunch
  redirect_requested: false
corrections: []
graph:
  atoms:
    a:
      run: \"echo 'summary: a done'\"
      status: solved
      attempts: 1
    b:
      run: touch b.done
      deps: [a]
bindings:
  a: { summary: a done, at: '2026-01-01T00:00:00Z', attempt: 1 }
trail: []
run: { status: stopped, revision: 0, iteration: 1, replans: 0 }
";
    env.write("aot.yaml", old);
    let before = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(before.version, 2, "migrated as it is read");
    assert_eq!(before.graph.atoms["a"].status, aot::state::AtomStatus::Solved);
    assert!(before.control.stop_requested);
    let run = env.aot(&["start"]);
    assert_eq!(
        run.code,
        0,
        "a stale stop request does not stop the next start: {}",
        run.transcript()
    );
    let text = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    let user = user_part(&text);
    for engine in [
        "status: solved",
        "attempts:",
        "bindings:",
        "stop_requested",
        "corrections:",
        "\nrun:",
    ] {
        assert!(!user.contains(engine), "`{engine}` left the user's part:\n{text}");
    }
    assert!(user.starts_with("version: 2\n"), "{text}");
    assert_eq!(std::fs::read_to_string(env.path("aot.yaml")).ok().map(|_| ()), Some(()));
    let after = document::read(&env.path("aot.yaml")).unwrap().state;
    assert_eq!(after.bindings["a"].summary, "a done", "the record survives the move");
    assert!(!after.control.stop_requested, "the request was consumed");
    // Its layout (flow style) could not be kept: the file as it was is kept aside, and said where.
    let said = run.transcript();
    let kept = said
        .split("the text as it was is kept in ")
        .nth(1)
        .and_then(|rest| rest.split(['"', '\n']).next())
        .unwrap_or_else(|| panic!("says where the old text is: {said}"));
    assert_eq!(std::fs::read_to_string(env.path(kept)).unwrap(), old);
}
