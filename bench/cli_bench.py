#!/usr/bin/env python3
"""The commands people type, whole processes: `reshard plan A B --json` on
the Kimi-K2 pair (TP8/PP8/EP16/DP2 -> TP8/EP64, 264,960 -> 529,920
fragments) and `reshard validate B`, each against the bare simdjson read
and parse of the same files in a process of its own
(`reshard_bench_plan --parse-files`), measured in interleaved rounds: wall
time and peak RSS (the children's ru_maxrss) of every process.

Prints one line per figure with min / median / max over the rounds and the
verdict on the median ratio; with --json, one JSON object per figure.

Usage: cli_bench.py --cli BUILD/reshard --parse BUILD/reshard_bench_plan
                    [--models DIR] [--rounds N] [--json]
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def measure(argv):
    """(wall seconds, peak RSS bytes, stdout), the child reaped by wait4."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        out = os.open(OUT_FILE[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                      0o644)
        os.dup2(out, 1)
        os.dup2(fd, 2)
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit("%s exited with %d" % (" ".join(argv), code))
    with open(OUT_FILE[0], "rb") as f:
        out = f.read()
    return wall, usage.ru_maxrss * 1024, out


OUT_FILE = [None]


def stats(values):
    return {"min": min(values), "median": statistics.median(values),
            "max": max(values)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--parse", required=True,
                    help="reshard_bench_plan (its --parse-files mode)")
    ap.add_argument("--models", default="examples/models")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.rounds < 3:
        raise SystemExit("--rounds must be at least 3 (verdicts on medians)")
    tmp = tempfile.mkdtemp(prefix="reshard-cli-bench-")
    OUT_FILE[0] = os.path.join(tmp, "stdout")
    a, b = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
    model = os.path.join(args.models, "kimi-k2.json")
    for path, grid in ((a, ("8", "8", "16", "2")), (b, ("8", "1", "64", "1"))):
        subprocess.run([args.cli, "gen", "--model", model, "--tp", grid[0],
                        "--pp", grid[1], "--ep", grid[2], "--dp", grid[3],
                        "-o", path], check=True, capture_output=True)
    sizes = {"plan": os.path.getsize(a) + os.path.getsize(b),
             "validate": os.path.getsize(b)}
    commands = {
        "plan": ([args.cli, "plan", a, b, "--json"],
                 [args.parse, "--parse-files", a, b]),
        "validate": ([args.cli, "validate", b],
                     [args.parse, "--parse-files", b]),
    }
    goals = {"plan": (1.5, 2.5), "validate": (1.2, 2.0)}
    results = []
    for name, (command, baseline) in commands.items():
        walls, base_walls, rss, base_rss, digests = [], [], [], [], set()
        for r in range(args.rounds):
            # Interleaved, the order alternating: a slow spell of the
            # machine falls on both sides of a ratio.
            order = (command, baseline) if r % 2 == 0 else (baseline, command)
            for argv in order:
                wall, peak, out = measure(argv)
                if argv is command:
                    walls.append(wall)
                    rss.append(peak)
                    digests.add(hashlib.sha256(out).hexdigest()[:16])
                else:
                    base_walls.append(wall)
                    base_rss.append(peak)
        if len(digests) != 1:
            raise SystemExit("%s printed different outputs: %s" %
                             (name, sorted(digests)))
        ratios = [w / bw for w, bw in zip(walls, base_walls)]
        rss_ratio = [m / sizes[name] for m in rss]
        wall_goal, rss_goal = goals[name]
        result = {
            "command": name, "rounds": args.rounds,
            "input_bytes": sizes[name], "output_digest": digests.pop(),
            "wall_seconds": stats(walls), "parse_seconds": stats(base_walls),
            "wall_ratio": stats(ratios), "peak_rss_bytes": stats(rss),
            "parse_peak_rss_bytes": stats(base_rss),
            "rss_to_input": stats(rss_ratio),
            "wall_goal": wall_goal, "rss_goal": rss_goal,
        }
        results.append(result)
    for r in results:
        if args.json:
            print(json.dumps(r))
            continue
        w, p, q = r["wall_seconds"], r["wall_ratio"], r["rss_to_input"]
        print("%-8s wall %.2f/%.2f/%.2f s (min/median/max), %.2fx the parse "
              "(median; goal <= %.1fx: %s); peak RSS %.0f MiB, %.2fx the "
              "input (goal <= %.1fx: %s); output %s" % (
                  r["command"], w["min"], w["median"], w["max"], p["median"],
                  r["wall_goal"],
                  "met" if round(p["median"], 2) <= r["wall_goal"]
                  else "NOT met",
                  r["peak_rss_bytes"]["median"] / 2**20, q["median"],
                  r["rss_goal"],
                  "met" if round(q["median"], 2) <= r["rss_goal"]
                  else "NOT met", r["output_digest"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
