#!/usr/bin/env python3
"""CLI contract of `reshard engine layout|load|reshard` on tiny checkpoints
made by the test (hf_checkpoints.py): every participant's file of `engine
load` byte for byte against the independent numpy statement of the vLLM and
Megatron-Core layouts (engine_reference.py), `engine reshard` between them
through this process, two UCX processes and a weight store, the refusals
(one error line, exit 1, nothing written), and the parameter maps of
`engine layout --params`.

Usage: engine_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_reference as ref  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402
from harness import (Suite, check, expect_error, expect_ok,  # noqa: E402
                     run_cli)

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}

_DSV3 = hfc.CONFIGS["deepseek_v3"]
CONFIGS = dict(
    hfc.CONFIGS,
    deepseek_v3_bf16=ref.DEEPSEEK_V3_BF16,
    # Block-FP8 variants vLLM refuses: the routed experts' intermediate
    # size 12 is not whole 8-row blocks even at TP 1; o_proj's input (4
    # heads x v 6 = 24 columns) splits into 12 columns at TP 2 while every
    # column-parallel split (q_b 32 rows, kv_b 32 rows) stays aligned.
    dsv3_moe12=dict(_DSV3, moe_intermediate_size=12, n_shared_experts=2),
    dsv3_o12=dict(_DSV3, qk_nope_head_dim=10, qk_rope_head_dim=6,
                  v_head_dim=6),
    # A vocabulary of 100 rows, which vLLM pads to 128: at TP 8 rank 6
    # holds rows 96-99 and rank 7 only padding (8 heads, so TP 8 splits
    # them; 2 KV heads, grouped).
    llama_v100=dict(hfc.CONFIGS["llama"], vocab_size=100,
                    num_attention_heads=8),
    llama_v100_tied=dict(hfc.CONFIGS["llama"], vocab_size=100,
                         num_attention_heads=8, tie_word_embeddings=True),
)
ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32",
            "float8_e4m3fn": "F8_E4M3"}


def run(*args, timeout=60):
    return run_cli(RESHARD, *args, timeout=timeout)


ok = expect_ok
fails = expect_error


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def no_files(d):
    """Nothing written in d (it may not exist)."""
    got = sorted(os.listdir(d)) if os.path.isdir(d) else []
    check(not os.path.exists(d) or (os.path.isdir(d) and not got),
          "%s: output written on a refusal: %s" % (d, got))


CACHE = {}


def checkpoint(key):
    """(directory, {name: (dtype, shape, bytes)}) of CONFIGS[key]."""
    if key not in CACHE:
        d = path("ckpt-" + key)
        hfc.write_checkpoint(d, CONFIGS[key])
        CACHE[key] = (d, hfc.read_checkpoint(d))
    return CACHE[key]


def grid_args(grid, prefix=""):
    """--tp/--pp/--ep/--dp[/--make-vocab-size-divisible-by] of
    grid = (tp, pp, ep, dp, vocab_multiple or None)."""
    args = []
    for name, v in zip(("tp", "pp", "ep", "dp"), grid[:4]):
        args += ["--" + prefix + name, v]
    if len(grid) > 4 and grid[4] is not None:
        args += ["--" + prefix + "make-vocab-size-divisible-by", grid[4]]
    return args


def full(grid):
    return tuple(grid) + (1, 1, 1, 1, None)[len(grid):]


def load(key, engine, grid, out, *extra):
    d = checkpoint(key)[0]
    return run("engine", "load", d, "--engine", engine, *grid_args(grid),
               "-o", out, *extra)


def expected(key, engine, grid):
    """engine_reference's {participant: {param: (dtype, shape, bytes)}}."""
    tp, pp, ep, dp, vm = full(grid)
    ckpt, tensors = checkpoint(key)
    return ref.expected(tensors, CONFIGS[key], engine, tp, pp, ep, dp, vm)


def read_dir(d):
    """{participant: {param: (dtype, shape, bytes)}} of OUTDIR; every entry
    is a participant's .safetensors file (no partial files left)."""
    out = {}
    for f in sorted(os.listdir(d)):
        check(f.endswith(".safetensors") and os.path.isfile(
            os.path.join(d, f)) and not os.path.islink(os.path.join(d, f)),
            "%s: unexpected entry %s" % (d, f))
        out[f[:-len(".safetensors")]] = hfc.read_file(os.path.join(d, f))
    return out


IDENTITY_KEYS = ("reshard.participant_id", "reshard.placement_id",
                 "reshard.parameter_map_id", "reshard.revision",
                 "reshard.weight_generation")


def split_file(blob):
    """(header without the file's identity, identity, data) of the bytes
    of one parameter file: files of one layout at two revisions, or of two
    engines with one layout, hold the same bytes under other identities."""
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.get("__metadata__", {})
    identity = {k: meta.pop(k) for k in IDENTITY_KEYS if k in meta}
    return (json.dumps(header, sort_keys=True), identity, blob[8 + n:])


def raw_dir(d):
    """{file: (header less identity, data)}: every byte but the identity."""
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as handle:
            header, identity, data = split_file(handle.read())
        check(identity.get("reshard.participant_id") ==
              f[:-len(".safetensors")],
              "%s/%s: identity %r names another participant" % (d, f,
                                                               identity))
        out[f] = (header, data)
    return out


def identities(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), "rb") as handle:
            out[f] = split_file(handle.read())[1]
    return out


def same_params(got, want, what):
    check(set(got) == set(want), "%s: participants %s, expected %s" %
          (what, sorted(got), sorted(want)))
    for pid in sorted(want):
        g, w = got[pid], want[pid]
        check(set(g) == set(w), "%s %s: parameters differ: extra %s, "
              "missing %s" % (what, pid, sorted(set(g) - set(w)),
                              sorted(set(w) - set(g))))
        for name in sorted(w):
            check(g[name][0] == w[name][0] and g[name][1] == w[name][1],
                  "%s %s %s: %s %s, expected %s %s" % (
                      what, pid, name, g[name][0], g[name][1], w[name][0],
                      w[name][1]))
            check(g[name][2] == w[name][2], "%s %s %s: bytes differ" %
                  (what, pid, name))


# ------------------------------------------------------------ engine load

