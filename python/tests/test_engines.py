"""reshard.engines: engine parameters bound by name and moved through every
path (local reshard, a store revision, a checkpoint), checked byte by
byte; refusals naming the parameter."""

import zlib

import numpy as np
import pytest
import torch

import reshard
import reshard.engines
import reshard.hf

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 16, "vocab_size": 54, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 24, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def megatron():
    return reshard.engines.layout(CONFIG, engine="megatron", tp=2, pp=2,
                                  make_vocab_size_divisible_by=4)


def vllm():
    return reshard.engines.layout(CONFIG, engine="vllm", tp=4)


def fragment_bytes(placement, fragment_id, step=1):
    """The bytes of a fragment: its tensor, each element's global index."""
    f = placement.find_fragment(fragment_id)
    t = placement.find_tensor(f.tensor_id)
    grid = np.indices(f.local_shape).reshape(len(f.local_shape), -1)
    index = np.ravel_multi_index(
        tuple(grid + np.array(f.global_offset).reshape(-1, 1)),
        t.global_shape)
    element = (index.astype(np.uint64) * np.uint64(2654435761) +
               np.uint64(zlib.crc32(f.tensor_id.encode()) + step))
    shift = np.uint64(3) + np.arange(t.itemsize, dtype=np.uint64)
    return ((element[:, None] >> shift[None, :]) &
            np.uint64(0xFF)).astype(np.uint8).reshape(-1)


def pieces(layout, participant, params):
    for name, q in layout.parameter_maps(participant).items():
        flat = params[name].reshape(-1).view(torch.uint8)
        for piece in q.pieces:
            yield flat[piece.offset:piece.offset + piece.nbytes], piece


def filled(layout):
    """{participant: {name: tensor}} with every fragment's bytes."""
    out = {}
    for p in layout.participants:
        params = layout.empty(p)
        for view, piece in pieces(layout, p, params):
            if piece.fragment is not None:
                view.copy_(torch.from_numpy(fragment_bytes(
                    layout.placement, piece.fragment)))
        out[p] = params
    return out


def poisoned(layout):
    out = {}
    for p in layout.participants:
        params = layout.empty(p)
        for view, piece in pieces(layout, p, params):
            view.fill_(0xEE)
        out[p] = params
    return out


def bound(layout, tensors):
    views = {}
    for p, params in tensors.items():
        views.update(layout.bind(p, params))
    return views


