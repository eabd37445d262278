#!/usr/bin/env python3
"""CLI contract of the conversions of `reshard hf layout --quantize fp8 /
--dtype D` and `reshard hf reshard --convert [--block BNxBK]`, on tiny
checkpoints made here whose values hold the edge cases (varied
magnitudes, an all-zero block, values rounding to 448, ties, tiny
negatives, NaN, subnormals, infinities): every output tensor byte for byte
against the independent numpy statement of the arithmetic
(conversion_reference.py); which tensors a layout quantizes against the
FP8 releases' rule, written out here; the refusals (one error line, exit
1, nothing written).

Usage: convert_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import re
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conversion_reference as ref  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402
from harness import (Suite, check, expect_error, expect_ok,  # noqa: E402
                     run_cli)

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

ST = {"bfloat16": "BF16", "float16": "F16", "float32": "F32",
      "float8_e4m3fn": "F8_E4M3", "uint8": "U8"}
FLOATS = ("BF16", "F16", "F32")
BLOCK = (8, 8)

# The DeepSeek-V3 / Qwen3-FP8 rule (shared/reference/fp8-conversion.md):
# the decoder layers' 2-D attention and MLP projections, routed and
# shared experts alike, the MTP layer's too; not embeddings, lm_head,
# norms, biases, the router, the correction bias, eh_proj, shared_head.
QUANTIZED = re.compile(
    r"^model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj|"
    r"q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)|"
    r"mlp\.(experts\.\d+\.|shared_experts\.)?(gate_proj|up_proj|down_proj))"
    r"\.weight$")

# Variants: llama with 36 columns (head_dim 8), so every quantized weight
# has partial edge blocks (36 = 4 x 8 + 4) and TP 2 still splits at
# multiples of 8; qwen3 (float32) for the float32 casts.
CONFIGS = dict(
    hfc.CONFIGS,
    llama36=dict(hfc.CONFIGS["llama"], hidden_size=36, head_dim=8),
)


def run(*args, timeout=120):
    return run_cli(RESHARD, *args, timeout=timeout)


ok = expect_ok
fails = expect_error


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def no_files(d):
    check(not os.path.exists(d) or (os.path.isdir(d) and not os.listdir(d)),
          "%s: output written on a refusal: %s" % (
              d, os.listdir(d) if os.path.isdir(d) else d))


# ------------------------------------------------------------ tensor data

def _rng(name, salt=0):
    return np.random.default_rng(zlib.crc32(name.encode()) + salt)


def _to_bytes(x, st):
    return ref.from_f32(np.ascontiguousarray(x, dtype=np.float32).ravel(),
                        {"BF16": "bfloat16", "F16": "float16",
                         "F32": "float32"}[st])


def plant_weight(name, shape, block=BLOCK):
    """float32 [N, K] of a weight to quantize (the planted values are
    exact in bfloat16; the random ones round when stored):
    per-block magnitudes from 1e-6 to 1e3 (some blocks below the
    1e-4 amax floor); block [0, 0] all zero with a -0.0; block [0, 1] the
    block maximum M with M * 0.975 and M * 440 / 448 (both round to 448),
    -M, tiny negatives; block [1, 0] two NaNs (one negative); block [1, 1]
    M = 448 * 2^k so x * factor is exact and lands on ties of e4m3 (432,
    1.0625, 1.1875, 3 * 2^-10, 2^-10)."""
    rng = _rng(name)
    N, K = shape
    bn, bk = block
    nb, kb = -(-N // bn), -(-K // bk)
    mag = 10.0 ** rng.uniform(-6, 3, (nb, kb))
    x = rng.standard_normal((N, K)) * np.repeat(np.repeat(
        mag, bn, 0), bk, 1)[:N, :K]
    x = x.astype(np.float32)
    x[0:bn, 0:bk] = 0.0
    x[0, 0] = -0.0
    if K > bk:
        M = np.float32(3.0)
        b = x[0:bn, bk:2 * bk]
        b[:] = rng.uniform(-2.5, 2.5, b.shape)
        b[0, 0] = M
        b.flat[1] = M * np.float32(0.975)
        b.flat[2] = M * np.float32(440.0 / 448.0)
        b.flat[3] = -M
        b.flat[4] = -M * np.float32(1e-6)
        b.flat[5] = np.float32(-1e-38)
    if N > bn:
        x[bn, 0] = np.nan
        x[bn + 1, 1] = -np.nan    # a payload is set in tensor_bytes
    if N > bn and K > bk:
        t = np.float32(2.0 ** -3)
        b = x[bn:2 * bn, bk:2 * bk]
        b[:] = rng.uniform(-0.4, 0.4, b.shape) * t * 448
        vals = [448.0, 432.0, -432.0, 1.0625, 1.1875, 3 * 2.0 ** -10,
                -2.0 ** -10, 2.0 ** -10, 416.0, 2.0 ** -9]
        for i, v in enumerate(vals[:b.size]):
            b.flat[i] = np.float32(v) * t
    return x


def tensor_bytes(name, st, shape, quantize=False, f32_bits=False):
    """Bytes of one tensor: a weight to quantize (plant_weight), float16 /
    float32 of random bit patterns (every class of value), other floats
    normal of varied magnitude with a few specials, FP8 random codes,
    block scales positive of varied magnitude."""
    rng = _rng(name, 1)
    n = int(np.prod(shape, dtype=np.int64))
    if st == "F8_E4M3":
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if name.endswith("weight_scale_inv"):
        s = (10.0 ** rng.uniform(-6, 1, n)).astype(np.float32)
        if n > 2:
            s[1] = 0.0          # a zero scale: codes times 0
            s[2] = 1e37         # 448 * 1e37 overflows float32 to inf
        return _to_bytes(s, st)
    if quantize:
        raw = bytearray(_to_bytes(plant_weight(name, shape), st))
        if shape[0] > BLOCK[0] + 1:
            # The negative NaN with a payload.
            w = {"BF16": 2, "F16": 2, "F32": 4}[st]
            code = {"BF16": 0xFFC1, "F16": 0xFE01, "F32": 0xFFC12345}[st]
            at = w * ((BLOCK[0] + 1) * shape[1] + 1)
            raw[at:at + w] = code.to_bytes(w, "little")
        return bytes(raw)
    if st == "F16" or (st == "F32" and f32_bits):
        w = 2 if st == "F16" else 4
        raw = bytearray(rng.integers(0, 256, n * w, dtype=np.uint8)
                        .tobytes())
        if st == "F16" and n >= 8:
            # NaN with payload, signalling NaN, infinities, a subnormal,
            # a bfloat16 tie (1 + 2^-8), the largest finite.
            for i, code in enumerate([0x7E55, 0xFC01, 0x7C00, 0xFC00,
                                      0x0001, 0x3C04, 0x3C0C, 0x7BFF]):
                raw[2 * i:2 * i + 2] = code.to_bytes(2, "little")
        if st == "F32" and n >= 8:
            # float32 -> float16 overflow and ties, NaN payloads.
            for i, code in enumerate([0x477FF000, 0x477FEFFF, 0xC7800000,
                                      0x7F800001, 0xFFC12345, 0x3F801000,
                                      0x33000000, 0x3F808000]):
                raw[4 * i:4 * i + 4] = code.to_bytes(4, "little")
        return bytes(raw)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 2, n)).astype(
        np.float32)
    if n >= 4:
        x[:4] = [0.0, -0.0, np.nan, np.inf]
    return _to_bytes(x, st)


def write_ckpt(d, cfg, files=3, f32_bits=False, edit=None):
    """Writes a checkpoint of cfg (hf_checkpoints' names, dtypes, shapes;
    this test's values); returns {name: (dtype, shape, bytes)}. edit(name,
    dtype, shape, data) may replace a tensor's bytes."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    data = {}
    for name, st, shape in hfc.model_tensors(cfg):
        q = st in FLOATS and len(shape) == 2 and bool(QUANTIZED.match(name))
        b = tensor_bytes(name, st, shape, quantize=q, f32_bits=f32_bits)
        if edit:
            b = edit(name, st, shape, b)
        data[name] = (st, shape, b)
    names = list(data)
    per = -(-len(names) // files)
    weight_map = {}
    for k in range(files):
        chunk = names[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, files)
        with open(os.path.join(d, fname), "wb") as f:
            f.write(hfc.encode_file([(n, *data[n]) for n in chunk]))
        weight_map.update({n: fname for n in chunk})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(
            len(v[2]) for v in data.values())}, "weight_map": weight_map}, f)
    return data