# (checkpoint, engine, (tp, pp, ep, dp[, vocab multiple])).
LOADS = [
    # vLLM: TP 4 over 2 KV heads (replicated), uneven PP (4 layers over 3
    # stages: 1, 2, 1; 3 over 2: 2, 1), DP replicas, tied embeddings on
    # both stages, EP on (ep = tp*dp, 4 experts over 3 ranks too) and off.
    ("llama", "vllm", (1, 1, 1, 1)),
    ("llama", "vllm", (4, 1, 1, 1)),
    ("llama", "vllm", (2, 3, 1, 1)),
    ("llama", "vllm", (2, 1, 1, 2)),
    ("qwen2", "vllm", (2, 2, 1, 1)),
    ("qwen3", "vllm", (4, 2, 1, 1)),
    ("qwen3_moe", "vllm", (2, 2, 1, 1)),
    ("qwen3_moe", "vllm", (2, 1, 4, 2)),
    ("qwen3_moe", "vllm", (1, 1, 3, 3)),
    ("mixtral", "vllm", (2, 2, 2, 1)),
    ("mixtral", "vllm", (4, 1, 1, 1)),
    # DeepSeek-V3 block FP8 with its scales; MTP layers not loaded.
    ("deepseek_v3", "vllm", (2, 2, 1, 1)),
    ("deepseek_v3", "vllm", (1, 3, 1, 1)),
    ("deepseek_v3", "vllm", (2, 1, 4, 2)),
    # Vocabulary 97 padded to 128 rows: TP rank 3 holds one real row.
    ("qwen3_quirks", "vllm", (4, 2, 1, 1)),
    # SGLang is vLLM's layout.
    ("qwen3_quirks", "sglang", (2, 1, 1, 1)),
    ("mixtral", "sglang", (2, 1, 2, 1)),
    # Megatron-Core: the default multiple 128 (64 rows padded to 128), PP,
    # DP, EP over TP x DP, tied embeddings with PP (output layer on the
    # last stage), DeepSeek-V3 in BF16 with its MTP layer, vocabulary 97.
    ("llama", "megatron", (1, 1, 1, 1)),
    ("llama", "megatron", (2, 2, 1, 2, 8)),
    ("qwen2", "megatron", (2, 2, 1, 1, 16)),
    ("qwen3", "megatron", (2, 1, 1, 1, 1)),
    ("qwen3_moe", "megatron", (2, 1, 2, 1, 8)),
    ("qwen3_moe", "megatron", (1, 3, 4, 4)),
    ("mixtral", "megatron", (2, 1, 4, 2, 8)),
    ("deepseek_v3_bf16", "megatron", (1, 1, 1, 1)),
    ("deepseek_v3_bf16", "megatron", (2, 3, 2, 1, 8)),
    ("deepseek_v3_bf16", "megatron", (4, 1, 4, 2, 4)),
    ("qwen3_quirks", "megatron", (2, 2, 1, 1, 8)),
]


def load_dir(key, engine, grid):
    tp, pp, ep, dp, vm = full(grid)
    return path("load-%s-%s-%d-%d-%d-%d-%s" % (key, engine, tp, pp, ep, dp,
                                                vm))


def check_load(key, engine, grid):
    what = "%s %s %s" % (key, engine, grid)
    out = load_dir(key, engine, grid)
    rep = json.loads(ok(load(key, engine, grid, out, "--json"),
                        "engine load " + what).stdout)
    want = expected(key, engine, grid)
    got = read_dir(out)
    same_params(got, want, what)
    check(sorted(rep) == ["bytes", "bytes_read", "padding_bytes",
                          "parameters", "participants", "seconds"], rep)
    check(rep["participants"] == len(want), "%s: %s" % (what, rep))
    check(rep["parameters"] == sum(len(p) for p in want.values()),
          "%s: %s" % (what, rep))
    # bytes: those loaded into parameters; padding_bytes: the zeros.
    check(rep["bytes"] + rep["padding_bytes"] ==
          sum(len(t[2]) for p in want.values() for t in p.values()),
          "%s: %s" % (what, rep))
    check(isinstance(rep["bytes_read"], int) and rep["bytes_read"] > 0, rep)
    return out


@SUITE.test
def load_matches_the_reference():
    for key, engine, grid in LOADS:
        check_load(key, engine, grid)


@SUITE.test
def sglang_is_vllm_before_033_file_for_file():
    # SGLang's FusedMoE holds w13_weight/w2_weight itself, as vLLM did
    # before 0.33 moved them into FusedMoE's routed_experts submodule.
    for key, grid in (("qwen3_quirks", (2, 1, 1, 1)),
                      ("mixtral", (2, 1, 2, 1))):
        s = load_dir(key, "sglang", grid)
        if not os.path.exists(s):
            check_load(key, "sglang", grid)
        v = path("sglang-vs-vllm-" + key)
        ok(load(key, "vllm@<0.33", grid, v), "engine load vllm@<0.33")
        check(raw_dir(s) == raw_dir(v), "%s: sglang files differ from "
              "vllm@<0.33's" % key)


@SUITE.test
def load_one_participant():
    key, grid = "deepseek_v3", (2, 1, 4, 2)
    pid = "p-d1-p0-e3-t1"
    out = path("one-participant")
    rep = json.loads(ok(load(key, "vllm", grid, out, "--participant", pid,
                             "--json"), "engine load --participant").stdout)
    want = {pid: expected(key, "vllm", grid)[pid]}
    same_params(read_dir(out), want, "--participant " + pid)
    check(rep["participants"] == 1 and rep["parameters"] == len(want[pid]),
          rep)
    # Another participant next to it: only its own file must be absent.
    other = "p-d0-p0-e0-t0"
    ok(load(key, "vllm", grid, out, "--participant", other), "second")
    want[other] = expected(key, "vllm", grid)[other]
    same_params(read_dir(out), want, "two --participant runs")


# --------------------------------------------------------- engine reshard

def params_of(key, engine, grid, name):
    """`engine layout --params` of a grid: {participant: [parameters]}."""
    cfg = os.path.join(checkpoint(key)[0], "config.json")
    out = path(name + ".placement.json")
    ok(run("engine", "layout", cfg, "--engine", engine, *grid_args(grid),
           "-o", out, "--params", out + ".params"), "engine layout")
    return json.load(open(out + ".params")), json.load(open(out))


def piece_bytes(params):
    """(non-padding bytes, padding bytes) of every participant's pieces."""
    real = pad = 0
    for p in params["participants"]:
        for q in p["parameters"]:
            for piece in q["pieces"]:
                if piece["fragment"] is None:
                    pad += piece["nbytes"]
                else:
                    real += piece["nbytes"]
    return real, pad


