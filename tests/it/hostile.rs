//! Hostile input and hostile neighbours: text an atom prints, files planted
//! in the folder, outputs without bound, a journal changed under a run.

use crate::common::TestEnv;

const HEAD: &str = "version: 1
objective:
  goal: g
  background_intent: b
  deliverables: d
  definition_of_done: done
  base_case:
    command: test -f used.done
  constraints:
    max_retries: 0
graph:
  atoms:
";

/// A summary and an output that try every way out of a shell word.
const EVIL: &str = r#"printf '%s\n' 'line $(touch PWNED-out) `touch PWNED-out2`' 'EOF' 'END'; printf 'summary: a $(touch PWNED1) `touch PWNED2` x'"'"'; touch PWNED3; echo '"'"' "q" \\ ${HOME} !! *\000z\n'"#;

#[test]
fn a_binding_reaches_the_next_command_as_text_never_as_code() {
    let env = TestEnv::new();
    let use_run = r#"printf '%s' {{bindings.evil.summary}} > bare.txt
        printf '%s' "{{bindings.evil.summary}}" > double.txt
        printf '%s' '{{bindings.evil.summary}}' > single.txt
        printf '%s' $'{{bindings.evil.summary}}' > ansi.txt
        printf '%s' "$(printf '%s' {{bindings.evil.summary}})" > nested.txt
        cat > heredoc.txt <<EOF
        {{bindings.evil.summary}}
        EOF
        printf '%s' "{{bindings.evil.output}}" > output.txt
        touch used.done"#;
    let text = format!(
        "{HEAD}    evil:\n      run: {}\n    use:\n      deps: [evil]\n      run: |\n        {}\n",
        serde_json::to_string(EVIL).unwrap(),
        use_run
    );
    env.write("aot.yaml", &text);
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());

    let pwned: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("PWNED"))
        .collect();
    assert!(pwned.is_empty(), "a binding ran as code: {pwned:?}");

    let summary = "a $(touch PWNED1) `touch PWNED2` x'; touch PWNED3; echo ' \"q\" \\ ${HOME} !! *z";
    for file in ["bare.txt", "double.txt", "single.txt", "ansi.txt", "nested.txt"] {
        let got = std::fs::read_to_string(env.path(file)).unwrap();
        assert_eq!(got, summary, "{file}");
    }
    let heredoc = std::fs::read_to_string(env.path("heredoc.txt")).unwrap();
    assert_eq!(heredoc.trim_end(), summary);
    let output = std::fs::read_to_string(env.path("output.txt")).unwrap();
    assert!(
        output.starts_with("line $(touch PWNED-out) `touch PWNED-out2`\nEOF\nEND\n"),
        "{output}"
    );
}

mod shell_words {
    use aot::model::time::Timestamp;
    use aot::state::Binding;
    use aot::state::template::ShellText;
    use indexmap::IndexMap;
    use proptest::prelude::*;

    /// Commands that print the binding of `x` from each place a template can stand.
    const PLACES: [&str; 7] = [
        "printf '%s' {{bindings.x.summary}}",
        "printf '%s' \"{{bindings.x.summary}}\"",
        "printf '%s' '{{bindings.x.summary}}'",
        "printf '%s' $'{{bindings.x.summary}}'",
        "printf '%s' \"$(printf '%s' '{{bindings.x.summary}}')\"",
        "printf '%s' \"`printf '%s' {{bindings.x.summary}}`\"",
        "cat <<EOF\n{{bindings.x.summary}}\nEOF",
    ];

