#!/usr/bin/env python3
"""The replanning loop's own overhead: a run whose only latency is the model's.

A fake OpenAI-compatible server on 127.0.0.1 answers every chat completion
after a fixed delay with a one-atom plan that works. The state file is a
chain of three atoms that fail at once and have no alternatives, then one
that finishes: each failure needs a replan, one after the other, so the
critical path is three model calls. The run's wall time is compared with
3 x delay (the paper's cost model: time is model calls on the critical path).

    python3 bench/llm.py [--delay 1.0] [--runs 3]

Prints each run's time and its ratio to the critical path; the target is <= 1.1.
"""

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STATE = """version: 2
objective:
  goal: finish the chain
  background_intent: measure replanning overhead
  deliverables: the file done
  definition_of_done: done exists
  base_case: { command: 'test -f done' }
  constraints: { max_retries: 0, isolation: none, max_replans: 3 }
graph:
  atoms:
    x1: { run: 'false' }
    x2: { run: 'false', deps: [x1] }
    x3: { run: 'false', deps: [x2] }
    fin: { run: 'touch done', deps: [x3] }
"""


def server(delay):
    calls = iter(range(1, 1_000_000))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length", 0))
            self.rfile.read(length)
            time.sleep(delay)
            # A command not tried before: break_symmetry refuses a repeat.
            plan = {"atoms": {"ok": {"run": f"echo step {next(calls)}"}}, "rationale": "do it another way"}
            body = json.dumps({
                "model": "bench",
                "choices": [{"message": {"role": "assistant", "content": json.dumps(plan)}}],
                "usage": {"prompt_tokens": 500, "completion_tokens": 30},
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    aot = os.path.join(ROOT, "target", "release", "aot")
    httpd = server(args.delay)
    base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "BRAIN_", "TOOL_", "AOT_"))}
    env.update({"BRAIN_BASE_URL": base, "BRAIN_MODEL": "bench", "NO_COLOR": "1"})
    critical = 3 * args.delay
    ratios = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "aot.yaml"), "w") as f:
                f.write(STATE)
            started = time.monotonic()
            done = subprocess.run([aot, "start"], cwd=folder, env=env, capture_output=True, text=True)
            took = time.monotonic() - started
            if done.returncode != 0:
                sys.exit(f"run {run + 1} ended with exit {done.returncode}:\n{done.stderr}")
            log = subprocess.run([aot, "log"], cwd=folder, env=env, capture_output=True, text=True).stdout
            replans = log.count("✎ planner")
            if replans != 3:
                sys.exit(f"run {run + 1}: {replans} replans, expected 3:\n{log}")
        ratio = took / critical
        ratios.append(ratio)
        print(f"run {run + 1}: {took:.3f} s for 3 model calls of {args.delay:.3f} s: {ratio:.3f}x the critical path")
    ratios.sort()
    print(f"median {ratios[len(ratios) // 2]:.3f}x (target <= 1.1x)")


if __name__ == "__main__":
    main()
