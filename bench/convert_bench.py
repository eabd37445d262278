#!/usr/bin/env python3
"""Conversions inside a reshard (docs/conversion.md) against the same
reshard without them, and the conversion kernels against memcpy; each
figure a ratio to a baseline measured in the same run.

1. End to end (held to <= 1.5x). A scaled Llama checkpoint (BF16;
   hidden 2048, intermediate 5632, 4 layers, 16 heads / 4 KV heads of
   128, vocabulary 32,000, tied embeddings; 492 MB in 2 files) is
   generated with numpy: finite values, normal(0, 0.02) in bfloat16
   (4,194,304 draws, each tensor repeating them from a random offset).
   Its TP2 layouts come from `reshard hf layout --tp 2` (plain) and the
   same with `--quantize fp8` (the 28 projections, 73% of the bytes, in
   float8_e4m3fn with their float32 weight_scale_inv). Then, after one
   untimed run of each, for ROUNDS interleaved rounds, into fresh output
   directories (the checkpoint read from the page cache):

     baseline  `reshard hf reshard CKPT plain.json OUT` (BF16 -> BF16);
     measured  `reshard hf reshard CKPT fp8.json OUT --convert --block
               128x128` (BF16 -> FP8, quantized inside the load).

   Each timed end to end (the wall clock of the process; output written
   and fsynced), each right after an untimed run of the same command (a
   primer: on this VM the first run after the other command pays for
   fresh pages, several times its time; the primers' walls are reported
   too). The figure is the median of the per-round ratios fp8 wall /
   plain wall, held to <= 1.5x. An informational line gives
   the same ratio of their `load_seconds` (the ranged reads, and for FP8
   the quantization, which runs inside the load). The FP8 warm-up's
   output is the correctness check: two quantized weights and their
   scales equal tests/cli/conversion_reference.py `quantize` of the
   checkpoint's BF16 bytes, byte for byte, and an unquantized tensor its
   input bytes; otherwise exit 1.

2. Throughput per core (informational). `reshard.reshard(...,
   threads=1)` in this process on one [8192, 8192] tensor (one
   participant on each side, numpy buffers allocated and touched once):
   quantize BF16 -> FP8 (128x128 blocks), dequantize FP8 -> BF16 (the
   quantized codes and scales as source), cast BF16 -> F32 and
   F16 -> BF16, and the same reshard without conversion (BF16 -> BF16,
   a plain copy); each as GB/s of source bytes and as a ratio to
   np.copyto of the same 128 MiB between two touched numpy arrays, in
   the same round (median over ROUNDS2 rounds). The first 128 rows and
   the last 128 of each converted output are checked against
   conversion_reference.py; otherwise exit 1.

Both parts run one copy of --cli (part 1) and the package on PYTHONPATH
(part 2; `make bench` passes build/python).

Usage: convert_bench.py [--cli build/reshard] [--dir TMP] [--rounds 3]
                        [--rounds2 5] [--json] [--keep]

--json prints one JSON object per figure (name, measured, baseline,
ratio, target, met, ...; bench/bench_report.py reads them) instead of
the table.
"""

import argparse
import json
import os
import resource
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
import conversion_reference as ref  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402

# Llama's structure, scaled: every projection's rows and columns (2048,
# 512, 5632; TP2 halves 1024, 256, 2816) are multiples of 128, so TP2
# splits whole 128x128 blocks.
CONFIG = dict(
    hfc.CONFIGS["llama"], hidden_size=2048, intermediate_size=5632,
    num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
    vocab_size=32000, tie_word_embeddings=True)
FILES = 2
TP = "2"
BLOCK = (128, 128)
TARGET = 1.5
# Checked in the FP8 output: two quantized weights and one kept tensor.
CHECK_QUANTIZED = ["model.layers.0.self_attn.k_proj.weight",
                   "model.layers.3.self_attn.v_proj.weight"]
CHECK_KEPT = "model.layers.3.post_attention_layernorm.weight"

# Part 2: one [8192, 8192] weight.
N = 8192
CONFIG2 = dict(
    hfc.CONFIGS["llama"], hidden_size=N, intermediate_size=128,
    num_hidden_layers=1, num_attention_heads=64, num_key_value_heads=8,
    vocab_size=128, tie_word_embeddings=True)