def reshard(key, src, frm, to, out, via, *extra):
    cfg = os.path.join(checkpoint(key)[0], "config.json")
    return run("engine", "reshard", src, out, "--config", cfg,
               "--from", frm[0], *grid_args(frm[1], "from-"),
               "--to", to[0], *grid_args(to[1], "to-"), "--via", via,
               "--json", *extra)


RUNS = []


def check_reshard(key, frm, to, vias):
    """Source and target written by `engine load`; `engine reshard` from
    the one must give the other, file for file, byte for byte."""
    what = "%s %s -> %s" % (key, frm, to)
    src, dst = load_dir(key, *frm), load_dir(key, *to)
    for d, (engine, grid) in ((src, frm), (dst, to)):
        if not os.path.exists(d):
            check_load(key, engine, grid)
    want = raw_dir(dst)
    params = params_of(key, to[0], to[1], "reshard-target-%s-%s-%s" %
                       (key, to[0], "-".join(map(str, full(to[1])))))[0]
    real, pad = piece_bytes(params)
    source_bytes = sum(len(t[2]) for p in read_dir(src).values()
                       for t in p.values())
    reports = []
    for k, via in enumerate(vias):
        extra = ()
        if via.startswith("fs://") and k % 2 == 0:
            extra = ("--revision", "rev-%s-%d" % (key, k))
        RUNS.append(key)
        out = path("reshard-%d-%s-%s-%s" % (len(RUNS), key, frm[0], to[0]))
        r = ok(reshard(key, src, frm, to, out, via, *extra),
               "engine reshard %s via %s" % (what, via))
        rep = json.loads(r.stdout)
        got = raw_dir(out)
        check(sorted(got) == sorted(want), "%s via %s: files %s, expected %s"
              % (what, via, sorted(got), sorted(want)))
        for f in want:
            check(got[f] == want[f], "%s via %s: %s differs from engine load's"
                  % (what, via, f))
        # The same layout's parameter maps, at the reshard's revision.
        ids, load_ids = identities(out), identities(dst)
        for f in want:
            check(ids[f]["reshard.parameter_map_id"] ==
                  load_ids[f]["reshard.parameter_map_id"] and
                  ids[f]["reshard.revision"] ==
                  (extra[1] if extra else ids[f]["reshard.revision"]) and
                  load_ids[f]["reshard.revision"] == "hf",
                  "%s via %s: %s identity %r, engine load's %r" %
                  (what, via, f, ids[f], load_ids[f]))
        keys = ["bytes", "files", "padding_bytes", "seconds", "source_bytes",
                "via"]
        if via.startswith("fs://"):
            keys.append("manifest_key")
        check(sorted(rep) == sorted(keys), "%s via %s: %s" % (what, via, rep))
        check(rep["via"] == via, rep)
        check(rep["files"] == len(want), rep)
        check(rep["bytes"] == real and rep["padding_bytes"] == pad,
              "%s via %s: bytes %d padding %d, the target's pieces hold %d "
              "and %d" % (what, via, rep["bytes"], rep["padding_bytes"],
                          real, pad))
        check(rep["source_bytes"] == source_bytes, "%s via %s: source_bytes "
              "%d, the source files hold %d" % (what, via,
                                                rep["source_bytes"],
                                                source_bytes))
        if via.startswith("fs://"):
            check_store_revision(key, via, rep["manifest_key"], extra)
        reports.append(rep)
    return reports


def check_store_revision(key, uri, manifest_key, extra):
    model_type = CONFIGS[key]["model_type"]
    if extra:
        check(manifest_key == "weights/default/%s/%s/0/manifest" %
              (model_type, extra[1]), manifest_key)
    else:
        check(re.fullmatch(r"weights/default/%s/engine-\d+/0/manifest" %
                           model_type, manifest_key), manifest_key)
    listed = json.loads(ok(run("store", "ls", uri, "--json"),
                           "store ls").stdout)
    mine = [x for x in listed if x["manifest_key"] == manifest_key]
    check(len(mine) == 1 and mine[0]["state"] == "READY", listed)
    ok(run("store", "verify", uri, manifest_key), "store verify")


@SUITE.test
def reshard_megatron_to_vllm_every_via():
    for key, frm in (("qwen3_moe", ("megatron", (2, 1, 2, 2, 8))),
                     # KV heads replicated on the vLLM side (2 over TP 4).
                     ("llama", ("megatron", (2, 2, 1, 1, 8)))):
        store = "fs://" + path("store-" + key)
        check_reshard(key, frm, ("vllm", (4, 1, 1, 1)),
                      ["local", "ucx", store, store])


@SUITE.test
def reshard_vllm_to_megatron_and_padding():
    check_reshard("llama", ("vllm", (4, 1, 1, 1)),
                  ("megatron", (2, 2, 1, 2, 8)), ["local"])
    # Megatron's default multiple: 64 rows become 128, half zero-filled.
    rep = check_reshard("llama", ("vllm", (4, 1, 1, 1)),
                        ("megatron", (1, 1, 1, 1)), ["local"])[0]
    check(rep["padding_bytes"] == 2 * 64 * 32 * 2, rep)
    # Vocabulary 97 both ways: padding in the source and in the target.
    rep = check_reshard("qwen3_quirks", ("megatron", (2, 2, 1, 1, 8)),
                        ("vllm", (4, 2, 1, 1)), ["local"])[0]
    check(rep["padding_bytes"] > 0, rep)
    check_reshard("deepseek_v3_bf16", ("megatron", (2, 3, 2, 1, 8)),
                  ("megatron", (4, 1, 4, 2, 4)), ["local"])
    check_reshard("mixtral", ("vllm", (2, 2, 2, 1)),
                  ("sglang", (2, 1, 2, 1)), ["local"])


