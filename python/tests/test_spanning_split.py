"""Spanning split axes from Python: a TP split spanning DP (vLLM's routed
experts at DP > 1 without EP), its wire key "over", and the
prototype-compatible layer's refusal of it."""
import pytest

import reshard
import reshard.engines


def test_axis_and_its_errors():
    axis = reshard.SpanningSplitAxis("tp", 1, "dp")
    assert (axis.semantics, axis.kind, axis.dim, axis.over) == (
        "split", "tp", 1, "dp")
    assert axis.shards is None and axis.ranks is None
    assert repr(axis) == "SpanningSplitAxis('tp', 1, 'dp')"
    assert axis == reshard.SpanningSplitAxis("tp", 1, "dp")
    assert axis != reshard.SplitAxis("tp", 1)
    assert hash(axis) != hash(reshard.SplitAxis("tp", 1))
    assert reshard.SplitAxis("tp", 1).over is None
    with pytest.raises(ValueError,
                       match=r"^a spanning split axis splits tp over dp, "
                             r"not ep over dp$"):
        reshard.SpanningSplitAxis("ep", 0, "dp")


def test_vllm_experts_at_dp2_carry_it_and_compat_refuses():
    cfg = {"architectures": ["Qwen3MoeForCausalLM"],
           "model_type": "qwen3_moe", "hidden_size": 32, "vocab_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 48,
           "moe_intermediate_size": 16, "num_experts": 4,
           "num_experts_per_tok": 2, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}
    layout = reshard.engines.layout(cfg, engine="vllm", tp=2, dp=2)
    wire = layout.placement.to_json()
    assert '{"dim":0,"kind":"tp","over":"dp","semantics":"split"}' in wire
    back = reshard.WeightPlacementManifest.from_json(wire)
    assert back.placement_id == layout.placement.placement_id
    assert back.to_json() == wire
    from reshard.compat import mooncake
    with pytest.raises(ValueError,
                       match=r"spanning split axis \(tp split on dim 1 over "
                             r"dp\) is a reshard extension the prototype "
                             r"contract cannot express"):
        mooncake.weight_placement_from_json(wire)
