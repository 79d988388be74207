#!/usr/bin/env python3
"""Loop benchmarks for `aot start` (issue: the loop).

(a) Scheduling overhead: a generated 2,000-atom DAG of `true` commands run by
    `aot start` versus the same DAG as a build.ninja run by `ninja -j3`.
    Target: aot wall time <= 1.5 x ninja's.
(b) Parallel efficiency: four layers of three `sleep 0.5` atoms, each layer
    depending on the one before, max_parallel_agents 3. The ideal is 2.0 s.
    Target: wall <= 1.05 x ideal.

Usage: python3 bench/loop.py [--aot PATH] [--runs N]
Builds nothing itself: pass the aot binary (default target/release/aot).
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HEADER = """version: 1
objective:
  goal: benchmark
  background_intent: measure scheduling overhead
  deliverables: a marker file
  definition_of_done: the marker exists
  base_case: {{ command: "test -f done.marker" }}
  constraints:
    max_parallel_agents: 3
    max_iterations: 5
    verify: {verify}
graph:
  atoms:
"""


def ensure_ninja():
    ninja = shutil.which("ninja")
    if ninja:
        return ninja
    print("ninja not found: installing it", file=sys.stderr)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "ninja-build"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not shutil.which("ninja"):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "ninja"], check=True)
    ninja = shutil.which("ninja")
    if not ninja:
        sys.exit("could not install ninja")
    return ninja


def dag(n, seed=7):
    """Returns [(id, deps)] for a random DAG where each atom needs up to 3 of the 50 before it."""
    rng = random.Random(seed)
    atoms = []
    for i in range(n):
        deps = sorted({rng.randrange(max(0, i - 50), i) for _ in range(rng.randint(0, 3))} if i else set())
        atoms.append((f"a{i}", [f"a{d}" for d in deps]))
    return atoms


def write_aot(path, atoms, command, verify="when_solved", finish=True):
    with open(path, "w") as f:
        f.write(HEADER.format(verify=verify))
        for atom_id, deps in atoms:
            f.write(f"    {atom_id}:\n      run: '{command}'\n")
            if deps:
                f.write(f"      deps: [{', '.join(deps)}]\n")
        if finish:
            f.write("    finish:\n      run: 'touch done.marker'\n")
            f.write(f"      deps: [{', '.join(a for a, _ in atoms)}]\n")


def write_ninja(path, atoms):
    with open(path, "w") as f:
        f.write("rule t\n  command = true && touch $out\n")
        for atom_id, deps in atoms:
            implicit = " ".join(f"out/{d}" for d in deps)
            f.write(f"build out/{atom_id}: t" + (f" | {implicit}" if implicit else "") + "\n")
        f.write("rule finish\n  command = touch $out\n")
        f.write("build done.marker: finish | " + " ".join(f"out/{a}" for a, _ in atoms) + "\n")
        f.write("default done.marker\n")


def timed(cmd, cwd):
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return elapsed


def fresh(tmp, name):
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "out"))
    return d


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aot", default="target/release/aot")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    aot = os.path.abspath(args.aot)
    ninja = ensure_ninja()
    atoms = dag(2000)
    tmp = tempfile.mkdtemp(prefix="aot-bench-")

    aot_times, ninja_times = [], []
    for _ in range(args.runs):
        d = fresh(tmp, "ninja")
        write_ninja(os.path.join(d, "build.ninja"), atoms)
        ninja_times.append(timed([ninja, "-j3"], d))
        d = fresh(tmp, "aot")
        write_aot(os.path.join(d, "aot.yaml"), atoms, "true")
        aot_times.append(timed([aot, "start"], d))
    a, n = statistics.median(aot_times), statistics.median(ninja_times)
    print(f"(a) 2,000-atom DAG: aot start {a:.2f} s, ninja -j3 {n:.2f} s -> {a / n:.2f}x (target <= 1.5x)")

    layers = [(f"l{layer}x{k}", [f"l{layer - 1}x{j}" for j in range(3)] if layer else []) for layer in range(4) for k in range(3)]
    times = []
    for _ in range(args.runs):
        d = fresh(tmp, "layers")
        write_aot(os.path.join(d, "aot.yaml"), layers, "sleep 0.5")
        times.append(timed([aot, "start"], d))
    w = statistics.median(times)
    print(f"(b) 4 layers x 3 x sleep 0.5, 3 in parallel: {w:.3f} s vs ideal 2.000 s -> {w / 2.0:.3f}x (target <= 1.05x)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