@SUITE.test
def vocab_padding_only_ranks_as_vllm_holds_them():
    # Vocabulary 100 padded to 128 at TP 8: ranks 0-5 hold 16 rows each,
    # rank 6 rows 96-99 and 12 rows of zeros, rank 7 16 rows of zeros.
    # The placement splits the vocabulary over TP ranks 0-6 only (a
    # partial split, wire key "ranks"), so rank 7 holds no fragment of it.
    tp8, tp2 = ("vllm", (8, 1, 1, 1)), ("vllm", (2, 1, 1, 1))
    for key in ("llama_v100", "llama_v100_tied"):
        tied = CONFIGS[key]["tie_word_embeddings"]
        tables = ["model.embed_tokens.weight"] + ([] if tied else
                                                  ["lm_head.weight"])
        out = check_load(key, "vllm", (8, 1, 1, 1))
        got = read_dir(out)
        tensors = checkpoint(key)[1]
        row = 32 * 2  # hidden 32, bfloat16
        for name in tables:
            want = tensors[name][2]
            for t in range(8):
                dt, shape, data = got["p-d0-p0-e0-t%d" % t][name]
                real = want[16 * t * row:min(16 * (t + 1), 100) * row]
                check(shape == [16, 32] and data == real +
                      bytes(16 * row - len(real)),
                      "%s rank %d %s: %s, not rows [%d, %d) and zeros" %
                      (key, t, name, shape, min(16 * t, 100),
                       min(16 * (t + 1), 100)))
        check(("lm_head.weight" in got["p-d0-p0-e0-t7"]) is not tied,
              "%s: lm_head on rank 7" % key)
        params, placement = params_of(key, "vllm", (8, 1, 1, 1),
                                      "v100-" + key)
        axes = {t["tensor_id"]: t["parallel_axes"]
                for t in placement["tensors"]}
        for name in tables:
            check(axes[name] == [{"dim": 0, "kind": "tp", "ranks": 7,
                                  "semantics": "split"}],
                  "%s %s: %s" % (key, name, axes[name]))
        part7 = [p for p in placement["parts"]
                 if p["participant_id"] == "p-d0-p0-e0-t7"][0]
        check(not [f for f in part7["fragments"]
                   if f["tensor_id"] in tables], part7["fragments"][:2])
        rank7 = [p for p in params["participants"]
                 if p["participant_id"] == "p-d0-p0-e0-t7"][0]
        for q in rank7["parameters"]:
            if q["name"] in tables:
                check(q["pieces"] == [{"fragment": None, "nbytes": 16 * row,
                                       "offset": 0}], q)
        # The same bytes from TP 2 and back, locally and through a store.
        store = "fs://" + path("store-" + key)
        check_reshard(key, tp2, tp8, ["local", store])
        check_reshard(key, tp8, tp2, ["local", store])
    # Tied with PP 2: the embedding on both stages, rank 7 of each zeros.
    check_load("llama_v100_tied", "vllm", (8, 2, 1, 1))


# --------------------------------------------------------------- refusals

@SUITE.test
def load_refusals():
    cases = [
        ("deepseek_v3", "vllm", (4, 1, 1, 1),
         "%s: vllm refuses block-FP8 parameter model.layers.0.self_attn."
         "q_b_proj.weight: it holds rows [0, 12) of model.layers.0.self_attn."
         "q_b_proj.weight, not whole 8-row blocks of its weight_scale_inv"),
        ("dsv3_o12", "vllm", (2, 1, 1, 1),
         "%s: vllm refuses block-FP8 parameter model.layers.0.self_attn."
         "o_proj.weight: it holds columns [0, 12) of model.layers.0."
         "self_attn.o_proj.weight, not whole 8-column blocks of its "
         "weight_scale_inv"),
        ("llama", "megatron", (4, 1, 1, 1, 8),
         "%s: megatron refuses TP 4: num_key_value_heads (query groups) = 2 "
         "is not divisible by 4"),
        ("llama", "megatron", (2, 1, 1, 1),
         "%s: megatron cannot split the vocabulary of model.embed_tokens."
         "weight over TP 2: 64 rows padded to 256 (a multiple of "
         "--make-vocab-size-divisible-by 128 x TP; a smaller multiple "
         "avoids it) give each rank 128 rows and rank 1 only padding"),
        ("llama", "vllm", (2, 1, 3, 1),
         "%s: vllm expert parallelism spans TP x DP: --ep must be 1 or 2, "
         "not 3"),
        ("qwen3_moe", "vllm", (2, 1, 2, 2),
         "%s: vllm expert parallelism spans TP x DP: --ep must be 1 or 4, "
         "not 2"),
        ("qwen3_moe", "vllm", (1, 1, 1, 3),
         "%s: vllm refuses DP x TP 3: moe_intermediate_size = 16 is not "
         "divisible by 3"),
        ("deepseek_v3", "megatron", (1, 1, 1, 1),
         "%s: megatron holds unquantized weights, but the model is "
         "block-FP8: lay it out with --dtype bfloat16 (and load with "
         "--convert), or use --engine vllm"),
        ("llama", "megatron", (1, 3, 1, 1),
         "%s: megatron refuses PP 3: num_hidden_layers (stages are even) = 4 "
         "is not divisible by 3"),
        ("mixtral", "megatron", (2, 1, 4, 1, 8),
         "%s: megatron places EP ranks over TP x DP: --ep 4 must divide tp x "
         "dp = 2"),
    ]
    for k, (key, engine, grid, message) in enumerate(cases):
        # The reference refuses each grid too.
        try:
            expected(key, engine, grid)
        except ValueError:
            pass
        else:
            check(False, "engine_reference accepts %s %s %s" %
                  (key, engine, grid))
        out = path("refused-load-%d" % k)
        d = checkpoint(key)[0]
        fails(load(key, engine, grid, out), message % d)
        check(not os.path.exists(out), "%s created for a refused layout" %
              out)


@SUITE.test
def fp8_refusal_at_tp1_does_not_suggest_a_tp():
    # The experts' intermediate size 12 is not whole 8-row blocks whatever
    # the TP: vLLM refuses it at TP 1 already, so the message must name
    # the parameter and the rows but not send the user to choose a TP.
    key = "dsv3_moe12"
    out = path("refused-moe12")
    r = load(key, "vllm", (1, 1, 1, 1), out)
    check(r.returncode == 1, r)
    err = r.stderr.strip()
    check(len(err.splitlines()) == 1 and err.startswith("reshard: error: "),
          err)
    for part in ("model.layers.1.mlp.experts.routed_experts.w13_weight",
                 "[0, 12)",
                 "8-row blocks"):
        check(part in err, "%r not in %r" % (part, err))
    check("choose a TP" not in err,
          "at TP 1 no TP splits 12 rows into 8-row blocks: %r" % err)
    check(not os.path.exists(out), "output created")


