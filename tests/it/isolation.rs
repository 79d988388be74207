//! Workspace isolation in real git repositories: what an attempt changes
//! reaches the user's tree only when it succeeds; failed, cancelled and
//! losing attempts leave nothing; parallel atoms merge or conflict; a killed
//! run's attempt is put back by the next start.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{TestEnv, aot_command, root, wait_until};

/// A git repository in a temporary folder, with `a.txt` committed.
struct Repo {
    env: TestEnv,
    /// A folder outside the repository for markers tests wait on.
    marks: tempfile::TempDir,
}

impl Repo {
    fn new() -> Self {
        let env = TestEnv::new();
        let repo = Repo {
            env,
            marks: tempfile::tempdir().expect("marks folder"),
        };
        crate::common::git_init(repo.dir());
        repo.env.write("a.txt", "one\ntwo\nthree\n");
        repo.env.write(".gitignore", "target/\n.aot/\n");
        repo.git(&["add", "a.txt", ".gitignore"]);
        repo.git(&["commit", "-q", "-m", "start"]);
        repo
    }

    fn dir(&self) -> &Path {
        self.env.dir.path()
    }

    /// The shell words that hold an atom until the test has made its edit
    /// (see [`Repo::start_editing_meanwhile`]): it says it started, then waits.
    fn hold(&self) -> String {
        format!(
            "touch {}; until [ -e {} ]; do sleep 0.05; done",
            self.mark("started").display(),
            self.mark("go").display()
        )
    }

    /// `aot start`, with `edit` made while an atom is held (see
    /// [`Repo::hold`]); the run's output when it ends.
    fn start_editing_meanwhile(&self, edit: impl FnOnce()) -> std::process::Output {
        let child = aot_command(self.dir())
            .arg("start")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start aot");
        wait_until(self.marks.path(), "the held atom runs", || {
            self.mark("started").exists()
        });
        edit();
        std::fs::write(self.mark("go"), "").unwrap();
        child.wait_with_output().expect("aot ends")
    }

    /// Saves `text` as `name` the way editors do, whole (written beside it,
    /// then renamed over it): a snapshot never sees it half written.
    fn save(&self, name: &str, text: &str) {
        let temp = self.marks.path().join(format!("{}.saving", name.replace('/', "_")));
        std::fs::write(&temp, text).unwrap();
        std::fs::copy(&temp, self.env.path(&format!("{name}.saving"))).unwrap();
        std::fs::rename(self.env.path(&format!("{name}.saving")), self.env.path(name)).unwrap();
    }

    fn mark(&self, name: &str) -> PathBuf {
        self.marks.path().join(name)
    }

