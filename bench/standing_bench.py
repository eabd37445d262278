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

Reported: the open cost, the median fixed cost per update (update time
from the last rank's arrival, minus the bytes at the session's fastest
exchange), and bytes / median update time against the baseline's. Targets:
fixed cost < 50 ms for the Qwen3 layout; bandwidth ratio >= 0.7 (Qwen3)
and >= 0.8 (small-moe).

Delta updates (`--delta --change-fraction 0.01`, the Qwen3 layout, over
loopback TCP and shared memory): the median delta update against the
median full update of a session without --delta, same transport, same
run; the wire bytes of a delta update as a fraction of a full one, and the
snapshot's host memory. Goals: at most 0.6x over TCP, 1.1x over shared
memory. A delta session's first update is full and its second allocates
its receive buffers, so its median is taken from the third update on.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/standing_bench.py
    --cli build/reshard [--updates K]
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


def session(cli, src, dst, updates):
    out = run(cli, "selftest", src, dst, "--transport", "ucx", "--procs",
              "2", "--updates", str(updates), "--json")
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


def case(cli, name, src, dst, updates, tmp, target_ratio, fixed_goal):
    layout = session(cli, src, dst, updates)
    csrc, cdst = contiguous_pair(layout["bytes"], tmp)
    base = session(cli, csrc, cdst, updates)
    gbps = layout["bytes"] / layout["update"] / 1e9
    base_gbps = base["bytes"] / base["update"] / 1e9
    ratio = gbps / base_gbps
    fixed_ms = layout["fixed"] * 1e3
    goal = f"< {fixed_goal} ms" if fixed_goal else "-"
    return (f"| {name} | {layout['regions']:,} | {layout['messages']:,} | "
            f"{layout['open']:.2f} | {fixed_ms:.1f} ({goal}) | {gbps:.2f} | "
            f"{base_gbps:.2f} | {ratio:.2f}x (>= {target_ratio}) |")


def delta_rows(cli, src, dst, updates):
    rows = []
    for tls, goal in (("tcp", 0.6), ("shm", 1.1)):
        common = ["selftest", src, dst, "--transport", "ucx", "--procs", "2",
                  "--updates", str(updates), "--ucx-tls", tls, "--json"]
        full = json.loads(run(cli, *common))
        delta = json.loads(run(cli, *common, "--delta", "--change-fraction",
                               "0.01"))
        for r in (full, delta):
            if not r["verified"]:
                sys.exit(f"selftest over {tls}: {r['mismatch']}")
        f = statistics.median(full["update_seconds"][1:])
        d = statistics.median(delta["update_seconds"][2:])
        wire = statistics.median(delta["wire_bytes"][2:]) / full["bytes"]
        ratio = d / f
        verdict = "meets" if ratio <= goal else "misses"
        rows.append(
            f"| {tls} | {f * 1e3:.0f} | {d * 1e3:.0f} | {ratio:.2f}x "
            f"(<= {goal}x, {verdict}) | {wire * 100:.1f}% | "
            f"{delta['snapshot_bytes'] / 2**30:.2f} GiB |")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "reshard"))
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--delta-updates", type=int, default=7)
    a = p.parse_args()
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
                 50),
            case(a.cli, "small-moe (TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4)",
                 gen(small, (4, 2, 8, 2), "s_src.json"),
                 gen(small, (8, 4, 2, 4), "s_dst.json"), a.updates, tmp, 0.8,
                 None),
        ]
        deltas = delta_rows(a.cli, os.path.join(tmp, "q_src.json"),
                            os.path.join(tmp, "q_dst.json"), a.delta_updates)
    print(f"Standing sessions, 2 processes, {a.updates} updates each "
          "(medians without the first); baseline: the same bytes as one "
          "contiguous region, same run")
    print()
    print("| layout | regions | messages/update | open s | fixed ms/update "
          "| GB/s | contiguous GB/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)
    print()
    print("Delta updates, Qwen3-235B-A22B structure (scaled), 1% of the "
          "elements changed per update: median delta update vs median full "
          "update, same transport, same run")
    print()
    print("| transport | full ms | delta ms | ratio | wire / full | "
          "snapshot |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in deltas:
        print(row)


if __name__ == "__main__":
    main()