CACHE = {}


def checkpoint(key, **kw):
    """(directory, {name: (dtype, shape, bytes)}) of CONFIGS[key]."""
    if key not in CACHE:
        d = path("ckpt-" + key)
        CACHE[key] = (d, write_ckpt(d, CONFIGS[key], **kw))
    return CACHE[key]


# --------------------------------------------------------------- expected

def target_tensors(placement):
    p = json.load(open(placement))
    return {t["tensor_id"]: (ST[t["dtype"]], t["global_shape"])
            for t in p["tensors"]}


def check_quantized_layout(source, target, block):
    """The target is the FP8 form of the source: the rule's float 2-D
    weights F8_E4M3 with F32 scales [ceil(N/bn), ceil(K/bk)], all else as
    in the source."""
    want = {}
    for name, (st, shape, _) in source.items():
        if st in FLOATS and len(shape) == 2 and QUANTIZED.match(name):
            want[name] = ("F8_E4M3", shape)
            want[name[:-len("weight")] + "weight_scale_inv"] = (
                "F32", ref.scale_shape(shape, block))
        else:
            want[name] = (st, shape)
    extra, missing = set(target) - set(want), set(want) - set(target)
    check(not extra and not missing, "target tensors: extra %s, missing %s"
          % (sorted(extra)[:5], sorted(missing)[:5]))
    bad = [(n, target[n], want[n]) for n in sorted(want)
           if tuple(target[n][:1]) + (list(target[n][1]),) !=
           tuple(want[n][:1]) + (list(want[n][1]),)]
    check(not bad, "target dtypes/shapes differ from the rule: %s" % bad[:5])
    check(any(v[0] == "F8_E4M3" for v in want.values()), "nothing quantized")


def check_dtype_layout(source, target, st, model=None):
    """Every float tensor in st, the scale tensors dropped; with a 16-bit
    `model` dtype (torch_dtype), F32 tensors stay F32 (DeepSeek's
    correction bias: --dtype keeps what the checkpoint stores wider)."""
    want = {}
    for name, (sdt, shape, _) in source.items():
        if name.endswith("weight_scale_inv") and \
                name[:-len("_scale_inv")] in source and \
                source[name[:-len("_scale_inv")]][0] == "F8_E4M3":
            continue
        if sdt == "F32" and model in ("BF16", "F16"):
            want[name] = (sdt, shape)
            continue
        want[name] = (st if sdt in FLOATS + ("F8_E4M3",) else sdt, shape)
    check(target == {n: (d, list(s)) for n, (d, s) in want.items()},
          "target differs from the --dtype rule: extra %s, missing %s, "
          "changed %s" % (sorted(set(target) - set(want))[:4],
                          sorted(set(want) - set(target))[:4],
                          [(n, target[n], want[n]) for n in sorted(want)
                           if n in target and target[n] !=
                           (want[n][0], list(want[n][1]))][:4]))


NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def expected_output(source, target, block):
    """{name: (dtype, shape, bytes)} the converted checkpoint must hold."""
    out = {}
    for name, (st, shape) in target.items():
        if name not in source:
            w = name[:-len("_scale_inv")]
            check(name.endswith("weight_scale_inv") and w in source and
                  target[w][0] == "F8_E4M3", "target tensor %s is neither "
                  "in the checkpoint nor a produced scale" % name)
            sdt, wshape, data = source[w]
            out[name] = (st, shape, ref.quantize(data, wshape, NAMES[sdt],
                                                 block)[1])
            continue
        sdt, sshape, data = source[name]
        check(list(sshape) == list(shape), name)
        if sdt == st:
            want = data
        elif st == "F8_E4M3":
            want = ref.quantize(data, shape, NAMES[sdt], block)[0]
        elif sdt == "F8_E4M3":
            scale = source[name[:-len("weight")] + "weight_scale_inv"]
            check(scale[0] in ("F32", "BF16", "F16"),
                  "%s: scale is %s" % (name, scale[0]))
            # 16-bit scales widen exactly to float32.
            scales = (scale[2] if scale[0] == "F32" else
                      ref.to_f32(scale[2], NAMES[scale[0]]).tobytes())
            want = ref.dequantize(data, scales, shape, block, NAMES[st])
        else:
            want = ref.cast(data, shape, NAMES[sdt], NAMES[st])
        out[name] = (st, list(shape), want)
    return out


def describe_diff(name, dtype, shape, got, want):
    w = {"F8_E4M3": 1, "BF16": 2, "F16": 2, "F32": 4}[dtype]
    g = np.frombuffer(got, dtype={1: "u1", 2: "<u2", 4: "<u4"}[w])
    e = np.frombuffer(want, dtype={1: "u1", 2: "<u2", 4: "<u4"}[w])
    if g.size != e.size:
        return "%s: %d bytes, expected %d" % (name, len(got), len(want))
    bad = np.flatnonzero(g != e)
    idx = [tuple(int(v) for v in np.unravel_index(i, shape))
           for i in bad[:4]]
    return "%s %s: %d of %d elements differ, first at %s: got %s expected "\
        "%s" % (name, dtype, bad.size, g.size, idx,
                [hex(int(v)) for v in g[bad[:4]]],
                [hex(int(v)) for v in e[bad[:4]]])


def same_checkpoint(out, want, what):
    got = hfc.read_checkpoint(out)
    check(set(got) == set(want), "%s: output tensors: extra %s, missing %s"
          % (what, sorted(set(got) - set(want))[:4],
             sorted(set(want) - set(got))[:4]))
    diffs = []
    for name in sorted(want):
        g, w = got[name], want[name]
        check(g[0] == w[0] and list(g[1]) == list(w[1]),
              "%s %s: %s %s, expected %s %s" % (what, name, g[0], g[1],
                                                w[0], w[1]))
        if g[2] != w[2]:
            diffs.append(describe_diff(name, w[0], w[1], g[2], w[2]))
    check(not diffs, "%s: %d tensors differ from the reference:\n  %s" %
          (what, len(diffs), "\n  ".join(diffs[:8])))
    return got


def layout(key, grid, name, *extra):
    d = checkpoint(key)[0]
    tp, pp, ep = grid
    out = path(name + ".json")
    r = run("hf", "layout", os.path.join(d, "config.json"), "--checkpoint",
            d, "--tp", tp, "--pp", pp, "--ep", ep, *extra, "-o", out)
    return r, out


def convert(key, grid, name, layout_args, reshard_args, check_layout):
    d, source = checkpoint(key)
    r, placement = layout(key, grid, name, *layout_args)
    ok(r, "hf layout %s %s %s" % (key, grid, layout_args))
    v = json.loads(ok(run("validate", placement, "--json"),
                      "validate").stdout)
    check(v["valid"], "%s: placement invalid" % name)
    target = target_tensors(placement)
    check_layout(source, target)
    out = path(name + "-out")
    rep = json.loads(ok(run("hf", "reshard", d, placement, out,
                            *reshard_args, "--json"),
                        "hf reshard %s" % name).stdout)
    block = (128, 128)
    if "--block" in reshard_args:
        bn, bk = reshard_args[reshard_args.index("--block") + 1].split("x")
        block = (int(bn), int(bk))
    want = expected_output(source, target, block)
    same_checkpoint(out, want, name)
    total = sum(len(t[2]) for t in want.values())
    check(rep["tensors"] == len(want), "tensors %s != %d" %
          (rep["tensors"], len(want)))
    check(rep["bytes_written"] == total, "bytes_written %s != %d" %
          (rep["bytes_written"], total))
    return source, target, want


# ------------------------------------------------------ the conversions

@SUITE.test
def bf16_to_fp8_tp2():
    # Llama with 36 columns: edge blocks of 4 columns (and 4 rows in
    # o_proj / down_proj), every planted case.
    convert("llama36", (2, 1, 1), "llama36-fp8",
            ["--quantize", "fp8", "--block", "8x8"],
            ["--convert", "--block", "8x8"],
            lambda s, t: check_quantized_layout(s, t, BLOCK))


@SUITE.test
def bf16_to_fp8_tp2_ep2_moe():
    source, target, want = convert(
        "qwen3_moe", (2, 1, 2), "moe-fp8",
        ["--quantize", "fp8", "--block", "8x8"],
        ["--convert", "--block", "8x8"],
        lambda s, t: check_quantized_layout(s, t, BLOCK))
    # The planted cases reached the output: an all-zero block's scale,
    # 448 codes, tiny negatives, NaN codes.
    w = "model.layers.1.mlp.experts.3.down_proj.weight"
    q = np.frombuffer(want[w][2], np.uint8).reshape(want[w][1])
    s = np.frombuffer(want[w[:-6] + "weight_scale_inv"][2], "<f4")
    check(s[0] == np.float32(1e-4) / np.float32(448), s[:2])
    check(list(q[0, 8:14]) == [0x7E, 0x7E, 0x7E, 0xFE, 0x80, 0x80]
          and q[8, 0] == 0x7F and q[9, 1] == 0xFF and (q[:8, :8] == 0).sum()
          == 63 and q[0, 0] == 0x80, q[:10, :14])