    fn git(&self, args: &[&str]) -> String {
        crate::common::git(self.dir(), args)
    }

    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.env.path(name)).ok()
    }

    /// Writes `aot.yaml` with these constraints and atoms (YAML, indented for `graph.atoms`).
    fn plan(&self, constraints: &str, atoms: &str) {
        self.env.write(
            "aot.yaml",
            &format!(
                "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: {{ command: 'test -e done.txt' }}\n  constraints: {{ {constraints} }}\ngraph:\n  atoms:\n{atoms}"
            ),
        );
    }

    fn start(&self) -> crate::common::Run {
        self.env.aot(&["start"])
    }

    fn journal(&self) -> String {
        self.read("aot.yaml.journal.jsonl").unwrap_or_default()
    }

    /// The shell that marks a worker as running: its process group in
    /// `<name>.pid`, then `<name>.started`.
    fn running(&self, name: &str) -> String {
        format!(
            "echo $$ > {}; touch {}",
            self.mark(&format!("{name}.pid")).display(),
            self.mark(&format!("{name}.started")).display()
        )
    }

    /// Starts `aot start`, waits until each of `workers` runs (see
    /// [`Repo::running`]), then SIGKILLs aot and the workers' groups.
    fn kill_mid_run(&self, workers: &[&str]) {
        let mut child = aot_command(self.dir())
            .arg("start")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start aot");
        wait_until(self.marks.path(), "the workers run", || {
            workers.iter().all(|w| self.mark(&format!("{w}.started")).exists())
        });
        child.kill().expect("SIGKILL aot");
        let _ = child.wait();
        for worker in workers {
            let pid = std::fs::read_to_string(self.mark(&format!("{worker}.pid"))).unwrap();
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{}", pid.trim())])
                .status();
        }
    }

    /// No ref of aot's is left, and no copy of the tree but the pool kept
    /// for the next run (under the copies' folder, outside the repository,
    /// at most `pool` of them).
    fn assert_clean_after_run(&self) {
        self.assert_clean_after_run_keeping(3);
    }

    fn assert_clean_after_run_keeping(&self, pool: usize) {
        let worktrees = self.git(&["worktree", "list", "--porcelain"]);
        let copies: Vec<&str> = worktrees
            .lines()
            .filter_map(|l| l.strip_prefix("worktree "))
            .skip(1)
            .collect();
        assert!(
            copies.len() <= pool,
            "more copies kept than the pool holds:\n{worktrees}"
        );
        let root = crate::common::copies().display().to_string();
        for copy in &copies {
            assert!(
                copy.starts_with(&root) && copy.contains("/trees/"),
                "a stray worktree: {copy}"
            );
        }
        assert_eq!(self.git(&["for-each-ref", "refs/aot"]), "", "stray refs");
        assert_eq!(self.git(&["stash", "list"]), "");
        let scratch: Vec<_> = std::fs::read_dir(self.dir().join(".git/aot"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        for folder in scratch {
            let inside: Vec<_> = std::fs::read_dir(&folder)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            assert!(
                inside.iter().all(|name| name == "trees"),
                "aot's files left in {}: {inside:?}",
                folder.display()
            );
        }
    }
}

#[test]
fn a_failed_alternatives_edit_and_new_file_are_gone_and_the_next_ones_edit_stays() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [wrong, right]\n    wrong:\n      run: 'echo wrong > a.txt && echo junk > new.txt && false'\n    right:\n      run: 'echo right > a.txt && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("a.txt").as_deref(), Some("right\n"));
    assert_eq!(repo.read("new.txt"), None, "the failed alternative's new file is gone");
    let journal = repo.journal();
    assert!(
        journal.contains(r#""type":"changes_discarded","atom":"wrong""#),
        "{journal}"
    );
    assert!(
        journal.contains(r#"{"path":"new.txt","change":"added","added":1}"#),
        "{journal}"
    );
    assert!(
        journal.contains(r#""type":"changes_landed","atom":"right""#),
        "{journal}"
    );
    repo.assert_clean_after_run();
}

#[test]
fn a_retry_starts_from_a_clean_tree_and_is_told_what_was_discarded() {
    let repo = Repo::new();
    // Attempt 1 leaves half.txt and fails; attempt 2 succeeds only if half.txt is gone.
    repo.plan(
        "max_retries: 1",
        "    work:\n      run: 'test ! -e half.txt && echo \"$AOT_CORRECTION\" > correction.json && echo x > half.txt && test \"$AOT_ATTEMPT\" = 2 && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    let correction: serde_json::Value =
        serde_json::from_str(&repo.read("correction.json").unwrap()).expect("AOT_CORRECTION is JSON");
    assert_eq!(correction["working_tree"], "clean");
    assert_eq!(
        correction["discarded"],
        "2 files: correction.json (new, +1), half.txt (new, +1)"
    );
    assert_eq!(repo.read("half.txt").as_deref(), Some("x\n"));
    repo.assert_clean_after_run();
}

#[test]
fn of_two_speculative_racers_writing_one_file_only_the_winners_content_lands() {
    let repo = Repo::new();
    let loser_wrote = repo.mark("loser-wrote");
    repo.plan(
        "max_parallel_agents: 2",
        &format!(
            "    race:\n      or: [slow, fast]\n      speculative: true\n    slow:\n      run: 'echo slow >> a.txt && touch {mark} && sleep 1000'\n    fast:\n      run: 'while [ ! -e {mark} ]; do sleep 0.05; done; echo fast >> a.txt && touch done.txt'\n",
            mark = loser_wrote.display()
        ),
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("a.txt").as_deref(), Some("one\ntwo\nthree\nfast\n"));
    repo.assert_clean_after_run();
}

#[test]
fn parallel_atoms_editing_different_files_or_lines_all_land() {
    let repo = Repo::new();
    let top = repo.dir().display().to_string();
    // `second` finishes after `first` landed (it waits for first's line in the
    // user's tree), so its change merges with first's in the same file.
    repo.plan(
        "max_parallel_agents: 3",
        &format!(
            "    all:\n      deps: [first, second, other]\n      run: 'touch done.txt'\n    first:\n      run: 'sed -i s/one/ONE/ a.txt'\n    second:\n      run: 'until grep -q ONE {top}/a.txt; do sleep 0.05; done; sed -i s/three/THREE/ a.txt'\n    other:\n      run: 'echo b > b.txt'\n"
        ),
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("a.txt").as_deref(), Some("ONE\ntwo\nTHREE\n"));
    assert_eq!(repo.read("b.txt").as_deref(), Some("b\n"));
    repo.assert_clean_after_run();
}

#[test]
fn parallel_atoms_editing_the_same_lines_is_a_reported_conflict_of_the_later_one() {
    let repo = Repo::new();
    let top = repo.dir().display().to_string();
    repo.plan(
        "max_parallel_agents: 2, max_retries: 0",
        &format!(
            "    all:\n      deps: [first, second]\n      run: 'touch done.txt'\n    first:\n      run: 'sed -i s/two/FIRST/ a.txt'\n    second:\n      run: 'until grep -q FIRST {top}/a.txt; do sleep 0.05; done; sed -i s/two/SECOND/ a.txt'\n"
        ),
    );
    let run = repo.start();
    assert_ne!(run.code, 0);
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\nFIRST\nthree\n"),
        "what landed first stays:\n{}\n{}",
        run.stderr,
        repo.journal()
    );
    let journal = repo.journal();
    let failed = journal
        .lines()
        .find(|l| l.contains(r#""type":"atom_failed","atom":"second""#))
        .unwrap_or_else(|| panic!("second failed:\n{journal}"));
    assert!(failed.contains(r#""class":"logical""#), "{failed}");
    assert!(failed.contains(r#""criterion":"merge""#), "{failed}");
    assert!(failed.contains("a.txt (both changed the same lines)"), "{failed}");
    repo.assert_clean_after_run();
}

#[test]
fn a_probes_write_is_discarded() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    work:\n      run: 'exit 127'\n      probe: 'echo probed > probe.txt; exit 1'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 7, "blocked: {}", run.stderr);
    assert_eq!(repo.read("probe.txt"), None);
    repo.assert_clean_after_run();
}

#[test]
fn an_empty_folder_that_landed_stays_when_a_later_attempt_is_discarded() {
    // The README's OR example in a git work tree: `setup` makes `out/` (empty,
    // so git does not track it), `from-remote` fails and is discarded; `out/`
    // must still be there for `from-default`.
    let repo = Repo::new();
    std::fs::copy(root().join("state/or-fallback.yaml"), repo.env.path("aot.yaml")).unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("out/config.txt").as_deref(), Some("mode=safe\n"));
    repo.assert_clean_after_run();
}

#[test]
fn a_read_only_atoms_findings_are_its_result_and_its_changes_never_land() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    look:\n      run: 'echo scratch > notes.txt; echo summary: the parser is in src/date.py'\n      read_only: true\n    work:\n      run: 'echo \"{{bindings.look.summary}}\" > done.txt'\n      deps: [look]\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("notes.txt"), None, "the probe's write is discarded");
    assert_eq!(repo.read("done.txt").as_deref(), Some("the parser is in src/date.py\n"));
    let journal = repo.journal();
    assert!(
        journal.contains(r#""type":"changes_discarded","atom":"look""#),
        "{journal}"
    );
    repo.assert_clean_after_run();
}

#[test]
fn the_users_uncommitted_changes_are_the_starting_point_and_stay() {
    let repo = Repo::new();
    repo.env.write("a.txt", "one\nmine\nthree\n");
    repo.env.write("untracked.txt", "my notes\n");
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [wrong, right]\n    wrong:\n      run: 'rm untracked.txt && sed -i s/one/bad/ a.txt && false'\n    right:\n      run: 'grep -q mine a.txt && sed -i s/three/THREE/ a.txt && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("a.txt").as_deref(), Some("one\nmine\nTHREE\n"));
    assert_eq!(repo.read("untracked.txt").as_deref(), Some("my notes\n"));
    // Nothing was staged or committed behind the user's back.
    assert_eq!(repo.git(&["diff", "--cached", "--name-only"]), "");
    assert_eq!(repo.git(&["rev-list", "--count", "HEAD"]).trim(), "1");
    repo.assert_clean_after_run();
}

#[test]
fn a_backtrack_undoes_what_the_given_up_branch_landed() {
    let repo = Repo::new();
    // `plan-a` is an AND of a step that lands and one that fails: the
    // backtrack to `plan-b` must take the landed step's file away.
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [plan-a, plan-b]\n    plan-a:\n      deps: [a-step1, a-step2]\n      run: 'true'\n    a-step1:\n      run: 'echo step1 > step1.txt && sed -i s/one/A1/ a.txt'\n    a-step2:\n      deps: [a-step1]\n      run: 'false'\n    plan-b:\n      run: 'test ! -e step1.txt && grep -q one a.txt && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("step1.txt"), None);
    assert_eq!(repo.read("a.txt").as_deref(), Some("one\ntwo\nthree\n"));
    assert!(repo.journal().contains(r#""type":"changes_undone","atom":"a-step1""#));
    repo.assert_clean_after_run();
}

#[test]
fn a_run_killed_mid_attempt_never_touched_the_users_tree_and_the_next_start_has_nothing_to_put_back() {
    let repo = Repo::new();
    let second = repo.mark("second");
    repo.plan(
        "max_retries: 0",
        &format!(
            "    a:\n      run: 'echo landed > a.txt'\n    b:\n      deps: [a]\n      run: 'if [ -e {second} ]; then touch done.txt; else echo partial > b.txt; {running}; sleep 1000; fi'\n",
            second = second.display(),
            running = repo.running("b"),
        ),
    );
    repo.kill_mid_run(&["b"]);
    assert_eq!(
        repo.read("b.txt"),
        None,
        "the attempt wrote in its copy, not in your tree"
    );
    assert_eq!(repo.read("a.txt").as_deref(), Some("landed\n"), "what landed is there");
    std::fs::write(&second, "").unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("b.txt"), None);
    assert_eq!(repo.read("a.txt").as_deref(), Some("landed\n"), "landed work stays");
    assert!(!repo.journal().contains(r#""type":"workspace_recovered""#));
    repo.assert_clean_after_run();
}

#[test]
fn outside_a_git_work_tree_start_says_isolation_is_off_once() {
    let env = TestEnv::new();
    env.write(
        "aot.yaml",
        "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: { command: 'test -e done.txt' }\ngraph:\n  atoms:\n    a: { run: 'touch done.txt' }\n",
    );
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr.matches("aot: isolation: none").count(), 1, "{}", run.stderr);
    env.write(
        "aot.yaml",
        "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: { command: 'test -e done2.txt' }\n  constraints: { isolation: none }\ngraph:\n  atoms:\n    a: { run: 'touch done2.txt' }\n",
    );
    let run = env.aot(&["start"]);
    assert!(!run.stderr.contains("isolation"), "said as meant: {}", run.stderr);
}

#[test]
fn keep_failed_keeps_a_failed_attempts_tree_and_status_lists_it() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [wrong, right]\n    wrong:\n      run: 'echo wrong > a.txt && false'\n    right:\n      run: 'touch done.txt'\n",
    );
    let run = repo.env.aot(&["start", "--keep-failed"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\ntwo\nthree\n"),
        "the user's tree is clean"
    );
    let status = repo.env.aot(&["status", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&status.stdout).expect("status --json");
    let kept = value["kept_trees"].as_array().expect("kept_trees");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["name"], "wrong-1");
    let path = PathBuf::from(kept[0]["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "wrong\n");
    let text = repo.env.aot(&["status"]);
    assert!(text.stdout.contains("wrong-1"), "{}", text.stdout);
    assert!(repo.journal().contains(r#""kept":""#));
    // A later run does not take a kept tree away.
    std::fs::remove_file(repo.env.path("done.txt")).unwrap();
    let again = repo.env.aot(&["redirect", "--reset", "right"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let again = repo.start();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(path.join("a.txt").exists());
}

#[test]
fn commit_per_atom_commits_each_atoms_files_on_the_branch_and_leaves_the_users_changes_alone() {
    let repo = Repo::new();
    // The user's own uncommitted change, in a file no atom touches.
    repo.env.write(".gitignore", "target/\n.aot/\nmine-ignored\n");
    repo.env.write("notes.txt", "my notes\n");
    repo.plan(
        "max_retries: 0, commit: per_atom",
        "    first:\n      run: 'sed -i s/one/ONE/ a.txt'\n    second:\n      deps: [first]\n      run: 'echo new > new.txt && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    let log = repo.git(&["log", "--format=%s", "--name-only"]);
    assert!(log.starts_with("aot: second (attempt 1)"), "{log}");
    assert!(log.contains("aot: first (attempt 1)\n\na.txt\n"), "{log}");
    for file in ["new.txt", "done.txt"] {
        assert!(log.contains(file), "{file} committed: {log}");
    }
    assert!(!log.contains("aot.yaml"), "aot's own files are never committed: {log}");
    assert!(
        !log.contains("notes.txt") && !log.contains(".gitignore\n\n"),
        "the user's changes are not committed: {log}"
    );
    // The user's index agrees with the commits: only their own work shows.
    let status = repo.git(&["status", "--porcelain"]);
    assert!(
        status.contains(" M .gitignore") && status.contains("?? notes.txt"),
        "{status}"
    );
    assert!(!status.contains("a.txt") && !status.contains("new.txt"), "{status}");
    let journal = repo.journal();
    assert!(journal.contains(r#""type":"changes_landed","atom":"first""#) && journal.contains(r#""commit":""#));
    repo.assert_clean_after_run();
}

#[test]
fn redirect_sets_isolation_and_commit_for_the_next_start() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    work:\n      run: 'echo x > x.txt && touch done.txt'\n",
    );
    for set in ["isolation=none", "commit=per_atom"] {
        let run = repo.env.aot(&["redirect", "--set", set]);
        assert_eq!(run.code, 0, "{set}: {}", run.stderr);
    }
    let text = repo.read("aot.yaml").unwrap();
    assert!(
        text.contains("isolation: none") && text.contains("commit: per_atom"),
        "{text}"
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("nothing is committed"),
        "the file's warning: {}",
        run.stderr
    );
    assert!(!repo.journal().contains("changes_landed"), "isolation is off");
}

#[test]
fn an_agents_retry_prompt_says_the_tree_is_clean_and_what_was_discarded() {
    let repo = Repo::new();
    let prompts = repo.marks.path().display().to_string();
    // A fake agent: saves each prompt outside the repository, edits a.txt,
    // and fixes the task on its second attempt.
    repo.env.write(".gitignore", "target/\n.aot/\nagent.sh\n");
    repo.env.write(
        "agent.sh",
        &format!(
            "#!/bin/sh\nn=$(ls {prompts}/prompt-*.txt 2>/dev/null | wc -l)\ncat > {prompts}/prompt-$n.txt\nsed -i s/two/agent/ a.txt\nif [ \"$n\" -ge 1 ]; then touch done.txt; fi\necho 'summary: edited a.txt'\n"
        ),
    );
    repo.plan(
        "max_retries: 1",
        "    fix:\n      agent: Make it pass\n      check: ['test -f done.txt']\n",
    );
    let text = repo.read("aot.yaml").unwrap();
    repo.env.write(
        "aot.yaml",
        &text.replace(
            "graph:\n",
            &format!(
                "workers: {{ agent: {{ command: 'sh {}/agent.sh' }} }}\ngraph:\n",
                repo.dir().display()
            ),
        ),
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    let second = std::fs::read_to_string(repo.mark("prompt-1.txt")).unwrap();
    assert!(
        second.contains("  it had changed (discarded): 1 file: a.txt (+1 -1)"),
        "{second}"
    );
    assert!(second.contains("The working tree is clean again"), "{second}");
    assert_eq!(repo.read("a.txt").as_deref(), Some("one\nagent\nthree\n"));
}

#[test]
fn a_run_killed_while_copies_work_has_them_reused_by_the_next_start_and_no_stray_left() {
    let repo = Repo::new();
    let second = repo.mark("second");
    let atom = |name: &str| {
        format!(
            "    {name}:\n      run: 'if [ -e {second} ]; then echo {name} > {name}.txt; else echo half > {name}.txt; {running}; sleep 1000; fi'\n",
            second = second.display(),
            running = repo.running(name),
        )
    };
    repo.plan(
        "max_parallel_agents: 2, max_retries: 0",
        &format!(
            "    all:\n      deps: [p, q]\n      run: 'touch done.txt'\n{}{}",
            atom("p"),
            atom("q")
        ),
    );
    repo.kill_mid_run(&["p", "q"]);
    let worktrees = repo.git(&["worktree", "list", "--porcelain"]);
    assert_eq!(
        worktrees.matches("worktree ").count(),
        3,
        "the kill left the copies:\n{worktrees}"
    );
    assert_eq!(repo.read("p.txt"), None, "a copy's work never reached the tree");
    std::fs::write(&second, "").unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("p.txt").as_deref(), Some("p\n"));
    assert_eq!(repo.read("q.txt").as_deref(), Some("q\n"));
    // The killed run's copies are this run's pool: reset, reused, and kept
    // for the next (at most max_parallel_agents of them).
    assert!(!run.stdout.contains("copies of the work tree"), "{}", run.stdout);
    repo.assert_clean_after_run_keeping(2);
}

#[test]
fn without_git_start_says_why_isolation_is_off() {
    let repo = Repo::new();
    repo.plan("max_retries: 0", "    work:\n      run: 'touch done.txt'\n");
    // A PATH with the shell and coreutils but no git.
    let bin = repo.marks.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in ["bash", "sh", "touch", "test"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
        std::os::unix::fs::symlink(path, bin.join(tool)).unwrap();
    }
    let out = aot_command(repo.dir())
        .arg("start")
        .env("PATH", &bin)
        .output()
        .expect("run aot");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("aot: isolation: none — git cannot work in") && stderr.contains("git is not installed"),
        "{stderr}"
    );
}

#[test]
fn of_racers_that_all_succeed_only_one_lands() {
    let repo = Repo::new();
    let marks = repo.marks.path().display().to_string();
    // Each racer waits until all three have started, then all succeed at once.
    let racer = |name: &str| {
        format!(
            "    {name}:\n      run: 'touch {marks}/{name}; until [ -e {marks}/p ] && [ -e {marks}/q ] && [ -e {marks}/r ]; do sleep 0.02; done; echo {name} > {name}.txt; touch done.txt'\n"
        )
    };
    repo.plan(
        "max_parallel_agents: 3",
        &format!(
            "    race:\n      or: [p, q, r]\n      speculative: true\n{}{}{}",
            racer("p"),
            racer("q"),
            racer("r")
        ),
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let landed: Vec<&str> = ["p", "q", "r"]
        .into_iter()
        .filter(|n| repo.read(&format!("{n}.txt")).is_some())
        .collect();
    assert_eq!(
        landed.len(),
        1,
        "only the winner's file: {landed:?}\n{}",
        repo.journal()
    );
    assert_eq!(repo.journal().matches(r#""type":"changes_landed""#).count(), 1);
    repo.assert_clean_after_run();
}

#[test]
fn a_failed_attempt_that_edits_gitignore_leaves_ignored_files_alone() {
    let repo = Repo::new();
    repo.env.write(".gitignore", "target/\n.aot/\n.env\n");
    repo.git(&["commit", "-qam", "ignore .env"]);
    repo.env.write(".env", "SECRET=1\n");
    std::fs::create_dir(repo.env.path("target")).unwrap();
    repo.env.write("target/c.o", "object\n");
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [wrong, right]\n    wrong:\n      run: 'printf \"\" > .gitignore && echo junk > junk.txt && false'\n    right:\n      run: 'touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read(".env").as_deref(), Some("SECRET=1\n"));
    assert_eq!(repo.read("target/c.o").as_deref(), Some("object\n"));
    assert_eq!(repo.read(".gitignore").as_deref(), Some("target/\n.aot/\n.env\n"));
    assert_eq!(repo.read("junk.txt"), None);
    // Nothing ignored landed with the next attempt either.
    let landed = repo.journal();
    let landed = landed
        .lines()
        .find(|l| l.contains(r#""type":"changes_landed""#))
        .unwrap_or("");
    assert!(!landed.contains(".env") && !landed.contains("c.o"), "{landed}");
}

#[test]
fn after_a_kill_the_users_edits_new_files_and_commits_made_since_survive_the_next_start() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        &format!(
            "    work:\n      run: 'echo partial >> a.txt; {}; sleep 1000'\n",
            repo.running("work")
        ),
    );
    repo.kill_mid_run(&["work"]);
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\ntwo\nthree\n"),
        "the attempt wrote in its copy"
    );
    // After the kill the user edits a file, makes one, and commits another.
    repo.env.write("a.txt", "ONE\ntwo\nthree\n");
    repo.env.write("notes.txt", "my notes\n");
    repo.env.write("b.txt", "mine\n");
    repo.git(&["add", "b.txt"]);
    repo.git(&["commit", "-qm", "keep it"]);
    repo.plan(
        "max_retries: 0",
        "    work:\n      run: 'echo more >> a.txt && touch done.txt'\n",
    );
    std::fs::remove_file(repo.env.path("aot.yaml.journal.jsonl")).unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("ONE\ntwo\nthree\nmore\n"),
        "your edit, then the work"
    );
    assert_eq!(repo.read("notes.txt").as_deref(), Some("my notes\n"));
    assert_eq!(repo.read("b.txt").as_deref(), Some("mine\n"));
    assert_eq!(repo.git(&["status", "--porcelain", "--", "b.txt"]), "");
    repo.assert_clean_after_run();
}

#[test]
fn a_landing_merges_with_the_users_edit_made_during_the_run() {
    let repo = Repo::new();
    repo.plan(
        "max_parallel_agents: 2, max_retries: 0",
        &format!(
            "    all:\n      deps: [p, q]\n      run: 'touch done.txt'\n    p:\n      run: '{hold}; sed -i s/three/THREE/ a.txt'\n    q:\n      run: 'true'\n",
            hold = repo.hold()
        ),
    );
    let out = repo.start_editing_meanwhile(|| {
        repo.save("a.txt", "USER\ntwo\nthree\n");
    });
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(repo.read("a.txt").as_deref(), Some("USER\ntwo\nTHREE\n"), "both edits");
}

#[test]
fn parallel_atoms_run_from_a_folder_that_holds_only_aots_files() {
    let repo = Repo::new();
    std::fs::create_dir(repo.env.path("ops")).unwrap();
    let text = "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: { command: 'test -e ../p.txt && test -e ../q.txt' }\n  constraints: { max_parallel_agents: 2, max_retries: 0 }\ngraph:\n  atoms:\n    p: { run: 'echo p > ../p.txt' }\n    q: { run: 'echo q > ../q.txt' }\n";
    repo.env.write("ops/aot.yaml", text);
    let run = repo.env.aot(&["--state", "ops/aot.yaml", "start"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    assert_eq!(repo.read("p.txt").as_deref(), Some("p\n"));
    assert_eq!(repo.read("q.txt").as_deref(), Some("q\n"));
    assert!(repo.read("ops/aot.yaml.journal.jsonl").is_some());
    repo.assert_clean_after_run();
}

#[test]
fn files_with_newlines_quotes_and_spaces_in_their_names_land_or_go() {
    let repo = Repo::new();
    repo.env.write("old\nname.txt", "a\n");
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "odd name"]);
    repo.plan(
        "max_parallel_agents: 2, max_retries: 0",
        "    all:\n      deps: [p, q, fix]\n      run: 'touch done.txt'\n    p:\n      run: \"printf x > \\\"$(printf 'new\\\\nline.txt')\\\"; echo b >> \\\"$(printf 'old\\\\nname.txt')\\\"\"\n    q:\n      run: \"echo y > 'sp ace \\\"q\\\" é.txt'\"\n    fix:\n      or: [bad, good]\n    bad:\n      run: \"printf z > \\\"$(printf 'bad\\\\nname')\\\"; false\"\n      tool: one\n    good:\n      run: 'true'\n      tool: two\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("new\nline.txt").as_deref(), Some("x"));
    assert_eq!(repo.read("old\nname.txt").as_deref(), Some("a\nb\n"));
    assert_eq!(repo.read("sp ace \"q\" é.txt").as_deref(), Some("y\n"));
    assert!(
        !repo.env.path("bad\nname").exists(),
        "the failed alternative's file is gone"
    );
    repo.assert_clean_after_run();
}

#[test]
fn a_run_without_isolation_after_a_kill_keeps_its_work_from_a_later_isolated_start() {
    let repo = Repo::new();
    let second = repo.mark("second");
    repo.plan(
        "max_retries: 0",
        &format!(
            "    b:\n      run: 'if [ -e {second} ]; then echo run two > c.txt; touch done.txt; else echo partial > b.txt; {running}; sleep 1000; fi'\n",
            second = second.display(),
            running = repo.running("b"),
        ),
    );
    repo.kill_mid_run(&["b"]);
    assert_eq!(repo.read("b.txt"), None, "the attempt wrote in its copy");
    assert_eq!(repo.env.aot(&["redirect", "--set", "isolation=none"]).code, 0);
    std::fs::write(&second, "").unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("c.txt").as_deref(), Some("run two\n"));
    assert_eq!(
        repo.git(&["for-each-ref", "refs/aot"]),
        "",
        "the killed run's marks are gone"
    );
    // Isolation on again: the next start must not undo the run without it.
    assert_eq!(repo.env.aot(&["redirect", "--set", "isolation=git"]).code, 0);
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("c.txt").as_deref(), Some("run two\n"));
    assert!(repo.read("done.txt").is_some());
}

#[test]
fn a_killed_runs_worker_still_running_is_stopped_and_never_reaches_the_users_files() {
    let repo = Repo::new();
    let second = repo.mark("second");
    let go = repo.mark("go");
    let pid_file = repo.mark("orphan.pid");
    repo.plan(
        "max_retries: 0",
        &format!(
            "    b:\n      run: 'if [ -e {second} ]; then touch done.txt; else echo partial > b.txt; echo $$ > {pid}; touch {started}; until [ -e {go} ]; do sleep 0.05; done; echo orphan >> a.txt; fi'\n",
            second = second.display(),
            pid = pid_file.display(),
            started = repo.mark("b.started").display(),
            go = go.display(),
        ),
    );
    // Only aot is killed: its worker goes on, waiting to write.
    let mut child = aot_command(repo.dir())
        .arg("start")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start aot");
    wait_until(repo.marks.path(), "the worker runs", || repo.mark("b.started").exists());
    child.kill().expect("SIGKILL aot");
    let _ = child.wait();
    let orphan = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    assert!(
        Path::new(&format!("/proc/{orphan}")).exists(),
        "the worker outlived aot"
    );
    // The user writes notes meanwhile: theirs, whatever the worker does.
    repo.env.write("my notes.txt", "mine\n");
    std::fs::write(&second, "").unwrap();
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert!(
        run.stderr.contains("a killed run of this file had left running"),
        "{}",
        run.stderr
    );
    assert_eq!(repo.read("my notes.txt").as_deref(), Some("mine\n"));
    let alive = std::fs::read_to_string(format!("/proc/{orphan}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
    assert!(!alive, "the killed run's worker is gone");
    std::fs::write(&go, "").unwrap();
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\ntwo\nthree\n"),
        "it wrote nothing of yours"
    );
    assert_eq!(repo.read("b.txt"), None, "its file was in its copy");
    repo.assert_clean_after_run();
}

#[test]
fn choosing_another_alternative_between_runs_undoes_the_old_one_and_its_dependents_wait() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [pa, pb]\n    pa:\n      run: 'echo wrong > a.txt'\n    pb:\n      run: 'echo right > a.txt'\n    tests:\n      deps: [fix]\n      run: 'grep -q right a.txt && touch done.txt'\n",
    );
    // One iteration: `pa` lands, the base case is unmet, the run pauses.
    let step = repo.env.aot(&["step"]);
    assert_eq!(step.code, 0, "{}\n{}", step.stderr, repo.journal());
    assert_eq!(repo.read("a.txt").as_deref(), Some("wrong\n"), "pa landed");
    let choose = repo.env.aot(&["redirect", "--choose", "fix=pb"]);
    assert_eq!(choose.code, 0, "{}", choose.transcript());
    let state = aot::state::document::read(&repo.env.path("aot.yaml")).unwrap().state;
    assert_eq!(
        state.graph.atoms["fix"].status,
        aot::state::AtomStatus::Pending,
        "the group's old binding came from pa: it waits for pb"
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("a.txt").as_deref(), Some("right\n"));
    let journal = repo.journal();
    assert!(
        journal.contains(r#""type":"changes_undone","atom":"pa""#),
        "what pa landed was undone: {journal}"
    );
    let lines: Vec<&str> = journal.lines().collect();
    let solved_pb = lines
        .iter()
        .position(|l| l.contains(r#""type":"atom_solved","atom":"pb""#))
        .unwrap_or_else(|| panic!("pb solved: {journal}"));
    let last_tests_start = lines
        .iter()
        .rposition(|l| l.contains(r#""type":"atom_started","atom":"tests""#))
        .unwrap_or_else(|| panic!("tests started: {journal}"));
    assert!(solved_pb < last_tests_start, "tests ran after pb was solved: {journal}");
    repo.assert_clean_after_run();
}

#[test]
fn a_failing_test_after_an_or_atom_switches_its_choice_and_undoes_the_old_patch() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        "    fix:\n      or: [pa, pb]\n    pa:\n      run: 'echo wrong > a.txt'\n    pb:\n      run: 'echo right > a.txt'\n    tests:\n      deps: [fix]\n      run: 'grep -q right a.txt && touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert_eq!(repo.read("a.txt").as_deref(), Some("right\n"));
    let journal = repo.journal();
    assert!(
        journal.contains(r#""type":"backtracked","group":"fix","from":"pa","to":"pb""#),
        "{journal}"
    );
    assert!(journal.contains(r#""type":"changes_undone","atom":"pa""#), "{journal}");
    repo.assert_clean_after_run();
}

#[test]
fn a_process_with_aot_state_exported_but_no_dead_runner_is_left_alone() {
    let repo = Repo::new();
    repo.plan("", "    b:\n      run: 'touch done.txt'\n");
    let state = repo.env.path("aot.yaml");
    // The user's shell with `export AOT_STATE=…`, and a worker of a runner
    // that is alive (this test): neither is a killed run's orphan.
    let spawn = |extra: &[(&str, String)]| {
        let mut command = Command::new("sleep");
        // Its own group: were it wrongly reaped, the test harness survives to say so.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.arg("1000").env("AOT_STATE", &state);
        for (k, v) in extra {
            command.env(k, v);
        }
        command.spawn().expect("spawn sleep")
    };
    let mut shell = spawn(&[]);
    let mut live_worker = spawn(&[("AOT_RUNNER_PID", std::process::id().to_string())]);
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("left running"), "{}", run.stderr);
    assert!(shell.try_wait().unwrap().is_none(), "the user's process still runs");
    assert!(
        live_worker.try_wait().unwrap().is_none(),
        "a live runner's worker still runs"
    );
    let _ = shell.kill();
    let _ = live_worker.kill();
    let _ = shell.wait();
    let _ = live_worker.wait();
}

#[test]
fn aots_own_folder_stays_out_of_git_status() {
    let env = TestEnv::new();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(env.dir.path())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    std::fs::copy(root().join("state/single.yaml"), env.path("aot.yaml")).unwrap();
    assert_eq!(env.aot(&["start"]).code, 0);
    assert!(env.path(".aot/.gitignore").exists());
    let status = git(&["status", "--porcelain"]);
    assert!(!status.contains(".aot"), "{status}");
}

#[test]
fn a_run_logging_into_the_tree_keeps_its_log_whole_through_a_discarded_attempt() {
    let repo = Repo::new();
    // `wrong` works in place; while it runs, a redirect makes the runner
    // write records into its log, which is inside the tree.
    let go = repo.mark("go");
    repo.plan(
        "max_retries: 0",
        &format!(
            "    fix:\n      or: [wrong, right]\n    wrong:\n      run: '{}; while [ ! -e {} ]; do sleep 0.02; done; echo wrong > a.txt && false'\n    right:\n      run: 'echo right > a.txt && touch done.txt'\n",
            repo.running("wrong"),
            go.display()
        ),
    );
    let log = std::fs::File::create(repo.env.path("run.log")).unwrap();
    let mut child = aot_command(repo.dir())
        .arg("start")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start aot");
    wait_until(repo.marks.path(), "wrong runs", || repo.mark("wrong.started").exists());
    assert_eq!(repo.env.aot(&["redirect", "--add-atom", "extra=true"]).code, 0);
    wait_until(repo.dir(), "the runner logs the redirect", || {
        repo.read("run.log").is_some_and(|log| log.contains("extra"))
    });
    std::fs::write(&go, "").unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let journal = repo.journal();
    assert!(
        journal.contains(r#""type":"changes_discarded","atom":"wrong""#),
        "{journal}"
    );
    assert!(
        !journal.contains("run.log"),
        "aot's own log is no attempt's change:\n{journal}"
    );
    let written = repo.read("run.log").unwrap_or_default();
    assert!(
        written.contains("completed"),
        "the log holds the run to its end:\n{written}"
    );
}

/// Writes a chain a1 → a5 whose base case holds once a2 is done.
fn chain_plan(repo: &Repo, constraints: &str, base_case: &str) {
    repo.env.write(
        "aot.yaml",
        &format!(
            "version: 2\nobjective:\n  goal: g\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: {{ command: '{base_case}' }}\n  constraints: {{ {constraints} }}\ngraph:\n  atoms:\n    a1: {{ run: 'touch a1.done' }}\n    a2: {{ run: 'touch a2.done', deps: [a1] }}\n    a3: {{ run: 'touch a3.done', deps: [a2] }}\n    a4: {{ run: 'touch a4.done', deps: [a3] }}\n    a5: {{ run: 'touch a5.done', deps: [a4] }}\n"
        ),
    );
}

#[test]
fn in_a_git_work_tree_a_chain_halts_the_moment_the_base_case_holds() {
    let repo = Repo::new();
    chain_plan(&repo, "max_retries: 0", "test -f a2.done");
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.transcript());
    assert!(repo.read("a2.done").is_some());
    let journal = repo.journal();
    assert!(
        !journal.contains(r#""type":"atom_started","atom":"a3""#),
        "the check after a2 comes before a3 starts in the tree:\n{journal}"
    );
    assert!(repo.read("a3.done").is_none());
}

#[test]
fn in_a_git_work_tree_each_check_ends_an_iteration_and_the_limit_counts_them() {
    let repo = Repo::new();
    chain_plan(&repo, "max_iterations: 2", "test -f a5.done");
    let run = repo.start();
    assert_eq!(run.code, 8, "iteration limit:\n{}", run.transcript());
    let state = aot::state::document::read(&repo.env.path("aot.yaml")).unwrap().state;
    assert_eq!(state.run.iteration, 2);
    let solved: Vec<_> = ["a1", "a2", "a3", "a4", "a5"]
        .into_iter()
        .filter(|a| state.graph.atoms[*a].status == aot::state::AtomStatus::Solved)
        .collect();
    assert_eq!(solved, ["a1", "a2"], "one atom per iteration in a chain");
}

#[test]
fn edits_made_during_a_failing_attempt_to_a_file_it_never_touches_and_a_new_file_survive() {
    let repo = Repo::new();
    repo.env.write("b.txt", "b\n");
    repo.git(&["add", "b.txt"]);
    repo.git(&["commit", "-qm", "b"]);
    repo.plan(
        "max_retries: 0",
        &format!(
            "    fix:\n      or: [wrong, right]\n    wrong:\n      run: 'echo wrong > a.txt; {hold}; false'\n    right:\n      run: 'touch done.txt'\n",
            hold = repo.hold()
        ),
    );
    // While the attempt that will fail runs: an edit to a file it never
    // touches, and a new file.
    let out = repo.start_editing_meanwhile(|| {
        repo.save("b.txt", "b, edited by me\n");
        repo.save("new.txt", "made by me\n");
    });
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(repo.read("b.txt").as_deref(), Some("b, edited by me\n"));
    assert_eq!(repo.read("new.txt").as_deref(), Some("made by me\n"));
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\ntwo\nthree\n"),
        "the failure left nothing"
    );
    repo.assert_clean_after_run();
}

#[test]
fn a_users_edit_of_line_one_and_an_attempts_append_to_the_same_file_both_land() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        &format!(
            "    work:\n      run: '{hold}; echo appended >> a.txt; touch done.txt'\n",
            hold = repo.hold()
        ),
    );
    let out = repo.start_editing_meanwhile(|| {
        repo.save("a.txt", "MINE\ntwo\nthree\n");
    });
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(repo.read("a.txt").as_deref(), Some("MINE\ntwo\nthree\nappended\n"));
    repo.assert_clean_after_run();
}

#[test]
fn an_attempts_change_that_does_not_merge_with_your_edit_fails_it_and_your_edit_stays() {
    let repo = Repo::new();
    repo.plan(
        "max_retries: 0",
        &format!(
            "    work:\n      run: '{hold}; sed -i s/two/THEIRS/ a.txt; touch done.txt'\n",
            hold = repo.hold()
        ),
    );
    let out = repo.start_editing_meanwhile(|| {
        repo.save("a.txt", "one\nMINE\nthree\n");
    });
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(
        repo.read("a.txt").as_deref(),
        Some("one\nMINE\nthree\n"),
        "never overwritten"
    );
    assert_eq!(repo.read("done.txt"), None, "nothing of the attempt landed");
    let journal = repo.journal();
    let failed = journal
        .lines()
        .find(|l| l.contains(r#""type":"atom_failed","atom":"work""#))
        .unwrap_or_else(|| panic!("{journal}"));
    assert!(
        failed.contains("a.txt (you changed the same lines while it ran)"),
        "{failed}"
    );
    repo.assert_clean_after_run();
}

#[test]
fn aot_undo_puts_back_what_the_runs_landings_overwrote_and_deleted_and_keeps_your_edits() {
    let repo = Repo::new();
    repo.env.write("b.txt", "precious\n");
    repo.env.write("c.txt", "mine\n");
    repo.git(&["add", "b.txt", "c.txt"]);
    repo.git(&["commit", "-qm", "more"]);
    repo.plan(
        "max_retries: 0",
        "    rewrite:\n      run: 'sed -i s/two/TWO/ a.txt'\n    remove:\n      run: 'rm b.txt'\n      deps: [rewrite]\n    finish:\n      run: 'echo made > new.txt && touch done.txt'\n      deps: [remove]\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    assert!(
        run.stderr
            .contains("1 overwritten (a.txt), 1 deleted (b.txt): `aot undo` puts them back"),
        "the summary says what was overwritten and deleted:\n{}",
        run.stderr
    );
    assert_eq!(repo.read("b.txt"), None);
    // You edit after the run: your edit stays through the undo.
    repo.env.write("a.txt", "one\nTWO\nthree\nmine too\n");
    let undo = repo.env.aot(&["undo"]);
    assert_eq!(undo.code, 0, "{}", undo.transcript());
    assert_eq!(repo.read("a.txt").as_deref(), Some("one\ntwo\nthree\nmine too\n"));
    assert_eq!(
        repo.read("b.txt").as_deref(),
        Some("precious\n"),
        "put back byte for byte"
    );
    assert_eq!(repo.read("new.txt"), None, "what the run added goes too");
    assert_eq!(repo.read("c.txt").as_deref(), Some("mine\n"));
    assert!(undo.stdout.contains("undid `remove` (attempt 1)"), "{}", undo.stdout);
    // Journaled, the atoms run again, and nothing is undone twice.
    let journal = repo.journal();
    assert_eq!(journal.matches(r#""type":"changes_undone""#).count(), 3, "{journal}");
    let status = repo.env.aot(&["--json", "status"]);
    let state: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(state["counts"]["pending"], 3, "{}", status.stdout);
    let again = repo.env.aot(&["undo"]);
    assert_eq!(again.code, 0);
    assert!(again.stdout.contains("nothing left to undo"), "{}", again.stdout);
    assert_eq!(repo.env.aot(&["replay", "--check"]).code, 0);
    // One atom's landing: the next run lands again, `--atom` undoes one.
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("b.txt"), None);
    let one = repo.env.aot(&["undo", "--atom", "remove"]);
    assert_eq!(one.code, 0, "{}", one.transcript());
    assert_eq!(repo.read("b.txt").as_deref(), Some("precious\n"));
    assert_eq!(
        repo.read("new.txt").as_deref(),
        Some("made\n"),
        "only that atom's landing"
    );
    repo.assert_clean_after_run();
}

#[test]
fn a_later_run_works_in_the_copy_an_earlier_one_kept_with_its_ignored_build_cache() {
    let repo = Repo::new();
    // `target/` is ignored: a build cache, kept in the copy between runs.
    repo.plan(
        "max_retries: 0",
        "    build:\n      run: 'if [ -e target/cache ]; then echo warm > built.txt; else mkdir -p target && touch target/cache && echo cold > built.txt; fi; touch done.txt'\n",
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(repo.read("built.txt").as_deref(), Some("cold\n"));
    assert!(
        !repo.env.path("target/cache").exists(),
        "the cache is the copy's, not in your tree"
    );
    std::fs::remove_file(repo.env.path("done.txt")).unwrap();
    assert_eq!(repo.env.aot(&["redirect", "--reset", "build"]).code, 0);
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        repo.read("built.txt").as_deref(),
        Some("warm\n"),
        "the kept copy's cache was there"
    );
    repo.assert_clean_after_run_keeping(1);
}

/// Whether `pid` runs (a zombie does not).
fn runs(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

#[test]
fn no_process_of_an_attempt_outlives_the_run_setsid_and_double_forks_included() {
    let repo = Repo::new();
    let marks = repo.marks.path().display().to_string();
    // A daemon in its own session, a double fork into one, and one that
    // clears its environment too.
    repo.plan(
        "max_retries: 0",
        &format!(
            "    spawn:\n      run: 'setsid sleep 300 & echo $! > {marks}/a.pid; (setsid sh -c \"sleep 300 & echo \\$! > {marks}/b.pid\" &); (env -i setsid sh -c \"sleep 300 & echo \\$! > {marks}/c.pid\" &); while [ ! -s {marks}/b.pid ] || [ ! -s {marks}/c.pid ]; do sleep 0.05; done; touch done.txt'\n"
        ),
    );
    let run = repo.start();
    assert_eq!(run.code, 0, "{}", run.stderr);
    for name in ["a", "b", "c"] {
        let pid = std::fs::read_to_string(repo.mark(&format!("{name}.pid"))).unwrap();
        assert!(!runs(&pid), "{name} ({}) outlived the run", pid.trim());
    }
}

#[test]
fn disguised_destructive_commands_land_only_in_a_copy_and_aot_undo_puts_every_byte_back() {
    // The issue's list of commands that slipped past Law 1's name matching:
    // with isolation each ran in a copy, landed like any work, and `aot
    // undo` puts the user's files back byte for byte.
    let repo = Repo::new();
    let files = [
        "p1.txt", "p2.txt", "p3.txt", "p4.txt", "p5.txt", "p6.txt", "p7.txt", "p8.txt", "p9.txt", "p10.txt", "p11.txt",
        "p12.txt", "p13.txt", "p14.txt",
    ];
    let mut original = Vec::new();
    for (i, name) in files.iter().enumerate() {
        let text = format!("precious {i}\nline two of {name}\n\u{0}binary tail {i}\n");
        repo.env.write(name, &text);
        original.push((name.to_string(), text));
    }
    std::fs::create_dir(repo.env.path("dir")).unwrap();
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-qm", "precious files"]);
    let commands = [
        "sed -i d p1.txt",
        "perl -pi -e 's/precious/gone/' p2.txt",
        "python3 -c \"open('p3.txt','w').write('')\"",
        "python3 - <<'EOF'\nimport os\nos.remove('p4.txt')\nEOF",
        "node -e \"require('fs').writeFileSync('p5.txt','x')\"",
        "awk 'BEGIN{system(\"rm p6.txt\")}'",
        "sed -n '1e rm p7.txt' p2.txt",
        "flock p8.txt rm -rf p8.txt",
        "taskset -c 0 rm p9.txt",
        "script -qc 'rm p10.txt' /dev/null",
        "sh -c 'exec 3<>p11.txt; echo x >&3'",
        "sort -o p12.txt /dev/null",
        "cp -t dir p13.txt && mv -t dir p13.txt",
        "ln -sf /etc/hostname p14.txt",
    ];
    let mut atoms = String::new();
    for (i, command) in commands.iter().enumerate() {
        let deps = if i == 0 {
            String::new()
        } else {
            format!("\n      deps: [c{}]", i - 1)
        };
        let quoted = serde_json::to_string(command).unwrap();
        atoms.push_str(&format!("    c{i}:\n      run: {quoted}{deps}\n"));
    }
    atoms.push_str(&format!(
        "    last:\n      run: 'touch done.txt'\n      deps: [c{}]\n",
        commands.len() - 1
    ));
    repo.plan("max_retries: 0", &atoms);
    let run = repo.start();
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, repo.journal());
    // They did land: every one of the user's files changed, and the
    // summary says so.
    let untouched: Vec<&String> = original
        .iter()
        .filter(|(name, text)| {
            std::fs::symlink_metadata(repo.env.path(name)).is_ok_and(|m| m.is_file())
                && std::fs::read(repo.env.path(name)).is_ok_and(|b| b == text.as_bytes())
        })
        .map(|(name, _)| name)
        .collect();
    assert!(untouched.is_empty(), "these commands did nothing: {untouched:?}");
    assert!(run.stderr.contains("`aot undo` puts them back"), "{}", run.stderr);
    let undo = repo.env.aot(&["undo"]);
    assert_eq!(undo.code, 0, "{}", undo.transcript());
    for (name, text) in &original {
        let path = repo.env.path(name);
        let meta = std::fs::symlink_metadata(&path).unwrap_or_else(|e| panic!("{name}: {e}\n{}", undo.stdout));
        assert!(meta.is_file(), "{name} is back as a file, not a link");
        assert_eq!(std::fs::read(&path).unwrap(), text.as_bytes(), "{name} byte for byte");
    }
    assert!(!repo.env.path("dir/p13.txt").exists(), "what the run made goes too");
    assert_eq!(repo.git(&["status", "--porcelain", "--", "p*.txt", "dir"]), "");
}

#[test]
fn a_change_in_place_of_the_same_size_right_after_the_copy_is_checked_out_lands() {
    // The same size, the same inode, within the same second as the copy's
    // checkout: only git's "racily clean" check tells it changed.
    for round in 0..5 {
        let repo = Repo::new();
        repo.plan(
            "max_retries: 0",
            "    work:\n      run: 'printf O | dd of=a.txt conv=notrunc status=none && touch done.txt'\n",
        );
        let run = repo.start();
        assert_eq!(run.code, 0, "round {round}: {}", run.stderr);
        assert_eq!(
            repo.read("a.txt").as_deref(),
            Some("One\ntwo\nthree\n"),
            "round {round}"
        );
    }
}
