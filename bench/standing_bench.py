#!/usr/bin/env python3
"""Standing live sessions: per-update fixed cost and bandwidth against the
same bytes as one contiguous region, two processes, measured in one run.

Cases (each `reshard selftest --transport ucx --procs 2 --updates K
--json`: one session, K updates, sources on one process, targets on the
other, every target byte checked after each update):

* Qwen3-235B-A22B's tensor and fragment structure (1,131 tensors, 72,384
  regions; TP4/PP4/EP8/DP2 -> TP4/EP16) with its dimensions scaled down
  (bench/models/qwen3-235b-a22b-scaled.json, 1.85 GiB);
* the demo's small-moe layouts (TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4);
* for each, the same number of bytes as one contiguous uint8 tensor moved
  whole (one region): the baseline.

Each case runs in --rounds rounds (default 3) of one layout session and
one baseline session, the order alternating from round to round; the
small-moe case, whose sessions take seconds, runs --small-rounds rounds
(default 7): its ratio sits near its goal, and a median of more rounds
moves less from run to run.
Reported: the open cost, the median fixed cost per update (update time
from the last rank's arrival, minus the bytes at the session's fastest
exchange; min / median / max over the rounds), and bytes / median update
time against the baseline's (min / median / max of the rounds' ratios;
verdicts on the median). Targets:
fixed cost < 50 ms for the Qwen3 layout; bandwidth ratio >= 0.7 (Qwen3)
and >= 0.8 (small-moe).

Delta updates (`--delta --change-fraction 0.01`, the Qwen3 layout, over
loopback TCP and shared memory): the median delta update against the
median full update of a session without --delta, same transport, same
run; the wire bytes of a delta update as a fraction of a full one, and the
snapshot's host memory. Goals: at most 0.6x over TCP, 1.1x over shared
memory. A delta session's first update is full and its second allocates
its receive buffers, so its median is taken from the third update on.
Also --rounds rounds of (full session, delta session), alternating.

Verification on arrival (on by default, so the rows above include it):
the Qwen3 layout's median full update with verification against the same
session with `--no-verify`, --rounds interleaved rounds; goal: at most
1.15x.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/standing_bench.py
    --cli build/reshard [--updates K] [--rounds R]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import reshard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cli, *args):
    proc = subprocess.run([cli, *args], capture_output=True, text=True,
                          timeout=1200)
    if proc.returncode != 0:
        sys.exit(f"reshard {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def contiguous_pair(nbytes, out_dir):
    """One uint8 tensor of `nbytes` held whole on each side."""
    def layout(name):
        rank = reshard.ParallelRank()
        topo = reshard.ParallelTopology(participants=[
            reshard.TopologyParticipant(name, rank)])
        tensor = reshard.TensorDescriptor("w", (nbytes,), "uint8", 1)
        frag = reshard.PlacementFragment("w", (0,), (nbytes,), nbytes, rank)
        return reshard.Placement.from_fragments(
            "contiguous", "r", 1, name, topo, [tensor], [frag])
    paths = []
    for side in ("source", "target"):
        path = os.path.join(out_dir, f"contiguous_{side}.json")
        with open(path, "w") as f:
            f.write(layout(side).to_json())
        paths.append(path)
    return paths


def session(cli, src, dst, updates, *extra):
    out = run(cli, "selftest", src, dst, "--transport", "ucx", "--procs",
              "2", "--updates", str(updates), "--json", *extra)
    r = json.loads(out)
    if not r["verified"]:
        sys.exit(f"selftest {src} -> {dst}: {r['mismatch']}")
    # The first update warms caches and registrations; it is reported in
    # the JSON but not in the medians.
    steady = r["update_seconds"][1:] or r["update_seconds"]
    fixed = r["fixed_seconds"][1:] or r["fixed_seconds"]
    return dict(bytes=r["bytes"], open=r["open_seconds"],
                update=statistics.median(steady),
                fixed=statistics.median(fixed), messages=r["messages"],
                regions=r["operations"])


def spread(values, fmt="{:.2f}"):
    """min / median / max of `values`, formatted."""
    return " / ".join(fmt.format(v) for v in
                      (min(values), statistics.median(values), max(values)))


def case(cli, name, src, dst, updates, tmp, target_ratio, fixed_goal,
         rounds):
    """`rounds` rounds of (layout session, baseline session), the order
    alternating; the verdict on the median of the rounds' ratios."""
    layouts, bases, ratios = [], [], []
    for r in range(rounds):
        if r % 2 == 0:
            layout = session(cli, src, dst, updates)
            if r == 0:  # the baseline moves as many bytes as the layout
                csrc, cdst = contiguous_pair(layout["bytes"], tmp)
            base = session(cli, csrc, cdst, updates)
        else:
            base = session(cli, csrc, cdst, updates)
            layout = session(cli, src, dst, updates)
        layouts.append(layout)
        bases.append(base)
        ratios.append((layout["bytes"] / layout["update"]) /
                      (base["bytes"] / base["update"]))
    gbps = statistics.median(l["bytes"] / l["update"] / 1e9 for l in layouts)
    base_gbps = statistics.median(b["bytes"] / b["update"] / 1e9
                                  for b in bases)
    fixed = [l["fixed"] * 1e3 for l in layouts]
    ratio = statistics.median(ratios)
    fixed_verdict = ""
    if fixed_goal:
        fixed_verdict = (f" (< {fixed_goal} ms, " +
                         ("meets" if statistics.median(fixed) < fixed_goal
                          else "misses") + ")")
    verdict = "meets" if ratio >= target_ratio else "misses"
    return (f"| {name} | {layouts[0]['regions']:,} | "
            f"{layouts[0]['messages']:,} | "
            f"{statistics.median(l['open'] for l in layouts):.2f} | "
            f"{spread(fixed, '{:.1f}')}{fixed_verdict} | {gbps:.2f} | "
            f"{base_gbps:.2f} | {spread(ratios, '{:.3f}')}x (>= {target_ratio}, "
            f"median {verdict}) |")