def check_every_byte(layout, tensors):
    checked = 0
    for p, params in tensors.items():
        for view, piece in pieces(layout, p, params):
            if piece.fragment is not None:
                want = fragment_bytes(layout.placement, piece.fragment)
            elif piece.fill:
                want = np.tile(np.frombuffer(piece.fill, np.uint8),
                               piece.nbytes // len(piece.fill))
            else:
                want = np.zeros(piece.nbytes, np.uint8)
            got = view.numpy()
            assert np.array_equal(got, want), (p, piece)
            checked += piece.nbytes
    return checked


def test_layout_names_shapes_and_participants():
    v = vllm()
    assert v.engine == "vllm@0.33"
    assert v.participants == [f"p-d0-p0-e0-t{t}" for t in range(4)]
    params = v.parameters("p-d0-p0-e0-t3")
    # One query head and KV head 1 (rows 4-7 of k and v): 3 heads x 4 rows.
    assert params["model.layers.0.self_attn.qkv_proj.weight"] == (
        (12, 16), "bfloat16")
    assert params["model.layers.0.self_attn.qkv_proj.bias"] == (
        (12,), "bfloat16")
    assert params["model.embed_tokens.weight"] == ((16, 16), "bfloat16")
    m = megatron()
    names = list(m.parameters("p-d0-p1-e0-t1"))
    assert names[0] == "decoder.layers.0.self_attention.linear_qkv.weight"
    assert names[-1] == "output_layer.weight"
    assert "embedding.word_embeddings.weight" not in names
    tensors = v.empty("p-d0-p0-e0-t0")
    assert tensors["model.norm.weight"].dtype == torch.bfloat16
    assert all(int(t.count_nonzero()) == 0 for t in tensors.values())


def test_megatron_to_vllm_in_this_process():
    m, v = megatron(), vllm()
    src, dst = filled(m), poisoned(v)
    report = reshard.reshard(m.placement, bound(m, src), v.placement,
                             bound(v, dst))
    for p, params in dst.items():
        v.zero_padding(p, params)
    assert check_every_byte(v, dst) > report.bytes  # padding too
    # And back: vLLM -> Megatron equals the filled trainer.
    back = poisoned(m)
    reshard.reshard(v.placement, bound(v, dst), m.placement, bound(m, back))
    for p in m.participants:
        m.zero_padding(p, back[p])
    check_every_byte(m, back)


def test_through_a_store_revision(tmp_path):
    m, v = megatron(), vllm()
    store = reshard.WeightStore(f"fs://{tmp_path / 'store'}")
    manifest = store.upload(m.placement, bound(m, filled(m)))
    dst = poisoned(v)
    store.load(manifest.manifest_key, v.placement, bound(v, dst))
    for p, params in dst.items():
        v.zero_padding(p, params)
    check_every_byte(v, dst)


def test_through_a_checkpoint(tmp_path):
    m, v = megatron(), vllm()
    reshard.hf.write(m.placement, bound(m, filled(m)), tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text(
        __import__("json").dumps(CONFIG))
    ckpt = reshard.hf.Checkpoint(tmp_path / "ckpt")
    # The layout from the checkpoint itself equals the config-only one.
    assert reshard.engines.layout(ckpt, engine="vllm", tp=4).placement \
        .placement_id == v.placement.placement_id
    dst = poisoned(v)
    report = reshard.hf.load(ckpt, v.placement, bound(v, dst))
    assert report.bytes > 0
    for p, params in dst.items():
        v.zero_padding(p, params)
    check_every_byte(v, dst)


def test_fp8_engine_layout_empty_without_torch_float8(tmp_path):
    """empty() of an FP8 layout used to raise AttributeError on a torch
    without float8 dtypes (Debian's 1.13): its FP8 parameters are uint8
    tensors of their shape there, which bind() takes, and the bytes then
    move exactly (locally and through a store revision)."""
    fp8 = dict(quantize="fp8", fp8_block=(2, 2))
    v4 = reshard.engines.layout(CONFIG, engine="vllm", tp=4, **fp8)
    v2 = reshard.engines.layout(CONFIG, engine="vllm", tp=2, **fp8)
    p = "p-d0-p0-e0-t1"
    params = v4.empty(p)
    name = "model.layers.0.self_attn.qkv_proj.weight"
    assert v4.parameters(p)[name] == ((12, 16), "float8_e4m3fn")
    want = getattr(torch, "float8_e4m3fn", torch.uint8)
    for n, (shape, dtype) in v4.parameters(p).items():
        assert tuple(params[n].shape) == shape, n
        assert params[n].dtype == (want if dtype == "float8_e4m3fn" else
                                   getattr(torch, dtype)), n
        if ".attn." in n:  # vLLM's KV-cache scales: -1.0 (a fill)
            assert params[n].tolist() == -1.0, n
        else:
            assert int(params[n].count_nonzero()) == 0, n
    if not hasattr(torch, "float8_e4m3fn"):
        assert params[name].dtype == torch.uint8
    src, dst = filled(v2), poisoned(v4)
    report = reshard.reshard(v2.placement, bound(v2, src), v4.placement,
                             bound(v4, dst))
    for q, tensors in dst.items():
        v4.zero_padding(q, tensors)
    assert check_every_byte(v4, dst) >= report.bytes > 0
    store = reshard.WeightStore(f"fs://{tmp_path / 'store'}")
    manifest = store.upload(v2.placement, bound(v2, src))
    again = poisoned(v4)
    store.load(manifest.manifest_key, v4.placement, bound(v4, again))
    for q, tensors in again.items():
        v4.zero_padding(q, tensors)
    check_every_byte(v4, again)


def test_bind_refuses_naming_the_parameter():
    v = vllm()
    p = "p-d0-p0-e0-t1"
    params = v.empty(p)
    name = "model.layers.0.mlp.down_proj.weight"
    wrong = dict(params, **{name: torch.zeros(16, 7, dtype=torch.bfloat16)})
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"parameter 'model.layers.0.mlp.down_proj."
                             r"weight' of participant 'p-d0-p0-e0-t1' \(vllm@0.33 "
                             r"layout\) has shape \[16, 7\]; the layout "
                             r"gives it \[16, 6\] bfloat16"):
        v.bind(p, wrong)
    wrong = dict(params, **{name: torch.zeros(16, 6, dtype=torch.float16)})
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"has dtype float16; the layout gives it "
                             r"bfloat16"):
        v.bind(p, wrong)
    missing = {k: t for k, t in params.items() if k != name}
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"parameter 'model.layers.0.mlp.down_proj."
                             r"weight' of participant 'p-d0-p0-e0-t1' \(vllm@0.33 "
                             r"layout\) was not given"):
        v.bind(p, missing)
    extra = dict(params, **{"lm_head.bias": torch.zeros(4)})
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"participant 'p-d0-p0-e0-t1' of the vllm@0.33 layout "
                             r"has no parameter 'lm_head.bias' \(pass "
                             r"strict=False"):
        v.bind(p, extra)
    assert len(v.bind(p, extra, strict=False)) == len(v.bind(p, params))
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"the vllm@0.33 layout has no participant 'p-d0-p0-"
                             r"e0-t9'"):
        v.parameters("p-d0-p0-e0-t9")


