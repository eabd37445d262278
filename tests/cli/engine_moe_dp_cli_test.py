#!/usr/bin/env python3
"""CLI contract of vLLM's MoE at DP > 1 without expert parallelism: FusedMoE
flattens TP across DP, so rank (d, t) holds part d * tp + t of dp * tp of
every routed expert's intermediate dimension (w13: gate rows and up rows;
w2: down columns), while shared experts and dense layers split over TP and
replicate over DP. Checked on tiny checkpoints (hf_checkpoints.py): every
participant's file of `engine load --engine vllm` byte for byte against
engine_reference.py (Qwen3-MoE, Mixtral, DeepSeek-V3 in BF16; per-expert
and transformers 5's fused save), the placement's spanning split axis
(wire key "over"), and `engine reshard` from Megatron into that grid and
out of it, locally and through an fs:// weight store.

Usage: engine_moe_dp_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_reference as ref  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402
from harness import (Suite, check, expect_error, expect_ok,  # noqa: E402
                     run_cli)

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}
CONFIGS = dict(hfc.CONFIGS, deepseek_v3_bf16=ref.DEEPSEEK_V3_BF16)
CACHE = {}


def run(*args):
    return run_cli(RESHARD, *args, timeout=120)


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def checkpoint(key):
    """(directory, {name: (dtype, shape, bytes)}) of CONFIGS[key]."""
    if key not in CACHE:
        d = path("ckpt-" + key)
        hfc.write_checkpoint(d, CONFIGS[key])
        CACHE[key] = (d, hfc.read_checkpoint(d))
    return CACHE[key]


def grid_args(grid, prefix=""):
    """--tp/--pp/--ep/--dp[/--make-vocab-size-divisible-by] of grid =
    (tp, pp, ep, dp[, vocab multiple])."""
    args = []
    for name, v in zip(("tp", "pp", "ep", "dp"), grid[:4]):
        args += ["--" + prefix + name, v]
    if len(grid) > 4:
        args += ["--" + prefix + "make-vocab-size-divisible-by", grid[4]]
    return args


def read_dir(d):
    """{participant: {param: (dtype, shape, bytes)}} of an output dir."""
    return {f[:-len(".safetensors")]: hfc.read_file(os.path.join(d, f))
            for f in sorted(os.listdir(d))}


def same_params(got, want, what):
    check(sorted(got) == sorted(want), "%s: participants %s, expected %s"
          % (what, sorted(got), sorted(want)))
    for pid in sorted(want):
        check(sorted(got[pid]) == sorted(want[pid]), "%s %s: parameters %s, "
              "expected %s" % (what, pid, sorted(got[pid]),
                               sorted(want[pid])))
        for name, (dt, shape, data) in sorted(want[pid].items()):
            g = got[pid][name]
            check(g[0] == dt and list(g[1]) == list(shape) and g[2] == data,
                  "%s %s %s: %s %s (%d bytes), expected %s %s (%d bytes)" %
                  (what, pid, name, g[0], g[1], len(g[2]), dt, shape,
                   len(data)))


def expected(key, engine, grid):
    tp, pp, ep, dp = grid[:4]
    vm = grid[4] if len(grid) > 4 else None
    return ref.expected(checkpoint(key)[1], CONFIGS[key], engine, tp, pp, ep,
                        dp, vm)


def load(key, engine, grid, ckpt=None):
    out = path("load-%s-%s-%s" % (key, engine, "-".join(map(str, grid))))
    if not os.path.exists(out):
        expect_ok(run("engine", "load", ckpt or checkpoint(key)[0],
                      "--engine", engine, *grid_args(grid), "-o", out),
                  "engine load %s %s %s" % (key, engine, grid))
    return out


def reshard(key, src, frm, to, out, via):
    cfg = os.path.join(checkpoint(key)[0], "config.json")
    return run("engine", "reshard", src, out, "--config", cfg,
               "--from", frm[0], *grid_args(frm[1], "from-"),
               "--to", to[0], *grid_args(to[1], "to-"), "--via", via,
               "--json")


GRIDS = [("qwen3_moe", (2, 1, 1, 2)), ("qwen3_moe", (1, 2, 1, 2)),
         ("qwen3_moe", (2, 1, 1, 4)), ("mixtral", (2, 1, 1, 2)),
         ("deepseek_v3_bf16", (1, 1, 1, 4)),
         ("deepseek_v3_bf16", (2, 1, 1, 2))]


@SUITE.test
def load_matches_the_reference():
    for key, grid in GRIDS:
        what = "%s vllm %s" % (key, grid)
        same_params(read_dir(load(key, "vllm", grid)),
                    expected(key, "vllm", grid), what)


@SUITE.test
def each_rank_holds_its_part_of_every_expert():
    # Qwen3-MoE: moe_intermediate_size 16 over DP 2 x TP 2: rank (d, t)
    # holds rows [4 (2d + t), 4 (2d + t) + 4) of each expert's gate and up
    # (and those columns of down); hidden 32, bfloat16.
    tensors = checkpoint("qwen3_moe")[1]
    got = read_dir(load("qwen3_moe", "vllm", (2, 1, 1, 2)))
    x = "model.layers.1.mlp.experts."  # layer 0 is dense (mlp_only_layers)
    for d in range(2):
        for t in range(2):
            part = 2 * d + t
            dt, shape, data = got["p-d%d-p0-e0-t%d" % (d, t)][
                x + "routed_experts.w13_weight"]
            check(shape == [4, 8, 32], shape)
            rows = 4 * 32 * 2
            for e in range(4):
                want = b"".join(
                    tensors[x + "%d.%s.weight" % (e, n)][2][
                        part * rows:(part + 1) * rows]
                    for n in ("gate_proj", "up_proj"))
                check(data[e * 2 * rows:(e + 1) * 2 * rows] == want,
                      "rank d%d t%d expert %d: not part %d" % (d, t, e, part))


@SUITE.test
def placement_declares_a_tp_split_spanning_dp():
    cfg = os.path.join(checkpoint("qwen3_moe")[0], "config.json")
    out = path("layout-qwen3_moe.json")
    expect_ok(run("engine", "layout", cfg, "--engine", "vllm",
                  *grid_args((2, 1, 1, 2)), "-o", out), "engine layout")
    placement = json.load(open(out))
    axes = {t["tensor_id"]: t["parallel_axes"] for t in placement["tensors"]}
    x = "model.layers.1.mlp.experts.0."
    check(axes[x + "gate_proj.weight"] == [
        {"dim": 0, "kind": "tp", "over": "dp", "semantics": "split"}],
        axes[x + "gate_proj.weight"])
    check(axes[x + "down_proj.weight"] == [
        {"dim": 1, "kind": "tp", "over": "dp", "semantics": "split"}],
        axes[x + "down_proj.weight"])
    check(axes["model.layers.0.self_attn.o_proj.weight"] == [
        {"kind": "dp", "semantics": "replicated"},
        {"dim": 1, "kind": "tp", "semantics": "split"}],
        axes["model.layers.0.self_attn.o_proj.weight"])
    expect_ok(run("validate", out), "validate")


@SUITE.test
def fused_experts_load_the_same_bytes():
    # transformers 5's fused save (gate_up_proj [E, 2I, H], down_proj [E,
    # H, I]) holding the same weights as the per-expert checkpoint.
    cfg = CONFIGS["qwen3_moe"]
    data = checkpoint("qwen3_moe")[1]
    d = path("ckpt-qwen3_moe-fused")

    def fill(name, dtype, shape, nbytes):
        if not name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            return bytes(data[name][2])
        x = name[:name.rindex(".") + 1]
        leaves = (("gate_proj", "up_proj") if name.endswith("gate_up_proj")
                  else ("down_proj",))
        return b"".join(bytes(data["%s%d.%s.weight" % (x, e, n)][2])
                        for e in range(shape[0]) for n in leaves)

    hfc.write_checkpoint(d, dict(cfg, _fused_experts=True), fill=fill)
    for grid in ((2, 1, 1, 2), (1, 1, 1, 2)):
        same_params(read_dir(load("qwen3_moe-fused", "vllm", grid, d)),
                    expected("qwen3_moe", "vllm", grid),
                    "fused qwen3_moe vllm %s" % (grid,))


@SUITE.test
def reshard_into_and_out_of_the_grid():
    grid = ("vllm", (2, 1, 1, 2))
    for key, frm in (("qwen3_moe", ("megatron", (2, 1, 2, 2, 8))),
                     ("mixtral", ("megatron", (2, 1, 2, 1, 8)))):
        src = load(key, *frm)
        want = read_dir(load(key, *grid))
        store = "fs://" + path("store-" + key)
        for k, via in enumerate(("local", store)):
            out = path("reshard-%s-%d" % (key, k))
            rep = json.loads(expect_ok(reshard(key, src, frm, grid, out, via),
                                       "engine reshard %s via %s" %
                                       (key, via)).stdout)
            check(rep["files"] == 4, rep)
            same_params(read_dir(out), want, "%s %s -> %s via %s" %
                        (key, frm, grid, via))
    # Out of the grid: to vLLM TP 4 (experts split 4 ways over TP alone)
    # and to TP 1, locally.
    src = load("qwen3_moe", *grid)
    for to in (("vllm", (4, 1, 1, 1)), ("vllm", (1, 1, 1, 1)),
               ("megatron", (2, 1, 2, 2, 8))):
        out = path("reshard-out-%s-%s" % (to[0], "-".join(map(str, to[1]))))
        expect_ok(reshard("qwen3_moe", src, grid, to, out, "local"),
                  "engine reshard %s -> %s" % (grid, to))
        same_params(read_dir(out), read_dir(load("qwen3_moe", *to)),
                    "qwen3_moe %s -> %s" % (grid, to))
    # A store holds one DP replica of every tensor; one DP replica of this
    # grid holds only its part of each expert.
    out = path("reshard-out-store")
    expect_error(reshard("qwen3_moe", src, grid, ("vllm", (4, 1, 1, 1)), out,
                         "fs://" + path("store-out")),
                 "Weight Store upload requires replicated DP source tensors; "
                 "tensors split over DP are not supported: "
                 "model.layers.1.mlp.experts.0.down_proj.weight")


@SUITE.test
def a_store_takes_experts_from_the_dp_replica_that_holds_them():
    # Megatron EP 4 over TP 2 x DP 2: each expert's tensors live in one DP
    # replica only, so the upload stores each tensor from the lowest DP
    # replica holding it; the load equals the local reshard and the
    # reference.
    frm = ("megatron", (2, 1, 4, 2, 8))
    to = ("vllm", (2, 1, 1, 1))
    src = load("qwen3_moe", *frm)
    want = read_dir(load("qwen3_moe", *to))
    for k, via in enumerate(("local", "fs://" + path("store-ep-over-dp"))):
        out = path("reshard-ep-over-dp-%d" % k)
        expect_ok(reshard("qwen3_moe", src, frm, to, out, via),
                  "engine reshard %s -> %s via %s" % (frm, to, via))
        same_params(read_dir(out), want, "qwen3_moe %s -> %s via %s" %
                    (frm, to, via))


sys.exit(SUITE.run("reshard-moedp-", lambda t: TMP.update(dir=t)))
