#!/usr/bin/env python3
"""Stop latency: from `aot stop` returning to the runner having exited with its
workers dead, over 50 trials. Target: p95 <= 200 ms.

Usage: python3 bench/stop.py [--aot PATH] [--trials N]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

STATE = """version: 1
objective:
  goal: stop latency
  background_intent: benchmark
  deliverables: none
  definition_of_done: never
  base_case: {{ command: "false" }}
graph:
  atoms:
    long: {{ run: "touch started; exec -a {marker} sleep 1000" }}
"""


def alive(marker):
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            pass
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aot", default="target/release/aot")
    parser.add_argument("--trials", type=int, default=50)
    args = parser.parse_args()
    aot = os.path.abspath(args.aot)
    latencies = []
    for trial in range(args.trials):
        d = tempfile.mkdtemp(prefix="aot-stop-")
        marker = f"aot-bench-stop-{os.getpid()}-{trial}"
        with open(os.path.join(d, "aot.yaml"), "w") as f:
            f.write(STATE.format(marker=marker))
        runner = subprocess.Popen([aot, "start"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(d, "started")):
            if time.monotonic() > deadline:
                sys.exit("the runner never started its atom")
            time.sleep(0.005)
        subprocess.run([aot, "stop"], cwd=d, check=True, stdout=subprocess.DEVNULL)
        returned = time.monotonic()
        code = runner.wait(timeout=30)
        exited = time.monotonic()
        if code != 3:
            sys.exit(f"trial {trial}: runner exited {code}, expected 3")
        if alive(marker):
            sys.exit(f"trial {trial}: the worker survived the stop")
        latencies.append((exited - returned) * 1000)
    latencies.sort()
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    print(f"stop -> runner exited, workers dead ({len(latencies)} trials): "
          f"median {statistics.median(latencies):.1f} ms, p95 {p95:.1f} ms, max {latencies[-1]:.1f} ms (target p95 <= 200 ms)")


if __name__ == "__main__":
    main()
