use std::path::Path;

use super::{Context, classify};

/// Classifies in a workspace `/work/ws` where `existing.txt` and `/etc/passwd` exist.
fn gates(command: &str) -> Vec<String> {
    let exists = |p: &Path| p == Path::new("/work/ws/existing.txt") || p == Path::new("/etc/passwd");
    let ctx = Context {
        workspace: Path::new("/work/ws"),
        exists: &exists,
        cwd: None,
    };
    classify(command, &ctx).into_iter().map(|g| g.why).collect()
}

fn destructive(command: &str) -> bool {
    !gates(command).is_empty()
}

#[test]
fn destructive_commands_are_found_by_their_argv() {
    for command in [
        "rm -rf build",
        "rm file.txt",
        "/bin/rm x",
        "unlink x",
        "shred -u secret",
        "find . -name '*.o' -delete",
        "find . -type f -exec rm {} \\;",
        "find . -exec /usr/bin/rm -f {} +",
        "git reset --hard HEAD~1",
        "git -C sub reset --hard",
        "git clean -fdx",
        "git clean -f",
        "git push --force origin main",
        "git push -f",
        "git push origin +main",
        "git push --force-with-lease",
        "dd if=/dev/zero of=/dev/sda",
        "mkfs.ext4 /dev/sdb1",
        "mkfs -t ext4 /dev/sdb1",
        "truncate -s 0 log",
        "chmod -R 777 /",
        "chown -R me ../elsewhere",
        "chmod --recursive 700 ~/",
        "echo hi > existing.txt",
        "echo hi >| existing.txt",
        "cmd &> existing.txt",
        "cat x | tee existing.txt",
        "echo x > /etc/passwd",
        "echo x > $OUT",
    ] {
        assert!(destructive(command), "{command} is destructive");
    }
}

#[test]
fn the_same_inside_shells_loops_pipelines_and_wrappers() {
    for command in [
        "bash -c 'rm -rf /tmp/x'",
        "sh -c \"git reset --hard\"",
        "bash -lc 'cd src && rm a.o'",
        "bash -c \"bash -c 'rm x'\"",
        "eval rm -rf x",
        "for f in *.o; do rm \"$f\"; done",
        "while true; do rm x; done",
        "if test -e x; then rm x; fi",
        "case $x in a) rm a;; esac",
        "(cd sub && rm -f x)",
        "{ rm x; }",
        "ls | xargs rm",
        "find . -name '*.tmp' -print0 | xargs -0 -n 1 rm -f",
        "ls | xargs -I{} rm {}",
        "sudo rm -rf /var/x",
        "sudo -u root rm x",
        "env FOO=1 rm x",
        "nice -n 5 rm x",
        "timeout 10 rm x",
        "timeout -s KILL 10 git clean -fd",
        "nohup rm x &",
        "true && rm x",
        "false || rm x",
        "echo $(rm x)",
        "X=`rm x` true",
        "f() { rm x; }; f",
        "bash <<'EOF'\nrm -rf x\nEOF",
        "echo ok; rm x",
        "cat <(rm x)",
    ] {
        assert!(destructive(command), "{command} is destructive");
    }
}

#[test]
fn harmless_commands_pass_even_when_they_mention_destructive_words() {
    for command in [
        "echo rm -rf /",
        "grep -r 'rm -rf' .",
        "cargo test",
        "python3 -m pytest -q",
        "git status",
        "git reset --soft HEAD~1",
        "git clean -n",
        "git clean -fdn",
        "git push origin main",
        "git diff > /dev/null",
        "echo hi > new-file.txt",
        "echo hi >> existing.txt",
        "cat x | tee -a existing.txt",
        "tee new.txt",
        "chmod -R 755 src",
        "chmod 600 /etc/passwd",
        "chown -R me ./build",
        "find . -name '*.rs' -print",
        "bash -c 'cargo build'",
        "ls | xargs wc -l",
        "git commit -m 'rm the old file'",
        "printf '%s\\n' rm",
        "mkdir -p out && cp a out/",
        "sleep 1 2>/dev/null",
        "cmd 2>&1",
    ] {
        assert_eq!(gates(command), Vec::<String>::new(), "{command} is not destructive");
    }
}

#[test]
fn what_cannot_be_read_or_is_decided_at_run_time_is_treated_as_destructive() {
    for command in [
        "$CMD -rf x",
        "\"$(which rm)\" x",
        "bash -c \"$SCRIPT\"",
        "eval \"$X\"",
        "echo 'unterminated",
        "if then fi (",
    ] {
        assert!(destructive(command), "{command} needs a confirmation");
    }
}

#[test]
fn each_destructive_piece_is_named_once_with_why() {
    let exists = |_: &Path| false;
    let ctx = Context {
        workspace: Path::new("/w"),
        exists: &exists,
        cwd: None,
    };
    let gates = classify("rm a; git reset --hard; echo done", &ctx);
    assert_eq!(gates.len(), 2, "{gates:?}");
    assert_eq!(gates[0].command, "rm a");
    assert!(gates[0].why.contains("deletes"), "{}", gates[0].why);
    assert_eq!(gates[1].command, "git reset --hard");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// A model's command is untrusted input: any text is classified, never a panic.
    #[test]
    fn any_text_is_classified_without_panicking(command in "[a-z $'\"`(){};|&<>\\\\=*#!\\n-]{0,40}") {
        let exists = |_: &Path| true;
        let ctx = Context { workspace: Path::new("/w"), exists: &exists, cwd: None };
        let _ = classify(&command, &ctx);
    }
}