@SUITE.test
def fp16_to_bf16_tp2_pp2():
    # Random float16 bit patterns: NaN payloads, signalling NaN,
    # infinities, subnormals, ties of the bfloat16 rounding.
    convert("qwen2", (2, 2, 1), "qwen2-bf16", ["--dtype", "bfloat16"],
            ["--convert"], lambda s, t: check_dtype_layout(s, t, "BF16"))


@SUITE.test
def fp8_to_bf16_tp2_ep4_deepseek():
    # Random FP8 codes (NaN codes included) times positive scales of
    # varied magnitude, a zero scale, one overflowing to infinity; the
    # float32 correction bias kept float32 (torch_dtype is bfloat16).
    convert("deepseek_v3", (2, 1, 4), "dsv3-bf16", ["--dtype", "bfloat16"],
            ["--convert", "--block", "8x8"],
            lambda s, t: check_dtype_layout(s, t, "BF16", model="BF16"))


@SUITE.test
def fp8_to_fp16_deepseek():
    convert("deepseek_v3", (2, 1, 2), "dsv3-f16", ["--dtype", "float16"],
            ["--convert", "--block", "8x8"],
            lambda s, t: check_dtype_layout(s, t, "F16", model="BF16"))


@SUITE.test
def fp8_to_bf16_tp_shards_splitting_blocks():
    """Finding (issue 58): dequantizing into TP shards that split FP8
    blocks was refused, although only the quantizing side needs whole
    blocks. DeepSeek-V3's 8x8 blocks at TP 4: q_b_proj's 48 rows are 12
    per rank, the experts' 16 rows 4 per rank. Every element must take the
    scale of its own block: `hf reshard`, `engine load` and the live and
    local self-tests, each against an independent statement."""
    import engine_reference as er
    source, target, want = convert(
        "deepseek_v3", (4, 1, 1), "dsv3-bf16-tp4", ["--dtype", "bfloat16"],
        ["--convert", "--block", "8x8"],
        lambda s, t: check_dtype_layout(s, t, "BF16", model="BF16"))
    with open(path("dsv3-bf16-tp4.json")) as f:
        placement = json.load(f)
    rows = sorted(fr["global_offset"][0] for part in placement["parts"]
                  for fr in part["fragments"] if fr["tensor_id"] ==
                  "model.layers.0.self_attn.q_b_proj.weight")
    check(rows == [0, 12, 24, 36], "q_b_proj rows start at %s" % rows)
    # vLLM's bfloat16 form at TP 4, file by file against the reference.
    d = checkpoint("deepseek_v3")[0]
    out = path("dsv3-vllm-bf16-tp4")
    ok(run("engine", "load", d, "--engine", "vllm", "--tp", 4, "--dtype",
           "bfloat16", "--block", "8x8", "--convert", "-o", out),
       "engine load --dtype bfloat16 at TP 4")
    same_engine_files(out, er.expected(want, er.DEEPSEEK_V3_BF16, "vllm",
                                       tp=4), "vllm bf16 tp4")
    # The same conversion in one process and live between processes,
    # every target byte checked against the pattern converted whole.
    r, whole = layout("deepseek_v3", (1, 1, 1), "dsv3-fp8-tp1")
    ok(r, "hf layout")
    for extra in ([], ["--transport", "ucx", "--procs", 3, "--updates", 2]):
        rep = json.loads(ok(run("selftest", whole, path("dsv3-bf16-tp4.json"),
                                "--convert", "--block", "8x8", "--json",
                                *extra, timeout=300),
                            "selftest --convert %s" % extra).stdout)
        check(rep["verified"] and rep["mismatch"] == "", rep)


@SUITE.test
def f32_to_f16_and_bf16_tp2():
    # float32 random bit patterns: float16 overflow to infinity, ties,
    # NaN payloads.
    checkpoint("qwen3", f32_bits=True)
    convert("qwen3", (2, 1, 1), "qwen3-f16", ["--dtype", "float16"],
            ["--convert"], lambda s, t: check_dtype_layout(s, t, "F16"))
    convert("qwen3", (2, 1, 1), "qwen3-bf16", ["--dtype", "bfloat16"],
            ["--convert"], lambda s, t: check_dtype_layout(s, t, "BF16"))


@SUITE.test
def f32_to_fp8_tp1_default_block():
    # One partial 128x128 block per weight (the default block): the
    # planted float32 weights quantized as one block each.
    checkpoint("qwen3", f32_bits=True)
    convert("qwen3", (1, 1, 1), "qwen3-fp8-128", ["--quantize", "fp8"],
            ["--convert"],
            lambda s, t: check_quantized_layout(s, t, (128, 128)))


@SUITE.test
def quantize_an_infinite_block():
    # bfloat16 infinity in an 8x8 block: amax infinite, the block's finite
    # elements signed zeros, its scale infinite, the infinite element
    # inf * 0 = NaN (the machine's NaN: x86 gives the negative one).
    w = "model.layers.0.self_attn.q_proj.weight"

    def edit(name, st, shape, data):
        if name != w:
            return data
        b = bytearray(data)
        k = shape[1]
        b[2 * (8 * k + 8):2 * (8 * k + 8) + 2] = (0x7F80).to_bytes(2,
                                                                   "little")
        b[2 * (9 * k + 9):2 * (9 * k + 9) + 2] = (0xFF80).to_bytes(2,
                                                                   "little")
        return bytes(b)

    CACHE["llama_inf"] = (path("ckpt-llama_inf"),
                          write_ckpt(path("ckpt-llama_inf"),
                                     CONFIGS["llama36"], edit=edit))
    CONFIGS["llama_inf"] = CONFIGS["llama36"]
    source, target, want = convert(
        "llama_inf", (1, 1, 1), "llama-inf-fp8",
        ["--quantize", "fp8", "--block", "8x8"],
        ["--convert", "--block", "8x8"],
        lambda s, t: check_quantized_layout(s, t, BLOCK))
    s = np.frombuffer(want[w[:-6] + "weight_scale_inv"][2], "<f4")
    check(np.isinf(s[1 * 5 + 1]), s)


