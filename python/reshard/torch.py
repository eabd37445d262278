"""Placements and bindings from torch tensors.

One rank describes the tensors it holds; the helpers turn that into its
``WeightPlacementPart`` and a function that binds the same tensors::

    import reshard
    from reshard.torch import Split, Replicated, Ownership, Shard

    topology = reshard.torch.grid_topology(tp=2, dp=2)
    local = reshard.torch.build_part(
        {"embed": embed_shard, "norm": norm},           # this rank's tensors
        {"embed": Split("tp", dim=0),                   # vocab-parallel
         "norm": Replicated("tp")},                     # whole on each TP rank
        topology=topology, rank=reshard.ParallelRank(dp=d, tp=t),
        resource_id="my-model", revision="step-1",
        placement_set_id="trainer", default_axes=[Replicated("dp")])
    placement = reshard.torch.gather_placement(
        "fs:///shared/rdzv", "trainer-step-1", rank, world, local.part,
        topology)                                       # every rank's parts
    binding = local.bind(placement)                     # reshard.bind_tensors

Layouts (``build_part``'s `layout`, per local name):

* ``Split(kind, dim)``: the tensor is split evenly along `dim` over the
  ranks of `kind` (tp, or ep on dim 0 for grouped experts); the global
  shape and this rank's offset follow from the topology's axis sizes.
* ``Replicated(kind)``: every rank of `kind` holds the whole tensor.
* ``Ownership(kind)``: only the ranks that have the tensor hold it (PP
  stages: a tensor is in the dict only on its stage; separately allocated
  experts: ``Ownership("ep")`` with ``Shard(expert_id=...)``).
* a list of those, or ``Shard(axes, global_shape=, global_offset=,
  tensor_id=, layer_id=, expert_id=, aliases=, pipeline_stage_id=)`` to
  give the box explicitly (uneven splits), rename the tensor (stage-local
  PP names to global ones) or set descriptor fields.

``Split``, ``Replicated`` and ``Ownership`` are other names of
``reshard.SplitAxis``, ``ReplicatedAxis`` and ``OwnershipAxis`` and return
those values: either spelling (and the contract's extensions, e.g.
``reshard.PartialSplitAxis``) may stand in a layout.

Every active DP and PP axis needs explicit semantics on every tensor
(``default_axes=[Replicated("dp")]`` is the usual one); an active TP or EP
axis may stay undeclared only where it is coupled to a declared one (EP
mapped onto the TP ranks: ranks with ep == tp), which the assembled
placement checks. The dtype name is the torch dtype's (``bfloat16``,
``float32``, ...), the itemsize its element size. A 0-dimensional tensor
is described as shape (1,).
"""

from __future__ import annotations

from typing import (Any, Callable, Dict, Iterable, Mapping, NamedTuple,
                    Optional, Sequence)

import torch as _torch

from reshard import _reshard
from reshard._api import bind_tensors
from reshard._frameworks import (  # noqa: F401
    Ownership,
    Replicated,
    Shard,
    Split,
    assemble,
    gather_placement,
    grid_ranks,
    grid_topology,
    participant_name,
    part_from_json,
    part_to_json,
    topology_from_ranks,
)
from reshard import _frameworks

__all__ = [
    "Ownership", "RankPart", "Replicated", "Shard", "Split", "assemble",
    "build_part", "dtype_name", "gather_placement", "grid_ranks",
    "grid_topology", "participant_name", "part_from_json", "part_to_json",
    "placement_of", "topology_from_ranks",
]


def dtype_name(dtype: _torch.dtype) -> str:
    """The placement dtype name of a torch dtype (``torch.bfloat16`` ->
    ``bfloat16``)."""
    return str(dtype).replace("torch.", "")


class RankPart(NamedTuple):
    """One participant's part, its binder and the tensors it binds.

    part: the ``WeightPlacementPart``.
    bind: ``bind(placement, **options) -> WeightRuntimeBindingManifest``
        binds `tensors` to the assembled placement (``reshard.bind_tensors``;
        options: instance_id, generation, lease_id, worker_id, writable).
    tensors: {tensor id: tensor}: the caller's tensors themselves (views
        sharing their storage), the mapping the paths take for this
        participant, e.g. ``reshard.reshard(..., {participant_id: tensors})``
        or ``LiveSession.update(sources=local.by_participant())``.
    """

    part: _reshard.WeightPlacementPart
    bind: Callable[..., _reshard.WeightRuntimeBindingManifest]
    tensors: Mapping[str, _torch.Tensor]

    @property
    def participant_id(self) -> str:
        return self.part.participant_id

    def by_participant(self) -> Dict[str, Mapping[str, _torch.Tensor]]:
        """{participant id: tensors}, as reshard(), WeightStore and
        LiveSession take them."""
        return {self.part.participant_id: self.tensors}


