"""Errors that say why: descriptor mismatches name the differing field and
both values; a tensor named in its unfused form where the placement holds
the fused one (or the reverse) says so."""

import pytest
import torch

import reshard
from reshard._fused import hint_for_missing, hint_for_unknown
from patterns import split_placement


def _placement(names, shape=(8, 4), dtype="bfloat16"):
    """Tensors `names`, each split on dim 0 over two TP ranks."""
    descs = [reshard.TensorDescriptor(n, list(shape), dtype, 2,
                                      shard_dims=[0],
                                      parallel_axes=[reshard.SplitAxis("tp",
                                                                       0)])
             for n in names]
    topology = reshard.ParallelTopology(tp_size=2, participants=[
        reshard.TopologyParticipant(f"t{r}", reshard.ParallelRank(tp=r))
        for r in range(2)])
    rows = shape[0] // 2
    fragments = [reshard.PlacementFragment(n, [r * rows, 0],
                                           [rows, shape[1]],
                                           rows * shape[1] * 2,
                                           reshard.ParallelRank(tp=r))
                 for n in names for r in range(2)]
    return reshard.WeightPlacementManifest.from_fragments(
        "m", "r1", 1, "s", topology, descs, fragments)


ATTN = "model.layers.0.self_attn."


def _zeros():
    return torch.zeros((4, 4), dtype=torch.bfloat16)


def test_unfused_name_for_a_fused_placement_names_the_fused_tensor():
    fused = _placement([ATTN + "qkv_proj.weight"])
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(fused, "t0", {ATTN + "q_proj.weight": _zeros()})
    assert str(e.value) == (
        f"binding tensor '{ATTN}q_proj.weight' of participant 't0' matches "
        f"no fragment of it; the placement holds the fused tensor "
        f"'{ATTN}qkv_proj.weight', which covers q_proj: pass the fused "
        "parameter under that name, or lay the placement out with unfused "
        "tensors")


def test_fused_name_for_an_unfused_placement_asks_for_views():
    unfused = _placement([ATTN + p + ".weight"
                          for p in ("q_proj", "k_proj", "v_proj")])
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(unfused, "t0",
                             {ATTN + "qkv_proj.weight": _zeros()})
    message = str(e.value)
    assert "the placement holds the unfused tensors " \
        f"'{ATTN}q_proj.weight', '{ATTN}k_proj.weight', " \
        f"'{ATTN}v_proj.weight': bind them as views of the fused parameter" \
        in message, message


def test_missing_member_of_a_given_fused_parameter_is_named():
    mlp = "model.layers.3.mlp."
    placement = _placement([mlp + "gate_proj.weight", mlp + "up_proj.weight",
                            mlp + "gate_up_proj.weight"])
    given = {mlp + "gate_up_proj.weight": _zeros(),
             mlp + "up_proj.weight": _zeros()}
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(placement, "t1", given)
    message = str(e.value)
    assert message.startswith(
        f"binding tensors of participant 't1' lack tensor "
        f"'{mlp}gate_proj.weight' (fragment "), message
    assert message.endswith(
        f"; the tensors given include the fused '{mlp}gate_up_proj.weight': "
        "bind the placement's gate_proj as a view of it (its slice along "
        "the fused dimension, e.g. torch.split)"), message


def test_hint_rules():
    # Families: q/k/v -> qkv_proj; gate/up -> gate_up_proj or fc1; w1/w3 ->
    # w13. Only whole name segments count.
    assert hint_for_unknown("e.0.w1.weight", {"e.0.w13.weight"}).startswith(
        "; the placement holds the fused tensor 'e.0.w13.weight'")
    assert "fc1" in hint_for_unknown("l.mlp.up_proj.weight",
                                     {"l.mlp.fc1.weight"})
    assert hint_for_unknown("l.xq_proj.weight", {"l.xqkv_proj.weight"}) == ""
    assert hint_for_unknown("l.q_proj.weight", {"l.o_proj.weight"}) == ""
    assert "unfused 'l.gate_proj.weight', 'l.up_proj.weight'" in \
        hint_for_missing("l.gate_up_proj.weight",
                         {"l.gate_proj.weight", "l.up_proj.weight"})
    assert hint_for_missing("l.norm.weight", {"l.q_proj.weight"}) == ""


def test_descriptor_mismatch_names_field_and_values():
    src = split_placement("w", (8, 4), "bfloat16", 2, 2, 0, "a")
    dst = split_placement("w", (8, 4), "float16", 2, 2, 0, "b")
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(src, dst)
    assert str(e.value).endswith(
        "tensor descriptor mismatch: w: dtype bfloat16 (source) vs float16 "
        "(target)"), str(e.value)
    wide = split_placement("w", (8, 8), "bfloat16", 2, 2, 0, "c")
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"global_shape \[8, 4\] \(source\) vs \[8, 8\] "
                             r"\(target\)"):
        reshard.plan(src, wide)