def write_variant(name, src, fname, mutate, metadata=None):
    """A copy of SRCDIR with file `fname` rewritten by mutate(tensors) (None
    removes it), keeping its metadata (its identity) unless `metadata` is
    given."""
    d = path("variant-" + name)
    os.makedirs(d)
    for f in os.listdir(src):
        with open(os.path.join(src, f), "rb") as a, \
                open(os.path.join(d, f), "wb") as b:
            b.write(a.read())
    if metadata is None:
        with open(os.path.join(d, fname), "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        metadata = json.loads(blob[8:8 + n])["__metadata__"]
    items = [(n, *v) for n, v in hfc.read_file(os.path.join(d, fname))
             .items()]
    items = mutate(items)
    if items is None:
        os.remove(os.path.join(d, fname))
    else:
        with open(os.path.join(d, fname), "wb") as f:
            f.write(hfc.encode_file(items, metadata))
    return d


VLLM4 = ("vllm", (4, 1, 1, 1))
MCORE = ("megatron", (2, 2, 1, 2, 8))


def vllm4_source():
    src = load_dir("llama", *VLLM4)
    if not os.path.exists(src):
        check_load("llama", *VLLM4)
    return src


@SUITE.test
def reshard_refuses_bad_source_files():
    src = vllm4_source()
    f = "p-d0-p0-e0-t1.safetensors"
    N = "model.layers.1.self_attn.o_proj.weight"
    head = "%s/%s" % (path(), "variant-%s/" + f)

    def retype(items):
        return [(n, "F16" if n == N else d, s, b) for n, d, s, b in items]

    def transpose(items):
        return [(n, d, s[::-1] if n == N else s, b) for n, d, s, b in items]

    def extra(items):
        return items + [("model.layers.9.extra.weight", "BF16", [4],
                         bytes(8))]

    def lacking(items):
        return [t for t in items if t[0] != N]

    cases = [
        ("dtype", retype,
         head + ": parameter " + N + " is [32, 8] F16 in the file, but the "
         "engine layout gives participant p-d0-p0-e0-t1 a [32, 8] bfloat16 "
         "parameter"),
        ("shape", transpose,
         head + ": parameter " + N + " is [8, 32] BF16 in the file, but the "
         "engine layout gives participant p-d0-p0-e0-t1 a [32, 8] bfloat16 "
         "parameter"),
        ("extra", extra,
         head + " holds model.layers.9.extra.weight, which is not a "
         "parameter of participant p-d0-p0-e0-t1 in this engine layout"),
        ("lacking", lacking,
         head + " lacks parameter " + N + " of participant p-d0-p0-e0-t1"),
        ("missing", lambda items: None,
         "cannot read " + head + ": No such file or directory"),
    ]
    for name, mutate, message in cases:
        d = write_variant(name, src, f, mutate)
        out = d + "-out"
        fails(reshard("llama", d, VLLM4, MCORE, out, "local"),
              message % name)
        no_files(out)


def copy_dir(src, name):
    d = path(name)
    os.makedirs(d)
    for f in os.listdir(src):
        with open(os.path.join(src, f), "rb") as a, \
                open(os.path.join(d, f), "wb") as b:
            b.write(a.read())
    return d


def identity_text(ident):
    return ("participant %s, placement %s (revision %s, weight generation "
            "%s), parameter map %s" % (
                ident["reshard.participant_id"], ident["reshard.placement_id"],
                ident["reshard.revision"], ident["reshard.weight_generation"],
                ident["reshard.parameter_map_id"]))


@SUITE.test
def reshard_refuses_swapped_renamed_or_foreign_files_on_every_via():
    """The probe swapped the files of two TP ranks of a load: the output
    held the other rank's rows and the command exited 0. Every file now
    carries its identity; a file in another's slot is refused naming the
    file and both identities, on every --via, and nothing is written."""
    src = vllm4_source()
    t0, t1 = "p-d0-p0-e0-t0.safetensors", "p-d0-p0-e0-t1.safetensors"
    ids = identities(src)
    swapped = copy_dir(src, "identity-swapped")
    os.rename(os.path.join(swapped, t0), os.path.join(swapped, "x"))
    os.rename(os.path.join(swapped, t1), os.path.join(swapped, t0))
    os.rename(os.path.join(swapped, "x"), os.path.join(swapped, t1))
    renamed = copy_dir(src, "identity-renamed")
    os.remove(os.path.join(renamed, t0))
    with open(os.path.join(src, t1), "rb") as a, \
            open(os.path.join(renamed, t0), "wb") as b:
        b.write(a.read())
    # Foreign: the same participant's file of a Megatron layout (other
    # parameter maps and placement) put in the vLLM TP4 source's place.
    other = load_dir("llama", *MCORE)
    if not os.path.exists(other):
        check_load("llama", *MCORE)
    foreign = copy_dir(src, "identity-foreign")
    with open(os.path.join(other, t0), "rb") as a, \
            open(os.path.join(foreign, t0), "wb") as b:
        b.write(a.read())
    foreign_id = identities(other)[t0]
    want = identity_text(ids[t0])
    # The slot's identity at the run's revision: the reshard's own.
    at = dict(ids[t0])
    cases = [
        (swapped, t0, ids[t1]),
        (renamed, t0, ids[t1]),
        (foreign, t0, foreign_id),
    ]
    for via in ("local", "ucx", "fs://" + path("identity-store")):
        for n, (d, f, found) in enumerate(cases):
            out = path("identity-out-%d-%s" % (n, via.split(":")[0]))
            r = reshard("llama", d, VLLM4, MCORE, out, via,
                        "--revision", "hf")
            # Over UCX rank 0 reads the sources, and its error says so.
            fails(r, "%s%s/%s is the file of %s, not of %s" %
                  ("rank 0 (sources): " if via == "ucx" else "", d, f,
                   identity_text(found), identity_text(at)))
            no_files(out)
    check(want == identity_text(at), "slot identity")


@SUITE.test
def reshard_takes_files_with_no_identity_only_with_trust_file_names():
    src = vllm4_source()
    f = "p-d0-p0-e0-t1.safetensors"
    d = write_variant("no-identity", src, f, lambda items: items,
                      metadata={"format": "pt"})
    out = path("no-identity-out")
    fails(reshard("llama", d, VLLM4, MCORE, out, "local"),
          "%s/%s carries no identity (no reshard.participant_id or the other "
          "reshard.* keys in its metadata): refused as the file of "
          "participant p-d0-p0-e0-t1 unless file names are trusted "
          "(--trust-file-names takes it by its name)" % (d, f))
    no_files(out)
    ok(reshard("llama", d, VLLM4, MCORE, out, "local", "--trust-file-names"),
       "engine reshard --trust-file-names")
    want = raw_dir(load_dir("llama", *MCORE)) if os.path.exists(
        load_dir("llama", *MCORE)) else None
    if want is not None:
        check(raw_dir(out) == want, "trusted files: output differs from "
              "engine load's")


@SUITE.test
def reshard_ucx_missing_source_fails_fast():
    # Rank 0 cannot read its source: rank 1 must not wait out --timeout for
    # a peer that already failed, and the error names the file.
    src = vllm4_source()
    f = "p-d0-p0-e0-t1.safetensors"
    d = write_variant("ucx-missing", src, f, lambda items: None)
    out = d + "-out"
    t0 = time.monotonic()
    r = reshard("llama", d, VLLM4, MCORE, out, "ucx", "--timeout", 6)
    took = time.monotonic() - t0
    check(r.returncode == 1, "exit %d: %s" % (r.returncode, r.stderr))
    no_files(out)
    check(os.path.join(d, f) in r.stderr, r.stderr)
    lines = r.stderr.strip().splitlines()
    check(lines[-1].startswith("reshard: error: "), r.stderr)
    check(took < 3, "a missing source file took %.1f s to refuse (--timeout "
          "6): %s" % (took, r.stderr.strip()))


@SUITE.test
def reshard_ucx_error_is_one_line():
    # A rank's error reaches the user as one line naming the rank and its
    # side, not the rank's own line followed by the parent's summary.
    src = vllm4_source()
    f = "p-d0-p0-e0-t1.safetensors"
    d = write_variant("ucx-one-line", src, f, lambda items: None)
    out = path("ucx-one-line-out")
    # The local run's one line, which names the file.
    local = reshard("llama", d, VLLM4, MCORE, out, "local").stderr.strip()
    check(local.startswith("reshard: error: ") and
          os.path.join(d, f) + ": No such file or directory" in local, local)
    fails(reshard("llama", d, VLLM4, MCORE, out, "ucx", "--timeout", 6),
          "rank 0 (sources): " + local[len("reshard: error: "):])
    no_files(out)


# ------------------------------------------------- live ranks and signals

RANK_NAMES = ("reshard-rank0", "reshard-rank1")


def proc_stat(pid):
    """(name, state, parent pid) of process `pid`, or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], rest[0], int(rest[1])


def children(pid):
    """{name: pid} of the processes whose parent is `pid`."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(int(d))
            if st is not None and st[2] == pid:
                out[st[0]] = int(d)
    return out


def gone(pid, within=5.0):
    """Whether process `pid` is gone (or a zombie) within `within` s."""
    end = time.monotonic() + within
    while True:
        st = proc_stat(pid)
        if st is None or st[1] == "Z":
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.02)


