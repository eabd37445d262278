#!/usr/bin/env python3
"""CLI contract of `reshard engine load --engine vllm|megatron` on
transformers 5's fused-expert save format (mlp.experts.gate_up_proj
[E, 2I, H]: per expert its gate rows, then its up rows; down_proj
[E, H, I]; Mixtral's block under mlp. too): for Qwen3-MoE, Mixtral,
DeepSeek-V2 and DeepSeek-V3 (with and without its MTP layer) the test
writes the same weights in both save formats (the fused tensors stacked
from the per-expert ones) and checks that every participant's parameters
(names in order, dtypes, shapes, offsets and bytes; the file identity in
__metadata__ names other canonical tensors and is left out) are the same
for both, for vllm (every release spec, TP 2 and EP 2) and megatron
(TP 2 and EP 2). Also: the loads that crashed before (no signal, exit 0),
DeepSeek-V3 and GLM-4.5 as transformers saves them (no MTP tensors),
and the refusal of fused experts in an FP8 vLLM layout.

Usage: engine_fused_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check, expect_error, expect_ok, run_cli  # noqa

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

# DeepSeek-V3 in BF16 with its MTP layer (megatron loads it).
hfc.CONFIGS.setdefault("deepseek_v3_bf16_mtp", dict(
    {k: v for k, v in hfc.CONFIGS["deepseek_v3"].items()
     if k != "quantization_config"}))

# family: (per-expert config, megatron lays it out)
FAMILIES = {
    "qwen3_moe": ("qwen3_moe", True),
    "mixtral": ("mixtral", True),
    "deepseek_v2": ("deepseek_v2", False),
    "deepseek_v3_hf": ("deepseek_v3_hf", True),
    "deepseek_v3_mtp": ("deepseek_v3_bf16_mtp", True),
}


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def fused_name(cfg, name):
    """The per-expert checkpoint's name of fused tensor `name`'s source:
    (prefix of expert e's tensors, (gate, up, down)) or None."""
    mixtral = cfg["architectures"][0] == "MixtralForCausalLM"
    for leaf in ("gate_up_proj", "down_proj"):
        if name.endswith(".experts." + leaf):
            x = name[:-len(leaf)]
            if mixtral:
                x = x.replace(".mlp.", ".block_sparse_moe.")
            names = (("w1", "w3", "w2") if mixtral
                     else ("gate_proj", "up_proj", "down_proj"))
            return leaf, x, names
    return None


def checkpoints(key):
    """Writes `key`'s per-expert checkpoint and the fused one holding the
    same weights; returns both directories."""
    cfg = hfc.CONFIGS[FAMILIES[key][0]]
    per, fused = path(key + "-per"), path(key + "-fused")
    if os.path.exists(per):
        return per, fused
    data = hfc.write_checkpoint(per, cfg)
    fcfg = dict(cfg, _fused_experts=True)
    mixtral = cfg["architectures"][0] == "MixtralForCausalLM"

    def fill(name, dtype, shape, nbytes):
        src = fused_name(cfg, name)
        if src is None:
            if mixtral:
                name = name.replace(".mlp.gate.", ".block_sparse_moe.gate.")
            out = bytes(data[name][2])
        else:
            leaf, x, (g, u, d) = src
            out = b"".join(
                bytes(data["%s%d.%s.weight" % (x, e, n)][2])
                for e in range(shape[0])
                for n in ((g, u) if leaf == "gate_up_proj" else (d,)))
        check(len(out) == nbytes, "%s: %d bytes, not %d" %
              (name, len(out), nbytes))
        return out

    hfc.write_checkpoint(fused, fcfg, fill=fill)
    return per, fused


def read_parameters(file):
    """(header without __metadata__, data bytes) of a safetensors file."""
    with open(file, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return header, raw[8 + n:]


def load(ckpt, out, engine, tp, ep=1, extra=()):
    expect_ok(run_cli(RESHARD, "engine", "load", ckpt, "--engine", engine,
                      "--tp", tp, "--ep", ep, *extra, "-o", out),
              "engine load %s --engine %s --tp %d --ep %d" %
              (ckpt, engine, tp, ep))


def same_loads(key, engine, tp, ep, extra=()):
    per, fused = checkpoints(key)
    tag = "%s-%s-tp%d-ep%d" % (key, engine.replace("@", "_").replace(
        "<", "lt"), tp, ep)
    a, b = path(tag + "-per"), path(tag + "-fused")
    load(per, a, engine, tp, ep, extra)
    load(fused, b, engine, tp, ep, extra)
    files = sorted(os.listdir(a))
    check(files == sorted(os.listdir(b)), "%s: files %s, not %s" %
          (tag, sorted(os.listdir(b)), files))
    check(len(files) == tp, "%s: %d files" % (tag, len(files)))
    for f in files:
        ha, da = read_parameters(os.path.join(a, f))
        hb, db = read_parameters(os.path.join(b, f))
        check(list(ha) == list(hb), "%s %s: parameters\n  %s\nnot\n  %s" %
              (tag, f, list(hb), list(ha)))
        check(ha == hb, "%s %s: headers differ" % (tag, f))
        for name, t in ha.items():
            lo, hi = t["data_offsets"]
            check(da[lo:hi] == db[lo:hi], "%s %s %s: bytes differ" %
                  (tag, f, name))
        check(da == db, "%s %s: data differ" % (tag, f))
        if engine.startswith("vllm"):
            check(any("w13_weight" in n for n in ha), "%s %s: no w13_weight"
                  % (tag, f))


MEGATRON = ("--make-vocab-size-divisible-by", 8)


# ------------------------------------------------------------------ tests

@SUITE.test
def loads_that_crashed_now_succeed():
    d = path("qwen3_moe_fused")
    hfc.write_checkpoint(d, hfc.CONFIGS["qwen3_moe_fused"])
    load(d, path("crash-vllm"), "vllm", 2)
    load(d, path("crash-megatron"), "megatron", 2, extra=MEGATRON)


@SUITE.test
def vllm_fused_equals_per_expert():
    for key in FAMILIES:
        same_loads(key, "vllm", 2, 1)
        same_loads(key, "vllm", 2, 2)


@SUITE.test
def vllm_every_release_spec():
    for spec in ("vllm@0.33", "vllm@<0.33"):
        same_loads("qwen3_moe", spec, 2, 1)
        same_loads("mixtral", spec, 2, 2)


@SUITE.test
def megatron_fused_equals_per_expert():
    for key, (_, megatron) in FAMILIES.items():
        if not megatron:
            continue
        same_loads(key, "megatron", 2, 1, MEGATRON)
        same_loads(key, "megatron", 2, 2, MEGATRON)


@SUITE.test
def megatron_mtp_layer_present_or_absent():
    # MTP in the files: mtp.layers.0.* on the last stage; transformers'
    # save without MTP tensors: none.
    for key, want in (("deepseek_v3_mtp", True), ("deepseek_v3_hf", False)):
        _, fused = checkpoints(key)
        out = path(key + "-megatron-mtp")
        load(fused, out, "megatron", 2, extra=MEGATRON)
        header, _ = read_parameters(os.path.join(out, "p-d0-p0-e0-t0"
                                                 ".safetensors"))
        has = any(n.startswith("mtp.layers.0.") for n in header)
        check(has == want, "%s: MTP parameters %s" % (key, has))


@SUITE.test
def transformers_saves_without_mtp():
    # DeepSeek-V3 and GLM-4.5 as transformers saves them: config.json
    # counts one MTP layer, the files hold none.
    for key in ("deepseek_v3_hf", "deepseek_v3_hf_fused"):
        d = path(key)
        hfc.write_checkpoint(d, hfc.CONFIGS[key])
        load(d, path(key + "-vllm"), "vllm", 2)
        load(d, path(key + "-megatron"), "megatron", 2, extra=MEGATRON)
    d = path("glm4_moe_hf_fused")
    hfc.write_checkpoint(d, hfc.CONFIGS["glm4_moe_hf_fused"])
    load(d, path("glm-vllm"), "vllm", 2)
    out = path("glm-megatron")
    expect_error(run_cli(RESHARD, "engine", "load", d, "--engine", "megatron",
                         "--tp", 2, "-o", out),
                 "%s: engine preset megatron does not lay out "
                 "Glm4MoeForCausalLM" % d)
    check(not os.path.exists(out), "output written on a refusal")


@SUITE.test
def fp8_vllm_of_fused_experts_is_refused():
    _, fused = checkpoints("qwen3_moe")
    out = path("fused-fp8")
    expect_error(
        run_cli(RESHARD, "engine", "load", fused, "--engine", "vllm", "--tp",
                2, "--quantize", "fp8", "--block", "8x8", "--convert", "-o",
                out),
        fused + ": vllm does not lay out the fused experts "
        "(model.layers.1.mlp.experts.gate_up_proj, down_proj) of an FP8 "
        "model: the engine holds FP8 experts with their scales, which the "
        "fused form does not carry; use a checkpoint with one tensor per "
        "expert")
    check(not os.path.exists(out), "output written on a refusal")


@SUITE.test
def fused_experts_at_ep_other_than_tp_are_refused():
    _, fused = checkpoints("qwen3_moe")
    for engine, args in (("vllm", ("--dp", 2, "--ep", 4)),
                         ("megatron", ("--dp", 2, "--ep", 4) + MEGATRON)):
        out = path("fused-ep4-" + engine)
        expect_error(
            run_cli(RESHARD, "engine", "load", fused, "--engine", engine,
                    "--tp", 2, *args, "-o", out),
            "%s: %s does not lay out the fused experts "
            "(mlp.experts.gate_up_proj, down_proj) of Qwen3MoeForCausalLM at "
            "EP 4 over TP 2 x DP 2: only EP 1 or EP = TP; use a checkpoint "
            "with one tensor per expert" % (fused, engine))
        check(not os.path.exists(out), "output written on a refusal")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-engine-fused-",
                       lambda tmp: TMP.update(dir=tmp)))