# ------------------------------------------------------------ refusals

# ------------------------------------------- engine layouts in another form

def engine_files(out):
    return {f[:-len(".safetensors")]: hfc.read_file(os.path.join(out, f))
            for f in os.listdir(out)}


def same_engine_files(out, want, what):
    got = engine_files(out)
    check(sorted(got) == sorted(want), "%s: participants %s" % (what,
                                                               sorted(got)))
    for pid, params in want.items():
        check(sorted(got[pid]) == sorted(params), "%s %s: names" % (what, pid))
        for name, (st, shape, data) in params.items():
            g = got[pid][name]
            check((g[0], list(g[1])) == (st, list(shape)) and g[2] == data,
                  "%s %s %s: %s %s differs" % (what, pid, name, g[0], g[1]))


@SUITE.test
def vllm_fp8_engine_from_a_bf16_checkpoint():
    # The vLLM FP8 engine of a BF16 model: the canonical tensors quantized
    # by the reference, then laid out by the independent vLLM statement.
    import engine_reference as er
    d, source = checkpoint("qwen3_moe")
    r, placement = layout("qwen3_moe", (2, 1, 1), "moe-fp8-form",
                          "--quantize", "fp8", "--block", "8x8")
    ok(r, "hf layout")
    canonical = expected_output(source, target_tensors(placement), BLOCK)
    cfg = dict(CONFIGS["qwen3_moe"], quantization_config={
        "quant_method": "fp8", "weight_block_size": [8, 8]})
    want = er.expected(canonical, cfg, "vllm", tp=2)
    out = path("moe-vllm-fp8")
    ok(run("engine", "load", d, "--engine", "vllm", "--tp", 2, "--quantize",
           "fp8", "--block", "8x8", "--convert", "-o", out),
       "engine load --quantize fp8")
    same_engine_files(out, want, "vllm fp8")
    fails(run("engine", "load", d, "--engine", "vllm", "--tp", 2,
              "--quantize", "fp8", "--block", "8x8", "-o", path("nope")),
          "tensor model.layers.0.mlp.down_proj.weight is bfloat16 in the "
          "checkpoint but float8_e4m3fn in the target placement: converting "
          "it needs CheckpointLoadOptions::convert (--convert, convert=True)")


@SUITE.test
def engine_reshard_converts_on_every_path():
    # A Megatron BF16 trainer into the vLLM FP8 engine: in this process,
    # between two processes (FP8 quantized at the source) and through a
    # store (quantized before the upload), each byte for byte what engine
    # load of the FP8 form gives (checked against the references above).
    d, _ = checkpoint("qwen3_moe")
    cfg = os.path.join(d, "config.json")
    src, want = path("eng-megatron-bf16"), path("eng-vllm-fp8")
    ok(run("engine", "load", d, "--engine", "megatron", "--tp", 2,
           "--make-vocab-size-divisible-by", 16, "-o", src),
       "engine load megatron")
    ok(run("engine", "load", d, "--engine", "vllm", "--tp", 2, "--quantize",
           "fp8", "--block", "8x8", "--convert", "-o", want),
       "engine load vllm fp8")
    wanted = engine_files(want)
    args = ("--config", cfg, "--from", "megatron", "--from-tp", 2,
            "--from-make-vocab-size-divisible-by", 16, "--to",
            "vllm", "--to-tp", 2, "--to-quantize", "fp8", "--block", "8x8",
            "--json")
    for via in ("local", "ucx", "fs://" + path("eng-store")):
        out = path("eng-out-" + via[:3])
        rep = json.loads(ok(run("engine", "reshard", src, out, *args,
                                "--convert", "--via", via),
                            "engine reshard --convert --via " + via).stdout)
        check(rep["via"] == via, "via %r" % rep["via"])
        same_engine_files(out, wanted, "engine reshard --via " + via)
    for via in ("local", "ucx", "fs://" + path("eng-store")):
        fails(run("engine", "reshard", src, path("eng-refused"), *args,
                  "--via", via),
              "tensor descriptor mismatch: model.layers.0.mlp.down_proj."
              "weight: dtype bfloat16 (source) vs float8_e4m3fn (target)")
        no_files(path("eng-refused"))


@SUITE.test
def megatron_bf16_trainer_from_an_fp8_checkpoint():
    # Megatron holds the dequantized DeepSeek-V3: every float tensor in
    # bfloat16 (FP8 weights dequantized, the F32 bias cast), no scales.
    import engine_reference as er
    d, source = checkpoint("deepseek_v3")
    r, placement = layout("deepseek_v3", (1, 1, 1), "dsv3-bf16-form",
                          "--dtype", "bfloat16")
    ok(r, "hf layout")
    canonical = expected_output(source, target_tensors(placement), BLOCK)
    want = er.expected(canonical, er.DEEPSEEK_V3_BF16, "megatron", tp=2,
                       pp=3, ep=2, vocab_multiple=8)
    out = path("dsv3-megatron-bf16")
    ok(run("engine", "load", d, "--engine", "megatron", "--tp", 2, "--pp", 3,
           "--ep", 2, "--make-vocab-size-divisible-by", 8, "--dtype",
           "bfloat16", "--block", "8x8", "--convert", "-o", out),
       "engine load --dtype bfloat16")
    same_engine_files(out, want, "megatron bf16")


