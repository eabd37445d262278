#!/usr/bin/env python3
"""CLI contract of `reshard engine load --engine vllm` for GLM-4.5
(Glm4MoeForCausalLM), on a tiny checkpoint made by the test
(hf_checkpoints.py, one MTP layer that vLLM does not load):

- every rank's parameters byte for byte against engine_reference.py at TP,
  EP, PP, DP without EP (experts split over DP x TP) and EP with TP and DP
  (sequence-parallel MoE: shared experts whole), and under vllm@<0.33's
  names; the router weight and correction bias widen to float32 without
  --convert;
- the parameters of a layer in named_parameters() order;
- megatron still refuses the architecture.

Usage: engine_glm_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_reference as ref  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402
from harness import (Suite, check, expect_error, expect_ok,  # noqa: E402
                     run_cli)

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}
CFG = hfc.CONFIGS["glm4_moe"]


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def checkpoint():
    """(directory, {name: (dtype, shape, bytes)}) of the GLM-4.5 checkpoint."""
    if "ckpt" not in TMP:
        d = path("ckpt-glm4-moe")
        TMP["ckpt"] = (d, hfc.write_checkpoint(d, CFG))
    return TMP["ckpt"]


def read_params(file):
    """({name: (dtype, shape, bytes)}, [names by data offset])."""
    with open(file, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {k: (v["dtype"], v["shape"],
               raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
           for k, v in header.items()}
    return out, sorted(header, key=lambda k: header[k]["data_offsets"][0])


def load(engine, tp=1, pp=1, ep=1, dp=1):
    out = path("load-%s-%d-%d-%d-%d" % (engine.replace("@", "_").replace(
        "<", "lt"), tp, pp, ep, dp))
    if os.path.exists(out):
        return out
    expect_ok(run_cli(RESHARD, "engine", "load", checkpoint()[0], "--engine",
                      engine, "--tp", tp, "--pp", pp, "--ep", ep, "--dp", dp,
                      "-o", out),
              "engine load %s tp %d pp %d ep %d dp %d" % (engine, tp, pp, ep,
                                                          dp))
    return out


@SUITE.test
def load_matches_the_reference():
    grids = [("vllm", dict(tp=2)), ("vllm", dict(tp=2, ep=2)),
             ("vllm", dict(tp=2, pp=2)), ("vllm", dict(tp=2, dp=2)),
             ("vllm", dict(tp=2, dp=2, ep=4)), ("vllm@<0.33", dict(tp=2))]
    for engine, grid in grids:
        out = load(engine, **grid)
        want = ref.expected(checkpoint()[1], CFG, engine, **grid)
        got = {f[:-len(".safetensors")]: read_params(os.path.join(out, f))[0]
               for f in sorted(os.listdir(out))}
        what = "%s %s" % (engine, grid)
        check(sorted(got) == sorted(want), "%s: participants %s, expected %s"
              % (what, sorted(got), sorted(want)))
        for pid in sorted(want):
            check(sorted(got[pid]) == sorted(want[pid]),
                  "%s %s: parameters %s, expected %s" %
                  (what, pid, sorted(got[pid]), sorted(want[pid])))
            for name, (dt, shape, data) in sorted(want[pid].items()):
                g = got[pid][name]
                check(g[0] == dt and list(g[1]) == list(shape)
                      and g[2] == data,
                      "%s %s %s: %s %s, expected %s %s" %
                      (what, pid, name, g[0], g[1], dt, shape))
    got, _ = read_params(os.path.join(load("vllm", tp=2), "p-d0-p0-e0-t0"
                                      ".safetensors"))
    for name in ("model.layers.1.mlp.gate.weight",
                 "model.layers.1.mlp.gate.e_score_correction_bias"):
        check(got[name][0] == "F32", "%s is %s, not F32" % (name, got[name][0]))


@SUITE.test
def parameters_in_named_parameters_order():
    _, order = read_params(os.path.join(load("vllm", tp=2),
                                        "p-d0-p0-e0-t1.safetensors"))
    layer = [n[len("model.layers.1."):] for n in order
             if n.startswith("model.layers.1.")]
    want = ["self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias",
            "self_attn.o_proj.weight", "self_attn.q_norm.weight",
            "self_attn.k_norm.weight", "mlp.gate.weight",
            "mlp.gate.e_score_correction_bias",
            "mlp.shared_experts.gate_up_proj.weight",
            "mlp.shared_experts.down_proj.weight",
            "mlp.experts.routed_experts.w13_weight",
            "mlp.experts.routed_experts.w2_weight",
            "input_layernorm.weight", "post_attention_layernorm.weight"]
    check(layer == want, "layer 1: %s, expected %s" % (layer, want))
    check(order[0] == "model.embed_tokens.weight" and
          order[-2:] == ["model.norm.weight", "lm_head.weight"],
          "model order %s" % order)
    check(not any(n.startswith("model.layers.3.") for n in order),
          "the MTP layer is loaded")


@SUITE.test
def megatron_refuses_glm():
    out = path("megatron")
    expect_error(run_cli(RESHARD, "engine", "load", checkpoint()[0],
                         "--engine", "megatron", "--tp", 2, "-o", out),
                 "%s: engine preset megatron does not lay out "
                 "Glm4MoeForCausalLM" % checkpoint()[0])
    check(not os.path.exists(out), "output written on a refusal")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-engine-glm-",
                       lambda tmp: TMP.update(dir=tmp)))
