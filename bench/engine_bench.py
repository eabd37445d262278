#!/usr/bin/env python3
"""Engine reshard (fused parameters) against `hf reshard` (canonical
tensors) of the same checkpoint, interleaved in one run.

A scaled Qwen3-MoE checkpoint (BF16, random bytes; hidden 1024, 8 MoE
layers of 16 experts, vocabulary 32,000; 475 MB of tensors in 4
files) is generated with numpy into a temporary directory, and the
Megatron-Core trainer's parameter files at TP2/EP2 are written from it
once with `reshard engine load` (untimed). Then, for ROUNDS rounds, in
turn (the order alternating from round to round):

  baseline  `reshard hf reshard CKPT TP4.json OUT` (the checkpoint's
            canonical TP4 layout from `reshard hf layout --tp 4`): reads
            the checkpoint, writes it as TP4 fragments;
  measured  `reshard engine reshard SRC DST --from megatron --from-tp 2
            --from-ep 2 --to vllm --to-tp 4 --via local`: reads the
            Megatron files (fused QKV and gate/up, grouped experts), moves
            them into vLLM's fused parameters, writes one file per rank.

Each is timed end to end (the wall clock of the process, files included;
both read files that were just written, so both read from the page cache)
and its bytes (hf: the tensor bytes loaded; engine: the target parameter
bytes, padding included) divided by that time. The figure is the median
over the rounds of engine GB/s / hf GB/s, held to >= 0.8 ("fused
parameters cost no more than canonical ones"). A second, informational
line compares the move alone: the engine's `seconds` (memory to memory)
against hf's `load_seconds` (ranged reads from the checkpoint into the
target buffers).

Both commands run one copy of --cli taken at the start. Before the
rounds, one untimed run of each (a warm-up; this VM's first
run after the setup writes measured up to 3x slower), the engine's also
the correctness check: its output equals `reshard engine load CKPT
--engine vllm --tp 4` file for file, byte for byte; otherwise exit 1.

Usage: engine_bench.py [--cli build/reshard] [--dir TMP] [--rounds 3]
                       [--json] [--keep]

--json prints one JSON object per figure (name, measured, baseline,
ratio, target, met, ...; bench/bench_report.py reads them) instead of
the table.
"""

import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
import hf_checkpoints as hfc  # noqa: E402

# Qwen3-30B-A3B's structure, scaled: Megatron TP2/EP2 (16 heads, 4 query
# groups, 16 experts; vocabulary 32,000 = 125 x 128 x TP 2, no padding)
# and vLLM TP4 (4 heads and 1 KV head per rank, 96 of each expert's 384
# rows; vocabulary 8,000 rows per rank) are both valid grids.
CONFIG = dict(
    hfc.CONFIGS["qwen3_moe"], hidden_size=1024, vocab_size=32000,
    num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
    head_dim=64, intermediate_size=3072, moe_intermediate_size=384,
    num_experts=16, num_experts_per_tok=4, mlp_only_layers=[])
FILES = 4
MEGATRON = ["--tp", "2", "--ep", "2"]
MEGATRON_FROM = ["--from-tp", "2", "--from-ep", "2"]
TARGET = 0.8