def live_run(tmp, out, *extra):
    """`engine reshard --via ucx` of the vLLM TP4 source into Megatron,
    with TMPDIR=tmp (where its rendezvous directory goes), not waited for."""
    cfg = os.path.join(checkpoint("llama")[0], "config.json")
    args = [RESHARD, "engine", "reshard", vllm4_source(), out, "--config",
            cfg, "--from", VLLM4[0], *grid_args(VLLM4[1], "from-"), "--to",
            MCORE[0], *grid_args(MCORE[1], "to-"), "--via", "ucx", "--json",
            *extra]
    return subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TMPDIR=tmp))


def caught_run(name, act, *extra):
    """Starts live runs until one's ranks are caught: act(proc, {rank name:
    pid}) runs once both ranks are seen, which each get SIGSTOP (freezing
    the run) as soon as seen, unless act stops them itself. Returns (proc,
    ranks, tmp, out, finished proc's (stdout, stderr), seconds from act to
    the parent's exit)."""
    for attempt in range(8):
        tmp = path("%s-tmp-%d" % (name, attempt))
        out = path("%s-out-%d" % (name, attempt))
        os.makedirs(tmp)
        proc = live_run(tmp, out, *extra)
        ranks = {}
        end = time.monotonic() + 20
        while len(ranks) < 2 and proc.poll() is None and \
                time.monotonic() < end:
            for n, pid in children(proc.pid).items():
                if n in RANK_NAMES and n not in ranks:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:  # it just exited
                        continue
                    ranks[n] = pid
        if len(ranks) < 2:  # the run finished before both were seen
            for pid in ranks.values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.communicate(timeout=60)
            continue
        t0 = time.monotonic()
        act(proc, ranks)
        try:
            got = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid] + list(ranks.values()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.communicate()
            raise
        return proc, ranks, tmp, out, got, time.monotonic() - t0
    raise AssertionError("no live run lasted long enough to catch its ranks")


def check_ended(ranks, tmp, out):
    """Both ranks gone (by pid), the rendezvous directory removed, no
    target file (nor .partial, nor staging directory) written."""
    for n, pid in sorted(ranks.items()):
        check(gone(pid), "%s (pid %d) survived the run" % (n, pid))
    check(os.listdir(tmp) == [], "left in TMPDIR: %s" % os.listdir(tmp))
    no_files(out)


def check_retry(out):
    """The same run into the same directory now succeeds, byte for byte."""
    want = load_dir("llama", *MCORE)
    if not os.path.exists(want):
        check_load("llama", *MCORE)
    tmp = out + "-retry-tmp"
    os.makedirs(tmp)
    proc = live_run(tmp, out)
    stdout, stderr = proc.communicate(timeout=120)
    check(proc.returncode == 0, "retry failed (%d): %s" % (proc.returncode,
                                                         stderr))
    check(json.loads(stdout)["files"] == len(os.listdir(want)), stdout)
    check(raw_dir(out) == raw_dir(want), "retry wrote other bytes")
    check(os.listdir(tmp) == [], "left in TMPDIR: %s" % os.listdir(tmp))


@SUITE.test
def reshard_ucx_dead_rank_ends_the_other():
    # Rank 0 dies while rank 1 hangs (stopped): the parent ends rank 1 at
    # once instead of waiting on it (--timeout 60), and says why in one
    # line.
    def act(proc, ranks):
        os.kill(ranks["reshard-rank0"], signal.SIGKILL)

    proc, ranks, tmp, out, (stdout, stderr), took = caught_run(
        "ucx-dead", act, "--timeout", 60)
    check(proc.returncode == 1, "exit %d: %s" % (proc.returncode, stderr))
    check(stderr == "reshard: error: rank 0 (sources) died of signal 9 "
          "(Killed)\n", repr(stderr))
    check(stdout == "", stdout)
    check(took < 4, "the parent took %.1f s to end rank 1" % took)
    check_ended(ranks, tmp, out)
    check_retry(out)


@SUITE.test
def reshard_ucx_stop_signal_ends_both_ranks():
    # SIGTERM or SIGINT to the parent ends both (stopped) ranks, removes
    # the rendezvous directory, writes no target file, and the parent dies
    # of the signal; the same run then succeeds.
    for sig in (signal.SIGTERM, signal.SIGINT):
        def act(proc, ranks):
            proc.send_signal(sig)

        proc, ranks, tmp, out, (stdout, stderr), took = caught_run(
            "ucx-%s" % sig.name, act, "--timeout", 60)
        check(proc.returncode == -sig, "%s: exit %d: %s" %
              (sig.name, proc.returncode, stderr))
        check((stdout, stderr) == ("", ""), (sig.name, stdout, stderr))
        check(took < 4, "%s: the parent took %.1f s" % (sig.name, took))
        check_ended(ranks, tmp, out)
        check_retry(out)


@SUITE.test
def reshard_ucx_timeout_bounds_the_whole_run():
    # Both ranks hang (stopped): --timeout bounds the parent's wait too.
    proc, ranks, tmp, out, (stdout, stderr), took = caught_run(
        "ucx-timeout", lambda proc, ranks: None, "--timeout", 2)
    check(proc.returncode == 1, "exit %d: %s" % (proc.returncode, stderr))
    check(stderr == "reshard: error: the live reshard did not finish within "
          "2 s (--timeout); rank 0 (sources) and rank 1 (targets) were "
          "ended\n", repr(stderr))
    check(took < 4, "the run took %.1f s after its ranks were caught" % took)
    check_ended(ranks, tmp, out)


@SUITE.test
def reshard_refusals():
    src = vllm4_source()
    out = path("refused-via")
    fails(reshard("llama", src, VLLM4, MCORE, out, "garbage"),
          "--via must be local, ucx or a weight store URI (fs://DIR, "
          "redis://HOST:PORT/PREFIX), not garbage")
    no_files(out)
    out = path("refused-from")
    fails(reshard("llama", src, ("megatron", (4, 1, 1, 1, 8)), VLLM4,
                  out, "local"),
          "--from: megatron refuses TP 4: num_key_value_heads (query groups) "
          "= 2 is not divisible by 4")
    check(not os.path.exists(out), "output created")
    fails(reshard("llama", src, VLLM4, ("vllm", (3, 1, 1, 1)), out,
                  "local"),
          "--to: vllm refuses TP 3: num_attention_heads = 4 is not divisible "
          "by 3")
    check(not os.path.exists(out), "output created")
    # A target file that exists (the source directory itself).
    fails(reshard("llama", src, ("vllm", (4, 1, 1, 1)),
                  ("vllm", (2, 1, 1, 1)), src, "local"),
          "%s/p-d0-p0-e0-t0.safetensors exists: refusing to replace it" % src)
    # The same revision twice in one store: refused, the first intact.
    uri = "fs://" + path("store-twice")
    args = ("--revision", "twice")
    ok(reshard("llama", src, VLLM4, MCORE, path("twice-1"), uri,
               *args), "first reshard")
    out = path("twice-2")
    fails(reshard("llama", src, VLLM4, MCORE, out, uri, *args),
          "conflicting weight revision: weights/default/llama/twice/0/"
          "manifest")
    no_files(out)
    check_store_revision("llama", uri,
                         "weights/default/llama/twice/0/manifest", args)


@SUITE.test
def load_refuses_existing_outputs():
    key, grid = "llama", (2, 1, 1, 1)
    out = path("twice")
    ok(load(key, "vllm", grid, out), "first engine load")
    before = {f: (os.stat(os.path.join(out, f)).st_mtime_ns, b)
              for f, b in raw_dir(out).items()}
    fails(load(key, "vllm", grid, out),
          "%s/p-d0-p0-e0-t0.safetensors exists: refusing to replace it" % out)
    fails(load(key, "vllm", grid, out, "--participant", "p-d0-p0-e0-t1"),
          "%s/p-d0-p0-e0-t1.safetensors exists: refusing to replace it" % out)
    after = {f: (os.stat(os.path.join(out, f)).st_mtime_ns, b)
             for f, b in raw_dir(out).items()}
    check(after == before, "the first output changed")
    # A symlink where a participant's file goes: refused before anything
    # is written, the link and its target untouched.
    out = path("symlinked")
    os.makedirs(out)
    target = path("precious.txt")
    with open(target, "w") as f:
        f.write("precious")
    link = os.path.join(out, "p-d0-p0-e0-t1.safetensors")
    os.symlink(target, link)
    fails(load(key, "vllm", grid, out),
          "%s exists: refusing to replace it" % link)
    check(os.listdir(out) == ["p-d0-p0-e0-t1.safetensors"] and
          os.readlink(link) == target, os.listdir(out))
    check(open(target).read() == "precious", "the link's target changed")
    # The same through engine reshard.
    fails(reshard(key, vllm4_source(), VLLM4, ("vllm", grid), out,
                  "local"),
          "%s exists: refusing to replace it" % link)
    check(open(target).read() == "precious", "the link's target changed")
    check(os.listdir(out) == ["p-d0-p0-e0-t1.safetensors"], os.listdir(out))
    # A dangling link is refused too, and nothing is created through it.
    out = path("dangling")
    os.makedirs(out)
    link = os.path.join(out, "p-d0-p0-e0-t0.safetensors")
    os.symlink(path("nowhere"), link)
    fails(load(key, "vllm", grid, out),
          "%s exists: refusing to replace it" % link)
    check(not os.path.lexists(path("nowhere")), "created through the link")
    # Not a directory; a parent that does not exist.
    notdir = path("precious.txt")
    fails(load(key, "vllm", grid, notdir), "%s is not a directory" % notdir)
    fails(load(key, "vllm", grid, path("no", "such")),
          "output directory %s cannot be created: its parent %s does not "
          "exist" % (path("no", "such"), path("no")))
    # An unknown participant.
    out = path("unknown-participant")
    fails(load(key, "vllm", grid, out, "--participant", "p-d0-p0-e0-t9"),
          "--participant: the vllm layout has no participant "
          "\"p-d0-p0-e0-t9\"")
    check(not os.path.exists(out), "output created")


@SUITE.test
def load_with_a_stale_partial_file_is_all_or_nothing():
    # A `.partial` left by a killed run (here a symlink) must neither be
    # written through nor make the run stop half way with some
    # participants' files written: either every file is written (and the
    # link's target untouched), or the run is refused before any is.
    key, grid = "llama", (2, 1, 1, 1)
    out = path("stale-partial")
    os.makedirs(out)
    target = path("precious-partial.txt")
    with open(target, "w") as f:
        f.write("precious")
    os.symlink(target, os.path.join(out, "p-d0-p0-e0-t1.safetensors.partial"))
    r = load(key, "vllm", grid, out)
    check(open(target).read() == "precious", "written through the link")
    written = sorted(f for f in os.listdir(out) if not f.endswith(".partial"))
    if r.returncode == 0:
        same_params({f[:-12]: hfc.read_file(os.path.join(out, f))
                     for f in written}, expected(key, "vllm", grid),
                    "over a stale .partial")
    else:
        check(not written, "refused (%s) after writing %s" %
              (r.stderr.strip(), written))


# ----------------------------------------------------- the parameter maps

@SUITE.test
def layout_params_tile_every_parameter():
    for key, grid in (("qwen3_quirks", (4, 1, 1, 1)),
                      ("deepseek_v3", (2, 1, 4, 2))):
        params, placement = params_of(key, "vllm", grid, "params-" + key)
        check(params["engine"] == "vllm@0.33", params["engine"])
        check(params["placement_id"] == placement["placement_id"], params)
        frags = {}
        for part in placement["parts"]:
            frags[part["participant_id"]] = {
                f["placement_fragment_id"]: f["nbytes"]
                for f in part["fragments"]}
            check(len(frags[part["participant_id"]]) ==
                  len(part["fragments"]), "a fragment listed twice")
        want = expected(key, "vllm", grid)
        ids = [p["participant_id"] for p in params["participants"]]
        check(sorted(ids) == sorted(want) == sorted(frags),
              "%s: participants %s / %s / %s" % (key, ids, sorted(want),
                                                  sorted(frags)))
        paddings = 0
        for p in params["participants"]:
            pid = p["participant_id"]
            check({q["name"]: (ST_DTYPE[q["dtype"]], q["shape"])
                   for q in p["parameters"]} ==
                  {n: t[:2] for n, t in want[pid].items()},
                  "%s %s: parameter names, dtypes or shapes differ from the "
                  "reference" % (key, pid))
            used = []
            for q in p["parameters"]:
                size = hfc.ITEMSIZE[ST_DTYPE[q["dtype"]]]
                for n in q["shape"]:
                    size *= n
                at = 0
                for piece in q["pieces"]:
                    check(piece["offset"] == at and piece["nbytes"] > 0,
                          "%s %s %s: piece at %d, expected %d" %
                          (key, pid, q["name"], piece["offset"], at))
                    at += piece["nbytes"]
                    if piece["fragment"] is None:
                        paddings += 1
                        continue
                    check(frags[pid].get(piece["fragment"]) ==
                          piece["nbytes"], "%s %s %s: fragment %s is not "
                          "one of the participant's (or of another size)" %
                          (key, pid, q["name"], piece["fragment"]))
                    used.append(piece["fragment"])
                check(at == size, "%s %s %s: pieces cover %d of %d bytes" %
                      (key, pid, q["name"], at, size))
            check(len(used) == len(set(used)) and set(used) == set(frags[pid]),
                  "%s %s: fragments used %d times (%d distinct), the "
                  "participant holds %d" % (key, pid, len(used),
                                            len(set(used)), len(frags[pid])))
        # Vocabulary 97 over TP 4: the last rank's embedding is one row
        # then 31 rows of padding.
        if key == "qwen3_quirks":
            check(paddings == 1, paddings)
            last = [q for p in params["participants"]
                    if p["participant_id"] == "p-d0-p0-e0-t3"
                    for q in p["parameters"]
                    if q["name"] == "model.embed_tokens.weight"][0]
            check([(x["offset"], x["nbytes"], x["fragment"] is None)
                   for x in last["pieces"]] ==
                  [(0, 64, False), (64, 31 * 64, True)], last)


@SUITE.test
def router_bias_widens_exactly_without_convert():
    # vLLM (since 0.10.2) and Megatron hold DeepSeek's router bias in
    # float32 whatever the model dtype; a checkpoint that stores it in
    # BF16 loads without --convert, each value widened exactly, and
    # vllm@<0.10.2 keeps it BF16. Any other dtype difference still needs
    # --convert.
    cfg = CONFIGS["deepseek_v3_bf16"]
    d = path("ckpt-bf16-bias")
    spec = [(n, "BF16" if n.endswith(".gate.e_score_correction_bias")
             else dt, shape) for n, dt, shape in hfc.model_tensors(cfg)]
    tensors = hfc.write_checkpoint(d, cfg, tensors=spec)
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    check(tensors[bias][0] == "BF16", tensors[bias][:2])
    for engine, grid, dt in (("vllm", (2, 1, 1, 1), "F32"),
                             ("vllm@<0.10.2", (2, 1, 1, 1), "BF16"),
                             ("megatron", (2, 1, 1, 1, 8), "F32")):
        out = path("bias-" + engine.replace("@<", "-"))
        ok(run("engine", "load", d, "--engine", engine, *grid_args(grid),
               "-o", out), "engine load " + engine)
        want = ref.expected(tensors, cfg, engine, *full(grid))
        got = read_dir(out)
        same_params(got, want, "bf16 bias " + engine)
        name = (bias if engine != "megatron"
                else "decoder.layers.1.mlp.router.expert_bias")
        g = got["p-d0-p0-e0-t0"][name]
        check(g[0] == dt, "%s %s: %s" % (engine, name, g[0]))
        if dt == "F32":  # each BF16 value is the upper half of its F32
            b = tensors[bias][2]
            check(g[2] == b"".join(b"\0\0" + b[i:i + 2]
                                   for i in range(0, len(b), 2)),
                  "%s: bias bytes not widened exactly" % engine)
    # A norm stored F16 as well, loaded as --dtype bfloat16: that
    # conversion needs --convert, and with it the bias widens as before.
    d2 = path("ckpt-bf16-bias-f16-norm")
    norm = "model.norm.weight"
    hfc.write_checkpoint(d2, cfg, tensors=[
        (n, "F16" if n == norm else dt, s) for n, dt, s in spec])
    out = path("bias-f16-norm")
    fails(run("engine", "load", d2, "--engine", "vllm", "--dtype",
              "bfloat16", "-o", out),
          "tensor model.norm.weight is float16 in the checkpoint but "
          "bfloat16 in the target placement: converting it needs "
          "CheckpointLoadOptions::convert (--convert, convert=True)")
    no_files(out)


sys.exit(SUITE.run("reshard-enginecli-", lambda t: TMP.update(dir=t)))