    fn run(command: &str, env: &[(String, String)]) -> std::process::Output {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(command)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run bash")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever the text, bash prints it back unchanged from every place.
        #[test]
        fn any_text_is_one_word_in_every_place(
            value in proptest::string::string_regex("[a-z $()`'\"\\\\;&|*?{}#!<>~=\n\t]{0,40}").unwrap(),
            place in 0..PLACES.len(),
        ) {
            let mut bindings = IndexMap::new();
            bindings.insert("x".into(), Binding {
                summary: value.clone(),
                output_tail: String::new(),
                artifacts: vec![],
                at: Timestamp::from_millis(0),
                attempt: 1,
                changes: None,
            });
            let mut shell = ShellText::default();
            let command = shell.render(PLACES[place], &bindings).unwrap();
            let out = run(&command, &shell.env);
            let printed = String::from_utf8_lossy(&out.stdout);
            // Substitutions drop trailing newlines; a here-document adds one.
            let (got, want) = if place >= 4 {
                (printed.trim_end_matches('\n').to_string(), value.trim_end_matches('\n').to_string())
            } else {
                (printed.into_owned(), value.clone())
            };
            prop_assert_eq!(got, want, "command: {}", command);
        }
    }
}

#[test]
fn an_endless_output_line_is_cut_and_the_files_stay_small() {
    let env = TestEnv::new();
    let text = format!(
        "{HEAD}    flood:\n      run: \"printf 'summary: '; head -c 100000000 /dev/zero | tr '\\\\0' x; echo\"\n    used:\n      deps: [flood]\n      run: touch used.done\n"
    );
    env.write("aot.yaml", &text);
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let state = std::fs::metadata(env.path("aot.yaml")).unwrap().len();
    let journal = std::fs::metadata(env.path("aot.yaml.journal.jsonl")).unwrap().len();
    assert!(state < 16 * 1024, "state file is {state} bytes");
    assert!(journal < 32 * 1024, "journal is {journal} bytes");
    let status = env.aot(&["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.transcript());
    let saved = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert!(saved.contains("bytes cut]"), "the cut is visible:\n{saved}");
}

#[test]
fn a_service_left_holding_the_output_does_not_hold_the_run() {
    let env = TestEnv::new();
    // The service escapes the atom's process group and keeps its stdout.
    let text = format!(
        "{HEAD}    service:\n      run: \"mkfifo ready; setsid bash -c 'echo $$ > svc.pid; echo > ready; exec sleep 60' & read < ready; echo started\"\n    used:\n      deps: [service]\n      run: touch used.done\n"
    );
    env.write("aot.yaml", &text);
    let run = env.aot(&["start"]);
    let pid = std::fs::read_to_string(env.path("svc.pid")).unwrap_or_default();
    let pid: u32 = pid.trim().parse().expect("the service wrote its pid");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let alive = stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X']));
    let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
    // The run went on past it, and ended it with the run: nothing an
    // attempt started outlives the run.
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(!alive, "the service outlived the run");
    assert!(
        run.stderr
            .contains("stopped 1 process the run's attempts had left running"),
        "{}",
        run.stderr
    );
}

mod planted_links {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use crate::common::TestEnv;

    /// A folder with a runnable state file and a file outside it that links must not reach.
    fn folder() -> (TestEnv, std::path::PathBuf) {
        let env = TestEnv::new();
        env.write(
            "aot.yaml",
            &format!("{}    a:\n      run: touch used.done\n", super::HEAD),
        );
        let victim = env.write("victim", "precious\n");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        (env, victim)
    }

    fn assert_untouched(victim: &std::path::Path) {
        assert_eq!(std::fs::read_to_string(victim).unwrap(), "precious\n");
        let mode = std::fs::metadata(victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    fn assert_refused(run: &crate::common::Run, link: &str) {
        assert_ne!(run.code, 0, "{}", run.transcript());
        assert!(
            run.stderr.contains(link) && run.stderr.contains("is a symbolic link"),
            "names the link {link}: {}",
            run.transcript()
        );
    }

    #[test]
    fn a_link_at_a_lock_or_the_journal_is_refused() {
        for link in [".aot/aot.yaml.runner", ".aot/aot.yaml.lock", "aot.yaml.journal.jsonl"] {
            let (env, victim) = folder();
            std::fs::create_dir_all(env.path(".aot")).unwrap();
            symlink(&victim, env.path(link)).unwrap();
            let run = env.aot(&["start"]);
            assert_refused(&run, link);
            assert_untouched(&victim);
            assert!(!env.path("used.done").exists(), "nothing ran");
        }
    }

    #[test]
    fn a_linked_aot_folder_is_refused() {
        let (env, victim) = folder();
        let elsewhere = env.path("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, env.path(".aot")).unwrap();
        let run = env.aot(&["start"]);
        assert_refused(&run, ".aot");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        assert_untouched(&victim);
    }

    #[test]
    fn a_linked_state_file_is_read_but_never_replaced() {
        let (env, _) = folder();
        std::fs::create_dir(env.path("real")).unwrap();
        std::fs::rename(env.path("aot.yaml"), env.path("real/plan.yaml")).unwrap();
        symlink("real/plan.yaml", env.path("aot.yaml")).unwrap();
        let before = std::fs::read_to_string(env.path("real/plan.yaml")).unwrap();
        let run = env.aot(&["start"]);
        assert_refused(&run, "aot.yaml");
        assert!(
            run.stderr.contains("real/plan.yaml"),
            "names the target: {}",
            run.stderr
        );
        assert!(
            std::fs::symlink_metadata(env.path("aot.yaml"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(env.path("real/plan.yaml")).unwrap(), before);
        let validate = env.aot(&["validate"]);
        assert_eq!(
            validate.code,
            0,
            "reading through the link is fine: {}",
            validate.transcript()
        );
    }

    #[test]
    fn a_save_never_writes_through_a_link_at_a_temporary_name() {
        let (env, victim) = folder();
        let path = env.path("aot.yaml");
        let mut store = env.store(&path);
        store.open().unwrap();
        // The name a save in this process used for its temporary file.
        symlink(&victim, env.path(&format!(".aot.yaml.tmp-{}", std::process::id()))).unwrap();
        store
            .transact(|_| Ok::<_, ()>((vec![aot::journal::event::Event::RunPaused {}], ())))
            .unwrap()
            .unwrap();
        assert_untouched(&victim);
    }
}

mod journal_under_a_run {
    use crate::common::TestEnv;

    /// A chain a → b → c → d where `c` does something to the journal.
    fn chain(env: &TestEnv, c_run: &str) {
        let text = format!(
            "{}    a:\n      run: echo summary=a\n    b:\n      deps: [a]\n      run: echo summary=b\n    c:\n      deps: [b]\n      run: {c_run}\n    d:\n      deps: [c]\n      run: touch used.done\n",
            super::HEAD
        );
        env.write("aot.yaml", &text);
    }

    fn assert_stopped_keeping_bindings(env: &TestEnv, what: &str) {
        let run = env.aot(&["start"]);
        assert_ne!(run.code, 0, "{}", run.transcript());
        assert!(
            run.stderr.contains(what),
            "says the journal was {what}: {}",
            run.transcript()
        );
        assert!(!env.path("used.done").exists(), "the run stopped");
        let state = aot::state::document::read(&env.path("aot.yaml")).unwrap().state;
        for atom in ["a", "b"] {
            assert!(
                state.bindings.contains_key(atom),
                "{atom} keeps its binding:\n{state:#?}"
            );
        }
    }

    #[test]
    fn a_journal_cut_short_stops_the_run() {
        let env = TestEnv::new();
        chain(&env, "'[ -f once ] || { touch once; : > aot.yaml.journal.jsonl; }'");
        assert_stopped_keeping_bindings(&env, "cut from");
        let check = env.aot(&["replay", "--check"]);
        assert_eq!(
            check.code,
            0,
            "the file is the fold of its journal again: {}",
            check.transcript()
        );
        let found: Vec<_> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".rewound-"))
            .collect();
        assert_eq!(found.len(), 1, "the journal found is kept aside");
        let again = env.aot(&["start"]);
        assert_eq!(again.code, 0, "{}", again.transcript());
        assert!(env.path("used.done").exists());
    }

    #[test]
    fn a_deleted_journal_stops_the_run() {
        let env = TestEnv::new();
        chain(&env, "rm aot.yaml.journal.jsonl");
        assert_stopped_keeping_bindings(&env, "deleted");
    }

    #[test]
    fn a_journal_replaced_by_an_older_copy_stops_the_run() {
        let env = TestEnv::new();
        chain(
            &env,
            "head -n 2 aot.yaml.journal.jsonl > old && mv old aot.yaml.journal.jsonl",
        );
        assert_stopped_keeping_bindings(&env, "replaced by a file");
    }
}

#[test]
fn a_full_disk_or_a_closed_pipe_on_stdout_is_an_error_not_a_panic() {
    let env = TestEnv::new();
    env.write("aot.yaml", &format!("{HEAD}    a:\n      run: touch used.done\n"));
    for args in [
        &["validate"][..],
        &["status"],
        &["--json", "status"],
        &["schema"],
        &["graph"],
    ] {
        let full = std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = env.command().args(args).stdout(full).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write to standard output"), "{args:?}: {stderr}");
    }
    // A reader that stops early (`aot schema | head -1`).
    let mut child = env
        .command()
        .arg("schema")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    assert_ne!(out.status.code(), Some(101));
}

#[test]
fn replay_check_right_after_a_kill_finds_nothing_wrong() {
    let env = TestEnv::new();
    let path = env.write("aot.yaml", &format!("{HEAD}    a:\n      run: touch used.done\n"));
    // Killed before its first write: no journal yet.
    let check = env.aot(&["replay", "--check"]);
    assert_eq!(check.code, 0, "{}", check.transcript());
    assert!(check.stdout.contains("no journal yet"), "{}", check.stdout);
    // Killed after the journal began, before the file's first save.
    let state = aot::state::document::read(&path).unwrap().state;
    let (mut journal, _) = aot::journal::Journal::open(&env.path("aot.yaml.journal.jsonl")).unwrap();
    let at = aot::model::time::Timestamp::from_millis(0);
    journal
        .append(
            at,
            vec![
                aot::journal::event::Event::snapshot(&state),
                aot::journal::event::Event::RunPaused {},
            ],
        )
        .unwrap();
    let check = env.aot(&["replay", "--check"]);
    assert_eq!(check.code, 0, "{}", check.transcript());
    assert!(check.stdout.contains("2 event(s) the file lacks"), "{}", check.stdout);
    // A stale temporary file of the killed save is swept by the next command.
    env.write(".aot.yaml.tmp-AbC123", "half a save");
    assert_eq!(env.aot(&["stop"]).code, 0);
    assert!(
        !env.path(".aot.yaml.tmp-AbC123").exists(),
        "the killed save's temporary file is gone"
    );
}

#[test]
fn a_secret_in_aot_environment_is_never_recorded() {
    let env = TestEnv::new();
    let token = "ghp_s3cr3t-value-0123456789";
    env.write(
        "aot.yaml",
        &format!(
            "{HEAD}    leak:\n      run: |\n        echo \"summary: token is $DEPLOY_TOKEN\"\n    fail:\n      run: |\n        echo \"bad $DEPLOY_TOKEN\" >&2; exit 1\n"
        ),
    );
    let run = crate::common::run_aot_with(env.dir.path(), &["start"], &[("DEPLOY_TOKEN", token)]);
    assert_ne!(run.code, 0, "{}", run.transcript());
    assert!(
        !run.stdout.contains(token) && !run.stderr.contains(token),
        "{}",
        run.transcript()
    );

    let mut seen = 0;
    for entry in crate::common::files_under(env.dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(token), "the secret reached {}", entry.display());
        seen += usize::from(text.contains("[redacted]"));
    }
    let state = std::fs::read_to_string(env.path("aot.yaml")).unwrap();
    assert!(state.contains("token is [redacted]"), "{state}");
    assert!(seen >= 2, "the redacted text is in the file and its journal");
}

#[test]
fn control_sequences_from_a_goal_or_a_summary_print_as_visible_text_never_obeyed() {
    let env = TestEnv::new();
    // The goal written with YAML escapes (a title change, 8-bit CSI); the
    // summary printed by the atom carries OSC 52, which writes the clipboard.
    env.write(
        "aot.yaml",
        &format!(
            "{}    used:\n      run: \"printf 'summary: copied \\\\033]52;c;cHduZWQ=\\\\007 a \\\\302\\\\2331m b\\\\n' && touch used.done\"\n",
            HEAD.replace("goal: g", "goal: \"g \\e]0;owned\\a \\x9b2J\"")
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let obeyed = |text: &str| text.chars().any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{9b}');
    for args in [&["status"][..], &["log"], &["status", "--all"], &["start"]] {
        let shown = env.aot(args);
        assert!(
            !obeyed(&shown.stdout) && !obeyed(&shown.stderr),
            "{args:?}:\n{:?}",
            shown.transcript()
        );
    }
    let status = env.aot(&["status"]);
    assert!(
        status.stdout.contains("\\u001b]52;c;cHduZWQ=\\u0007"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("\\u001b]0;owned\\u0007"), "{}", status.stdout);
    // --json escapes them as JSON does, and says exactly what was there.
    let json = env.aot(&["--json", "status"]);
    assert!(!obeyed(&json.stdout), "{:?}", json.stdout);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("status --json is JSON");
    assert!(value.to_string().contains("\\u001b]52"), "{value}");
    assert!(
        json.stdout.contains("\\u009b"),
        "the 8-bit CSI is escaped in JSON too:\n{}",
        json.stdout
    );
}

#[test]
fn the_largest_max_retries_is_a_bound_not_an_overflow() {
    // Found by the fuzzer: `max_retries: 4294967295` overflowed `1 + max_retries`.
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        &format!(
            "{}    used:\n      run: touch used.done\n",
            HEAD.replace("max_retries: 0", "max_retries: 4294967295")
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert_eq!(env.aot(&["status"]).code, 0);
}

#[test]
fn without_git_too_no_daemon_an_attempt_started_outlives_the_run() {
    let env = TestEnv::new();
    let dir = env.dir.path().display().to_string();
    env.write(
        "aot.yaml",
        &format!(
            "{}    used:\n      run: '(setsid sh -c \"sleep 300 & echo \\$! > {dir}/d.pid\" &); while [ ! -s {dir}/d.pid ]; do sleep 0.05; done; touch used.done'\n",
            HEAD
        ),
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.transcript());
    let pid = std::fs::read_to_string(env.path("d.pid")).unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
    assert!(!alive, "the daemon outlived the run");
}

#[test]
fn an_attempt_of_the_same_user_cannot_read_aots_environment() {
    // As another, unprivileged user (root would have CAP_SYS_PTRACE): aot
    // and its attempt run as `nobody`, and the attempt tries for the key.
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    });
    if !root || !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv to run aot as an unprivileged user");
        return;
    }
    let env = TestEnv::new();
    std::fs::set_permissions(env.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    env.write(
        "aot.yaml",
        &format!(
            "{}    used:\n      run: 'cat /proc/$AOT_RUNNER_PID/environ > seen.txt 2> err.txt; touch used.done'\n",
            HEAD
        ),
    );
    let output = std::process::Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_aot"))
        .arg("start")
        .current_dir(env.dir.path())
        .env("HOME", env.dir.path())
        .env("OPENAI_API_KEY", "sk-do-not-read-me")
        .env("NO_COLOR", "1")
        .output()
        .expect("run aot as nobody");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(env.path("used.done").exists(), "{said}");
    let seen = std::fs::read_to_string(env.path("seen.txt")).unwrap_or_default();
    assert!(
        !seen.contains("sk-do-not-read-me"),
        "the attempt read aot's environment:\n{said}"
    );
}