def _local(name: str, t: Any) -> _torch.Tensor:
    if not isinstance(name, str) or not name:
        raise _reshard.InvalidArgumentError(
            f"tensor names must be non-empty strings, got {name!r}")
    if not isinstance(t, _torch.Tensor):
        raise _reshard.InvalidArgumentError(
            f"tensor '{name}' is a {type(t).__name__}, not a torch tensor")
    if t.is_sparse:
        raise _reshard.InvalidArgumentError(f"tensor '{name}' is sparse")
    if not t.is_contiguous():
        raise _reshard.InvalidArgumentError(
            f"tensor '{name}' is not contiguous (strides {tuple(t.stride())} "
            f"for shape {tuple(t.shape)}); a binding needs the tensor's own "
            "contiguous storage")
    t = t.detach()
    return t.reshape(1) if t.dim() == 0 else t


def build_part(tensors: Mapping[str, _torch.Tensor], layout: Any, *,
               topology: _reshard.ParallelTopology,
               resource_id: str, revision: str, placement_set_id: str,
               weight_generation: int = 1,
               rank: Optional[_reshard.ParallelRank] = None,
               participant_id: Optional[str] = None,
               default_axes: Sequence[Any] = (),
               layout_fingerprint: str = "row-major") -> RankPart:
    """The part of one participant from its tensors.

    tensors: {local name: tensor} (parameters of this rank; contiguous).
    layout: {local name: layout} or a callable ``name -> layout`` (see the
        module docstring); a tensor without a layout is refused.
    topology: the placement's topology (axis sizes, participants); the
        participant is found by `rank` or `participant_id`.
    default_axes: axis rules of every tensor unless it declares that kind.

    Refuses, naming the tensor: a missing layout, a non-contiguous or empty
    tensor, a Split dim out of range, a local shape inconsistent with the
    given global shape or with an even split, an offset out of range, a
    tensor id given twice, an active DP or PP axis without semantics, and
    everything the contract's descriptor and fragment rules reject.
    """
    if not isinstance(tensors, Mapping):
        raise _reshard.InvalidArgumentError(
            f"tensors must be a mapping of names to tensors, got "
            f"{type(tensors).__name__}")
    if not callable(layout) and not isinstance(layout, Mapping):
        raise _reshard.InvalidArgumentError(
            "layout must be a mapping of names to layouts or a callable")
    pid, prank = _frameworks.resolve_participant(topology, rank,
                                                 participant_id)
    local = {name: _local(name, t) for name, t in tensors.items()}
    described = [_frameworks.LocalTensor(name, tuple(t.shape),
                                         dtype_name(t.dtype), t.element_size())
                 for name, t in local.items()]
    pieces = _frameworks.build_pieces(
        described, layout, topology=topology, rank=prank,
        default_axes=default_axes, layout_fingerprint=layout_fingerprint)
    part = _frameworks.make_part(
        pieces, topology=topology, participant_id=pid, rank=prank,
        resource_id=resource_id, revision=revision,
        weight_generation=weight_generation,
        placement_set_id=placement_set_id)
    by_id = {p.descriptor.tensor_id: local[p.name] for p in pieces}

    def bind(placement: _reshard.WeightPlacementManifest,
             **options: Any) -> _reshard.WeightRuntimeBindingManifest:
        """The validated runtime binding of this participant's tensors in
        `placement` (which must contain this part)."""
        mine = placement.find_part(pid)
        if mine is None:
            raise _reshard.InvalidArgumentError(
                f"placement {placement.placement_id} has no participant "
                f"'{pid}'")
        if list(mine.fragments) != list(part.fragments):
            raise _reshard.InvalidArgumentError(
                f"placement {placement.placement_id} holds another part for "
                f"participant '{pid}' than the one built from these tensors")
        return bind_tensors(placement, pid, by_id, **options)

    return RankPart(part, bind, by_id)


def placement_of(parts: Iterable[Any], topology: _reshard.ParallelTopology
                 ) -> _reshard.WeightPlacementManifest:
    """``assemble`` over RankParts or WeightPlacementParts."""
    return assemble([p.part if isinstance(p, RankPart) else p for p in parts],
                    topology)