def test_refused_grids_name_the_reason():
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"megatron refuses TP 4: num_key_value_heads "
                             r"\(query groups\) = 2 is not divisible by 4"):
        reshard.engines.layout(CONFIG, engine="megatron", tp=4,
                               make_vocab_size_divisible_by=4)
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"engine trt: unknown engine \(supported: hf, "
                             r"megatron, sglang, vllm@0.33 \(= vllm\), "
                             r"vllm@<0.33, vllm@<0.10.2\)"):
        reshard.engines.layout(CONFIG, engine="trt", tp=2)
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"engine vllm@0.34: release 0.34 is newer"):
        reshard.engines.layout(CONFIG, engine="vllm@0.34", tp=2)


def test_engine_specs_select_the_release():
    for spec, canonical in (("vllm", "vllm@0.33"), ("vllm@0.33.1",
                            "vllm@0.33"), ("vllm@<0.33", "vllm@<0.33"),
                            ("vllm@0.32", "vllm@<0.33"),
                            ("sglang", "sglang")):
        v = reshard.engines.layout(CONFIG, engine=spec, tp=2)
        assert v.engine == canonical, spec
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"config must be a config.json path"):
        reshard.engines.layout(42)


def test_the_prototype_compat_layer_refuses_grouped_splits():
    from reshard.compat import mooncake
    wire = vllm().placement.to_json()
    assert '"shards":2' in wire
    with pytest.raises(ValueError,
                       match=r"grouped split axis \(tp split on dim 0 in 2 "
                             r"shards\) is a reshard extension the prototype "
                             r"contract cannot express"):
        mooncake.weight_placement_from_json(wire)
    # Without grouped splits (vLLM TP 2 over 2 KV heads) it reads as ever.
    tp2 = reshard.engines.layout(CONFIG, engine="vllm", tp=2).placement
    back = mooncake.weight_placement_from_json(tp2.to_json())
    assert back.placement_id == tp2.placement_id


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 16, "vocab_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 2,
    "intermediate_size": 32, "moe_intermediate_size": 8,
    "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1,
    "topk_group": 1, "topk_method": "noaux_tc", "q_lora_rank": None,
    "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
    "v_head_dim": 4, "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_sequence_parallel_moe_keeps_shared_experts_whole():
    name = "model.layers.1.mlp.shared_experts.gate_up_proj.weight"
    for mode, shape in (("auto", (16, 16)), ("on", (16, 16)),
                        ("off", (8, 16))):
        v = reshard.engines.layout(DEEPSEEK_V3, engine="vllm", tp=2, dp=2,
                                   ep=4, sequence_parallel_moe=mode)
        assert tuple(v.parameters("p-d1-p0-e2-t0")[name][0]) == shape, mode
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"vllm runs sequence-parallel MoE only with "
                             r"expert parallelism, TP > 1 and DP > 1, not at "
                             r"TP 2, DP 1, EP 2"):
        reshard.engines.layout(DEEPSEEK_V3, engine="vllm", tp=2, ep=2,
                               sequence_parallel_moe="on")
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"sequence-parallel MoE must be auto, on or "
                             r"off, not maybe"):
        reshard.engines.layout(DEEPSEEK_V3, engine="vllm", tp=2,
                               sequence_parallel_moe="maybe")


MIXTRAL_6 = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "hidden_size": 32, "vocab_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 24, "num_local_experts": 6,
    "num_experts_per_tok": 2, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_ranks_without_experts_hold_zero_size_parameters():
    v = reshard.engines.layout(MIXTRAL_6, engine="vllm", tp=4, dp=2, ep=8)
    x = "model.layers.0.block_sparse_moe.experts.routed_experts."
    for part, n in (("p-d1-p0-e5-t1", 1), ("p-d1-p0-e6-t2", 0),
                    ("p-d1-p0-e7-t3", 0)):
        shapes = v.parameters(part)
        assert tuple(shapes[x + "w13_weight"][0]) == (n, 48, 32), part
        assert tuple(shapes[x + "w2_weight"][0]) == (n, 32, 24), part
        params = v.empty(part)
        assert params[x + "w13_weight"].numel() == n * 48 * 32
        views = v.bind(part, params)  # a zero-size tensor binds too
        assert len(views) > 0


