"""convert=True on the Python paths: a local reshard, a store load and a
checkpoint load of a BF16 model into its FP8 form (and back), every
converted byte checked against tests/cli/conversion_reference.py, an
independent statement of the arithmetic; refusals without it."""

import json
import pathlib
import sys

import numpy as np
import pytest
import torch

import reshard
import reshard.engines
import reshard.hf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests"
                       / "cli"))
import conversion_reference as ref  # noqa: E402

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 48, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
TEXT = json.dumps(CONFIG)
BLOCK = (8, 8)


def canonical(placement, seed=7):
    """{tensor id: bfloat16 values}, varied magnitudes per row."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for t in placement.tensors:
        scale = torch.logspace(-3, 2, t.global_shape[0]).reshape(
            -1, *([1] * (len(t.global_shape) - 1)))
        out[t.tensor_id] = (torch.randn(t.global_shape, generator=g) *
                            scale).to(torch.bfloat16)
    return out


def boxes(placement, full, dtype):
    """{participant: {tensor id: its fragment of `full` (or empty)}}."""
    out = {}
    for part in placement.parts:
        mine = {}
        for f in part.fragments:
            desc = placement.find_tensor(f.tensor_id)
            if full is not None:
                idx = tuple(slice(o, o + n) for o, n in
                            zip(f.global_offset, f.local_shape))
                mine[f.tensor_id] = full[f.tensor_id][idx].contiguous()
            else:
                mine[f.tensor_id] = torch.empty(
                    f.local_shape, dtype=torch.uint8 if desc.itemsize == 1 and
                    desc.dtype == "float8_e4m3fn" else getattr(torch,
                                                               desc.dtype))
        out[part.participant_id] = mine
    return out


def assemble(placement, tensors):
    """{tensor id: raw little-endian bytes of the whole tensor}."""
    out = {}
    for t in placement.tensors:
        whole = np.zeros(list(t.global_shape) + [t.itemsize], np.uint8)
        for part in placement.parts:
            for f in part.fragments:
                if f.tensor_id != t.tensor_id:
                    continue
                got = tensors[part.participant_id][f.tensor_id]
                raw = got.contiguous().view(torch.uint8).numpy().reshape(
                    list(f.local_shape) + [t.itemsize])
                idx = tuple(slice(o, o + n) for o, n in
                            zip(f.global_offset, f.local_shape))
                whole[idx] = raw
        out[t.tensor_id] = whole.tobytes()
    return out


def check_fp8(target, tensors, full):
    got = assemble(target, tensors)
    quantized = 0
    for t in target.tensors:
        name = t.tensor_id
        if name.endswith("weight_scale_inv"):
            continue
        raw = full[name].view(torch.int16).numpy().tobytes()
        if t.dtype == "float8_e4m3fn":
            q, s = ref.quantize(raw, t.global_shape, "bfloat16", BLOCK)
            scale = name[:-len("weight")] + "weight_scale_inv"
            assert got[name] == q, name
            assert got[scale] == s, scale
            quantized += 1
        else:
            assert got[name] == raw, name
    return quantized


def layouts():
    source = reshard.hf.layout(config=TEXT, tp=1)
    target = reshard.hf.layout(config=TEXT, tp=2, quantize="fp8",
                               fp8_block=BLOCK)
    return source, target


def test_local_reshard_quantizes_bit_exactly():
    source, target = layouts()
    full = canonical(source)
    dst = boxes(target, None, None)
    plan = reshard.plan(source, target, convert=True, fp8_block=BLOCK)
    assert plan.summary["bytes"] > 0
    reshard.reshard(source, boxes(source, full, None), target, dst,
                    convert=True, fp8_block=BLOCK)
    # 2 layers x 7 projections.
    assert check_fp8(target, dst, full) == 14


def test_without_convert_the_first_differing_tensor_is_named():
    source, target = layouts()
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"tensor descriptor mismatch: model.layers.0.mlp."
                             r"down_proj.weight: dtype bfloat16 \(source\) vs "
                             r"float8_e4m3fn \(target\)"):
        reshard.plan(source, target)


def test_store_load_quantizes_and_dequantizes(tmp_path):
    source, target = layouts()
    full = canonical(source)
    store = reshard.WeightStore(f"fs://{tmp_path / 'store'}")
    manifest = store.upload(source, boxes(source, full, None))
    dst = boxes(target, None, None)
    store.load(manifest.manifest_key, target, dst, convert=True,
               fp8_block=BLOCK)
    check_fp8(target, dst, full)
    with pytest.raises(reshard.InvalidArgumentError, match=r"bfloat16"):
        store.load(manifest.manifest_key, target, boxes(target, None, None))


def test_upload_quantizes_before_the_store(tmp_path):
    """upload(..., quantize_to=FP8 form): the revision holds the FP8
    weights and their scales (the source's geometry), so a plain load into
    the FP8 layout, no conversion, is bit-exact with the reference."""
    source, target = layouts()
    full = canonical(source)
    store = reshard.WeightStore(f"fs://{tmp_path / 'store'}")
    manifest = store.upload(source, boxes(source, full, None),
                            quantize_to=target, fp8_block=BLOCK)
    dtypes = {t.tensor_id: t.dtype for t in manifest.tensors}
    assert dtypes["model.layers.0.mlp.down_proj.weight"] == "float8_e4m3fn"
    assert dtypes["model.layers.0.mlp.down_proj.weight_scale_inv"] == (
        "float32")
    assert dtypes["model.norm.weight"] == "bfloat16"
    dst = boxes(target, None, None)
    store.load(manifest.manifest_key, target, dst)
    assert check_fp8(target, dst, full) == 14
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"cannot convert tensor model.layers.0.mlp."
                             r"down_proj.weight: its scale tensor"):
        store.upload(source, boxes(source, full, None), quantize_to=target,
                     fp8_block=(4, 4))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"upload quantize_to: no tensor of the placement "
                             r"is held in block FP8 there"):
        store.upload(source, boxes(source, full, None), quantize_to=source)


def test_checkpoint_load_into_fp8_engine_parameters(tmp_path):
    source, _ = layouts()
    full = canonical(source)
    reshard.hf.write(source, boxes(source, full, None), tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text(TEXT)
    ckpt = reshard.hf.Checkpoint(tmp_path / "ckpt")
    engine = reshard.engines.layout(ckpt, engine="vllm", tp=2,
                                    quantize="fp8", fp8_block=BLOCK)
    p = "p-d0-p0-e0-t1"
    params = engine.parameters(p)
    # Two query heads and one KV head of 8 rows each; 8x8 blocks.
    assert params["model.layers.0.self_attn.qkv_proj.weight"] == (
        (32, 32), "float8_e4m3fn")
    assert params["model.layers.0.self_attn.qkv_proj.weight_scale_inv"] == (
        (4, 4), "float32")
    tensors = {}
    for part in engine.participants:
        tensors[part] = {
            n: torch.empty(shape, dtype=torch.uint8 if dtype ==
                           "float8_e4m3fn" else getattr(torch, dtype))
            for n, (shape, dtype) in engine.parameters(part).items()}
    views = {}
    for part, named in tensors.items():
        views.update(engine.bind(part, named))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"converting it needs CheckpointLoadOptions::"
                             r"convert \(--convert, convert=True\)"):
        reshard.hf.load(ckpt, engine.placement, views)
    reshard.hf.load(ckpt, engine.placement, views, convert=True,
                    fp8_block=BLOCK)
    # Rank 1's qkv_proj: q rows [16, 32) and KV head 1 (k, v rows [8, 16)),
    # each quantized as the whole canonical tensor is, block by block.
    qkv = tensors[p]["model.layers.0.self_attn.qkv_proj.weight"].numpy()
    scales = tensors[p]["model.layers.0.self_attn.qkv_proj.weight_scale_inv"]
    rows = [("q_proj", 16, 32), ("k_proj", 8, 16), ("v_proj", 8, 16)]
    at = 0
    for name, lo, hi in rows:
        t = full[f"model.layers.0.self_attn.{name}.weight"]
        q, s = ref.quantize(t.view(torch.int16).numpy().tobytes(),
                            list(t.shape), "bfloat16", BLOCK)
        q = np.frombuffer(q, np.uint8).reshape(t.shape)
        s = np.frombuffer(s, np.float32).reshape(-1, t.shape[1] // 8)
        assert np.array_equal(qkv[at:at + hi - lo], q[lo:hi]), name
        assert np.array_equal(scales.numpy()[at // 8:(at + hi - lo) // 8],
                              s[lo // 8:hi // 8]), name
        at += hi - lo


def _live_rank(rank, rendezvous, shadow, results):
    try:
        results.put((rank, _live_steps(rank, rendezvous, shadow)))
    except Exception as error:  # reported to the test, not lost
        results.put((rank, repr(error)))


def _live_steps(rank, rendezvous, shadow):
    """Rank 0 holds the BF16 model, rank 1 both FP8 TP2 participants."""
    source, target = layouts()
    session = reshard.LiveSession(rendezvous, "fp8", rank=rank, ranks=2,
                                  source=source, target=target, timeout=30,
                                  convert=True, fp8_block=BLOCK,
                                  shadow_targets=shadow)
    held = boxes(source, canonical(source, seed=0), None)
    dst = boxes(target, None, None)
    out = []
    with session:
        for step in (1, 2):
            full = canonical(source, seed=step)
            if rank == 0:
                # The trainer's weights stay in place, new values each step.
                for part, named in boxes(source, full, None).items():
                    for name, values in named.items():
                        held[part][name].copy_(values)
                report = session.update(held, {})
            else:
                report = session.update({}, dst)
                check_fp8(target, dst, full)
            out.append((step, report.ready, report.wire_bytes))
    return out


def test_live_session_quantizes_at_the_source(tmp_path):
    """Two processes over UCX: the BF16 source quantizes before the wire,
    so rank 1 receives exactly the FP8 model's bytes (FP8 weights, float32
    scales, the rest in bfloat16), bit-exact with the reference at every
    step, with and without shadow targets."""
    import multiprocessing as mp
    source, target = layouts()
    fp8_bytes = sum(f.nbytes for part in target.parts
                    for f in part.fragments)
    bf16_bytes = sum(f.nbytes for part in source.parts
                     for f in part.fragments)
    assert fp8_bytes < 0.75 * bf16_bytes
    for shadow in (False, True):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        procs = [ctx.Process(target=_live_rank,
                             args=(r, str(tmp_path / f"rv{shadow}"), shadow,
                                   results)) for r in range(2)]
        for p in procs:
            p.start()
        out = dict(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert out[0] == [(1, False, 0), (2, False, 0)]
        assert out[1] == [(1, True, fp8_bytes), (2, True, fp8_bytes)]