def verify_row(cli, src, dst, updates, rounds):
    """`rounds` rounds of (verifying session, --no-verify session), the
    order alternating; the verdict on the median of the rounds' ratios."""
    ons, offs, ratios, fixed = [], [], [], []
    for r in range(rounds):
        kinds = ("on", "off") if r % 2 == 0 else ("off", "on")
        runs = {}
        for kind in kinds:
            extra = [] if kind == "on" else ["--no-verify"]
            runs[kind] = session(cli, src, dst, updates, *extra)
        ons.append(runs["on"]["update"] * 1e3)
        offs.append(runs["off"]["update"] * 1e3)
        fixed.append(runs["on"]["fixed"] * 1e3)
        ratios.append(runs["on"]["update"] / runs["off"]["update"])
    ratio = statistics.median(ratios)
    verdict = "meets" if ratio <= 1.15 else "misses"
    return (f"| {statistics.median(offs):.0f} | {statistics.median(ons):.0f} "
            f"| {spread(ratios, '{:.3f}')}x (<= 1.15x, median {verdict}) | "
            f"{spread(fixed, '{:.1f}')} |")


def delta_rows(cli, src, dst, updates, rounds):
    """Per transport, `rounds` rounds of (full session, delta session), the
    order alternating; the verdict on the median of the rounds' ratios."""
    rows = []
    for tls, goal in (("tcp", 0.6), ("shm", 1.1)):
        common = ["selftest", src, dst, "--transport", "ucx", "--procs", "2",
                  "--updates", str(updates), "--ucx-tls", tls, "--json"]
        fulls, deltas, ratios, wires = [], [], [], []
        for r in range(rounds):
            runs = {}
            for kind in (("full", "delta") if r % 2 == 0 else
                         ("delta", "full")):
                extra = (["--delta", "--change-fraction", "0.01"]
                         if kind == "delta" else [])
                runs[kind] = json.loads(run(cli, *common, *extra))
                if not runs[kind]["verified"]:
                    sys.exit(f"selftest over {tls}: {runs[kind]['mismatch']}")
            full, delta = runs["full"], runs["delta"]
            f = statistics.median(full["update_seconds"][1:])
            d = statistics.median(delta["update_seconds"][2:])
            fulls.append(f * 1e3)
            deltas.append(d * 1e3)
            ratios.append(d / f)
            wires.append(statistics.median(delta["wire_bytes"][2:]) /
                         full["bytes"])
        ratio = statistics.median(ratios)
        verdict = "meets" if ratio <= goal else "misses"
        rows.append(
            f"| {tls} | {statistics.median(fulls):.0f} | "
            f"{statistics.median(deltas):.0f} | {spread(ratios, '{:.3f}')}x "
            f"(<= {goal}x, median {verdict}) | "
            f"{statistics.median(wires) * 100:.1f}% | "
            f"{delta['snapshot_bytes'] / 2**30:.2f} GiB |")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "reshard"))
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--delta-updates", type=int, default=6)
    p.add_argument("--small-rounds", type=int, default=7,
                   help="rounds of the small-moe case (at least --rounds)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds of each case and its baseline "
                   "(at least 3; verdicts on the median)")
    a = p.parse_args()
    if a.rounds < 3:
        p.error("--rounds must be at least 3 (verdicts on medians)")
    a.small_rounds = max(a.small_rounds, a.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        def gen(model, sizes, name):
            path = os.path.join(tmp, name)
            args = ["gen", "--model", model, "-o", path]
            for axis, n in zip(("--tp", "--pp", "--ep", "--dp"), sizes):
                args += [axis, str(n)]
            run(a.cli, *args)
            return path
        qwen = os.path.join(HERE, "models", "qwen3-235b-a22b-scaled.json")
        small = os.path.join(ROOT, "examples", "models", "small-moe.json")
        rows = [
            case(a.cli, "Qwen3-235B-A22B structure, scaled (TP4/PP4/EP8/DP2 "
                 "-> TP4/EP16)", gen(qwen, (4, 4, 8, 2), "q_src.json"),
                 gen(qwen, (4, 1, 16, 1), "q_dst.json"), a.updates, tmp, 0.7,
                 50, a.rounds),
            case(a.cli, "small-moe (TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4)",
                 gen(small, (4, 2, 8, 2), "s_src.json"),
                 gen(small, (8, 4, 2, 4), "s_dst.json"), a.updates, tmp, 0.8,
                 None, a.small_rounds),
        ]
        verify = verify_row(a.cli, os.path.join(tmp, "q_src.json"),
                            os.path.join(tmp, "q_dst.json"), a.updates,
                            a.rounds)
        deltas = delta_rows(a.cli, os.path.join(tmp, "q_src.json"),
                            os.path.join(tmp, "q_dst.json"), a.delta_updates,
                            a.rounds)
    print(f"Standing sessions, 2 processes, {a.updates} updates each "
          "(medians without the first); baseline: the same bytes as one "
          f"contiguous region, same run; {a.rounds} interleaved rounds of "
          f"each ({a.small_rounds} of small-moe; min / median / max; "
          "verdicts on the median)")
    print()
    print("| layout | regions | messages/update | open s | fixed ms/update "
          "| GB/s | contiguous GB/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)
    print()
    print("Verification on arrival, Qwen3-235B-A22B structure (scaled), "
          "full updates: median update without and with verification, same "
          f"run; {a.rounds} interleaved rounds (ratio and fixed cost with "
          "verification: min / median / max)")
    print()
    print("| without ms | with ms | ratio | fixed ms/update with |")
    print("| --- | --- | --- | --- |")
    print(verify)
    print()
    print("Delta updates, Qwen3-235B-A22B structure (scaled), 1% of the "
          "elements changed per update: median delta update vs median full "
          f"update, same transport, same run; {a.rounds} interleaved rounds "
          "of (full, delta) sessions (ratio min / median / max; ms: "
          "medians)")
    print()
    print("| transport | full ms | delta ms | ratio | wire / full | "
          "snapshot |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in deltas:
        print(row)


if __name__ == "__main__":
    main()
