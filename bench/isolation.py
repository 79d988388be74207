#!/usr/bin/env python3
"""Isolation benchmarks for `aot start` (issue: workspace isolation).

(a) Overhead per isolated attempt on a repository of 10,000 files: a chain of
    20 atoms, each editing one file, run with `isolation: git` (each attempt
    in a pooled copy: the user's edits taken in, the copy reset, the work,
    then a landing) and with `isolation: none`; then 12 atoms in a fan-out of
    3 at a time. Each first with a cold pool (a fresh repository: the copies
    are checked out), then with the pool a run kept (a second run of the same
    file). Reported: (git - none) / attempts, in milliseconds.
(b) A retried `cargo build` of a small generated crate: attempt 1 builds and
    fails, attempt 2 builds again and passes. With isolation the retry runs in
    the same pooled copy, so its `target/` (ignored) is kept and the second
    build is incremental. Reported: each attempt's time, with and without
    isolation.

Usage: python3 bench/isolation.py [--aot PATH] [--runs N]
Builds nothing itself: pass the aot binary (default target/release/aot).
Needs git (and cargo for (b)).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

HEADER = """version: 2
objective:
  goal: benchmark
  background_intent: measure isolation overhead
  deliverables: a marker file
  definition_of_done: the marker exists
  base_case: {{ command: "test -f done.marker" }}
  constraints:
    max_parallel_agents: {parallel}
    max_retries: {retries}
    max_iterations: 100
    verify: when_solved
    isolation: {isolation}
graph:
  atoms:
"""


def git(cwd, *args):
    subprocess.run(["git", "-C", cwd, *args], check=True, stdout=subprocess.DEVNULL)


def repo_with_files(path, n):
    os.makedirs(path)
    git(path, "init", "-q")
    git(path, "config", "user.email", "bench@example.com")
    git(path, "config", "user.name", "bench")
    # No background `git gc --auto`: it packs loose objects away while the
    # repository is being copied for the next run.
    git(path, "config", "gc.auto", "0")
    for i in range(n):
        folder = os.path.join(path, "src", f"d{i // 100}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i}.txt"), "w") as f:
            f.write(f"file {i}\n" * 5)
    with open(os.path.join(path, ".gitignore"), "w") as f:
        f.write("target/\n.aot/\naot.yaml*\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "files")


def run_aot(aot, cwd):
    start = time.perf_counter()
    out = subprocess.run([aot, "start"], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"aot start failed in {cwd}: {out.stderr}")
    return took


def chain(n):
    atoms = []
    for i in range(n):
        deps = f", deps: [a{i - 1}]" if i else ""
        last = " && touch done.marker" if i == n - 1 else ""
        atoms.append(f"    a{i}: {{ run: 'echo edit >> src/d{i}/f{i * 100}.txt{last}'{deps} }}\n")
    return "".join(atoms)


def fan(n):
    atoms = [f"    w{i}: {{ run: 'echo edit >> src/d{i}/f{i * 100}.txt' }}\n" for i in range(n)]
    deps = ", ".join(f"w{i}" for i in range(n))
    atoms.append(f"    all: {{ run: 'touch done.marker', deps: [{deps}] }}\n")
    return "".join(atoms)


def fresh_state(d, atoms, parallel, isolation):
    """Writes the state file anew (no journal): a new run of the same file."""
    for name in ("aot.yaml.journal.jsonl", "done.marker"):
        path = os.path.join(d, name)
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(os.path.join(d, ".aot"), ignore_errors=True)
    with open(os.path.join(d, "aot.yaml"), "w") as f:
        f.write(HEADER.format(parallel=parallel, retries=0, isolation=isolation) + atoms)


def overhead(aot, tmp, atoms, parallel, runs, base):
    """Median run time per isolation, with a cold pool and with a warm one."""
    times = {}
    for isolation in ("none", "git"):
        cold, warm = [], []
        for r in range(runs):
            d = os.path.join(tmp, f"{isolation}-{parallel}-{r}")
            shutil.copytree(base, d, symlinks=True)
            fresh_state(d, atoms, parallel, isolation)
            cold.append(run_aot(aot, d))
            landed = open(os.path.join(d, "aot.yaml.journal.jsonl")).read().count('"changes_landed"')
            if isolation == "git" and landed == 0:
                raise SystemExit(f"no attempt was isolated in {d}")
            # The same file again: its copies were kept by the first run.
            fresh_state(d, atoms, parallel, isolation)
            warm.append(run_aot(aot, d))
            shutil.rmtree(d)
        times[isolation] = (statistics.median(cold), statistics.median(warm))
    return times


CARGO_TOML = """[package]
name = "benchcrate"
version = "0.1.0"
edition = "2021"