@SUITE.test
def refused_without_convert():
    d, _ = checkpoint("qwen3_moe")
    r, placement = layout("qwen3_moe", (2, 1, 2), "moe-noconv", "--quantize",
                          "fp8", "--block", "8x8")
    ok(r, "hf layout")
    out = path("moe-noconv-out")
    # The first tensor (in the target's order) whose dtype differs.
    source = checkpoint("qwen3_moe")[1]
    first = [n for n, t in target_tensors(placement).items()
             if n in source and source[n][0] != t[0]][0]
    check(first == "model.layers.0.mlp.down_proj.weight", first)
    fails(run("hf", "reshard", d, placement, out),
          "tensor model.layers.0.mlp.down_proj.weight is bfloat16 in the "
          "checkpoint but float8_e4m3fn in the target placement: converting "
          "it needs CheckpointLoadOptions::convert (--convert, convert=True)")
    no_files(out)
    # --block without --convert.
    fails(run("hf", "reshard", d, placement, out, "--block", "8x8"),
          "tensor model.layers.0.mlp.down_proj.weight is bfloat16 in the "
          "checkpoint but float8_e4m3fn in the target placement: converting "
          "it needs CheckpointLoadOptions::convert (--convert, convert=True)")
    no_files(out)
    d2, _ = checkpoint("qwen2")
    r, placement = layout("qwen2", (2, 2, 1), "qwen2-noconv", "--dtype",
                          "bfloat16")
    ok(r, "hf layout")
    first = sorted(target_tensors(placement))[0]
    fails(run("hf", "reshard", d2, placement, path("qwen2-noconv-out")),
          "tensor %s is float16 in the checkpoint but bfloat16 in the target "
          "placement: converting it needs CheckpointLoadOptions::convert "
          "(--convert, convert=True)" % first)
    no_files(path("qwen2-noconv-out"))


@SUITE.test
def engine_load_refusals_create_no_directory():
    """Finding (issue 58): `engine load` created OUTDIR before its
    conversion checks, so these refusals left an empty directory although
    nothing may be created before every check passes."""
    dsv3 = checkpoint("deepseek_v3")[0]
    # DeepSeek-V3 without one weight's scale: nothing to dequantize with.
    cfg = CONFIGS["deepseek_v3"]
    lost = "model.layers.0.self_attn.q_a_proj.weight_scale_inv"
    unscaled = path("ckpt-dsv3-unscaled")
    hfc.write_checkpoint(unscaled, cfg, files=2, tensors=[
        t for t in hfc.model_tensors(cfg) if t[0] != lost])
    cases = [
        (checkpoint("qwen3_moe")[0], ["--quantize", "fp8", "--block", "8x8"],
         "tensor model.layers.0.mlp.down_proj.weight is bfloat16 in the "
         "checkpoint but float8_e4m3fn in the target placement: converting "
         "it needs CheckpointLoadOptions::convert (--convert, convert=True)"),
        (dsv3, ["--dtype", "bfloat16"],
         "tensor model.layers.0.mlp.down_proj.weight is float8_e4m3fn in the "
         "checkpoint but bfloat16 in the target placement: converting it "
         "needs CheckpointLoadOptions::convert (--convert, convert=True)"),
        (checkpoint("qwen2")[0], ["--dtype", "bfloat16"],
         "tensor model.embed_tokens.weight is float16 in the checkpoint but "
         "bfloat16 in the target placement: converting it needs "
         "CheckpointLoadOptions::convert (--convert, convert=True)"),
        (dsv3, ["--dtype", "bfloat16", "--convert"],
         "cannot convert tensor model.layers.0.mlp.down_proj.weight: its "
         "scale tensor model.layers.0.mlp.down_proj.weight_scale_inv "
         "(source) is float32 [4, 4] but blocks of 128x128 make float32 "
         "[1, 1]"),
        (unscaled, ["--dtype", "bfloat16", "--block", "8x8", "--convert"],
         "cannot convert tensor model.layers.0.self_attn.q_a_proj.weight: "
         "the source lacks its scale tensor " + lost),
    ]
    for k, (d, extra, message) in enumerate(cases):
        out = path("load-refused-%d" % k)
        fails(run("engine", "load", d, "--engine", "vllm", "--tp", 2,
                  *extra, "-o", out), message)
        check(not os.path.exists(out), "%s created by a refusal (%s)" %
              (out, extra))


def _file_of(d, name):
    return json.load(open(os.path.join(
        d, "model.safetensors.index.json")))["weight_map"][name]


def _shape(d, name):
    return "[%s]" % ", ".join(str(v) for v in checkpoint_shape(d, name))


def checkpoint_shape(d, name):
    for key, (dd, src) in CACHE.items():
        if dd == d:
            return src[name][1]
    raise KeyError(d)


