#!/usr/bin/env python3
"""CLI contract of `reshard hf layout|reshard|import|export` on tiny
checkpoints made by the test (hf_checkpoints.py): every architecture,
several grids each, byte-for-byte round trips, the weight-store bridge.

Usage: hf_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check  # noqa: E402

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

# Grids per architecture: (tp, pp, ep, dp).
GRIDS = {
    "llama": [(1, 1, 1, 1), (2, 2, 1, 1), (4, 1, 1, 1), (2, 1, 1, 2)],
    "qwen2": [(2, 1, 1, 1), (4, 2, 1, 1)],
    "qwen3": [(2, 2, 1, 1), (4, 1, 1, 1)],
    "qwen3_moe": [(2, 1, 2, 1), (1, 3, 4, 1), (2, 1, 1, 1)],
    "mixtral": [(2, 2, 2, 1), (4, 1, 4, 1)],
    "deepseek_v3": [(2, 1, 2, 1), (2, 3, 1, 1), (1, 1, 4, 2)],
    # Conformance fixtures: real releases' names, dtypes and quirks.
    "qwen3_quirks": [(2, 2, 1, 1), (4, 1, 1, 1)],
    "qwen3_moe_fp8": [(2, 1, 2, 1), (2, 3, 1, 1)],
    "mistral": [(2, 2, 1, 1), (4, 1, 1, 1)],
    "deepseek_v2": [(2, 3, 1, 1), (2, 1, 2, 1), (1, 1, 4, 1)],
    "glm4_moe": [(2, 3, 1, 1), (2, 1, 2, 1), (1, 2, 4, 1)],
    "gpt_oss": [(2, 2, 1, 1), (2, 1, 2, 1), (1, 1, 4, 1)],
    "gpt_oss_bf16": [(2, 2, 1, 1), (2, 1, 2, 1)],
    "qwen3_next": [(2, 2, 1, 1), (2, 1, 2, 1), (4, 1, 1, 1), (1, 2, 4, 1)],
    "qwen3_5": [(2, 2, 1, 1), (2, 1, 1, 2)],
    "qwen3_5_moe": [(2, 1, 1, 1), (2, 2, 2, 1), (1, 2, 4, 1)],
    "qwen3_5_moe_fp8": [(2, 1, 2, 1), (2, 2, 1, 1)],
    "glm4_moe_fp8": [(2, 3, 1, 1), (2, 1, 2, 1)],
    # As transformers 5.20 saves them (hf_checkpoints.py): no MTP tensors
    # although config.json counts one, no topk_method, fused experts.
    "deepseek_v3_hf": [(2, 1, 2, 1), (2, 3, 1, 1), (1, 1, 4, 2)],
    "deepseek_v3_hf_fused": [(2, 1, 1, 1), (2, 1, 2, 1), (1, 3, 4, 1)],
    "glm4_moe_hf_fused": [(2, 3, 1, 1), (2, 1, 2, 1)],
    "qwen3_moe_fused": [(2, 1, 1, 1), (2, 1, 2, 1), (1, 3, 4, 1)],
    "mixtral_fused": [(2, 2, 1, 1), (4, 1, 4, 1)],
    "deepseek_v2_fused": [(2, 1, 1, 1), (1, 1, 4, 1)],
    "qwen3_5_text": [(2, 2, 1, 1), (4, 1, 1, 1)],
    "qwen3_5_moe_text": [(2, 1, 2, 1), (2, 2, 1, 1)],
    "qwen3_5_moe_text_fused": [(2, 1, 1, 1), (1, 2, 4, 1)],
}


def run(*args):
    return subprocess.run([RESHARD, *map(str, args)], capture_output=True,
                          text=True)


def ok(r, what):
    check(r.returncode == 0, "%s failed (%d): %s" % (what, r.returncode,
                                                     r.stderr.strip()))
    return r


def fails(r, message):
    check(r.returncode == 1, "expected exit 1, got %d: %s" %
          (r.returncode, r.stderr))
    err = r.stderr.strip()
    check(err.startswith("reshard: error: ") and len(err.splitlines()) == 1,
          "not one error line: %r" % err)
    check(message in err, "%r not in %r" % (message, err))


def checkpoint(arch):
    d = os.path.join(TMP["dir"], "ckpt-" + arch)
    if not os.path.exists(d):
        hfc.write_checkpoint(d, hfc.CONFIGS[arch])
    return d


def layout(arch, grid, ckpt=True, name=None):
    tp, pp, ep, dp = grid
    out = os.path.join(TMP["dir"], name or "%s-%d-%d-%d-%d.json" %
                       (arch, tp, pp, ep, dp))
    d = checkpoint(arch)
    args = ["hf", "layout", os.path.join(d, "config.json"), "--tp", tp,
            "--pp", pp, "--ep", ep, "--dp", dp, "-o", out]
    if ckpt:
        args += ["--checkpoint", d]
    return run(*args), out


def round_trip(arch, grid):
    d = checkpoint(arch)
    r, placement = layout(arch, grid)
    ok(r, "hf layout %s %s" % (arch, grid))
    v = json.loads(ok(run("validate", placement, "--json"), "validate").stdout)
    check(v["valid"], "%s %s: placement invalid" % (arch, grid))
    # Non-persistent buffers are skipped on load and never written back.
    source = {n: t for n, t in hfc.read_checkpoint(d).items()
              if not n.endswith(hfc.BUFFER_SUFFIX)}
    check(v["tensors"] == len(source),
          "%s %s: %d tensors laid out, checkpoint has %d" %
          (arch, grid, v["tensors"], len(source)))
    out = placement[:-5] + "-out"
    total = sum(len(t[2]) for t in source.values())
    # Several output files, laid out independently of the input's.
    rep = json.loads(ok(run("hf", "reshard", d, placement, out, "--json",
                            "--max-file-bytes", total // 3 + 1),
                        "hf reshard").stdout)
    check(rep["files"] >= 3, "%d output files" % rep["files"])
    got = hfc.read_checkpoint(out)
    check(set(got) == set(source), "%s %s: tensor sets differ" % (arch, grid))
    for name, (dtype, shape, data) in source.items():
        g = got[name]
        check(g[0] == dtype and g[1] == shape,
              "%s: %s %s became %s %s" % (name, dtype, shape, g[0], g[1]))
        check(g[2] == data, "%s %s: bytes of %s differ" % (arch, grid, name))
    check(rep["tensors"] == len(source), "tensors %d" % rep["tensors"])
    check(rep["bytes_written"] == total, "bytes_written %d != %d" %
          (rep["bytes_written"], total))
    if grid[3] == 1:
        check(rep["bytes_read"] == total,
              "%s %s: bytes_read %d != tensor bytes %d" %
              (arch, grid, rep["bytes_read"], total))
    for key in ("bytes", "load_seconds", "write_seconds"):
        check(key in rep, "no %s in %s" % (key, rep))
    check(rep["bytes"] >= total, "bytes %d < %d" % (rep["bytes"], total))


def make_test(arch):
    def test():
        for grid in GRIDS[arch]:
            round_trip(arch, grid)
    test.__name__ = "round_trip_" + arch
    return test


for _arch in GRIDS:
    SUITE.test(make_test(_arch))


@SUITE.test
def layout_from_config_only():
    # DeepSeek-V3 without a checkpoint: FP8 weights with block scales,
    # the MTP layer on the last stage, dtypes from the config.
    r, out = layout("deepseek_v3", (2, 3, 1, 1), ckpt=False,
                    name="dsv3-config.json")
    ok(r, "hf layout (config only)")
    v = json.loads(ok(run("validate", out, "--json"), "validate").stdout)
    check(v["valid"] and v["participants"] == 6, v)
    p = json.load(open(out))
    tensors = {t["tensor_id"]: t for t in p["tensors"]}
    names = {n for n, _, _ in hfc.model_tensors(hfc.CONFIGS["deepseek_v3"])}
    extra = set(tensors) - names
    missing = names - set(tensors)
    # Names agree exactly; the router bias is F32 as in the releases.
    check(not extra and not missing, "extra %s missing %s" % (extra, missing))
    q = tensors["model.layers.1.self_attn.q_b_proj.weight"]
    check(q["dtype"] == "float8_e4m3fn", q)
    s = tensors["model.layers.1.self_attn.q_b_proj.weight_scale_inv"]
    check(s["dtype"] == "float32" and s["global_shape"] == [6, 2], s)
    stage = {}
    for part in p["parts"]:
        for f in part["fragments"]:
            stage.setdefault(f["tensor_id"], set()).add(part["rank"]["pp"])
    check(stage["model.layers.3.eh_proj.weight"] == {2}, stage)
    check(stage["model.embed_tokens.weight"] == {0}, stage)
    check(stage["lm_head.weight"] == {2}, stage)


@SUITE.test
def sharding_rules():
    r, out = layout("llama", (4, 1, 1, 1), name="llama-rules.json")
    ok(r, "hf layout")
    p = json.load(open(out))
    shapes = {}
    for part in p["parts"]:
        if part["rank"]["tp"] != 1:
            continue
        for f in part["fragments"]:
            shapes[f["tensor_id"]] = (f["global_offset"], f["local_shape"])
    L = "model.layers.0."
    check(shapes[L + "self_attn.q_proj.weight"] == ([8, 0], [8, 32]), shapes)
    # 2 KV heads, TP 4: replicated.
    check(shapes[L + "self_attn.k_proj.weight"] == ([0, 0], [16, 32]), shapes)
    check(shapes[L + "self_attn.o_proj.weight"] == ([0, 8], [32, 8]), shapes)
    check(shapes[L + "mlp.down_proj.weight"] == ([0, 12], [32, 12]), shapes)
    check(shapes["model.embed_tokens.weight"] == ([16, 0], [16, 32]), shapes)
    check(shapes[L + "input_layernorm.weight"] == ([0], [32]), shapes)
    r, out = layout("qwen3_moe", (1, 1, 2, 1), name="moe-rules.json")
    ok(r, "hf layout moe")
    owners = {}
    for part in json.load(open(out))["parts"]:
        for f in part["fragments"]:
            owners.setdefault(f["tensor_id"], set()).add(part["rank"]["ep"])
    check(owners["model.layers.1.mlp.experts.3.down_proj.weight"] == {1},
          owners)
    check(owners["model.layers.1.mlp.gate.weight"] == {0, 1}, owners)


def all_boxes(arch, grid, name):
    """{tensor: {(tp, ep, pp): [(offset, shape), ...]}}, boxes sorted."""
    r, out = layout(arch, grid, name=name)
    ok(r, "hf layout %s" % arch)
    p = json.load(open(out))
    got = {}
    for part in p["parts"]:
        k = (part["rank"]["tp"], part["rank"]["ep"], part["rank"]["pp"])
        for f in part["fragments"]:
            got.setdefault(f["tensor_id"], {}).setdefault(k, []).append(
                (f["global_offset"], f["local_shape"]))
    for per_rank in got.values():
        for v in per_rank.values():
            v.sort()
    return got, {t["tensor_id"]: t for t in p["tensors"]}


def boxes(arch, grid, name):
    """{tensor: {(tp, ep, pp): (offset, shape)}} of a layout whose ranks
    each hold one box of every tensor; (all_boxes, tensors)."""
    got, tensors = all_boxes(arch, grid, name)
    one = {}
    for tensor, per_rank in got.items():
        for k, v in per_rank.items():
            check(len(v) == 1, "%s: rank %s holds %d boxes" % (tensor, k,
                                                              len(v)))
            one.setdefault(tensor, {})[k] = tuple(v[0])
    return one, tensors


@SUITE.test
def release_quirks_and_split_rules():
    # Vocabulary 97 at TP 4, padded as vLLM pads it: 128 rows, 32 per
    # rank, the last rank holding the one real row left (padding is
    # never laid out, loaded or written). The stored lm_head of tied
    # embeddings is laid out like an untied head; inv_freq is not.
    b, t = boxes("qwen3_quirks", (4, 1, 1, 1), "quirks-rules.json")
    check(b["model.embed_tokens.weight"][(3, 0, 0)] == ([96, 0], [1, 32]), b)
    check(b["lm_head.weight"][(2, 0, 0)] == ([64, 0], [32, 32]), b)
    check(not any(n.endswith("inv_freq") for n in b), sorted(b))
    # Qwen3-FP8: BF16 block scales split with their weights' rows.
    b, t = boxes("qwen3_moe_fp8", (2, 1, 1, 1), "fp8-rules.json")
    s = "model.layers.0.self_attn.q_proj.weight_scale_inv"
    check(t[s]["dtype"] == "bfloat16", t[s])
    check(b[s][(1, 0, 0)] == ([2, 0], [2, 4]), b[s])
    # DeepSeek-V2-Lite: q_proj column-parallel, no correction bias.
    b, t = boxes("deepseek_v2", (2, 1, 1, 1), "dsv2-rules.json")
    check(b["model.layers.1.self_attn.q_proj.weight"][(1, 0, 0)] ==
          ([24, 0], [24, 32]), b)
    check("model.layers.1.mlp.gate.e_score_correction_bias" not in b, t)
    # GLM-4.5: q/k/v biases split by head, q/k norms and the F32
    # correction bias replicated, the MTP layer on the last stage.
    b, t = boxes("glm4_moe", (2, 3, 1, 1), "glm-rules.json")
    check(b["model.layers.1.self_attn.k_proj.bias"][(1, 0, 1)] ==
          ([16], [16]), b)
    check(b["model.layers.1.self_attn.q_norm.weight"][(1, 0, 1)] ==
          ([0], [16]), b)
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    check(t[bias]["dtype"] == "float32", t[bias])
    check(set(k[2] for k in b["model.layers.3.eh_proj.weight"]) == {2}, b)
    # gpt-oss: sinks split by head; MXFP4 gate_up split on its rows,
    # down on its input blocks (dim 2) under TP; under EP the expert
    # dimension is split and each expert is whole.
    b, t = boxes("gpt_oss", (2, 1, 1, 1), "gptoss-tp.json")
    x = "model.layers.0.mlp.experts."
    check(b["model.layers.0.self_attn.sinks"][(1, 0, 0)] == ([2], [2]), b)
    check(b[x + "gate_up_proj_blocks"][(1, 0, 0)] ==
          ([0, 64, 0, 0], [4, 64, 2, 16]), b)
    check(b[x + "down_proj_scales"][(1, 0, 0)] == ([0, 0, 1], [4, 64, 1]), b)
    check(b[x + "down_proj_bias"][(1, 0, 0)] == ([0, 0], [4, 64]), b)
    check(t[x + "down_proj_blocks"]["dtype"] == "uint8", t)
    b, t = boxes("gpt_oss", (2, 1, 2, 1), "gptoss-ep.json")
    check(b[x + "gate_up_proj_blocks"][(1, 1, 0)] ==
          ([2, 0, 0, 0], [2, 128, 2, 16]), b)
    # gpt-oss BF16 export: gate_up [E, H, 2I] (gate/up columns
    # interleaved, pairs kept whole) split on dim 2 with its bias, down
    # [E, I, H] on its inputs (dim 1), down's bias replicated.
    b, t = boxes("gpt_oss_bf16", (2, 1, 1, 1), "gptoss-bf16.json")
    check(b[x + "gate_up_proj"][(1, 0, 0)] == ([0, 0, 24], [4, 48, 24]), b)
    check(b[x + "gate_up_proj_bias"][(1, 0, 0)] == ([0, 24], [4, 24]), b)
    check(b[x + "down_proj"][(1, 0, 0)] == ([0, 12, 0], [4, 12, 48]), b)
    check(b[x + "down_proj_bias"][(1, 0, 0)] == ([0, 0], [4, 48]), b)


@SUITE.test
def hybrid_split_rules():
    # Qwen3-Next at TP 2 (4 key heads, 8 value heads of 8; K = 32, V = 64).
    b, t = all_boxes("qwen3_next", (2, 1, 1, 1), "next-rules.json")
    a = "model.layers.0.linear_attn."
    # in_proj_qkvz / in_proj_ba interleave per key-head group: a
    # contiguous split hands rank 1 key groups 2 and 3 whole.
    check(b[a + "in_proj_qkvz.weight"][(1, 0, 0)] == [([96, 0], [96, 32])], b)
    check(b[a + "in_proj_ba.weight"][(1, 0, 0)] == [([8, 0], [8, 32])], b)
    # conv1d's channels are [q | k | v]: each section split on its own.
    check(b[a + "conv1d.weight"][(1, 0, 0)] ==
          [([16, 0, 0], [16, 1, 4]), ([48, 0, 0], [16, 1, 4]),
           ([96, 0, 0], [32, 1, 4])], b[a + "conv1d.weight"])
    # A_log / dt_bias by value head (A_log F32 as the files hold it), the
    # gated norm whole, out_proj row-parallel.
    check(b[a + "A_log"][(1, 0, 0)] == [([4], [4])], b)
    check(t[a + "A_log"]["dtype"] == "float32", t[a + "A_log"])
    check(b[a + "norm.weight"][(1, 0, 0)] == [([0], [8])], b)
    check(b[a + "out_proj.weight"][(1, 0, 0)] == [([0, 32], [32, 32])], b)
    # Gated attention: q_proj holds [q_h | gate_h] per head, split by head.
    q = "model.layers.1.self_attn.q_proj.weight"
    check(t[q]["global_shape"] == [64, 32], t[q])
    check(b[q][(1, 0, 0)] == [([32, 0], [32, 32])], b[q])
    # Shared expert gate whole; MTP counted from the files (config.json
    # has no key), mtp.fc split on its rows; layer 0 dense.
    check(b["model.layers.1.mlp.shared_expert_gate.weight"][(1, 0, 0)] ==
          [([0, 0], [1, 32])], b)
    check(b["mtp.fc.weight"][(1, 0, 0)] == [([16, 0], [16, 64])], b)
    check("mtp.layers.0.mlp.experts.3.up_proj.weight" in t, sorted(t))
    check("model.layers.0.mlp.gate_proj.weight" in t, sorted(t))
    # Qwen3.5 MoE at TP 2: in_proj_qkv [q | k | v] and the fused experts'
    # gate_up [gate | up] split section by section, down on its inputs;
    # the vision tower split as vLLM's (qkv by head per section).
    b, t = all_boxes("qwen3_5_moe", (2, 1, 1, 1), "q35-tp.json")
    p = "model.language_model.layers.0."
    check(b[p + "linear_attn.in_proj_qkv.weight"][(1, 0, 0)] ==
          [([16, 0], [16, 32]), ([48, 0], [16, 32]), ([96, 0], [32, 32])], b)
    check(b[p + "linear_attn.in_proj_b.weight"][(1, 0, 0)] ==
          [([4, 0], [4, 32])], b)
    check(b[p + "mlp.experts.gate_up_proj"][(1, 0, 0)] ==
          [([0, 8, 0], [4, 8, 32]), ([0, 24, 0], [4, 8, 32])], b)
    check(b[p + "mlp.experts.down_proj"][(1, 0, 0)] ==
          [([0, 0, 8], [4, 32, 8])], b)
    v = "model.visual.blocks.0."
    check(b[v + "attn.qkv.weight"][(1, 0, 0)] ==
          [([8, 0], [8, 16]), ([24, 0], [8, 16]), ([40, 0], [8, 16])], b)
    check(b[v + "attn.proj.weight"][(1, 0, 0)] == [([0, 8], [16, 8])], b)
    check(b[v + "attn.proj.bias"][(1, 0, 0)] == [([0], [16])], b)
    check(b["model.visual.merger.linear_fc1.weight"][(1, 0, 0)] ==
          [([32, 0], [32, 64])], b)
    # Under EP the fused experts split on the expert dimension, whole;
    # the vision tower lives on the first stage, MTP on the last.
    b, t = all_boxes("qwen3_5_moe", (2, 2, 2, 1), "q35-ep.json")
    x = "model.language_model.layers.3.mlp.experts.gate_up_proj"
    check(b[x][(1, 1, 1)] == [([2, 0, 0], [2, 32, 32])], b[x])
    check(set(k[2] for k in b["model.visual.pos_embed.weight"]) == {0}, b)
    check(set(k[1:] for k in
              b["mtp.layers.0.mlp.experts.3.down_proj.weight"]) == {(1, 1)},
          b["mtp.layers.0.mlp.experts.3.down_proj.weight"])
    # GLM-4.5-FP8 (compressed-tensors): per-channel scales split with the
    # rows of column-parallel weights, whole beside row-parallel ones;
    # ignored modules stay BF16 without a scale.
    b, t = all_boxes("glm4_moe_fp8", (2, 1, 1, 1), "glm-fp8.json")
    a = "model.layers.1."
    check(t[a + "self_attn.q_proj.weight"]["dtype"] == "float8_e4m3fn", t)
    s = a + "self_attn.q_proj.weight_scale"
    check(t[s]["dtype"] == "bfloat16" and t[s]["global_shape"] == [64, 1], t)
    check(b[s][(1, 0, 0)] == [([32, 0], [32, 1])], b[s])
    s = a + "self_attn.o_proj.weight_scale"
    check(b[s][(1, 0, 0)] == [([0, 0], [32, 1])], b[s])
    s = a + "mlp.experts.2.down_proj.weight_scale"
    check(b[s][(1, 0, 0)] == [([0, 0], [32, 1])], b[s])
    check(t[a + "mlp.gate.weight"]["dtype"] == "bfloat16", t)
    check("model.layers.0.mlp.down_proj.weight_scale" not in t, sorted(t))
    check(t["model.layers.0.mlp.up_proj.weight"]["dtype"] == "float8_e4m3fn",
          t)


@SUITE.test
def redos_guard_bypass_ignore_expressions_finish_at_once():
    """The probe's ignore expressions hung `hf layout` and `engine layout`
    (a bracket class "[^]" or "[]" that swallowed the rest of the guard's
    view, and nine chained ".*" against GLM-4.5's module names). Matched
    in linear time, each refusal or layout takes well under a second."""
    import json
    import time
    chained = "re:" + ".*" * 9 + "Z"
    for entry, refusal in (
            ("re:[^](.+)+Z", "entry re:[^](.+)+Z is not a regular "
             "expression (missing ]: [^](.+)+Z)"),
            ("re:[](.+)+Z", "entry re:[](.+)+Z is not a regular expression "
             "(missing ]: [](.+)+Z)"),
            (chained, None)):
        cfg = dict(hfc.CONFIGS["glm4_moe_fp8"])
        cfg["quantization_config"] = dict(cfg["quantization_config"],
                                          ignore=["lm_head", entry])
        name = "redos-%d.json" % len(entry)
        config = os.path.join(TMP["dir"], name)
        with open(config, "w") as f:
            json.dump(cfg, f)
        for args in (("hf", "layout", config, "--tp", 2),
                     ("engine", "layout", config, "--engine", "hf",
                      "--tp", 2)):
            out = os.path.join(TMP["dir"], "redos-out.json")
            if os.path.exists(out):
                os.remove(out)
            t0 = time.monotonic()
            try:
                r = subprocess.run([RESHARD, *map(str, args), "-o", out],
                                   capture_output=True, text=True,
                                   timeout=30)
            except subprocess.TimeoutExpired:
                check(False, "%s with %s still running after 30 s" %
                      (args[0:2], entry))
            took = time.monotonic() - t0
            check(took < 1.0, "%s with %s took %.2f s" % (args[:2], entry,
                                                          took))
            if refusal is None:
                ok(r, "%s with %s" % (args[:2], entry))
            else:
                fails(r, "config.json: quantization_config.ignore " + refusal)
                check(not os.path.exists(out), "wrote %s" % out)


@SUITE.test
def hybrid_layouts_from_config_only():
    # Without files: the names the architectures imply, exactly the
    # generator's (A_log in torch_dtype, one MTP layer as vLLM assumes
    # for Qwen3-Next; fused decoder experts and per-expert MTP experts for
    # Qwen3.5 MoE; compressed-tensors' FP8 weights with BF16 scales).
    for arch, grid in (("qwen3_next", (2, 2, 1, 1)),
                       ("qwen3_5", (2, 1, 1, 1)),
                       ("qwen3_5_moe", (2, 1, 2, 1)),
                       ("glm4_moe_fp8", (2, 1, 2, 1))):
        r, out = layout(arch, grid, ckpt=False, name=arch + "-cfg.json")
        ok(r, "hf layout %s (config only)" % arch)
        v = json.loads(ok(run("validate", out, "--json"), "validate").stdout)
        check(v["valid"], v)
        tensors = {t["tensor_id"]: t for t in json.load(open(out))["tensors"]}
        cfg = dict(hfc.CONFIGS[arch])
        cfg.pop("_a_log_dtype", None)
        expect = {n: d for n, d, _ in hfc.model_tensors(cfg)}
        check(set(tensors) == set(expect), "%s: extra %s missing %s" % (
            arch, sorted(set(tensors) - set(expect)),
            sorted(set(expect) - set(tensors))))
        st = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
              "F32": "float32"}
        for n, d in expect.items():
            check(tensors[n]["dtype"] == st[d],
                  "%s: %s is %s, expected %s" % (arch, n,
                                                 tensors[n]["dtype"], d))


@SUITE.test
def transformers_saves():
    # DeepSeek-V3 as transformers saves it: num_nextn_predict_layers 1 but
    # no model.layers.3.* in the files, so none laid out; no topk_method,
    # so the F32 correction bias the files hold is taken.
    b, t = boxes("deepseek_v3_hf", (2, 1, 1, 1), "dsv3-hf.json")
    check(not any(n.startswith("model.layers.3.") for n in t), sorted(t))
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    check(t[bias]["dtype"] == "float32" and t[bias]["global_shape"] == [4],
          t[bias])
    check(b[bias][(1, 0, 0)] == ([0], [4]), b[bias])
    # Without files, the config's count and the bias (transformers'
    # DeepseekV3 holds it whatever topk_method says).
    r, out = layout("deepseek_v3_hf", (2, 1, 1, 1), ckpt=False,
                    name="dsv3-hf-cfg.json")
    ok(r, "hf layout deepseek_v3_hf (config only)")
    names = {x["tensor_id"]: x for x in json.load(open(out))["tensors"]}
    check("model.layers.3.eh_proj.weight" in names, sorted(names))
    check(names[bias]["dtype"] == "float32", names[bias])
    # A checkpoint holding part of the MTP layer: the missing tensor named.
    cfg = dict(hfc.CONFIGS["deepseek_v3_hf"])
    del cfg["_no_mtp"]
    spec = [x for x in hfc.model_tensors(cfg)
            if x[0] != "model.layers.3.enorm.weight"]
    d = os.path.join(TMP["dir"], "dsv3-part-mtp")
    hfc.write_checkpoint(d, cfg, files=2, tensors=spec)
    fails(run("hf", "layout", os.path.join(d, "config.json"), "--checkpoint",
              d, "-o", d + ".json"),
          "checkpoint lacks model.layers.3.enorm.weight, which "
          "DeepseekV3ForCausalLM config.json implies")
    # Fused experts: gate_up_proj [E, 2I, h] split over TP section by
    # section (rank 1: gate rows 8-15 and up rows 24-31), down_proj on
    # its inputs; under EP whole experts on dim 0.
    x = "model.layers.1.mlp.experts."
    b, t = all_boxes("qwen3_moe_fused", (2, 1, 1, 1), "q3moe-fused.json")
    check(t[x + "gate_up_proj"]["global_shape"] == [4, 32, 32], t)
    check(b[x + "gate_up_proj"][(1, 0, 0)] ==
          [([0, 8, 0], [4, 8, 32]), ([0, 24, 0], [4, 8, 32])], b)
    check(b[x + "down_proj"][(1, 0, 0)] == [([0, 0, 8], [4, 32, 8])], b)
    b, t = all_boxes("mixtral_fused", (4, 1, 4, 1), "mixtral-fused.json")
    m = "model.layers.0.mlp."
    check(b[m + "experts.gate_up_proj"][(0, 3, 0)] ==
          [([3, 0, 0], [1, 48, 32])], b)
    check(b[m + "gate.weight"][(0, 3, 0)] == [([0, 0], [4, 32])], b)
    # The text-only Qwen3.5 classes: model.*, no vision tower, no MTP.
    b, t = all_boxes("qwen3_5_moe_text", (2, 1, 1, 1), "q35moe-text.json")
    check("model.layers.0.mlp.experts.3.up_proj.weight" in t, sorted(t))
    check(not any(n.startswith(("mtp.", "model.visual.",
                                "model.language_model.")) for n in t),
          sorted(t))
    a = "model.layers.0.linear_attn.in_proj_qkv.weight"
    check(t[a]["global_shape"] == [128, 32], t[a])


@SUITE.test
def dtype_keeps_what_the_checkpoint_stores_wider():
    # --dtype bfloat16 on DeepSeek-V3 FP8 (torch_dtype bfloat16): the
    # weights dequantized to bfloat16 without their scales, the F32
    # correction bias kept F32 (as DeepSeek's BF16 script and the engines
    # keep it); Qwen3-Next's F32 A_log likewise.
    for arch, keep in (("deepseek_v3",
                        "model.layers.1.mlp.gate.e_score_correction_bias"),
                       ("qwen3_next", "model.layers.0.linear_attn.A_log")):
        d = checkpoint(arch)
        out = os.path.join(TMP["dir"], arch + "-bf16.json")
        ok(run("hf", "layout", os.path.join(d, "config.json"), "--tp", 2,
               "--checkpoint", d, "--dtype", "bfloat16", "-o", out),
           "hf layout --dtype bfloat16")
        t = {x["tensor_id"]: x for x in json.load(open(out))["tensors"]}
        src = hfc.read_checkpoint(d)
        for name, (dt, _, _) in src.items():
            if name.endswith("weight_scale_inv"):
                check(name not in t, name)
                continue
            want = "float32" if dt == "F32" else "bfloat16"
            check(t[name]["dtype"] == want, "%s: %s is %s, not %s" % (
                arch, name, t[name]["dtype"], want))
        check(t[keep]["dtype"] == "float32", t[keep])


@SUITE.test
def hf_engine_names_sectioned_boxes():
    # A sectioned split gives a rank one box per section of one tensor:
    # the hf preset names them <tensor>#<section>; other tensors keep
    # their own names.
    d = checkpoint("qwen3_next")
    out = os.path.join(TMP["dir"], "next-hf-engine.json")
    ok(run("engine", "layout", os.path.join(d, "config.json"), "--engine",
           "hf", "--tp", 2, "--checkpoint", d, "-o", out, "--params",
           out + ".params"), "engine layout --engine hf (Qwen3-Next)")
    params = json.load(open(out + ".params"))
    rank1 = [p for p in params["participants"]
             if p["participant_id"] == "p-d0-p0-e0-t1"][0]
    got = {q["name"]: q["shape"] for q in rank1["parameters"]}
    a = "model.layers.0.linear_attn."
    check({n: s for n, s in got.items() if n.startswith(a + "conv1d")} ==
          {a + "conv1d.weight#0": [16, 1, 4], a + "conv1d.weight#1": [16, 1, 4],
           a + "conv1d.weight#2": [32, 1, 4]}, sorted(got))
    check(got[a + "A_log"] == [4], got.get(a + "A_log"))
    ok(run("engine", "load", d, "--engine", "hf", "--tp", 2, "-o",
           os.path.join(TMP["dir"], "next-hf-load")),
       "engine load --engine hf (Qwen3-Next)")


@SUITE.test
def layout_errors():
    fails(layout("llama", (3, 1, 1, 1))[0], "TP 3 does not divide the 4 "
          "attention heads of LlamaForCausalLM")
    fails(layout("llama", (1, 1, 2, 1))[0],
          "EP 2 needs routed experts; LlamaForCausalLM has none")
    fails(layout("qwen3_moe", (1, 1, 3, 1))[0],
          "EP 3 does not divide the 4 routed experts")
    fails(layout("llama", (1, 5, 1, 1))[0], "PP 5 exceeds the 4 layers")
    fails(layout("deepseek_v3", (4, 1, 1, 1))[0],
          "TP 4 splits dimension 0 (48) of model.layers.0.self_attn.q_b_proj"
          ".weight into shards that are not whole FP8 blocks of 8")
    cfg = dict(hfc.CONFIGS["llama"], architectures=["GPT2LMHeadModel"])
    path = os.path.join(TMP["dir"], "gpt2.json")
    json.dump(cfg, open(path, "w"))
    fails(run("hf", "layout", path, "-o", path + ".out"),
          "unknown architecture GPT2LMHeadModel")


@SUITE.test
def checkpoint_tensor_errors():
    cfg = hfc.CONFIGS["qwen3"]
    spec = hfc.model_tensors(cfg)
    d = os.path.join(TMP["dir"], "extra")
    hfc.write_checkpoint(d, cfg, files=2,
                         tensors=spec + [("model.visual.proj", "BF16", [4])])
    fails(run("hf", "layout", os.path.join(d, "config.json"), "--tp", 2,
              "--checkpoint", d, "-o", d + ".json"),
          "checkpoint tensor model.visual.proj (in model-00002-of-00002."
          "safetensors) is not a tensor of Qwen3ForCausalLM")
    d = os.path.join(TMP["dir"], "lacking")
    hfc.write_checkpoint(d, cfg, files=2,
                         tensors=[t for t in spec
                                  if t[0] != "model.layers.1.mlp.up_proj."
                                  "weight"])
    fails(run("hf", "layout", os.path.join(d, "config.json"),
              "--checkpoint", d, "-o", d + ".json"),
          "checkpoint lacks model.layers.1.mlp.up_proj.weight")
    d = os.path.join(TMP["dir"], "reshaped")
    hfc.write_checkpoint(d, cfg, files=2, tensors=[
        (n, t, [50, 32] if n == "model.embed_tokens.weight" else s)
        for n, t, s in spec])
    fails(run("hf", "layout", os.path.join(d, "config.json"),
              "--checkpoint", d, "-o", d + ".json"),
          "model.embed_tokens.weight is [50, 32] in model-00001-of-00002."
          "safetensors but config.json implies [64, 32]")
    # A per-channel scale without compressed-tensors, one of the wrong
    # shape, and a Qwen3.5 checkpoint whose vision tower lacks a tensor.
    cfg = hfc.CONFIGS["glm4_moe"]
    spec = hfc.model_tensors(cfg)
    d = os.path.join(TMP["dir"], "stray-scale")
    hfc.write_checkpoint(d, cfg, files=2, tensors=spec + [
        ("model.layers.1.self_attn.q_proj.weight_scale", "BF16", [64, 1])])
    fails(run("hf", "layout", os.path.join(d, "config.json"),
              "--checkpoint", d, "-o", d + ".json"),
          "checkpoint tensor model.layers.1.self_attn.q_proj.weight_scale is "
          "a per-channel FP8 scale but config.json has no compressed-tensors "
          "quantization_config")
    cfg = hfc.CONFIGS["glm4_moe_fp8"]
    s = "model.layers.1.self_attn.o_proj.weight_scale"
    d = os.path.join(TMP["dir"], "bad-scale")
    hfc.write_checkpoint(d, cfg, files=2, tensors=[
        (n, t, [1, 32] if n == s else sh)
        for n, t, sh in hfc.model_tensors(cfg)])
    r = run("hf", "layout", os.path.join(d, "config.json"), "--checkpoint", d,
            "-o", d + ".json")
    fails(r, s + " is [1, 32] in ")
    fails(r, " but its weight implies [32, 1]")
    cfg = hfc.CONFIGS["qwen3_5"]
    d = os.path.join(TMP["dir"], "half-vision")
    hfc.write_checkpoint(d, cfg, files=2, tensors=[
        t for t in hfc.model_tensors(cfg)
        if t[0] != "model.visual.blocks.1.attn.qkv.bias"])
    fails(run("hf", "layout", os.path.join(d, "config.json"),
              "--checkpoint", d, "-o", d + ".json"),
          "checkpoint lacks model.visual.blocks.1.attn.qkv.bias, which "
          "Qwen3_5ForConditionalGeneration config.json implies")


@SUITE.test
def quantized_checkpoint_dtypes_are_checked():
    """Finding (issue 58): an I32 weight_scale, an I8 quantized weight and
    BF16 MXFP4 scales were laid out as they came. Each quantization scheme's
    tensors must be in its dtypes: FP8 block and per-channel scales F32,
    BF16 or F16 with their weights F8_E4M3, MXFP4 blocks and scales U8; the
    error names the tensor, its file, its dtype and the dtypes allowed, and
    nothing is written."""
    cases = [
        ("deepseek_v3", "model.layers.0.self_attn.q_a_proj.weight_scale_inv",
         "I32", "model.layers.0.self_attn.q_a_proj.weight_scale_inv",
         "int32, but an FP8 block scale must be float32, bfloat16 or "
         "float16"),
        ("deepseek_v3", "model.layers.0.self_attn.q_a_proj.weight", "I8",
         "model.layers.0.self_attn.q_a_proj.weight",
         "int8, but a weight with an FP8 block scale must be float8_e4m3fn"),
        ("glm4_moe_fp8", "model.layers.1.self_attn.o_proj.weight_scale",
         "I32", "model.layers.1.self_attn.o_proj.weight_scale",
         "int32, but a per-channel FP8 scale must be float32, bfloat16 or "
         "float16"),
        ("glm4_moe_fp8", "model.layers.1.self_attn.o_proj.weight", "I8",
         "model.layers.1.self_attn.o_proj.weight",
         "int8, but a weight with a per-channel FP8 scale must be "
         "float8_e4m3fn"),
        ("gpt_oss", "model.layers.0.mlp.experts.gate_up_proj_scales", "BF16",
         "model.layers.0.mlp.experts.gate_up_proj_scales",
         "bfloat16, but an MXFP4 block or scale must be uint8"),
        ("gpt_oss", "model.layers.1.mlp.experts.down_proj_blocks", "I8",
         "model.layers.1.mlp.experts.down_proj_blocks",
         "int8, but an MXFP4 block or scale must be uint8"),
    ]
    for k, (arch, changed, dtype, named, why) in enumerate(cases):
        cfg = hfc.CONFIGS[arch]
        spec = hfc.model_tensors(cfg)
        check(any(n == changed for n, _, _ in spec), "%s has no %s" %
              (arch, changed))
        d = os.path.join(TMP["dir"], "bad-dtype-%d" % k)
        hfc.write_checkpoint(d, cfg, files=2, tensors=[
            (n, dtype if n == changed else t, sh) for n, t, sh in spec])
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            fname = json.load(f)["weight_map"][named]
        out = d + ".json"
        config = os.path.join(d, "config.json")
        r = run("hf", "layout", config, "--checkpoint", d, "-o", out)
        want = ("reshard: error: %s: checkpoint tensor %s (in %s) is %s\n" %
                (config, named, fname, why))
        check(r.returncode == 1 and r.stderr == want,
              "exit %d, stderr\n  %r\nnot\n  %r" % (r.returncode, r.stderr,
                                                    want))
        check(not os.path.exists(out), "%s written" % out)


@SUITE.test
def checkpoint_source_plans():
    d = checkpoint("mixtral")
    r, placement = layout("mixtral", (2, 2, 2, 1), name="mixtral-src.json")
    ok(r, "hf layout")
    manifest = os.path.join(TMP["dir"], "mixtral-source.json")
    ok(run("hf", "source", d, placement, "-o", manifest), "hf source")
    m = json.load(open(manifest))
    check(m["manifest_key"] == "hf-checkpoint/manifest", m["manifest_key"])
    source = hfc.read_checkpoint(d)
    by_id = {f["tensor_id"]: f for f in m["fragments"]}
    check(set(by_id) == set(source), "manifest tensors differ")
    f = by_id["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    raw = open(os.path.join(d, f["object_key"].split("/")[-1]), "rb").read()
    check(raw[f["object_offset"]:f["object_offset"] + f["nbytes"]] ==
          source[f["tensor_id"]][2], "the manifest's range is not the tensor")
    plan = json.loads(ok(run("plan", manifest, placement, "--json"),
                         "plan from the checkpoint").stdout)
    frag_bytes = sum(fr["nbytes"] for p in json.load(open(placement))["parts"]
                     for fr in p["fragments"])
    check(plan["bytes"] == frag_bytes, "plan bytes %d != %d" %
          (plan["bytes"], frag_bytes))


@SUITE.test
def reshard_refuses_existing_output():
    d = checkpoint("qwen2")
    r, placement = layout("qwen2", (2, 1, 1, 1), name="qwen2-twice.json")
    ok(r, "hf layout")
    out = os.path.join(TMP["dir"], "twice")
    ok(run("hf", "reshard", d, placement, out), "first hf reshard")
    before = hfc.read_checkpoint(out)
    fails(run("hf", "reshard", d, placement, out),
          "exists: refusing to overwrite a checkpoint")
    check(hfc.read_checkpoint(out) == before, "the first output changed")


@SUITE.test
def reshard_names_a_malformed_file():
    d = os.path.join(TMP["dir"], "malformed")
    hfc.write_checkpoint(d, hfc.CONFIGS["qwen2"], files=2)
    r, placement = layout("qwen2", (1, 1, 1, 1), name="qwen2-bad.json")
    ok(r, "hf layout")
    path = os.path.join(d, "model-00002-of-00002.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    fails(run("hf", "reshard", d, placement, d + "-out"),
          "model-00002-of-00002.safetensors")
    check(not os.path.exists(d + "-out"), "output created for a bad source")


@SUITE.test
def store_import_export_round_trip():
    for arch in ("deepseek_v3", "qwen3_moe", "qwen3_next", "qwen3_5_moe"):
        d = checkpoint(arch)
        uri = "fs://" + os.path.join(TMP["dir"], "store-" + arch)
        # Slabs of at most 1 KiB: no tensor is ever whole in memory.
        imp = json.loads(ok(run("hf", "import", d, uri, "--json",
                                "--max-fragment-bytes", 1024),
                            "hf import").stdout)
        source = hfc.read_checkpoint(d)
        total = sum(len(t[2]) for t in source.values())
        check(imp["tensors"] == len(source), imp)
        check(imp["fragments"] > len(source), imp)
        check(imp["bytes_read"] == total, imp)
        key = imp["manifest_key"]
        check(key == "weights/default/%s/hf/0/manifest" % arch, key)
        ok(run("store", "verify", uri, key), "store verify")
        out = os.path.join(TMP["dir"], "exported-" + arch)
        exp = json.loads(ok(run("hf", "export", uri, key, out, "--json",
                                "--staging-bytes", 4096,
                                "--max-file-bytes", total // 2 + 1),
                            "hf export").stdout)
        check(exp["bytes"] == total and exp["files"] >= 2, exp)
        got = hfc.read_checkpoint(out)
        check(got == source, "%s: exported checkpoint differs" % arch)
        # Twice: the revision exists, the output exists; both refused and
        # nothing changes.
        fails(run("hf", "import", d, uri), "conflicting weight revision")
        ok(run("store", "verify", uri, key), "store verify after")
        fails(run("hf", "export", uri, key, out), "exists: refusing")
        check(hfc.read_checkpoint(out) == source, "export changed")


@SUITE.test
def store_export_of_a_missing_revision():
    uri = "fs://" + os.path.join(TMP["dir"], "store-empty")
    os.makedirs(uri[5:], exist_ok=True)
    out = os.path.join(TMP["dir"], "never")
    fails(run("hf", "export", uri, "weights/default/x/hf/0/manifest", out),
          "weights/default/x/hf/0/manifest")
    check(not os.path.exists(out), "output created for a missing revision")


sys.exit(SUITE.run("reshard-hf-", lambda t: TMP.update(dir=t)))