[dependencies]
"""


def crate(path, functions=400):
    os.makedirs(os.path.join(path, "src"))
    git(path, "init", "-q")
    git(path, "config", "user.email", "bench@example.com")
    git(path, "config", "user.name", "bench")
    # No background `git gc --auto`: it packs loose objects away while the
    # repository is being copied for the next run.
    git(path, "config", "gc.auto", "0")
    with open(os.path.join(path, "Cargo.toml"), "w") as f:
        f.write(CARGO_TOML)
    with open(os.path.join(path, "src", "lib.rs"), "w") as f:
        for i in range(functions):
            f.write(
                f"pub fn f{i}(x: u64) -> u64 {{ let v: Vec<u64> = (0..x).map(|i| i * {i}).collect(); v.iter().sum() }}\n"
            )
    with open(os.path.join(path, ".gitignore"), "w") as f:
        f.write("target/\n.aot/\naot.yaml*\nCargo.lock\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "crate")


def attempt_times(journal):
    """Seconds each attempt took, from the journal's records."""
    started, took = {}, []
    for line in open(journal):
        record = json.loads(line)
        event = record["event"]
        at = record["at"]
        if event["type"] == "atom_started":
            started[event["attempt"]] = at
        elif event["type"] in ("attempt_failed", "atom_solved"):
            attempt = event.get("attempt") or event.get("binding", {}).get("attempt")
            took.append(seconds(at) - seconds(started[attempt]))
    return took


def seconds(stamp):
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def retried_build(aot, tmp, isolation):
    d = os.path.join(tmp, f"crate-{isolation}")
    crate(d)
    atom = "    build: { run: 'cargo build -q --offline && test \"$AOT_ATTEMPT\" = 2 && touch done.marker' }\n"
    with open(os.path.join(d, "aot.yaml"), "w") as f:
        f.write(HEADER.format(parallel=1, retries=1, isolation=isolation) + atom)
    total = run_aot(aot, d)
    took = attempt_times(os.path.join(d, "aot.yaml.journal.jsonl"))
    shutil.rmtree(d)
    return total, took


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aot", default="target/release/aot")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    aot = os.path.abspath(args.aot)
    tmp = tempfile.mkdtemp(prefix="aot-bench-iso-")
    base = os.path.join(tmp, "base")
    repo_with_files(base, args.files)

    for label, atoms, n, parallel, attempts in (
        ("chain of 20, one at a time", chain(20), 20, 1, 20),
        ("fan-out of 12, 3 at a time", fan(12), 12, 3, 13),
    ):
        t = overhead(aot, tmp, atoms, parallel, args.runs, base)
        for i, pool in enumerate(("cold pool", "warm pool")):
            none, git_ = t["none"][i], t["git"][i]
            per = (git_ - none) / attempts * 1000
            print(
                f"(a) {args.files:,} files, {label}, {pool}: none {none:.2f} s, git {git_:.2f} s -> {per:.0f} ms per attempt"
            )

    if shutil.which("cargo"):
        for isolation in ("none", "git"):
            total, took = retried_build(aot, tmp, isolation)
            shown = ", ".join(f"attempt {i + 1} {s:.2f} s" for i, s in enumerate(took))
            print(f"(b) retried cargo build, isolation {isolation}: {shown} (run {total:.2f} s)")
    else:
        print("(b) skipped: cargo not found")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
