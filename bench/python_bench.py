#!/usr/bin/env python3
"""The Python package against the C++ CLI, measured in the same run.

Two ratios:

* planning: ``reshard.plan`` of the Qwen3-235B-A22B layouts of the README's
  planner table (TP4/PP4/EP8/DP2 -> TP4/EP16, generated with ``reshard
  gen``) from Python, against the plan time ``reshard plan`` reports for
  the same files (the "(X s)" of its first line). Medians of --runs runs;
  the target is Python within 10% of the CLI (ratio <= 1.10).
* local reshard: 1 GiB (a [64, 4096, 4096] uint8 tensor) resharded between
  torch tensors with ``reshard.reshard`` (plan reused, wall time of the
  call, so tensor intake and binding count), against the bandwidth
  ``reshard selftest --json`` reports for the same placements (transfer
  only). Rounds of one self-test then three Python reshards, interleaved,
  medians. The self-test's buffers are on transparent huge pages, so the
  compared Python tensors are too (madvised before first touch); the
  target is Python within 10% of the self-test (ratio >= 0.90). Tensors of
  torch's own allocator are reported beside them, not compared: where THP
  is "madvise" they sit on 4 KiB pages, which the copy pays for.

Usage (scripts/bench.sh runs it):
  PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py \\
      --cli build/reshard --models examples/models [--runs N]
      [--local-runs N] [--threads N]

Prints a markdown table; --json prints a JSON list of rows instead. Exits 0
whatever the ratios (timings are noisy on small machines) unless --check
is given, then 1 when a ratio misses its target.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import reshard

try:
    import torch
except ImportError:  # pragma: no cover
    sys.exit("python_bench: torch is required (Debian's python3-torch)")

PLAN_SOURCE = dict(tp=4, pp=4, ep=8, dp=2)
PLAN_TARGET = dict(tp=4, pp=1, ep=16, dp=1)
LOCAL_SHAPE = (64, 4096, 4096)  # uint8: 1 GiB
PY_PER_ROUND = 3
LOCAL_CASES = [("TP4 -> TP8, dim 0 (contiguous)", 4, 0, 8, 0),
               ("TP4 dim 0 -> TP4 dim 1", 4, 0, 4, 1)]


def run(cmd):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.exit(f"python_bench: {' '.join(map(str, cmd))} failed: "
                 f"{proc.stderr.strip()}")
    return proc.stdout


def layout_name(sizes):
    parts = [f"TP{sizes['tp']}"]
    if sizes["pp"] > 1:
        parts.append(f"PP{sizes['pp']}")
    parts.append(f"EP{sizes['ep']}")
    if sizes["dp"] > 1:
        parts.append(f"DP{sizes['dp']}")
    return "/".join(parts)


def bench_plan(cli, models, runs, tmp):
    """Median seconds of the CLI's reported plan time and of reshard.plan."""
    spec = os.path.join(models, "qwen3-235b-a22b.json")
    files = []
    for name, sizes in (("source", PLAN_SOURCE), ("target", PLAN_TARGET)):
        path = os.path.join(tmp, f"qwen3-{name}.json")
        run([cli, "gen", "--model", spec, "--tp", sizes["tp"], "--pp",
             sizes["pp"], "--ep", sizes["ep"], "--dp", sizes["dp"], "-o",
             path])
        files.append(path)
    with open(files[0], encoding="utf-8") as f:
        src = reshard.Placement.from_json(f.read())
    with open(files[1], encoding="utf-8") as f:
        dst = reshard.Placement.from_json(f.read())
    plan = reshard.plan(src, dst)  # warm-up
    # Interleaved, so that a change of machine load hits both sides.
    cli_seconds, py_seconds = [], []
    for _ in range(runs):
        out = run([cli, "plan", *files])
        first = out.splitlines()[0]
        m = re.search(r"\(([0-9.]+) s\)$", first)
        if not m:
            sys.exit(f"python_bench: no plan time in {first!r}")
        cli_seconds.append(float(m.group(1)))
        del plan  # not freed inside the timed call
        t0 = time.perf_counter()
        plan = reshard.plan(src, dst)
        py_seconds.append(time.perf_counter() - t0)
    regions = int(re.search(r"regions (\d+)", out).group(1))
    if plan.num_regions != regions:
        sys.exit(f"python_bench: Python planned {plan.num_regions} regions, "
                 f"the CLI {regions}")
    cli_s = statistics.median(cli_seconds)
    py_s = statistics.median(py_seconds)
    return {
        "case": (f"plan Qwen3-235B-A22B {layout_name(PLAN_SOURCE)} -> "
                 f"{layout_name(PLAN_TARGET)} ({len(src.fragments):,} / "
                 f"{len(dst.fragments):,} fragments, {regions:,} regions)"),
        "unit": "s", "cli": cli_s, "python": py_s,
        "cli_runs": cli_seconds, "python_runs": py_seconds,
        "ratio": py_s / cli_s, "target": "<= 1.10",
        "ok": py_s / cli_s <= 1.10,
    }


