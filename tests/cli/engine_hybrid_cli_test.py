#!/usr/bin/env python3
"""CLI contract of `reshard engine load --engine vllm` for Qwen3-Next and
Qwen3.5's text classes on tiny checkpoints made by the test
(hf_checkpoints.py): every participant's file byte for byte, in order,
against an independent numpy statement of what each vLLM 0.33 rank holds
after load_weights (vllm_ranks below, from vLLM's qwen3_next.py,
qwen3_5.py and qwen_gdn_linear_attn.py), at TP 2, TP 2 x PP 2, EP 2 and
sequence-parallel MoE (TP 2, DP 2, EP 4), per-expert and fused experts
(TP 2, EP 2); and the refusal of fused experts at an EP other than 1 or
TP (one error line, exit 1, nothing written).

Usage: engine_hybrid_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check, expect_error, expect_ok, run_cli  # noqa

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

# Qwen3-Next as released: F32 A_log, a dense layer (mlp_only_layers), one
# MTP layer in the files that vLLM's target model does not load.
NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "hidden_size": 32, "vocab_size": 100, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "intermediate_size": 48, "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16, "num_experts": 4,
    "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "mlp_only_layers": [0], "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
    "layer_types": ["linear_attention", "full_attention",
                    "linear_attention", "full_attention"],
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "_mtp": 1, "_a_log_dtype": "F32",
}
# Qwen3.5's text classes as transformers saves them: flat config, model.*,
# BF16 A_log (vLLM widens it to float32: --convert), tied dense model with
# layer types from the interval, MoE per expert or fused.
QWEN35 = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
    "hidden_size": 32, "vocab_size": 100, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "intermediate_size": 48, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 2, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
QWEN35_MOE = dict(
    QWEN35, architectures=["Qwen3_5MoeForCausalLM"],
    model_type="qwen3_5_moe_text", moe_intermediate_size=16,
    shared_expert_intermediate_size=16, num_experts=4,
    num_experts_per_tok=2, tie_word_embeddings=False)
del QWEN35_MOE["intermediate_size"]
QWEN35_MOE_FUSED = dict(QWEN35_MOE, _fused_experts=True)
CONFIGS = {"next": NEXT, "qwen35": QWEN35, "qwen35_moe": QWEN35_MOE,
           "qwen35_moe_fused": QWEN35_MOE_FUSED}

NP = {"BF16": np.uint16, "F32": np.uint32}

CACHE = {}


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def checkpoint(key):
    """(directory, {name: (dtype, shape, bytes)}) of CONFIGS[key]."""
    if key not in CACHE:
        d = path("ckpt-" + key)
        hfc.write_checkpoint(d, CONFIGS[key])
        CACHE[key] = (d, hfc.read_checkpoint(d))
    return CACHE[key]


# ------------------------------------------------------ the vLLM statement

def vllm_ranks(cfg, ck, tp, pp=1, ep=1, dp=1):
    """{participant: [(name, dtype, shape, bytes)]} in named_parameters()
    order, from the checkpoint's tensors `ck`."""
    next_ = cfg["architectures"][0] == "Qwen3NextForCausalLM"
    h, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, K, d = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
               cfg["head_dim"])
    nv = cfg["linear_num_value_heads"]
    kd = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    vd = nv * cfg["linear_value_head_dim"]
    E = cfg.get("num_experts", 0)
    if "layer_types" in cfg:
        linear = [x == "linear_attention" for x in cfg["layer_types"]]
    else:
        linear = [(l + 1) % cfg["full_attention_interval"] != 0
                  for l in range(L)]
    sparse = [E > 0 and l not in cfg.get("mlp_only_layers", [])
              for l in range(L)]
    padded = -(-V // 64) * 64
    chunk = padded // tp
    seq_parallel = ep > 1 and tp > 1 and dp > 1

    def a(name):
        dtype, shape, raw = ck[name]
        return np.frombuffer(raw, dtype=NP[dtype]).reshape(shape), dtype

    def stage_layers(p):
        parts = [L // pp] * pp
        for i in range(2, L % pp + 2):
            parts[pp - i] += 1
        lo = sum(parts[:p])
        return range(lo, lo + parts[p])

    def rank(d_, p, t):
        out = []

        def emit(name, arr, dtype):
            out.append((name, dtype, list(arr.shape),
                        np.ascontiguousarray(arr).tobytes()))

        def rows(name, *parts):  # parts: (tensor, row0, n)
            arrs = []
            for src, r0, n in parts:
                x, dtype = a(src)
                arrs.append(x[r0:r0 + n])
            emit(name, np.concatenate(arrs), dtype)

        def whole(name):
            x, dtype = a(name)
            emit(name, x, dtype)

        def vocab(name, src):
            x, dtype = a(src)
            part = x[t * chunk:(t + 1) * chunk]
            pad = np.zeros((chunk - len(part), h), dtype=x.dtype)
            emit(name, np.concatenate([part, pad]), dtype)

        def cols(name, c0, n):
            x, dtype = a(name)
            emit(name, x[:, c0:c0 + n], dtype)

        def mlp(p_, i, split=True):
            il, r0 = (i // tp, t * (i // tp)) if split else (i, 0)
            rows(p_ + "gate_up_proj.weight",
                 (p_ + "gate_proj.weight", r0, il),
                 (p_ + "up_proj.weight", r0, il))
            cols(p_ + "down_proj.weight", r0, il)

        vocab("model.embed_tokens.weight", "model.embed_tokens.weight")
        for l in stage_layers(p):
            q = "model.layers.%d." % l
            if linear[l]:
                x = q + "linear_attn."
                hl, kl, vl = nv // tp, kd // tp, vd // tp
                rows(x + "dt_bias", (x + "dt_bias", t * hl, hl))
                alog, dtype = a(x + "A_log")
                alog = alog[t * hl:(t + 1) * hl]
                if dtype == "BF16":  # widened exactly
                    alog = alog.astype(np.uint32) << 16
                emit(x + "A_log", alog, "F32")
                c = x + "conv1d.weight"
                rows(c, (c, t * kl, kl), (c, kd + t * kl, kl),
                     (c, 2 * kd + t * vl, vl))
                if next_:
                    n = (2 * kd + 2 * vd) // tp
                    rows(x + "in_proj_qkvz.weight",
                         (x + "in_proj_qkvz.weight", t * n, n))
                    n = 2 * nv // tp
                    rows(x + "in_proj_ba.weight",
                         (x + "in_proj_ba.weight", t * n, n))
                else:
                    qkv = x + "in_proj_qkv.weight"
                    rows(x + "in_proj_qkvz.weight", (qkv, t * kl, kl),
                         (qkv, kd + t * kl, kl), (qkv, 2 * kd + t * vl, vl),
                         (x + "in_proj_z.weight", t * vl, vl))
                    rows(x + "in_proj_ba.weight",
                         (x + "in_proj_b.weight", t * hl, hl),
                         (x + "in_proj_a.weight", t * hl, hl))
                whole(x + "norm.weight")
                cols(x + "out_proj.weight", t * vd // tp, vd // tp)
            else:
                x = q + "self_attn."
                ql = 2 * H // tp * d  # each head's queries, then its gate
                kvr = max(1, K // tp)
                s = t if K >= tp else t // (tp // K)
                rows(x + "qkv_proj.weight", (x + "q_proj.weight", t * ql, ql),
                     (x + "k_proj.weight", s * kvr * d, kvr * d),
                     (x + "v_proj.weight", s * kvr * d, kvr * d))
                cols(x + "o_proj.weight", t * H * d // tp, H * d // tp)
                whole(x + "q_norm.weight")
                whole(x + "k_norm.weight")
            m = q + "mlp."
            if not sparse[l]:
                mlp(m, cfg["intermediate_size"])
            else:
                I = cfg["moe_intermediate_size"]
                whole(m + "gate.weight")
                whole(m + "shared_expert_gate.weight")
                mlp(m + "shared_expert.",
                    cfg["shared_expert_intermediate_size"],
                    split=not seq_parallel)
                if ep > 1:
                    e = d_ * tp + t
                    base, rem = E // ep, E % ep
                    first = e * base + min(e, rem)
                    experts = range(first, first + base + (e < rem))
                    il, r0 = I, 0
                else:
                    experts, il, r0 = range(E), I // tp, t * (I // tp)
                w13, w2 = [], []
                for j in experts:
                    if cfg.get("_fused_experts"):
                        gu, dtype = a(m + "experts.gate_up_proj")
                        dn, _ = a(m + "experts.down_proj")
                        w13.append(np.concatenate(
                            [gu[j, r0:r0 + il], gu[j, I + r0:I + r0 + il]]))
                        w2.append(dn[j, :, r0:r0 + il])
                    else:
                        e_ = m + "experts.%d." % j
                        g, dtype = a(e_ + "gate_proj.weight")
                        u, _ = a(e_ + "up_proj.weight")
                        dn, _ = a(e_ + "down_proj.weight")
                        w13.append(np.concatenate([g[r0:r0 + il],
                                                   u[r0:r0 + il]]))
                        w2.append(dn[:, r0:r0 + il])
                x = m + "experts.routed_experts."
                if w13:
                    w13, w2 = np.stack(w13), np.stack(w2)
                else:  # EP above the expert count: [0, ...]
                    g, dtype = a(m + "experts.0.gate_proj.weight")
                    w13 = np.zeros((0, 2 * il, g.shape[1]), g.dtype)
                    w2 = np.zeros((0, g.shape[1], il), g.dtype)
                emit(x + "w13_weight", w13, dtype)
                emit(x + "w2_weight", w2, dtype)
            whole(q + "input_layernorm.weight")
            whole(q + "post_attention_layernorm.weight")
        last = p == pp - 1
        if last:
            whole("model.norm.weight")
        # Qwen3-Next builds (and loads) its untied head on every stage;
        # Qwen3.5 on the last, and ties it to the embedding when asked.
        if next_ or (last and not cfg["tie_word_embeddings"]):
            vocab("lm_head.weight", "lm_head.weight")
        return out

    ranks = {}
    for d_ in range(dp):
        for p in range(pp):
            for t in range(tp):
                e = d_ * tp + t if ep > 1 else 0
                ranks["p-d%d-p%d-e%d-t%d" % (d_, p, e, t)] = rank(d_, p, t)
    return ranks


def read_in_order(file):
    """[(name, dtype, shape, bytes)] of a parameter file, by data offset
    (a zero-size parameter before the one that starts where it does; json
    keeps the header's order among equals)."""
    with open(file, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    items = sorted(header.items(),
                   key=lambda kv: tuple(kv[1]["data_offsets"]))
    return [(k, v["dtype"], v["shape"],
             raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in items]


def load_and_check(key, out, tp, pp=1, ep=1, dp=1, convert=False):
    d, ck = checkpoint(key)
    args = ["engine", "load", d, "--engine", "vllm", "--tp", tp, "--pp", pp,
            "--ep", ep, "--dp", dp, "-o", path(out)]
    expect_ok(run_cli(RESHARD, *args, *(["--convert"] if convert else [])),
              "engine load " + out)
    want = vllm_ranks(CONFIGS[key], ck, tp, pp, ep, dp)
    got = sorted(f[:-len(".safetensors")] for f in os.listdir(path(out)))
    check(got == sorted(want), "%s: participants %s, not %s" %
          (out, got, sorted(want)))
    for part, params in want.items():
        have = read_in_order(path(out, part + ".safetensors"))
        names = [p[0] for p in have]
        check(names == [p[0] for p in params],
              "%s %s: parameters\n  %s\nnot\n  %s" %
              (out, part, names, [p[0] for p in params]))
        for h_, w in zip(have, params):
            check(h_[1:3] == w[1:3], "%s %s %s: %s %s, not %s %s" %
                  (out, part, w[0], h_[1], h_[2], w[1], w[2]))
            check(h_[3] == w[3], "%s %s %s: bytes differ" % (out, part, w[0]))


# ------------------------------------------------------------------ tests

@SUITE.test
def qwen3_next_tp2_pp2_and_ep():
    load_and_check("next", "next-tp2", 2)
    load_and_check("next", "next-tp2-pp2", 2, pp=2)
    load_and_check("next", "next-ep2", 2, ep=2)


@SUITE.test
def qwen3_next_sequence_parallel_moe():
    # EP 4 over TP 2 x DP 2: the shared expert whole on every rank.
    load_and_check("next", "next-sp", 2, ep=4, dp=2)


@SUITE.test
def qwen3_next_ep_above_the_expert_count():
    # 4 experts at EP 8 (TP 2 x DP 4): ranks e4-e7 hold zero-size
    # w13_weight [0, 2I, h] and w2_weight [0, h, I], as vLLM allocates them.
    load_and_check("next", "next-ep8", 2, ep=8, dp=4)


@SUITE.test
def qwen35_text_tied_widens_a_log():
    load_and_check("qwen35", "qwen35-tp2", 2, convert=True)
    load_and_check("qwen35", "qwen35-pp2", 1, pp=2, convert=True)


@SUITE.test
def qwen35_moe_experts_per_expert_and_fused():
    load_and_check("qwen35_moe", "moe-tp2", 2, convert=True)
    load_and_check("qwen35_moe", "moe-ep2", 2, ep=2, convert=True)
    load_and_check("qwen35_moe_fused", "fused-tp2", 2, convert=True)
    load_and_check("qwen35_moe_fused", "fused-ep2", 2, ep=2, convert=True)


@SUITE.test
def fused_experts_under_ep_other_than_tp_are_refused():
    d, _ = checkpoint("qwen35_moe_fused")
    out = path("fused-ep4")
    expect_error(
        run_cli(RESHARD, "engine", "load", d, "--engine", "vllm", "--tp", 2,
                "--dp", 2, "--ep", 4, "--convert", "-o", out),
        "%s: vllm does not lay out the fused experts "
        "(mlp.experts.gate_up_proj, down_proj) of Qwen3_5MoeForCausalLM at "
        "EP 4 over TP 2 x DP 2: only EP 1 or EP = TP; use a checkpoint with "
        "one tensor per expert" % d)
    check(not os.path.exists(out), "output written on a refusal")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-engine-hybrid-",
                       lambda tmp: TMP.update(dir=tmp)))