WEIGHT = "model.layers.0.self_attn.o_proj.weight"
SCALE = WEIGHT[:-len("weight")] + "weight_scale_inv"


def normal_pool(rng, size=1 << 22, sigma=0.02):
    """`size` draws of normal(0, sigma) as bfloat16 codes (uint16; round to
    nearest even): finite, as real weights are."""
    x = rng.standard_normal(size, dtype=np.float32) * np.float32(sigma)
    return ref.f32_to_bf16_bits(x)


def normal_bf16(rng, n, pool):
    """n bfloat16 codes: `pool` from a random offset, repeated (drawing
    every element afresh takes 10x longer on this machine)."""
    return np.resize(np.roll(pool, -int(rng.integers(len(pool)))), n)


# ---------------------------------------------------------------- part 1

def run(cli, *args):
    """(parsed --json output with the process's user_seconds and
    sys_seconds added, wall seconds) of `reshard ARGS --json`."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([cli, *map(str, args), "--json"],
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"reshard {' '.join(map(str, args))} failed "
                 f"({proc.returncode}): {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    out["user_seconds"] = r1.ru_utime - r0.ru_utime
    out["sys_seconds"] = r1.ru_stime - r0.ru_stime
    return out, wall


def write_checkpoint(directory, cfg, files, rng):
    """config.json, `files` safetensors shards of finite BF16 values and
    the index; returns ({name: (shape, bytes)} of the tensors checked,
    tensor bytes)."""
    pool = normal_pool(rng)

    def fill(name, dtype, shape, nbytes):
        assert dtype == "BF16", (name, dtype)
        # memoryviews: encode_file joins them, the only copy.
        return memoryview(normal_bf16(rng, nbytes // 2, pool)).cast("B")

    written = hfc.write_checkpoint(directory, cfg, files, fill=fill)
    data = {name: (shape, bytes(raw))
            for name, (_, shape, raw) in written.items()
            if name in CHECK_QUANTIZED or name == CHECK_KEPT}
    return data, sum(len(v[2]) for v in written.values())


def check_fp8(out, data):
    """None if the FP8 checkpoint in `out` holds the reference's codes and
    scales for CHECK_QUANTIZED and the input bytes of CHECK_KEPT, else
    what differs."""
    got = hfc.read_checkpoint(out)
    for name in CHECK_QUANTIZED:
        shape, raw = data[name]
        q, s = ref.quantize(raw, shape, "bfloat16", BLOCK)
        scale = name[:-len("weight")] + "weight_scale_inv"
        if name not in got or got[name][0] != "F8_E4M3":
            return f"{name}: not float8_e4m3fn in the output"
        if got[name][2] != q:
            return f"{name}: codes differ from the reference"
        if scale not in got or got[scale][2] != s:
            return f"{scale}: scales differ from the reference"
    shape, raw = data[CHECK_KEPT]
    if got.get(CHECK_KEPT, (None, None, None))[2] != raw:
        return f"{CHECK_KEPT}: differs from the checkpoint"
    return None


def bench_reshard(cli, tmp, rounds):
    # One copy of the binary for the whole run: both commands run the same
    # bytes even if the build directory is relinked meanwhile.
    shutil.copy2(cli, os.path.join(tmp, "reshard"))
    cli = os.path.join(tmp, "reshard")
    ckpt = os.path.join(tmp, "ckpt")
    t0 = time.perf_counter()
    data, ckpt_bytes = write_checkpoint(ckpt, CONFIG, FILES,
                                        np.random.default_rng(20261204))
    gen_s = time.perf_counter() - t0
    config = os.path.join(ckpt, "config.json")
    plain, fp8 = os.path.join(tmp, "plain.json"), os.path.join(tmp,
                                                               "fp8.json")
    for layout, extra in ((plain, []), (fp8, ["--quantize", "fp8"])):
        subprocess.run([cli, "hf", "layout", config, "--checkpoint", ckpt,
                        "--tp", TP, *extra, "-o", layout],
                       check=True, capture_output=True)
    # The checkpoint just written stays in the page cache; its writeback is
    # done before the first timed command (each command fsyncs its own
    # output, so none is pending between rounds).
    os.sync()

    def plain_reshard(out):
        return run(cli, "hf", "reshard", ckpt, plain, out)

    def fp8_reshard(out):
        return run(cli, "hf", "reshard", ckpt, fp8, out, "--convert",
                   "--block", "%dx%d" % BLOCK)

    # One untimed run of each first; the FP8 one is the correctness check.
    out = os.path.join(tmp, "plain-warmup")
    plain_reshard(out)
    shutil.rmtree(out)
    out = os.path.join(tmp, "fp8-check")
    fp8_reshard(out)
    t0 = time.perf_counter()
    diff = check_fp8(out, data)
    check_s = time.perf_counter() - t0
    if diff is not None:
        sys.exit(f"hf reshard --convert output is not the reference's "
                 f"quantization: {diff}")
    shutil.rmtree(out)
    del data
    # Each timed run right after an untimed one of the same command: on
    # this VM a command that follows the other one (which freed memory of
    # other sizes and kinds) pays for faulting in fresh pages, several
    # times its time (docs/benchmarks.md); the primers' walls are kept.
    runs = {"plain": [], "fp8": []}
    primers = {"plain": [], "fp8": []}
    for r in range(rounds):
        for kind, fn in (("plain", plain_reshard), ("fp8", fp8_reshard)):
            out = os.path.join(tmp, f"{kind}-{r}-primer")
            primers[kind].append(fn(out)[1])
            shutil.rmtree(out)
            out = os.path.join(tmp, f"{kind}-{r}")
            runs[kind].append(fn(out))
            shutil.rmtree(out)
    return dict(ckpt_bytes=ckpt_bytes, gen_seconds=gen_s,
                check_seconds=check_s, plain=runs["plain"], fp8=runs["fp8"],
                primers=primers)


def reshard_figures(res, rounds):
    plain, fp8 = res["plain"], res["fp8"]
    case = ("scaled Llama (hidden 2048, 4 layers, vocabulary 32,000, "
            f"{res['ckpt_bytes'] / 1e6:.0f} MB BF16) into TP2")
    common = dict(case=case, rounds=rounds, ckpt_bytes=res["ckpt_bytes"],
                  gen_seconds=res["gen_seconds"],
                  check_seconds=res["check_seconds"],
                  bytes=fp8[0][0]["bytes"],
                  bytes_written=fp8[0][0]["bytes_written"],
                  baseline_bytes=plain[0][0]["bytes"],
                  baseline_bytes_written=plain[0][0]["bytes_written"],
                  checked="two quantized weights and their scales equal "
                  "conversion_reference.quantize")

    def figure(name, what, key, target):
        if key is None:
            m = [w for _, w in fp8]
            b = [w for _, w in plain]
        else:
            m = [r[key] for r, _ in fp8]
            b = [r[key] for r, _ in plain]
        ratios = [x / y for x, y in zip(m, b)]
        med = statistics.median(ratios)
        return dict(
            name=name, what=what, unit="s", **common,
            seconds=m, baseline_seconds=b, ratios=ratios,
            load_seconds=[r["load_seconds"] for r, _ in fp8],
            baseline_load_seconds=[r["load_seconds"] for r, _ in plain],
            write_seconds=[r["write_seconds"] for r, _ in fp8],
            baseline_write_seconds=[r["write_seconds"] for r, _ in plain],
            primer_seconds=res["primers"]["fp8"],
            baseline_primer_seconds=res["primers"]["plain"],
            user_seconds=[r["user_seconds"] for r, _ in fp8],
            baseline_user_seconds=[r["user_seconds"] for r, _ in plain],
            sys_seconds=[r["sys_seconds"] for r, _ in fp8],
            baseline_sys_seconds=[r["sys_seconds"] for r, _ in plain],
            measured=statistics.median(m), baseline=statistics.median(b),
            ratio=med, target=target,
            met=None if target is None else round(med, 2) <= target)

    return [
        figure("convert-reshard", "end to end: process wall clock, files "
               "read and written", None, TARGET),
        figure("convert-reshard-load", "the load alone: `load_seconds` "
               "(ranged reads; the FP8 run quantizes inside it); "
               "informational", "load_seconds", None),
    ]


# ---------------------------------------------------------------- part 2

def one_tensor(layout, keep, **kw):
    """The placement of `layout(**kw)` cut to the tensors in `keep`."""
    p = layout(**kw)
    return reshard_pkg().Placement.from_fragments(
        p.resource_id, p.revision, p.weight_generation, p.placement_set_id,
        p.topology, [t for t in p.tensors if t.tensor_id in keep],
        [f for f in p.fragments if f.tensor_id in keep])


def reshard_pkg():
    import reshard
    import reshard.hf  # noqa: F401
    return reshard


def bench_kernels(rounds):
    rs = reshard_pkg()
    keep = {WEIGHT, SCALE}

    def layout(config, **kw):
        return one_tensor(lambda **k: rs.hf.layout(config=json.dumps(config),
                                                   tp=1, **k), keep, **kw)

    bf16 = layout(CONFIG2)
    fp8 = layout(CONFIG2, quantize="fp8", fp8_block=BLOCK)
    f32 = layout(CONFIG2, dtype="float32")
    f16 = layout(dict(CONFIG2, torch_dtype="float16"))
    part = bf16.parts[0].participant_id
    rng = np.random.default_rng(8192)
    src = normal_bf16(rng, N * N, normal_pool(rng)).reshape(N, N)
    # float16 codes of the same values (all normal numbers in float16).
    src16 = ref.f32_to_f16_bits(ref.to_f32(src.tobytes(), "bfloat16")
                                ).reshape(N, N)
    out16 = np.ones((N, N), np.uint16)
    codes = np.ones((N, N), np.uint8)
    scales = np.ones((N // BLOCK[0], N // BLOCK[1]), np.float32)
    out32 = np.ones((N, N), np.float32)
    memcpy_dst = np.ones((N, N), np.uint16)

    def reshard(source, s, target, t, convert):
        rs.reshard(source, {part: s}, target, {part: t}, threads=1,
                   convert=convert, fp8_block=BLOCK if convert else None)

    cases = [
        ("copy", "reshard BF16 -> BF16 (no conversion)", lambda: reshard(
            bf16, {WEIGHT: src}, bf16, {WEIGHT: out16}, False)),
        ("quantize", "quantize BF16 -> FP8 (128x128 blocks)", lambda: reshard(
            bf16, {WEIGHT: src}, fp8, {WEIGHT: codes, SCALE: scales}, True)),
        ("dequantize", "dequantize FP8 -> BF16", lambda: reshard(
            fp8, {WEIGHT: codes, SCALE: scales}, bf16, {WEIGHT: out16},
            True)),
        ("cast-bf16-f32", "cast BF16 -> F32", lambda: reshard(
            bf16, {WEIGHT: src}, f32, {WEIGHT: out32}, True)),
        ("cast-f16-bf16", "cast F16 -> BF16", lambda: reshard(
            f16, {WEIGHT: src16}, bf16, {WEIGHT: out16}, True)),
    ]
    src_bytes = src.nbytes  # every case reads 128 MiB except dequantize
    source_bytes = {name: src_bytes for name, _, _ in cases}
    source_bytes["dequantize"] = codes.nbytes + scales.nbytes

    def check(name):
        """None if the rows [0, 128) and [N - 128, N) of the output of case
        `name` (just run) equal the reference's, else what differs."""
        for lo in (0, N - BLOCK[0]):
            rows = slice(lo, lo + BLOCK[0])
            band = src[rows].tobytes()
            shape = [BLOCK[0], N]
            if name == "copy":
                ok = out16[rows].tobytes() == band
            elif name == "quantize":
                q, s = ref.quantize(band, shape, "bfloat16", BLOCK)
                ok = (codes[rows].tobytes() == q and
                      scales[lo // BLOCK[0]].tobytes() == s)
            elif name == "dequantize":
                want = ref.dequantize(codes[rows].tobytes(),
                                      scales[lo // BLOCK[0]].tobytes(),
                                      shape, BLOCK, "bfloat16")
                ok = out16[rows].tobytes() == want
            elif name == "cast-bf16-f32":
                ok = out32[rows].tobytes() == ref.cast(band, shape,
                                                       "bfloat16", "float32")
            else:
                ok = out16[rows].tobytes() == ref.cast(
                    src16[rows].tobytes(), shape, "float16", "bfloat16")
            if not ok:
                return f"rows [{lo}, {lo + BLOCK[0]}) differ"
        return None

    # One untimed run of each (the dequantize source is the quantize
    # output), each output checked right after it.
    for name, _, fn in cases:
        fn()
        diff = check(name)
        if diff is not None:
            sys.exit(f"reshard {name} of [{N}, {N}] is not the "
                     f"reference's: {diff}")
    np.copyto(memcpy_dst, src)

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    memcpy = []
    seconds = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        memcpy.append(timed(lambda: np.copyto(memcpy_dst, src)))
        for name, _, fn in cases:
            seconds[name].append(timed(fn))
    return dict(cases=cases, memcpy=memcpy, seconds=seconds,
                source_bytes=source_bytes, memcpy_bytes=src_bytes)


def kernel_figures(res, rounds):
    base = [res["memcpy_bytes"] / s / 1e9 for s in res["memcpy"]]
    figs = []
    for name, what, _ in res["cases"]:
        secs = res["seconds"][name]
        g = [res["source_bytes"][name] / s / 1e9 for s in secs]
        ratios = [x / y for x, y in zip(g, base)]
        figs.append(dict(
            name=f"convert-{name}", what=what, unit="GB/s",
            case=f"one [{N}, {N}] tensor, reshard.reshard(threads=1), "
            "GB/s of source bytes",
            rounds=rounds, bytes=res["source_bytes"][name],
            baseline_bytes=res["memcpy_bytes"], seconds=secs,
            baseline_seconds=res["memcpy"], gbps=g, baseline_gbps=base,
            ratios=ratios, measured=statistics.median(g),
            baseline=statistics.median(base),
            ratio=statistics.median(ratios), target=None, met=None,
            checked="rows [0, 128) and [8064, 8192) equal "
            "conversion_reference"))
    return figs


# ---------------------------------------------------------------- output

def print_table(figs, res):
    f = figs[0]
    print(f"{f['case']}; {f['rounds']} interleaved rounds; checkpoint "
          f"generated in {res['gen_seconds']:.1f} s; FP8 output checked "
          f"({f['checked']}) in {res['check_seconds']:.1f} s")
    print(f"FP8 bytes {f['bytes']:,} loaded, {f['bytes_written']:,} "
          f"written; plain {f['baseline_bytes']:,} loaded, "
          f"{f['baseline_bytes_written']:,} written")
    print()
    print("| figure | fp8 s | plain s | ratio min / median / max | "
          "target |")
    print("| --- | --- | --- | --- | --- |")
    for f in figs[:2]:
        rs = sorted(f["ratios"])
        print(f"| {f['name']} ({f['what']}) | "
              f"{', '.join('%.3f' % s for s in f['seconds'])} | "
              f"{', '.join('%.3f' % s for s in f['baseline_seconds'])} | "
              f"{rs[0]:.2f}x / {f['ratio']:.2f}x / {rs[-1]:.2f}x | " +
              ("-" if f["target"] is None else
               f"<= {f['target']}x: {'met' if f['met'] else 'NOT MET'}") +
              " |")
    f = figs[0]
    for key in ("primer_seconds", "write_seconds", "user_seconds",
                "sys_seconds"):
        print(f"{key}: fp8 " +
              ", ".join("%.3f" % s for s in f[key]) + "; plain " +
              ", ".join("%.3f" % s for s in f["baseline_" + key]))
    print()
    k = figs[2]
    print(f"{k['case']}; median of {k['rounds']} rounds; memcpy (np.copyto, "
          f"same round) median {k['baseline']:.2f} GB/s")
    print()
    print("| kernel | s | GB/s (median) | ratio to memcpy min / median / "
          "max |")
    print("| --- | --- | --- | --- |")
    for f in figs[2:]:
        rs = sorted(f["ratios"])
        print(f"| {f['what']} | "
              f"{', '.join('%.3f' % s for s in f['seconds'])} | "
              f"{f['measured']:.2f} | {rs[0]:.3f}x / {f['ratio']:.3f}x / "
              f"{rs[-1]:.3f}x |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "reshard"))
    p.add_argument("--dir", help="parent of the temporary directory")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rounds2", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory")
    a = p.parse_args()
    if a.rounds < 1 or a.rounds2 < 1:
        p.error("--rounds and --rounds2 must be at least 1")
    t0 = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="reshard-convert-bench-", dir=a.dir)
    try:
        res = bench_reshard(a.cli, tmp, a.rounds)
    finally:
        if a.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    figs = reshard_figures(res, a.rounds)
    figs += kernel_figures(bench_kernels(a.rounds2), a.rounds2)
    total = time.perf_counter() - t0
    if a.json:
        for f in figs:
            print(json.dumps(f))
    else:
        print_table(figs, res)
        print(f"\nbench ran {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