def split_layout(tp, dim, set_id):
    """LOCAL_SHAPE uint8 split over `tp` ranks along `dim`."""
    desc = reshard.TensorDescriptor(
        "w", list(LOCAL_SHAPE), "uint8", 1, shard_dims=[dim],
        parallel_axes=[reshard.SplitAxis("tp", dim)])
    topology = reshard.ParallelTopology(
        tp_size=tp, participants=[
            reshard.TopologyParticipant(f"t{r}", reshard.ParallelRank(tp=r))
            for r in range(tp)])
    fragments = []
    for r in range(tp):
        offset = [0, 0, 0]
        shape = list(LOCAL_SHAPE)
        shape[dim] //= tp
        offset[dim] = r * shape[dim]
        fragments.append(reshard.PlacementFragment(
            "w", offset, shape, shape[0] * shape[1] * shape[2],
            reshard.ParallelRank(tp=r)))
    return reshard.Placement.from_fragments(
        "bench-model", "r1", 1, set_id, topology, [desc], fragments)


def _huge_page_tensor(shape, value):
    """A uint8 tensor whose pages are advised as transparent huge pages
    before first touch, as the self-test allocates its buffers
    (src/selftest/host_buffers.cc); plain torch memory otherwise."""
    t = torch.empty(shape, dtype=torch.uint8)
    huge = 2 << 20
    start = (t.data_ptr() + huge - 1) // huge * huge
    end = (t.data_ptr() + t.numel()) // huge * huge
    if end > start and _MADVISE is not None:
        _MADVISE(start, end - start, 14)  # MADV_HUGEPAGE
    return t.fill_(value)


def _madvise():
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int]
        return libc.madvise
    except (OSError, AttributeError):
        return None


_MADVISE = _madvise()
# (label, allocator, compared with the self-test): the self-test's buffers
# are on transparent huge pages, so the like-for-like ratio is the first;
# the second shows what plain torch memory costs where THP is "madvise"
# (page size, not the package).
ALLOCATORS = [
    ("torch tensors on huge pages, as the self-test's buffers",
     _huge_page_tensor, True),
    ("torch tensors, torch's allocator",
     lambda shape, value: torch.full(shape, value, dtype=torch.uint8), False),
]


