#!/usr/bin/env python3
"""CLI contract of what `reshard engine layout|load --engine vllm` holds
where vLLM 0.33 holds more than the canonical tensors or holds them in
another form, on tiny checkpoints made by the test (hf_checkpoints.py):

- the tensors a preset holds in float32 whatever the model dtype (router
  biases, the gated DeltaNet's A_log) widen exactly from a 16-bit
  checkpoint without --convert; any other dtype difference needs it;

Each check is byte for byte against the checkpoint's own bytes, or the
exact one-line error (exit 1, nothing written).

Usage: engine_vllm_more_cli_test.py RESHARD_BINARY TESTS_DIR
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

# Qwen3.5's text class as transformers saves it: A_log in the model dtype
# (BF16), which vLLM holds in float32.
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


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def read_params(file):
    """({name: (dtype, shape, bytes)}, [names by data offset]) of a
    parameter file."""
    with open(file, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {k: (v["dtype"], v["shape"],
               raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
           for k, v in header.items()}
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return out, order


def read_dir(d):
    return {f[:-len(".safetensors")]: read_params(os.path.join(d, f))[0]
            for f in sorted(os.listdir(d))}


def deepseek_bf16():
    """(directory, tensors) of a BF16 DeepSeek-V3 (correction bias BF16)."""
    if "dsv3" not in TMP:
        cfg = hfc.CONFIGS["deepseek_v3"]
        cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
        cfg["torch_dtype"] = "bfloat16"
        d = path("ckpt-dsv3-bf16")
        tensors = hfc.write_checkpoint(d, cfg, tensors=[
            (n, "BF16", s) for n, _, s in hfc.model_tensors(cfg)
            if not n.endswith("weight_scale_inv")])
        TMP["dsv3"] = (d, tensors, cfg)
    return TMP["dsv3"]


def rows(t, r0, n):
    """Rows [r0, r0 + n) of tensor t = (dtype, shape, bytes)."""
    row = len(t[2]) // t[1][0]
    return t[2][r0 * row:(r0 + n) * row]


def cols(t, c0, n):
    """Columns [c0, c0 + n) of a 2-D tensor t, row-major."""
    item = len(t[2]) // (t[1][0] * t[1][1])
    row = t[1][1] * item
    return b"".join(t[2][r * row + c0 * item:r * row + (c0 + n) * item]
                    for r in range(t[1][0]))


def widened(bf16):
    """Each BF16 value as the float32 of the same value (its upper half)."""
    return b"".join(b"\0\0" + bf16[i:i + 2] for i in range(0, len(bf16), 2))


# ------------------------------------------------------------------ tests

@SUITE.test
def float32_tensors_widen_without_convert():
    # Qwen3.5's BF16 A_log: vLLM holds it float32, so the load widens it
    # exactly without --convert; every other parameter is the same bytes
    # as a load with --convert.
    d = path("ckpt-qwen35")
    tensors = hfc.write_checkpoint(d, QWEN35)
    a_log = "model.layers.0.linear_attn.A_log"
    check(tensors[a_log][0] == "BF16", tensors[a_log][:2])
    plain, conv = path("qwen35-plain"), path("qwen35-convert")
    expect_ok(run_cli(RESHARD, "engine", "load", d, "--engine", "vllm",
                      "--tp", 2, "-o", plain), "engine load")
    expect_ok(run_cli(RESHARD, "engine", "load", d, "--engine", "vllm",
                      "--tp", 2, "--convert", "-o", conv),
              "engine load --convert")
    got, want = read_dir(plain), read_dir(conv)
    check(got == want, "a load without --convert differs from one with it")
    b = tensors[a_log][2]
    for t, part in enumerate(("p-d0-p0-e0-t0", "p-d0-p0-e0-t1")):
        g = got[part][a_log]
        check(g[:2] == ("F32", [2]), "%s A_log: %s" % (part, g[:2]))
        check(g[2] == widened(b[4 * t:4 * t + 4]),
              "%s A_log: bytes not widened exactly" % part)
    # DeepSeek-V3's BF16 router bias under sglang (float32 too) and the
    # hf preset (the checkpoint's own dtype): both load without --convert.
    dd, tensors, _ = deepseek_bf16()
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    for engine, dt in (("sglang", "F32"), ("hf", "BF16")):
        out = path("dsv3-" + engine)
        expect_ok(run_cli(RESHARD, "engine", "load", dd, "--engine", engine,
                          "-o", out), "engine load " + engine)
        g = read_dir(out)["p-d0-p0-e0-t0"][bias]
        check(g[0] == dt, "%s bias: %s" % (engine, g[0]))
        check(g[2] == (widened(tensors[bias][2]) if dt == "F32"
                       else tensors[bias][2]), "%s bias bytes" % engine)
    # Any other difference still needs --convert (here --dtype float16),
    # naming the first tensor; nothing is written.
    out = path("qwen35-f16")
    expect_error(
        run_cli(RESHARD, "engine", "load", d, "--engine", "vllm", "--tp", 2,
                "--dtype", "float16", "-o", out),
        "tensor model.embed_tokens.weight is bfloat16 in the checkpoint but "
        "float16 in the target placement: converting it needs "
        "CheckpointLoadOptions::convert (--convert, convert=True)")
    check(not os.path.exists(out), "output written on a refusal")


@SUITE.test
def shared_experts_whole_under_sequence_parallel_moe():
    # TP 2 x DP 2 with EP 4: vLLM runs sequence-parallel MoE and builds
    # DeepseekV2MLP(disable_tp=True): every rank holds the shared experts
    # whole. "off" (another all2all backend) splits them as at DP 1.
    d, tensors, cfg = deepseek_bf16()
    grid = ["--tp", 2, "--dp", 2, "--ep", 4]
    x = "model.layers.1.mlp.shared_experts."
    gate, up, down = (tensors[x + n + ".weight"]
                      for n in ("gate_proj", "up_proj", "down_proj"))
    width = gate[1][0]
    outs = {}
    for mode in ("auto", "on", "off"):
        out = outs[mode] = path("dsv3-sp-" + mode)
        expect_ok(run_cli(RESHARD, "engine", "load", d, "--engine", "vllm",
                          *grid, "--sequence-parallel-moe", mode, "-o", out),
                  "engine load --sequence-parallel-moe " + mode)
        got = read_dir(out)
        check(len(got) == 4, sorted(got))
        for part, params in got.items():
            t = int(part[-1])
            if mode == "off":
                il = width // 2
                want_gu = rows(gate, t * il, il) + rows(up, t * il, il)
                want_dn = cols(down, t * il, il)
                shapes = ([2 * il, gate[1][1]], [down[1][0], il])
            else:
                want_gu, want_dn = gate[2] + up[2], down[2]
                shapes = ([2 * width, gate[1][1]], list(down[1]))
            gu = params[x + "gate_up_proj.weight"]
            dn = params[x + "down_proj.weight"]
            check((gu[1], dn[1]) == shapes, "%s %s: shapes %s %s" %
                  (mode, part, gu[1], dn[1]))
            check(gu[2] == want_gu and dn[2] == want_dn,
                  "%s %s: shared expert bytes" % (mode, part))
    check(read_dir(outs["auto"]) == read_dir(outs["on"]), "auto != on")
    # engine reshard into the "off" layout gives engine load's bytes.
    cfg_path = os.path.join(d, "config.json")
    out = path("dsv3-sp-reshard-off")
    expect_ok(run_cli(RESHARD, "engine", "reshard", outs["auto"], out,
                      "--config", cfg_path, "--from", "vllm", "--from-tp", 2,
                      "--from-dp", 2, "--from-ep", 4, "--to", "vllm",
                      "--to-tp", 2, "--to-dp", 2, "--to-ep", 4,
                      "--to-sequence-parallel-moe", "off"),
              "engine reshard --to-sequence-parallel-moe off")
    check(read_dir(out) == read_dir(outs["off"]),
          "engine reshard into the off layout differs from engine load")
    # "on" where vLLM cannot run it, and any other preset: refused.
    out = path("dsv3-sp-refused")
    expect_error(
        run_cli(RESHARD, "engine", "load", d, "--engine", "vllm", "--tp", 2,
                "--ep", 2, "--sequence-parallel-moe", "on", "-o", out),
        "%s: vllm runs sequence-parallel MoE only with expert parallelism, "
        "TP > 1 and DP > 1, not at TP 2, DP 1, EP 2 "
        "(--sequence-parallel-moe on)" % d)
    expect_error(
        run_cli(RESHARD, "engine", "load", d, "--engine", "megatron",
                "--sequence-parallel-moe", "off", "-o", out),
        "%s: sequence-parallel MoE (--sequence-parallel-moe) is vLLM's and "
        "SGLang's; the megatron preset takes only auto" % d)
    check(not os.path.exists(out), "output written on a refusal")


@SUITE.test
def ep_above_the_expert_count_gives_zero_size_experts():
    # determine_expert_map: 6 experts over EP 8 give ranks 0-5 one expert
    # each and ranks 6-7 none, whose w13_weight is [0, 2I, h].
    cfg = dict(hfc.CONFIGS["mixtral"], num_local_experts=6)
    d = path("ckpt-mixtral6")
    tensors = hfc.write_checkpoint(d, cfg)
    out = path("mixtral6-ep8")
    expect_ok(run_cli(RESHARD, "engine", "load", d, "--engine", "vllm",
                      "--tp", 4, "--dp", 2, "--ep", 8, "-o", out),
              "engine load EP 8")
    got = read_dir(out)
    x = "model.layers.0.block_sparse_moe.experts."
    i, h = cfg["intermediate_size"], cfg["hidden_size"]
    for part, params in sorted(got.items()):
        e = int(part.split("-e")[1].split("-")[0])
        w13 = params[x + "routed_experts.w13_weight"]
        w2 = params[x + "routed_experts.w2_weight"]
        if e >= 6:
            check((w13[:2], w2[:2]) == (("BF16", [0, 2 * i, h]),
                                        ("BF16", [0, h, i])),
                  "%s: %s %s" % (part, w13[:2], w2[:2]))
            check(w13[2] == b"" and w2[2] == b"", part)
        else:
            ex = x + "%d." % e
            check(w13[1] == [1, 2 * i, h] and w13[2] == (
                tensors[ex + "w1.weight"][2] + tensors[ex + "w3.weight"][2]),
                "%s w13_weight" % part)
            check(w2[1] == [1, h, i] and w2[2] == tensors[ex + "w2.weight"][2],
                  "%s w2_weight" % part)
    # Read back: engine reshard from these files to TP 2 (every expert on
    # every rank) gives engine load's bytes, and back to EP 8 the same files.
    cfg_path = os.path.join(d, "config.json")
    tp2, back = path("mixtral6-tp2"), path("mixtral6-back")
    expect_ok(run_cli(RESHARD, "engine", "load", d, "--engine", "vllm",
                      "--tp", 2, "-o", tp2), "engine load TP 2")
    resharded = path("mixtral6-resharded")
    expect_ok(run_cli(RESHARD, "engine", "reshard", out, resharded,
                      "--config", cfg_path, "--from", "vllm", "--from-tp", 4,
                      "--from-dp", 2, "--from-ep", 8, "--to", "vllm",
                      "--to-tp", 2), "engine reshard EP 8 -> TP 2")
    check(read_dir(resharded) == read_dir(tp2), "EP 8 -> TP 2 differs")
    expect_ok(run_cli(RESHARD, "engine", "reshard", tp2, back,
                      "--config", cfg_path, "--from", "vllm", "--from-tp", 2,
                      "--to", "vllm", "--to-tp", 4, "--to-dp", 2,
                      "--to-ep", 8), "engine reshard TP 2 -> EP 8")
    check(read_dir(back) == got, "TP 2 -> EP 8 differs from engine load")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-engine-vllm-more-",
                       lambda tmp: TMP.update(dir=tmp)))
