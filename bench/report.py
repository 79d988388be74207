#!/usr/bin/env python3
"""`aot report` and `aot audit` on a large run (issue 17).

Generates an N-atom DAG (default 10,000) of `true` commands in layers of 10,
runs it to completion with `aot start`, then times `aot report -o` and
`aot audit` on the finished run (best of --runs). Target: the report in
under a second for 10,000 atoms.

Usage: python3 bench/report.py [--aot PATH] [--atoms N] [--runs N]
Builds nothing itself: pass the aot binary (default target/release/aot).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HEADER = """version: 2
objective:
  goal: benchmark the report
  background_intent: measure report and audit time on a large run
  deliverables: a marker file
  definition_of_done: the marker exists
  base_case: {{ command: "test -f done.marker" }}
  constraints: {{ max_parallel_agents: 4, isolation: none, verify: when_solved }}
graph:
  atoms:
"""


def state(n):
    lines = [HEADER.format()]
    for i in range(n):
        layer, pos = divmod(i, 10)
        deps = f", deps: [a{(layer - 1) * 10 + pos}]" if layer else ""
        run = "touch done.marker" if i == n - 1 else "true"
        lines.append(f"    a{i}: {{ run: '{run}'{deps} }}\n")
    return "".join(lines)


def timed(cmd, cwd, runs):
    best = None
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", default="target/release/aot")
    ap.add_argument("--atoms", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    aot = os.path.abspath(args.aot)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "aot.yaml"), "w") as f:
            f.write(state(args.atoms))
        start = time.perf_counter()
        run = subprocess.run([aot, "start"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ran = time.perf_counter() - start
        if run.returncode != 0:
            print(run.stderr[-2000:], file=sys.stderr)
            sys.exit(f"aot start exited {run.returncode}")
        records = sum(1 for _ in open(os.path.join(d, "aot.yaml.journal.jsonl")))
        report = timed([aot, "report", "-o", "report.html"], d, args.runs)
        audit = timed([aot, "audit", "--no-log"], d, args.runs)
        size = os.path.getsize(os.path.join(d, "report.html"))
        print(f"{args.atoms} atoms, {records} journal records (the run took {ran:.1f} s)")
        print(f"aot report: {report * 1000:.0f} ms (best of {args.runs}), {size / 1024:.0f} KiB page")
        print(f"aot audit:  {audit * 1000:.0f} ms (best of {args.runs})")
        if report > 1.0:
            sys.exit("the report took over a second")


if __name__ == "__main__":
    main()
