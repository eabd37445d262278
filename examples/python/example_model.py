"""A small MoE transformer in two framework layouts, for the examples.

* ``megatron_rank``: the parameters one rank of a Megatron-style trainer
  holds (stage-local names ``decoder.layers.<j>...``; TP column/row
  parallel linears, vocab-parallel embedding and output layer, layer norms
  replicated over TP, PP stages owning their layers, grouped experts split
  over EP) and their layouts for
  ``reshard.torch.build_part``.
* ``engine_rank``: the parameters one rank of an inference engine holds
  (global names ``model.layers.<i>...``; TP for the dense weights, EP for
  the grouped experts, either over the same workers as TP (ep == tp) or
  whole experts on every rank; DP replicas).

Both describe the same global tensors (the ids of ``global_tensors``), so
placements built from them plan against each other. ``fill`` and
``expected`` give every element a value derived from its global index,
the tensor and the step, so a receiver can check every byte.
"""

from __future__ import annotations

import zlib
from typing import Dict, Tuple

import torch

import reshard
from reshard.torch import Ownership, Replicated, Shard, Split

VOCAB, HIDDEN, FFN, EXPERTS = 32, 16, 8, 4
RESOURCE = "example-moe"


def global_tensors(layers: int) -> Dict[str, Tuple[Tuple[int, ...],
                                                   torch.dtype]]:
    """{tensor id: (global shape, dtype)} of the model."""
    out = {"model.embed_tokens.weight": ((VOCAB, HIDDEN), torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = ((HIDDEN,), torch.float32)
        out[p + "self_attn.qkv_proj.weight"] = ((3 * HIDDEN, HIDDEN),
                                                torch.bfloat16)
        out[p + "self_attn.o_proj.weight"] = ((HIDDEN, HIDDEN), torch.bfloat16)
        out[p + "mlp.experts.w13_weight"] = ((EXPERTS, 2 * FFN, HIDDEN),
                                             torch.bfloat16)
        out[p + "mlp.experts.w2_weight"] = ((EXPERTS, HIDDEN, FFN),
                                            torch.bfloat16)
    out["model.norm.weight"] = ((HIDDEN,), torch.float32)
    out["lm_head.weight"] = ((VOCAB, HIDDEN), torch.bfloat16)
    return out


def _layer_of(tensor_id: str):
    parts = tensor_id.split(".")
    return int(parts[2]) if parts[:2] == ["model", "layers"] else None


def megatron_rank(rank: reshard.ParallelRank, *, tp: int, pp: int, ep: int,
                  layers: int, ep_folded_on_tp: bool = False):
    """({local name: tensor}, layout) of one Megatron-style trainer rank.

    Dense weights: Split over TP, Replicated over EP (the EP ranks are
    data parallel for them), Ownership over PP. Experts: grouped tensors
    split over EP on dim 0, whole experts (expert tensor parallelism 1)
    replicated over the TP ranks; with `ep_folded_on_tp` EP is folded onto
    the TP ranks instead (ranks with ep == tp, TP undeclared on experts and
    EP undeclared on dense weights: each follows the other).
    """
    per_stage = layers // pp
    first = rank.pp * per_stage
    layout = {}
    tensors = {}
    shapes = global_tensors(layers)

    def add(local: str, tensor_id: str, axes, shape):
        dtype = shapes[tensor_id][1]
        tensors[local] = torch.empty(shape, dtype=dtype)
        layout[local] = Shard(axes=axes, tensor_id=tensor_id,
                              layer_id=_layer_of(tensor_id))

    dense = [Ownership("pp")] + ([] if ep_folded_on_tp else
                                 [Replicated("ep")])
    h, t = HIDDEN, tp
    e_local = EXPERTS // ep
    if rank.pp == 0:
        add("embedding.word_embeddings.weight", "model.embed_tokens.weight",
            dense + [Split("tp", 0)], (VOCAB // t, h))
    for j in range(per_stage):
        i = first + j
        m, g = f"decoder.layers.{j}.", f"model.layers.{i}."
        add(m + "input_layernorm.weight", g + "input_layernorm.weight",
            dense + [Replicated("tp")], (h,))
        add(m + "self_attention.linear_qkv.weight",
            g + "self_attn.qkv_proj.weight", dense + [Split("tp", 0)],
            (3 * h // t, h))
        add(m + "self_attention.linear_proj.weight",
            g + "self_attn.o_proj.weight", dense + [Split("tp", 1)],
            (h, h // t))
        # Grouped experts: rank r of EP holds experts [r*E/ep, (r+1)*E/ep),
        # each whole (expert tensor parallelism 1): w13 is [gate; up] per
        # expert, as inference engines fuse it.
        experts = [Ownership("pp"), Split("ep", 0)] + (
            [] if ep_folded_on_tp else [Replicated("tp")])
        add(m + "mlp.experts.linear_fc1.weight", g + "mlp.experts.w13_weight",
            experts, (e_local, 2 * FFN, h))
        add(m + "mlp.experts.linear_fc2.weight", g + "mlp.experts.w2_weight",
            experts, (e_local, h, FFN))
    if rank.pp == pp - 1:
        add("decoder.final_layernorm.weight", "model.norm.weight",
            dense + [Replicated("tp")], (h,))
        add("output_layer.weight", "lm_head.weight", dense + [Split("tp", 0)],
            (VOCAB // t, h))
    return tensors, layout


def engine_rank(rank: reshard.ParallelRank, *, tp: int, ep: int,
                layers: int):
    """({tensor id: tensor}, layout) of one inference engine rank.

    Dense weights split over TP (layer norms whole on every TP rank);
    grouped experts split over EP on dim 0 when ep > 1 (EP over the TP
    workers: ranks with ep == tp), whole otherwise. Replicated over DP.
    """
    tensors, layout = {}, {}
    for tid, (shape, dtype) in global_tensors(layers).items():
        shape = list(shape)
        if "experts" in tid:
            axes = [Split("ep", 0)] if ep > 1 else []
            shape[0] //= ep
        elif "norm" in tid:
            axes = [Replicated("tp")]
        else:
            dim = 1 if "o_proj" in tid else 0
            axes = [Split("tp", dim)]
            shape[dim] //= tp
        tensors[tid] = torch.empty(shape, dtype=dtype)
        layout[tid] = Shard(axes=axes, layer_id=_layer_of(tid))
    return tensors, layout


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                8: torch.int64}


def expected(tensor_id: str, global_shape, global_offset, local_shape,
             itemsize: int, step: int) -> torch.Tensor:
    """The bits of every element of a box as a tensor of the signed (or,
    for one byte, unsigned) integer type of `itemsize`: a hash of the
    element's global row-major index, the tensor id and the step."""
    index = torch.zeros(tuple(local_shape), dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(global_shape))):
        view = [1] * len(global_shape)
        view[d] = local_shape[d]
        axis = torch.arange(global_offset[d], global_offset[d] +
                            local_shape[d], dtype=torch.int64)
        index = index + (axis * stride).view(view)
        stride *= global_shape[d]
    salt = zlib.crc32(tensor_id.encode()) & 0xFFFFFFFF
    h = (index * 2654435761 + step * 40503 + salt) % (1 << 32)
    h = h ^ (h >> 15)
    if itemsize == 1:
        return (h & 0xFF).to(torch.uint8)
    if itemsize == 2:
        h = h & 0xFFFF
        return torch.where(h >= 1 << 15, h - (1 << 16), h).to(torch.int16)
    if itemsize == 4:
        return torch.where(h >= 1 << 31, h - (1 << 32), h).to(torch.int32)
    return h * 4096 + (h & 0xFFF)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers of its itemsize (same storage)."""
    return t.view(_INT_OF_SIZE[t.element_size()])


def fill_part(local, placement: reshard.Placement, step: int) -> None:
    """Writes the step's values into every tensor of a RankPart."""
    for f in local.part.fragments:
        d = placement.find_tensor(f.tensor_id)
        bits(local.tensors[f.tensor_id]).copy_(expected(
            f.tensor_id, d.global_shape, f.global_offset, f.local_shape,
            d.itemsize, step))


def check_part(local, placement: reshard.Placement, step: int) -> int:
    """Checks every byte of a RankPart's tensors; returns the bytes checked
    or raises naming the first wrong element."""
    checked = 0
    for f in local.part.fragments:
        d = placement.find_tensor(f.tensor_id)
        got = bits(local.tensors[f.tensor_id])
        want = expected(f.tensor_id, d.global_shape, f.global_offset,
                        f.local_shape, d.itemsize, step)
        wrong = (got != want).nonzero()
        if len(wrong):
            at = tuple(int(i) for i in wrong[0])
            raise AssertionError(
                f"{local.participant_id}: {f.tensor_id} step {step}: element "
                f"{at} of the fragment at {f.global_offset} is "
                f"{int(got[at])}, expected {int(want[at])} "
                f"({len(wrong)} wrong)")
        checked += f.nbytes
    return checked


def poison(local) -> None:
    """Overwrites a RankPart's tensors with 0xFF bytes."""
    for t in local.tensors.values():
        bits(t).fill_(-1 if t.element_size() > 1 else 255)