@SUITE.test
def refused_block_mismatch():
    d, _ = checkpoint("qwen3_moe")
    r, placement = layout("qwen3_moe", (2, 1, 2), "moe-blk", "--quantize",
                          "fp8", "--block", "8x8")
    ok(r, "hf layout")
    out = path("moe-blk-out")
    # The default block (128x128) against the layout's 8x8 scales.
    fails(run("hf", "reshard", d, placement, out, "--convert"),
          "cannot convert tensor model.layers.0.mlp.down_proj.weight: its "
          "scale tensor model.layers.0.mlp.down_proj.weight_scale_inv "
          "(target) is float32 [4, 6] but blocks of 128x128 make float32 "
          "[1, 1]")
    no_files(out)
    fails(run("hf", "reshard", d, placement, out, "--convert", "--block",
              "16x8"),
          "cannot convert tensor model.layers.0.mlp.down_proj.weight: its "
          "scale tensor model.layers.0.mlp.down_proj.weight_scale_inv "
          "(target) is float32 [4, 6] but blocks of 16x8 make float32 "
          "[2, 6]")
    no_files(out)
    # Dequantizing: the source's 8x8 scales against 16x16 blocks.
    d3, _ = checkpoint("deepseek_v3")
    r, placement = layout("deepseek_v3", (2, 1, 4), "dsv3-blk", "--dtype",
                          "bfloat16")
    ok(r, "hf layout")
    r = run("hf", "reshard", d3, placement, path("dsv3-blk-out"),
            "--convert", "--block", "16x16")
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and
          r.stderr.startswith("reshard: error: cannot convert tensor ") and
          "(source)" in r.stderr and "16x16" in r.stderr,
          "dequantize block mismatch: %d %r" % (r.returncode, r.stderr))
    no_files(path("dsv3-blk-out"))


@SUITE.test
def refused_block_split_between_fragments():
    # The default 128x128 block at TP 2: every quantized weight's one
    # block would be split between the two ranks; the layout refuses it
    # (so `hf reshard` never sees such a target).
    d, _ = checkpoint("qwen3_moe")
    r, placement = layout("qwen3_moe", (2, 1, 1), "moe-split", "--quantize",
                          "fp8")
    fails(r, "%s: TP 2 splits dimension 1 (48) of model.layers.0.mlp."
          "down_proj.weight into shards that are not whole FP8 blocks of "
          "128 (its scale model.layers.0.mlp.down_proj.weight_scale_inv)" %
          os.path.join(d, "config.json"))
    check(not os.path.exists(placement), "placement written")
    r, placement = layout("qwen3_moe", (2, 1, 1), "moe-split", "--quantize",
                          "fp8", "--block", "8x5")
    fails(r, "%s: TP 2 splits dimension 1 (48) of model.layers.0.mlp."
          "down_proj.weight into shards that are not whole FP8 blocks of "
          "5 (its scale model.layers.0.mlp.down_proj.weight_scale_inv)" %
          os.path.join(d, "config.json"))
    check(not os.path.exists(placement), "placement written")


def usage_error(r, message):
    """A usage error: non-zero exit, the one line `reshard: error:
    MESSAGE (run with --help for usage)`."""
    check(r.returncode != 0, "accepted: %r" % r.stdout[:200])
    err = r.stderr.strip()
    want = "reshard: error: %s (run with --help for usage)" % message
    check(err == want, "stderr is\n  %r\nnot\n  %r" % (err, want))


@SUITE.test
def refused_bad_options():
    d, _ = checkpoint("qwen3_moe")
    cfg = os.path.join(d, "config.json")
    out = path("bad.json")
    for block in ("8by8", "0x8", "8x0", "8", "x8", "-8x8", "8x8x8", "",
                  "8x8junk", "99999999999x8"):
        r = run("hf", "layout", cfg, "--checkpoint", d, "--tp", 2,
                "--quantize", "fp8", "--block", block, "-o", out)
        usage_error(r, "--block: must be ROWSxCOLS with positive integers "
                    "(e.g. 128x128), not '%s'" % block)
        check(not os.path.exists(out), "placement written")
    r, placement = layout("qwen3_moe", (2, 1, 2), "moe-opt", "--quantize",
                          "fp8", "--block", "8x8")
    ok(r, "hf layout")
    for block in ("8by8", "0x8", "8x0", ""):
        o = path("opt-out")
        r = run("hf", "reshard", d, placement, o, "--convert", "--block",
                block)
        usage_error(r, "--block: must be ROWSxCOLS with positive integers "
                    "(e.g. 128x128), not '%s'" % block)
        no_files(o)
    for args, message in (
            (["--quantize", "int4"], "--quantize: int4 not in {fp8}"),
            (["--quantize", "FP8"], "--quantize: FP8 not in {fp8}"),
            (["--dtype", "int8"],
             "--dtype: int8 not in {float32,bfloat16,float16}"),
            (["--dtype", "float64"],
             "--dtype: float64 not in {float32,bfloat16,float16}"),
            (["--dtype", "float8_e4m3fn"],
             "--dtype: float8_e4m3fn not in {float32,bfloat16,float16}"),
            (["--quantize", "fp8", "--dtype", "bfloat16"],
             "--quantize excludes --dtype"),
            (["--dtype", "bfloat16", "--quantize", "fp8"],
             "--quantize excludes --dtype")):
        r = run("hf", "layout", cfg, "--checkpoint", d, *args, "-o", out)
        usage_error(r, message)
        check(not os.path.exists(out), "placement written")
    # An FP8 checkpoint quantized again with other blocks.
    d3, _ = checkpoint("deepseek_v3")
    for block in ("16x16", None):
        r = run("hf", "layout", os.path.join(d3, "config.json"),
                "--checkpoint", d3, "--tp", 2, "--quantize", "fp8",
                *(["--block", block] if block else []), "-o", out)
        fails(r, "%s: the checkpoint is block-FP8 with 8x8 blocks, not "
              "--block %s" % (os.path.join(d3, "config.json"),
                              block or "128x128"))
        check(not os.path.exists(out), "placement written")


@SUITE.test
def bf16_scales_dequantize():
    # Qwen3-FP8's BF16 block scales widen exactly to float32, then
    # dequantize like DeepSeek's F32 ones.
    d = path("ckpt-qwen3_moe_fp8")
    CACHE["qwen3_moe_fp8"] = (d, write_ckpt(d, CONFIGS["qwen3_moe_fp8"]))
    convert("qwen3_moe_fp8", (2, 1, 2), "qfp8-bf16", ["--dtype", "bfloat16"],
            ["--convert", "--block", "8x8"],
            lambda s, t: check_dtype_layout(s, t, "BF16"))


