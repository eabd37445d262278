#!/usr/bin/env python3
"""The planner benchmark of two builds, interleaved in one run.

Runs `reshard_bench_plan --json` of a baseline build and of this build in
alternation (ROUNDS rounds, so both see the same machine), and prints per
case the median validate and plan CPU seconds of each, their ratio
(baseline / this: above 1 is faster), and whether the plan digests (an
XXH3 of every fragment table entry and region field) are equal. A
baseline build from before the digest existed prints "n/a" there.

Usage: plan_ab.py BASELINE_BUILD THIS_BUILD [--models DIR] [--rounds N]
                  [--json]

--json prints one JSON object per case instead of the table (the medians,
ratios and digest verdict; bench/bench_report.py reads them).
"""

import argparse
import json
import statistics
import subprocess
import sys


def run(build, models):
    out = subprocess.run([f"{build}/reshard_bench_plan", "--models", models,
                          "--json"], capture_output=True, text=True,
                         check=True).stdout
    return {r["case"]: r for r in map(json.loads, out.splitlines())}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("baseline")
    p.add_argument("this")
    p.add_argument("--models", default="examples/models")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    rounds = {"baseline": [], "this": []}
    for _ in range(a.rounds):
        rounds["baseline"].append(run(a.baseline, a.models))
        rounds["this"].append(run(a.this, a.models))
    med = lambda side, case, key: statistics.median(  # noqa: E731
        r[case][key] for r in rounds[side])
    if not a.json:
        print(f"planner, baseline {a.baseline} against {a.this}, "
              f"{a.rounds} interleaved rounds (medians; ratio = baseline / "
              "this)")
        print()
        print("| case | validate s base | this | ratio | plan cpu s base | "
              "this | ratio | plan digests |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    differ = False
    for case in rounds["this"][0]:
        if case not in rounds["baseline"][0]:
            continue
        vb, vt = (med(s, case, "validate_seconds") for s in rounds)
        pb, pt = (med(s, case, "plan_cpu_seconds") for s in rounds)
        db = {r[case].get("plan_digest") for r in rounds["baseline"]}
        dt = {r[case].get("plan_digest") for r in rounds["this"]}
        if None in db:
            same = "n/a"
        else:
            same = "equal" if db == dt and len(dt) == 1 else "DIFFER"
            differ |= same == "DIFFER"
        if a.json:
            print(json.dumps({
                "case": case, "rounds": a.rounds,
                "validate_seconds_baseline": vb, "validate_seconds": vt,
                "plan_cpu_seconds_baseline": pb, "plan_cpu_seconds": pt,
                "plan_speedup": pb / pt, "plan_digests": same}))
        else:
            print(f"| {case} | {vb:.3f} | {vt:.3f} | {vb / vt:.2f}x | "
                  f"{pb:.3f} | {pt:.3f} | {pb / pt:.2f}x | {same} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