def run(cli, *args):
    """(parsed --json output, wall seconds) of `reshard ARGS --json`."""
    t0 = time.perf_counter()
    proc = subprocess.run([cli, *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"reshard {' '.join(map(str, args))} failed "
                 f"({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout), wall


def write_checkpoint(directory, cfg, files):
    """config.json, `files` safetensors shards of random bytes and the
    index; returns the tensor bytes."""
    rng = np.random.default_rng(20261204)
    data = hfc.write_checkpoint(directory, cfg, files,
                                fill=lambda name, dt, shape, n: rng.bytes(n))
    return sum(len(v[2]) for v in data.values())


def same_files(a, b):
    """None if directories a and b hold the same files with the same
    bytes, else what differs."""
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if fa != fb:
        return f"files differ: {fa} vs {fb}"
    for name in fa:
        if not filecmp.cmp(os.path.join(a, name), os.path.join(b, name),
                           shallow=False):
            return f"{name} differs"
    return None


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


def bench(cli, tmp, rounds):
    # One copy of the binary for the whole run: both commands run the same
    # bytes even if the build directory is relinked meanwhile.
    shutil.copy2(cli, os.path.join(tmp, "reshard"))
    cli = os.path.join(tmp, "reshard")
    ckpt = os.path.join(tmp, "ckpt")
    t0 = time.perf_counter()
    ckpt_bytes = write_checkpoint(ckpt, CONFIG, FILES)
    gen_s = time.perf_counter() - t0
    config = os.path.join(ckpt, "config.json")
    layout = os.path.join(tmp, "tp4.json")
    subprocess.run([cli, "hf", "layout", config, "--tp", "4", "-o", layout],
                   check=True, capture_output=True)
    src = os.path.join(tmp, "megatron")
    load, _ = run(cli, "engine", "load", ckpt, "--engine", "megatron",
                  *MEGATRON, "-o", src)
    ref = os.path.join(tmp, "vllm-ref")
    run(cli, "engine", "load", ckpt, "--engine", "vllm", "--tp", "4",
        "-o", ref)
    # The files just written stay in the page cache; their writeback is
    # done before the first timed command (each command fsyncs its own
    # output, so none is pending between rounds).
    os.sync()

    def hf_reshard(out):
        return run(cli, "hf", "reshard", ckpt, layout, out)

    def engine_reshard(out):
        return run(cli, "engine", "reshard", src, out, "--config", config,
                   "--from", "megatron", *MEGATRON_FROM, "--to", "vllm",
                   "--to-tp", "4", "--via", "local",
                   # engine load's revision: the files' identities agree
                   # too, so the outputs are the same bytes.
                   "--revision", "hf")

    # One untimed run of each first (this VM's first run after writing
    # 1.4 GB measured up to 3x slower); the engine's is the correctness
    # check.
    out = os.path.join(tmp, "hf-warmup")
    hf_reshard(out)
    shutil.rmtree(out)
    out = os.path.join(tmp, "engine-check")
    engine_reshard(out)
    diff = same_files(out, ref)
    if diff is not None:
        sys.exit(f"engine reshard output is not engine load's vLLM TP4 "
                 f"files: {diff}")
    shutil.rmtree(out)
    hf_runs, engine_runs = [], []
    for r in range(rounds):
        # The order alternates (a slow spell of the disk falls on both
        # sides of the ratios), and each command starts with the removal
        # of the last one's files written back.
        order = [("hf", hf_reshard, hf_runs),
                 ("engine", engine_reshard, engine_runs)]
        for name, command, runs in order if r % 2 == 0 else order[::-1]:
            out = os.path.join(tmp, f"{name}-{r}")
            runs.append(command(out))
            shutil.rmtree(out)
            os.sync()
    return dict(ckpt_bytes=ckpt_bytes, gen_seconds=gen_s,
                source_bytes=load["bytes"] + load["padding_bytes"],
                hf=hf_runs, engine=engine_runs)


def figures(res, rounds):
    hf, eng = res["hf"], res["engine"]
    hf_bytes = hf[0][0]["bytes"]
    eng_bytes = eng[0][0]["bytes"] + eng[0][0]["padding_bytes"]
    case = ("scaled Qwen3-MoE (hidden 1024, 8 layers x 16 experts, "
            f"{res['ckpt_bytes'] / 1e6:.0f} MB BF16): Megatron TP2/EP2 -> "
            "vLLM TP4 via local")
    common = dict(case=case, rounds=rounds, bytes=eng_bytes,
                  baseline_bytes=hf_bytes,
                  source_bytes=eng[0][0]["source_bytes"],
                  padding_bytes=eng[0][0]["padding_bytes"],
                  checked="identical to engine load --engine vllm --tp 4")

    def figure(name, what, eng_s, hf_s, target):
        e = [gbps(eng_bytes, s) for s in eng_s]
        b = [gbps(hf_bytes, s) for s in hf_s]
        ratios = [x / y for x, y in zip(e, b)]
        med = statistics.median(ratios)
        return dict(
            name=name, what=what, **common,
            seconds=eng_s, baseline_seconds=hf_s,
            gbps=e, baseline_gbps=b, ratios=ratios,
            measured=statistics.median(e), baseline=statistics.median(b),
            ratio=med, target=target,
            met=None if target is None else round(med, 2) >= target)

    return [
        figure("engine-reshard", "end to end: process wall clock, files "
               "read and written",
               [w for _, w in eng], [w for _, w in hf], TARGET),
        figure("engine-reshard-move", "the move alone: engine `seconds` "
               "(memory to memory) vs hf `load_seconds` (ranged reads into "
               "the target buffers); informational",
               [r["seconds"] for r, _ in eng],
               [r["load_seconds"] for r, _ in hf], None),
    ]


def print_table(figs, res):
    f = figs[0]
    print(f"{f['case']}; {f['rounds']} interleaved rounds; checkpoint "
          f"generated in {res['gen_seconds']:.1f} s; engine output "
          f"{f['checked']}")
    print(f"engine bytes {f['bytes']:,} ({f['padding_bytes']:,} padding; "
          f"{f['source_bytes']:,} read), hf bytes {f['baseline_bytes']:,}")
    print()
    print("| figure | engine s | engine GB/s | hf s | hf GB/s | ratio "
          "min / median / max | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for f in figs:
        rs = sorted(f["ratios"])
        print(f"| {f['name']} ({f['what']}) | "
              f"{', '.join('%.3f' % s for s in f['seconds'])} | "
              f"{f['measured']:.2f} | "
              f"{', '.join('%.3f' % s for s in f['baseline_seconds'])} | "
              f"{f['baseline']:.2f} | "
              f"{rs[0]:.2f}x / {f['ratio']:.2f}x / {rs[-1]:.2f}x | " +
              ("-" if f["target"] is None else
               f">= {f['target']}x: {'met' if f['met'] else 'NOT MET'}") +
              " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "reshard"))
    p.add_argument("--dir", help="parent of the temporary directory")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory")
    a = p.parse_args()
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    tmp = tempfile.mkdtemp(prefix="reshard-engine-bench-", dir=a.dir)
    try:
        res = bench(a.cli, tmp, a.rounds)
    finally:
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    figs = figures(res, a.rounds)
    if a.json:
        for f in figs:
            print(json.dumps(f))
    else:
        print_table(figs, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