#[test]
fn what_the_review_found_is_destructive() {
    for command in [
        "echo 'rm -rf x' | sh",
        "bash <<< 'rm -rf x'",
        "bash /dev/stdin <<< 'rm -rf x'",
        "source <(echo rm -rf x)",
        "bash -c -- 'rm -rf x'",
        "bash -c -e 'rm -rf x'",
        "echo ${X:-$(rm -rf x)}",
        "echo $(( $(rm x) ))",
        "[[ -n $(rm x) ]]",
        "(( $(rm x) ))",
        "case y in $(rm x)) true;; esac",
        "/bin/r? x",
        "/usr/bin/[r]m x",
        "{rm,-rf,x}",
        "$'\\x72m' -rf x",
        "echo x >& existing.txt",
        "git checkout -- .",
        "git restore .",
        "git stash clear",
        "git branch -D main",
        "git push origin :main",
        "git reset --har",
        "git -c alias.n='!rm -rf x' n",
        "timeout --signal KILL 10 rm x",
        "env -S 'rm -rf x'",
        "sudo --user root rm x",
        "exec -a f rm x",
        "busybox rm x",
        "chmod -R -w /etc",
        "chown -R --reference=r /etc",
        "cp /dev/null existing.txt",
        "mv other existing.txt",
        "rsync -a --delete src/ dst/",
    ] {
        assert!(destructive(command), "{command} is destructive");
    }
    for command in [
        "bash -c 'cargo test'",
        "git checkout main",
        "cp a new-file.txt",
        "echo x 2>&1",
        "git branch feature",
    ] {
        assert_eq!(gates(command), Vec::<String>::new(), "{command} is not destructive");
    }
}

#[test]
fn a_deeply_nested_script_is_refused_without_reaching_the_parser() {
    let deep = "{ ".repeat(5000) + "true";
    assert!(gates(&deep).iter().any(|g| g.contains("too deeply")));
    let long_if = "if true; then ".repeat(2000) + "true";
    assert!(gates(&long_if).iter().any(|g| g.contains("too deeply")));
}

#[test]
fn stashing_uncommitted_work_is_gated_reading_the_stash_is_not() {
    for command in [
        "git stash",
        "git stash push -u",
        "git stash save wip",
        "git stash -k",
        "git stash drop",
    ] {
        assert!(destructive(command), "{command}");
    }
    for command in ["git stash list", "git stash show -p", "git stash pop"] {
        assert!(!destructive(command), "{command}");
    }
}

#[test]
fn programs_run_under_other_names_are_gated() {
    for command in [
        "hash -p /bin/rm r; r -f keep",
        "shopt -s expand_aliases\nalias r=rm\nr -rf data",
        "alias g=git",
        "enable -f ./x.so rm",
    ] {
        assert!(destructive(command), "{command}");
    }
    for command in ["hash", "hash -r", "shopt -s nullglob"] {
        assert!(!destructive(command), "{command}");
    }
}

#[test]
fn inline_interpreter_code_that_deletes_or_runs_commands_is_destructive() {
    for command in [
        "python3 -c 'import shutil; shutil.rmtree(\"/home\")'",
        "python -c \"import os; os.remove('a')\"",
        "python3.12 -c 'import pathlib; pathlib.Path(\"x\").unlink()'",
        "python3 -c 'import subprocess; subprocess.run([\"rm\", \"-rf\", \"/\"])'",
        "python3 -c '__import__(\"os\").system(\"rm -rf ~\")'",
        "perl -e 'unlink glob \"*\"'",
        "perl -E 'system(\"rm -rf /\")'",
        "ruby -e 'require \"fileutils\"; FileUtils.rm_rf(\"/\")'",
        "node -e 'require(\"fs\").rmSync(\"/\", {recursive: true})'",
        "node --eval 'require(\"child_process\").execSync(\"rm -rf /\")'",
        "php -r 'unlink(\"a\");'",
        "timeout 5 python3 -c 'import os; os.system(\"x\")'",
        "python3 - <<'EOF'\nimport shutil\nshutil.rmtree('/')\nEOF",
        "python3 -c \"$CODE\"",
    ] {
        assert!(destructive(command), "{command}");
    }
}

#[test]
fn inline_interpreter_code_that_only_reads_or_prints_is_not() {
    for command in [
        "python3 -c 'print(1 + 1)'",
        "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"name\"])'",
        "python3 script.py",
        "python3 -m pytest -q",
        "perl -pe 's/a/b/' file.txt",
        "ruby -e 'puts 42'",
        "node -e 'console.log(1)'",
        "php -r 'echo 1;'",
        "pythonic --version",
    ] {
        assert!(!destructive(command), "{command}: {:?}", gates(command));
    }
}