def bench_local(cli, runs, threads, tmp):
    rows = []
    for name, stp, sdim, dtp, ddim in LOCAL_CASES:
        src = split_layout(stp, sdim, "bench-source")
        dst = split_layout(dtp, ddim, "bench-target")
        paths = []
        for side, p in (("source", src), ("target", dst)):
            path = os.path.join(tmp, f"local-{stp}-{sdim}-{dtp}-{ddim}-"
                                f"{side}.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(p.to_json())
            paths.append(path)
        plan = reshard.plan(src, dst)
        nbytes = plan.summary["bytes"]
        variants = []
        for label, make, compared in ALLOCATORS:
            sources = {f.placement_fragment_id: make(f.local_shape, 0x5A)
                       for f in src.fragments}
            # Targets written once, as the self-test poisons its own.
            targets = {f.placement_fragment_id: make(f.local_shape, 0xD7)
                       for f in dst.fragments}
            reshard.reshard(src, sources, dst, targets, plan=plan,
                            threads=threads)  # warm-up
            variants.append((label, compared, sources, targets, [], []))
        # Interleaved rounds: one self-test (it fills and checks 1 GiB:
        # seconds), then PY_PER_ROUND reshards of each Python variant.
        cli_gbps = []
        for _ in range(runs):
            report = json.loads(run([cli, "selftest", *paths, "--threads",
                                     threads, "--json"]))
            if not report["verified"]:
                sys.exit(f"python_bench: selftest mismatch: "
                         f"{report['mismatch']}")
            cli_gbps.append(report["gbps"])
            for _, _, sources, targets, wall, native in variants:
                for _ in range(PY_PER_ROUND):
                    t0 = time.perf_counter()
                    r = reshard.reshard(src, sources, dst, targets, plan=plan,
                                        threads=threads)
                    wall.append(time.perf_counter() - t0)
                    native.append(r.transfer_seconds)
        cli_v = statistics.median(cli_gbps)
        for label, compared, sources, targets, wall, native in variants:
            for t in targets.values():
                if not bool((t == 0x5A).all()):
                    sys.exit("python_bench: a target byte was not written")
            py_v = nbytes / statistics.median(wall) / 1e9
            rows.append({
                "case": f"local 1 GiB {name}, {threads} threads: {label}",
                "unit": "GB/s", "cli": cli_v, "python": py_v,
                "python_native": nbytes / statistics.median(native) / 1e9,
                "cli_runs": cli_gbps,
                "python_runs": [nbytes / w / 1e9 for w in wall],
                "ratio": py_v / cli_v,
                "target": ">= 0.90" if compared else "none (page size)",
                "ok": py_v / cli_v >= 0.90 or not compared,
            })
        del variants
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default="build/reshard")
    ap.add_argument("--models", default="examples/models")
    ap.add_argument("--runs", type=int, default=5,
                    help="planning rounds: the CLI once, Python once")
    ap.add_argument("--local-runs", type=int, default=5,
                    help="local rounds: one self-test, then 3 reshards of "
                    "each Python variant")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a ratio misses its target")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reshard-python-bench-") as tmp:
        rows = [bench_plan(args.cli, args.models, args.runs, tmp)]
        rows += bench_local(args.cli, args.local_runs, args.threads, tmp)
    if args.json:
        print(json.dumps(rows, indent=1, sort_keys=True))
    else:
        print(f"Python package vs C++ CLI, interleaved in one run (medians: "
              f"planning of {args.runs} runs each; local of "
              f"{args.local_runs} self-tests and "
              f"{args.local_runs * PY_PER_ROUND} Python reshards)")
        print("ratio = Python / C++: seconds (lower is better), GB/s "
              "(higher is better)")
        print()
        print("| case | C++ | Python | ratio | target |")
        print("| --- | --- | --- | --- | --- |")
        for r in rows:
            digits = 3 if r["unit"] == "s" else 2
            print(f"| {r['case']} | {r['cli']:.{digits}f} {r['unit']} | "
                  f"{r['python']:.{digits}f} {r['unit']} | "
                  f"{r['ratio']:.2f}x | {r['target']}"
                  f"{'' if r['ok'] else ' (missed)'} |")
        local = [r for r in rows if "python_native" in r]
        if local:
            print()
            print("Python GB/s is the wall time of reshard.reshard() (tensor "
                  "intake, binding, transfer); its native transfer alone: " +
                  ", ".join(f"{r['python_native']:.2f} GB/s" for r in local)
                  + ".")
    if args.check and not all(r["ok"] for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