def test_a_vocabulary_whose_last_tp_rank_holds_only_padding():
    # Vocabulary 100 padded to 128 at TP 8: rank 6 holds rows 96-99 and
    # rank 7 only padding; the placement splits the vocabulary over TP
    # ranks 0-6 (a partial split), and rank 7 holds no fragment of it.
    cfg = dict(CONFIG, vocab_size=100, num_attention_heads=8)
    tp8 = reshard.engines.layout(cfg, engine="vllm", tp=8)
    tp2 = reshard.engines.layout(cfg, engine="vllm", tp=2)
    axis = tp8.placement.find_tensor("lm_head.weight").parallel_axes[0]
    assert (axis.semantics, axis.kind, axis.dim, axis.ranks,
            axis.shards) == ("split", "tp", 0, 7, None)
    assert axis == reshard.PartialSplitAxis("tp", 0, 7)
    assert repr(axis) == "PartialSplitAxis('tp', 0, 7)"
    assert tp2.placement.find_tensor(
        "lm_head.weight").parallel_axes[0].ranks is None
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"partial split axis ranks must be positive, "
                             r"got 0"):
        reshard.PartialSplitAxis("tp", 0, 0)
    maps = tp8.parameter_maps("p-d0-p0-e0-t7")
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert tp8.parameters("p-d0-p0-e0-t7")[name] == ((16, 16),
                                                         "bfloat16")
        assert [(p.offset, p.nbytes, p.fragment)
                for p in maps[name].pieces] == [(0, 16 * 16 * 2, None)]
    # The wire carries the extension and reads back to the same identity;
    # the prototype-compatible layer refuses it.
    wire = tp8.placement.to_json()
    assert ('{"dim":0,"kind":"tp","ranks":7,"semantics":"split"}' in wire)
    back = reshard.WeightPlacementManifest.from_json(wire)
    assert back.placement_id == tp8.placement.placement_id
    assert back.to_json() == wire
    from reshard.compat import mooncake
    with pytest.raises(ValueError,
                       match=r"partial split axis \(tp split on dim 0 over "
                             r"its first 7 ranks\) is a reshard extension "
                             r"the prototype contract cannot express"):
        mooncake.weight_placement_from_json(wire)
    # TP 2 -> TP 8 -> TP 2, every byte (padding zero) checked.
    src, dst = filled(tp2), poisoned(tp8)
    reshard.reshard(tp2.placement, bound(tp2, src), tp8.placement,
                    bound(tp8, dst))
    for p, params in dst.items():
        tp8.zero_padding(p, params)
    assert check_every_byte(tp8, dst) > 0
    back2 = poisoned(tp2)
    reshard.reshard(tp8.placement, bound(tp8, dst), tp2.placement,
                    bound(tp2, back2))
    for p in tp2.participants:
        tp2.zero_padding(p, back2[p])
    assert check_every_byte(tp2, back2) > 0


def test_fp8_kv_cache_scales_are_fills_written_by_empty_and_zero_padding():
    """With an FP8 quant config vLLM's attention holds q/k/v/prob_scale:
    0-dim, the model dtype, -1.0, in no checkpoint. The maps carry them as
    fill pieces, which empty() and zero_padding() write, bind() never
    moves, and the JSON and the map id carry."""
    v = reshard.engines.layout(CONFIG, engine="vllm", tp=2, quantize="fp8",
                               fp8_block=(2, 2))
    p = "p-d0-p0-e0-t0"
    a = "model.layers.1.self_attn.attn."
    names = [n for n in v.parameters(p) if n.startswith(a)]
    assert names == [a + s for s in ("q_scale", "k_scale", "v_scale",
                                     "prob_scale")]
    order = list(v.parameters(p))
    assert order.index(a + "q_scale") == order.index(
        "model.layers.1.self_attn.o_proj.weight_scale_inv") + 1
    maps = v.parameter_maps(p)
    for n in names:
        assert v.parameters(p)[n] == ((), "bfloat16")
        assert maps[n].pieces == (reshard.engines.Piece(0, 2, None,
                                                        b"\x80\xbf"),)
    params = v.empty(p)
    for n in names:
        assert params[n].dtype == torch.bfloat16
        assert params[n].tolist() == -1.0
    views = v.bind(p, params)
    assert not any(view.data_ptr() == params[n].data_ptr()
                   for view in views.values() for n in names)
    for n in names:
        params[n].fill_(7.0)
    v.zero_padding(p, params)
    for n in names:
        assert params[n].tolist() == -1.0, n
    # numpy arrays too (bit patterns: bfloat16 as uint16).
    arrays = {n: np.zeros(shape, np.uint16 if dtype == "bfloat16"
                          else np.uint8 if dtype == "float8_e4m3fn"
                          else np.float32)
              for n, (shape, dtype) in v.parameters(p).items()}
    v.zero_padding(p, arrays)
    assert int(arrays[a + "k_scale"]) == 0xBF80
    # Unquantized: no scales.
    assert not any(".attn." in n for n in vllm().parameters(p))