@SUITE.test
def no_conversion_is_a_plain_reshard():
    # --convert where nothing differs: the bytes of the checkpoint; so is
    # --quantize fp8 of an FP8 checkpoint with its own blocks, and --dtype
    # of the checkpoint's own dtype.
    for key, grid, args, rargs in (
            ("qwen3_moe", (2, 1, 2), [], ["--convert"]),
            ("deepseek_v3", (2, 1, 2), ["--quantize", "fp8", "--block",
                                        "8x8"], ["--convert", "--block",
                                                 "8x8"]),
            ("deepseek_v3", (2, 1, 2), ["--quantize", "fp8", "--block",
                                        "8x8"], []),
            ("llama36", (2, 1, 1), ["--dtype", "bfloat16"], [])):
        d, source = checkpoint(key)
        name = "plain-%s-%d" % (key, len(args) + 2 * len(rargs))
        r, placement = layout(key, grid, name, *args)
        ok(r, "hf layout %s" % args)
        check(target_tensors(placement) == {
            n: (t[0], list(t[1])) for n, t in source.items()},
            "%s %s: the target differs from the checkpoint" % (key, args))
        out = path(name + "-out")
        ok(run("hf", "reshard", d, placement, out, *rargs), "hf reshard")
        same_checkpoint(out, source, name)


@SUITE.test
def block_without_quantize():
    # --block with neither --quantize nor an FP8 checkpoint is accepted
    # and changes nothing.
    d, _ = checkpoint("qwen2")
    cfg = os.path.join(d, "config.json")
    ok(run("hf", "layout", cfg, "--checkpoint", d, "--tp", 2, "--block",
           "8x8", "-o", path("blk-noq.json")), "hf layout --block")
    ok(run("hf", "layout", cfg, "--checkpoint", d, "--tp", 2, "-o",
           path("blk-none.json")), "hf layout")
    check(open(path("blk-noq.json")).read() ==
          open(path("blk-none.json")).read(), "--block changed the layout")


@SUITE.test
def live_selftest_quantizes_at_the_source():
    # A model whose linear weights dominate, as real ones do: the live
    # BF16 -> FP8 update (2 processes over UCX) carries FP8 and scales,
    # at most 0.55x the bytes of the same update in bfloat16; every target
    # byte checked by the ranks against the pattern converted.
    cfg = dict(hfc.CONFIGS["llama"], hidden_size=256, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=1024, vocab_size=128,
               num_hidden_layers=2)
    c = path("live-config.json")
    with open(c, "w") as f:
        json.dump(cfg, f)
    src, bf16, fp8 = (path("live-%s.json" % n) for n in ("s", "b", "q"))
    ok(run("hf", "layout", c, "--tp", 1, "-o", src), "source layout")
    ok(run("hf", "layout", c, "--tp", 2, "-o", bf16), "bf16 layout")
    ok(run("hf", "layout", c, "--tp", 2, "--quantize", "fp8", "--block",
           "64x64", "-o", fp8), "fp8 layout")
    live = ("--transport", "ucx", "--procs", 2, "--json", "--timeout", 30)
    plain = json.loads(ok(run("selftest", src, bf16, *live),
                          "plain live selftest").stdout)
    check(plain["verified"], "plain run not verified")
    rep = json.loads(ok(run("selftest", src, fp8, *live, "--convert",
                            "--block", "64x64", "--updates", 2),
                        "converting live selftest").stdout)
    check(rep["verified"] and rep["updates"] == 2, "not verified: %s" % rep)
    check(len(rep["wire_bytes"]) == 2, "wire_bytes %s" % rep["wire_bytes"])
    # What crossed is exactly the FP8 target: weights, scales, the rest.
    target = json.load(open(fp8))
    total = sum(f["nbytes"] for part in target["parts"]
                for f in part["fragments"])
    for w in rep["wire_bytes"]:
        check(w == total, "wire_bytes %d != the FP8 target's %d" % (w, total))
        check(w <= 0.55 * plain["wire_bytes"], "wire_bytes %d > 0.55 x %d" %
              (w, plain["wire_bytes"]))
    fails(run("selftest", src, fp8, *live),
          "tensor descriptor mismatch: model.layers.0.mlp.down_proj.weight: "
          "dtype bfloat16 (source) vs float8_e4m3fn (target)")
    # Through a store: the upload quantizes, so the revision holds FP8 and
    # scales in the source's geometry (one whole tensor each at TP 1).
    store = "fs://" + path("live-store")
    rep = json.loads(ok(run("selftest", src, fp8, "--via-store", store,
                            "--convert", "--block", "64x64",
                            "--keep-revision", "--json"),
                        "store selftest --convert").stdout)
    check(rep["verified"], "store selftest not verified: %s" % rep)
    ls = json.loads(ok(run("store", "ls", store, "--json"), "ls").stdout)
    source = json.load(open(src))
    fp8_dtypes = {t["tensor_id"]: t for t in target["tensors"]}
    want = 0
    for t in source["tensors"]:
        n = int(np.prod(t["global_shape"]))
        q = fp8_dtypes[t["tensor_id"]]["dtype"] == "float8_e4m3fn"
        want += n if q else n * t["itemsize"]
        if q:
            scale = t["tensor_id"][:-len("weight")] + "weight_scale_inv"
            want += 4 * int(np.prod(fp8_dtypes[scale]["global_shape"]))
    check(len(ls) == 1 and ls[0]["bytes"] == want,
          "stored %s, the FP8 form of the model is %d bytes" % (ls, want))
    fails(run("selftest", src, fp8, "--block", "64x64"),
          "--block needs --convert")


sys.exit(SUITE.run("reshard-convertcli-", lambda t: TMP.update(dir=t)))
