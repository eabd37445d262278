"""Placement and runtime-binding value classes of the mooncake compat layer.

Every class is a frozen dataclass with the reference's fields, defaults and
normalisation (tuples, sorted orders). Construction applies the Python-level
scalar rules (exact ints, non-empty strings, sequences) and then builds the
equivalent ``reshard._reshard`` object, which validates the contract rules
and computes the canonical ids; that native object is cached on the value
(``to_native()``) and reused by planning, JSON encoding and binding
validation. Native errors are ``reshard.InvalidArgumentError``, a
``ValueError``, as the reference raises.
"""

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Tuple

from reshard import _reshard as _R
from reshard.compat._checks import (
    KIND_ORDER,
    NativeBacked,
    normalize_aliases,
    require_int,
    require_int_tuple,
    require_items,
    require_optional_int,
    require_sha256,
    require_str,
    require_u64,
    trusted,
)


class ResourceKind(str, enum.Enum):
    """The resource a manifest describes; compares equal to its value."""

    MODEL_WEIGHT = "model_weight"
    KV_CACHE = "kv_cache"


# --------------------------------------------------------------- ranks, axes


@dataclass(frozen=True)
class ParallelRank(NativeBacked):
    """A routing coordinate: dp, tp, pp, ep, each an int >= 0 (default 0)."""

    dp: int = 0
    tp: int = 0
    pp: int = 0
    ep: int = 0

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "ep"):
            require_int(getattr(self, name), f"parallel rank {name}", 0)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.ParallelRank(self.dp, self.tp, self.pp, self.ep)


def _require_kind(kind):
    require_str(kind, "parallel axis kind")
    if kind not in KIND_ORDER:
        raise ValueError(f"unsupported parallel axis kind: {kind}")


@dataclass(frozen=True)
class SplitAxis(NativeBacked):
    """Ranks of `kind` (ep or tp) jointly partition the tensor along `dim`;
    EP must split dimension 0.

    The prototype's spelling of ``reshard.SplitAxis`` (its fields, errors
    and wire form), backed by it; a descriptor also takes reshard's axes."""

    kind: str
    dim: int
    semantics: ClassVar[str] = "split"

    def __post_init__(self):
        _require_kind(self.kind)
        if self.kind not in ("ep", "tp"):
            raise ValueError(f"{self.kind} cannot use split semantics")
        require_int(self.dim, "split axis dim", 0)
        if self.kind == "ep" and self.dim != 0:
            raise ValueError(
                "EP must split the leading logical expert dimension")
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.SplitAxis(self.kind, self.dim)


@dataclass(frozen=True)
class ReplicatedAxis(NativeBacked):
    """Every rank of `kind` holds a complete independent copy."""

    kind: str
    semantics: ClassVar[str] = "replicated"

    def __post_init__(self):
        _require_kind(self.kind)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.ReplicatedAxis(self.kind)


@dataclass(frozen=True)
class OwnershipAxis(NativeBacked):
    """Only the ranks named by fragments hold the tensor."""

    kind: str
    semantics: ClassVar[str] = "ownership"

    def __post_init__(self):
        _require_kind(self.kind)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.OwnershipAxis(self.kind)


_AXIS_TYPES = (SplitAxis, ReplicatedAxis, OwnershipAxis)
_AXIS_BY_SEMANTICS = {"split": SplitAxis, "replicated": ReplicatedAxis,
                      "ownership": OwnershipAxis}


# ---------------------------------------------------------------- tensors


@dataclass(frozen=True)
class TensorDescriptor(NativeBacked):
    """One logical tensor: shape, opaque dtype, itemsize, split dimensions,
    layout fingerprint and parallel axes (sorted dp < pp < ep < tp).

    Rules 3, 5 and 6 apply; the native descriptor checks shard_dims, axis
    kinds, split dimensions and the expert rule."""

    tensor_id: str
    global_shape: Tuple[int, ...]
    dtype: str
    itemsize: int
    shard_dims: Tuple[int, ...]
    layout_fingerprint: str
    parallel_axes: tuple
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None

    def __post_init__(self):
        shape = require_int_tuple(self.global_shape, "global_shape", 1)
        if not shape:
            raise ValueError("global_shape must not be empty")
        require_str(self.tensor_id, "tensor_id")
        require_str(self.dtype, "dtype")
        require_int(self.itemsize, "itemsize", 1)
        shard_dims = require_int_tuple(self.shard_dims, "shard_dims", 0)
        axes = require_items(self.parallel_axes,
                             "TensorDescriptor parallel_axes", object)
        # reshard's own axes (reshard.SplitAxis ...) are the same values.
        axes = tuple(_axis_from_native(a) if isinstance(a, _R.ParallelAxis)
                     else a for a in axes)
        if not all(isinstance(a, _AXIS_TYPES) for a in axes):
            raise ValueError(
                "TensorDescriptor parallel_axes must contain explicit axis "
                "values")
        axes = tuple(sorted(axes, key=lambda a: KIND_ORDER[a.kind]))
        require_optional_int(self.layer_id, "layer_id", 0)
        require_optional_int(self.expert_id, "expert_id", 0)
        require_str(self.layout_fingerprint, "layout_fingerprint")
        object.__setattr__(self, "global_shape", shape)
        object.__setattr__(self, "shard_dims", shard_dims)
        object.__setattr__(self, "parallel_axes", axes)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.TensorDescriptor(
            self.tensor_id, self.global_shape, self.dtype, self.itemsize,
            self.shard_dims, self.layout_fingerprint,
            [a.to_native() for a in self.parallel_axes], self.layer_id,
            self.expert_id)


# -------------------------------------------------------------- fragments


@dataclass(frozen=True, init=False)
class PlacementFragment(NativeBacked):
    """An address-free box of one tensor held by one rank.

    `placement_fragment_id` defaults to the canonical id (SHA-256 of the
    fragment's canonical JSON, computed natively); `aliases` is sorted.
    `pipeline_stage_id` (a virtual pipeline stage, >= 0) takes part in the
    identity only when set. `fragment_id` is an alias of
    `placement_fragment_id`."""

    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    nbytes: int
    rank: ParallelRank
    aliases: Tuple[str, ...]
    placement_fragment_id: str
    pipeline_stage_id: Optional[int]

    def __init__(self, tensor_id, global_offset, local_shape, nbytes, rank,
                 aliases=(), placement_fragment_id=None,
                 pipeline_stage_id=None):
        offset = require_int_tuple(global_offset, "global_offset", 0)
        shape = require_int_tuple(local_shape, "local_shape", 1)
        require_str(tensor_id, "tensor_id")
        require_u64(nbytes, "nbytes", 1)
        if not isinstance(rank, ParallelRank):
            raise ValueError("rank must be a ParallelRank")
        aliases = normalize_aliases(aliases, tensor_id)
        if placement_fragment_id is not None:
            require_str(placement_fragment_id, "placement_fragment_id")
        require_optional_int(pipeline_stage_id, "pipeline_stage_id", 0)
        native = _R.PlacementFragment(tensor_id, offset, shape, nbytes,
                                      rank.to_native(), aliases,
                                      placement_fragment_id, pipeline_stage_id)
        for key, value in (("tensor_id", tensor_id), ("global_offset", offset),
                           ("local_shape", shape), ("nbytes", nbytes),
                           ("rank", rank), ("aliases", aliases),
                           ("placement_fragment_id",
                            native.placement_fragment_id),
                           ("pipeline_stage_id", pipeline_stage_id)):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_native", native)

    @property
    def fragment_id(self):
        """The placement fragment id."""
        return self.placement_fragment_id

    def _build_native(self):
        return _R.PlacementFragment(
            self.tensor_id, self.global_offset, self.local_shape, self.nbytes,
            self.rank.to_native(), self.aliases, self.placement_fragment_id,
            self.pipeline_stage_id)


@dataclass(frozen=True)
class RuntimeBindingFragment(NativeBacked):
    """Where the live bytes of one placement fragment are: a contiguous view
    [address, address + nbytes) inside the allocation [storage_address,
    storage_address + storage_nbytes) of one worker and device.

    Strides of extent-1 dimensions are rewritten to their canonical values.
    `owner` is an opaque keep-alive handle: it takes no part in equality,
    hashing or repr, and is dropped when pickled."""

    placement_fragment_id: str
    fragment_id: str
    address: int
    nbytes: int
    worker_id: str
    endpoint: str
    device: str
    itemsize: int
    local_shape: Tuple[int, ...]
    strides_bytes: Tuple[int, ...]
    storage_address: int
    storage_nbytes: int
    storage_offset_bytes: int
    owner: object = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        for name in ("placement_fragment_id", "fragment_id", "worker_id",
                     "endpoint", "device"):
            require_str(getattr(self, name), name)
        require_u64(self.address, "address", 1)
        require_u64(self.nbytes, "nbytes", 1)
        require_int(self.itemsize, "runtime itemsize", 1)
        shape = require_int_tuple(self.local_shape, "runtime local_shape", 1)
        strides = require_int_tuple(self.strides_bytes,
                                    "runtime strides_bytes", 0)
        require_u64(self.storage_address, "storage_address", 1)
        require_u64(self.storage_nbytes, "storage_nbytes", 1)
        require_u64(self.storage_offset_bytes, "storage_offset_bytes")
        object.__setattr__(self, "local_shape", shape)
        object.__setattr__(self, "strides_bytes", strides)
        native = self._build_native()
        object.__setattr__(self, "strides_bytes", native.strides_bytes)
        object.__setattr__(self, "_native", native)

    def _build_native(self):
        return _R.RuntimeBindingFragment(
            placement_fragment_id=self.placement_fragment_id,
            fragment_id=self.fragment_id, address=self.address,
            nbytes=self.nbytes, worker_id=self.worker_id,
            endpoint=self.endpoint, device=self.device,
            itemsize=self.itemsize, local_shape=self.local_shape,
            strides_bytes=self.strides_bytes,
            storage_address=self.storage_address,
            storage_nbytes=self.storage_nbytes,
            storage_offset_bytes=self.storage_offset_bytes)

    def __getstate__(self):
        state = super().__getstate__()
        state["owner"] = None
        return state


@dataclass(frozen=True)
class WeightRuntimeBindingManifest(NativeBacked):
    """One participant's runtime binding of a placement: identity fence
    (placement_id, placement_digest, instance, generation, lease) and the
    fragments, sorted by placement_fragment_id."""

    resource_id: str
    placement_id: str
    placement_digest: str
    instance_id: str
    generation: int
    lease_id: str
    revision: str
    participant_id: str
    fragments: Tuple[RuntimeBindingFragment, ...]

    @property
    def resource_kind(self):
        """Always ResourceKind.MODEL_WEIGHT."""
        return ResourceKind.MODEL_WEIGHT

    def __post_init__(self):
        for name in ("resource_id", "placement_id", "instance_id", "lease_id",
                     "revision", "participant_id"):
            require_str(getattr(self, name), name)
        require_sha256(self.placement_digest, "placement_digest")
        require_u64(self.generation, "generation")
        fragments = require_items(self.fragments,
                                  "WeightRuntimeBindingManifest fragments",
                                  RuntimeBindingFragment)
        fragments = tuple(sorted(fragments,
                                 key=lambda f: f.placement_fragment_id))
        object.__setattr__(self, "fragments", fragments)
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.WeightRuntimeBindingManifest(
            self.resource_id, self.placement_id, self.placement_digest,
            self.instance_id, self.generation, self.lease_id, self.revision,
            self.participant_id, [f.to_native() for f in self.fragments])


# --------------------------------------------------------------- topology


@dataclass(frozen=True)
class TopologyParticipant(NativeBacked):
    """One participant of a topology and its rank."""

    participant_id: str
    rank: ParallelRank

    def __post_init__(self):
        require_str(self.participant_id, "participant_id")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError(
                "topology participant rank must be a ParallelRank")
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.TopologyParticipant(self.participant_id,
                                      self.rank.to_native())


@dataclass(frozen=True, init=False)
class ParallelTopology(NativeBacked):
    """Axis sizes and participants (sorted by participant_id) of a layout,
    with the canonical `topology_id`; a supplied `topology_id` must equal
    it. `world_size` is the number of participants, not the product of the
    sizes."""

    tp_size: int
    pp_size: int
    ep_size: int
    dp_size: int
    participants: Tuple[TopologyParticipant, ...]
    topology_id: str

    def __init__(self, *, tp_size, pp_size, ep_size, dp_size, participants,
                 topology_id=None):
        for value, name in ((tp_size, "tp_size"), (pp_size, "pp_size"),
                            (ep_size, "ep_size"), (dp_size, "dp_size")):
            require_int(value, name, 1)
        items = require_items(participants, "ParallelTopology participants",
                              TopologyParticipant)
        if not items:
            raise ValueError(
                "parallel topology participants must not be empty")
        if topology_id is not None:
            require_str(topology_id, "topology_id")
        items = tuple(sorted(items, key=lambda p: p.participant_id))
        native = _R.ParallelTopology(
            tp_size=tp_size, pp_size=pp_size, ep_size=ep_size,
            dp_size=dp_size, participants=[p.to_native() for p in items],
            topology_id=topology_id)
        for key, value in (("tp_size", tp_size), ("pp_size", pp_size),
                           ("ep_size", ep_size), ("dp_size", dp_size),
                           ("participants", items),
                           ("topology_id", native.topology_id)):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_native", native)

    @property
    def world_size(self):
        """The number of participants."""
        return len(self.participants)

    def participant(self, participant_id):
        """The participant with this id; ValueError if there is none."""
        for p in self.participants:
            if p.participant_id == participant_id:
                return p
        raise ValueError(f"unknown topology participant: {participant_id}")

    def _build_native(self):
        return _R.ParallelTopology(
            tp_size=self.tp_size, pp_size=self.pp_size, ep_size=self.ep_size,
            dp_size=self.dp_size,
            participants=[p.to_native() for p in self.participants],
            topology_id=self.topology_id)


# ------------------------------------------------------------------ parts


@dataclass(frozen=True)
class WeightPlacementPart(NativeBacked):
    """One participant's address-free contribution: tensors sorted by id,
    fragments sorted by placement_fragment_id (rules 7-14). May be empty."""

    resource_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology_id: str
    participant_id: str
    rank: ParallelRank
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[PlacementFragment, ...]

    def __post_init__(self):
        for name in ("resource_id", "revision", "placement_set_id",
                     "topology_id", "participant_id"):
            require_str(getattr(self, name), name)
        require_u64(self.weight_generation, "weight_generation")
        if not isinstance(self.rank, ParallelRank):
            raise ValueError("placement part rank must be a ParallelRank")
        tensors = require_items(self.tensors, "WeightPlacementPart tensors",
                                TensorDescriptor)
        fragments = require_items(self.fragments,
                                  "WeightPlacementPart fragments",
                                  PlacementFragment)
        object.__setattr__(self, "tensors",
                           tuple(sorted(tensors, key=lambda t: t.tensor_id)))
        object.__setattr__(
            self, "fragments",
            tuple(sorted(fragments, key=lambda f: f.placement_fragment_id)))
        object.__setattr__(self, "_native", self._build_native())

    def _build_native(self):
        return _R.WeightPlacementPart(
            self.resource_id, self.revision, self.weight_generation,
            self.placement_set_id, self.topology_id, self.participant_id,
            self.rank.to_native(), [t.to_native() for t in self.tensors],
            [f.to_native() for f in self.fragments])


# -------------------------------------------------------------- placement


@dataclass(frozen=True, init=False)
class WeightPlacementManifest(NativeBacked):
    """One complete, validated placement of a weight generation (rules
    16-27): parts sorted by participant_id, the union of their tensors and
    fragments, the canonical `placement_id` (a supplied one must equal it)
    and `digest` (hex SHA-256 of the canonical wire JSON)."""

    resource_id: str
    placement_id: str
    revision: str
    weight_generation: int
    placement_set_id: str
    topology: ParallelTopology
    parts: Tuple[WeightPlacementPart, ...]
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[PlacementFragment, ...]

    _CACHES = ("_native", "_fragment_index")

    def __init__(self, *, resource_id, revision, weight_generation,
                 placement_set_id, topology, parts, placement_id=None):
        require_str(resource_id, "resource_id")
        require_str(revision, "revision")
        require_u64(weight_generation, "weight_generation")
        require_str(placement_set_id, "placement_set_id")
        if not isinstance(topology, ParallelTopology):
            raise ValueError("topology must be a ParallelTopology")
        if placement_id is not None:
            require_str(placement_id, "placement_id")
        parts = tuple(sorted(
            require_items(parts, "WeightPlacementManifest parts",
                          WeightPlacementPart),
            key=lambda p: p.participant_id))
        native = _R.WeightPlacementManifest(
            resource_id, revision, weight_generation, placement_set_id,
            topology.to_native(), [p.to_native() for p in parts],
            placement_id)
        tensors = {}
        fragments = {}
        for part in parts:
            for t in part.tensors:
                tensors.setdefault(t.tensor_id, t)
            for f in part.fragments:
                fragments[f.placement_fragment_id] = f
        for key, value in (
                ("resource_id", resource_id),
                ("placement_id", native.placement_id), ("revision", revision),
                ("weight_generation", weight_generation),
                ("placement_set_id", placement_set_id),
                ("topology", topology), ("parts", parts),
                ("tensors", tuple(tensors[k] for k in sorted(tensors))),
                ("fragments", tuple(fragments[k] for k in sorted(fragments)))):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_native", native)

    @property
    def resource_kind(self):
        """Always ResourceKind.MODEL_WEIGHT."""
        return ResourceKind.MODEL_WEIGHT

    @property
    def digest(self):
        """Lowercase hex SHA-256 of weight_placement_to_json(self)."""
        return self.to_native().digest

    @classmethod
    def from_fragments(cls, *, resource_id, revision, weight_generation,
                       placement_set_id, topology, tensors, fragments,
                       placement_id=None):
        """Groups a flat fragment inventory into one part per topology
        participant, by rank (rule 28); participants without fragments get
        empty parts."""
        require_str(resource_id, "resource_id")
        require_str(revision, "revision")
        require_u64(weight_generation, "weight_generation")
        require_str(placement_set_id, "placement_set_id")
        if not isinstance(topology, ParallelTopology):
            raise ValueError("topology must be a ParallelTopology")
        tensors = require_items(tensors, "placement tensors",
                                TensorDescriptor)
        fragments = require_items(fragments, "placement fragments",
                                  PlacementFragment)
        if placement_id is not None:
            require_str(placement_id, "placement_id")
        native = _R.WeightPlacementManifest.from_fragments(
            resource_id, revision, weight_generation, placement_set_id,
            topology.to_native(), [t.to_native() for t in tensors],
            [f.to_native() for f in fragments])
        if placement_id is not None and placement_id != native.placement_id:
            raise ValueError(
                "placement_id does not match canonical logical content")
        return placement_from_native(
            native, topology=topology,
            tensors={t.tensor_id: t for t in tensors},
            fragments={f.placement_fragment_id: f for f in fragments})

    def _fragment_by_id(self, placement_fragment_id):
        """The fragment with this id, or None."""
        index = self.__dict__.get("_fragment_index")
        if index is None:
            index = {f.placement_fragment_id: f for f in self.fragments}
            object.__setattr__(self, "_fragment_index", index)
        return index.get(placement_fragment_id)

    def _build_native(self):
        return _R.WeightPlacementManifest(
            self.resource_id, self.revision, self.weight_generation,
            self.placement_set_id, self.topology.to_native(),
            [p.to_native() for p in self.parts], self.placement_id)


# ------------------------------------------------- native -> compat values


def rank_from_native(native):
    """A ParallelRank wrapping a validated native rank."""
    return trusted(ParallelRank, native, {"dp": native.dp, "tp": native.tp,
                                          "pp": native.pp, "ep": native.ep})


def _axis_from_native(native):
    if getattr(native, "shards", None) is not None:
        raise ValueError(
            f"grouped split axis ({native.kind} split on dim {native.dim} in "
            f"{native.shards} shards) is a reshard extension the prototype "
            "contract cannot express; use reshard's own API for this "
            "placement")
    if getattr(native, "ranks", None) is not None:
        raise ValueError(
            f"partial split axis ({native.kind} split on dim {native.dim} "
            f"over its first {native.ranks} ranks) is a reshard extension "
            "the prototype contract cannot express; use reshard's own API "
            "for this placement")
    if getattr(native, "over", None) is not None:
        raise ValueError(
            f"spanning split axis ({native.kind} split on dim {native.dim} "
            f"over {native.over}) is a reshard extension the prototype "
            "contract cannot express; use reshard's own API for this "
            "placement")
    cls = _AXIS_BY_SEMANTICS[native.semantics]
    fields = {"kind": native.kind}
    if cls is SplitAxis:
        fields["dim"] = native.dim
    return trusted(cls, native, fields)


def tensor_from_native(native):
    """A TensorDescriptor wrapping a validated native descriptor."""
    return trusted(TensorDescriptor, native, {
        "tensor_id": native.tensor_id,
        "global_shape": native.global_shape,
        "dtype": native.dtype,
        "itemsize": native.itemsize,
        "shard_dims": native.shard_dims,
        "layout_fingerprint": native.layout_fingerprint,
        "parallel_axes": tuple(_axis_from_native(a)
                               for a in native.parallel_axes),
        "layer_id": native.layer_id,
        "expert_id": native.expert_id,
    })


def _fragment_from_native(native, ranks):
    r = native.rank
    key = (r.dp, r.tp, r.pp, r.ep)
    rank = ranks.get(key)
    if rank is None:
        rank = ranks[key] = rank_from_native(r)
    return trusted(PlacementFragment, native, {
        "tensor_id": native.tensor_id,
        "global_offset": native.global_offset,
        "local_shape": native.local_shape,
        "nbytes": native.nbytes,
        "rank": rank,
        "aliases": native.aliases,
        "placement_fragment_id": native.placement_fragment_id,
        "pipeline_stage_id": native.pipeline_stage_id,
    })


def _topology_from_native(native, ranks):
    participants = []
    for p in native.participants:
        r = p.rank
        rank = ranks.setdefault((r.dp, r.tp, r.pp, r.ep), rank_from_native(r))
        participants.append(trusted(TopologyParticipant, p, {
            "participant_id": p.participant_id, "rank": rank}))
    return trusted(ParallelTopology, native, {
        "tp_size": native.tp_size, "pp_size": native.pp_size,
        "ep_size": native.ep_size, "dp_size": native.dp_size,
        "participants": tuple(participants),
        "topology_id": native.topology_id})


def placement_from_native(native, topology=None, tensors=None,
                          fragments=None):
    """A WeightPlacementManifest wrapping a validated native placement.

    `topology`, `tensors` (by tensor_id) and `fragments` (by
    placement_fragment_id) are compat values to reuse instead of
    converting their native counterparts."""
    ranks = {}
    if topology is None:
        topology = _topology_from_native(native.topology, ranks)
    tensor_map = {}
    for t in native.tensors:
        reuse = tensors.get(t.tensor_id) if tensors else None
        tensor_map[t.tensor_id] = reuse or tensor_from_native(t)
    fragment_map = {}
    parts = []
    for part in native.parts:
        part_fragments = []
        for f in part.fragments:
            fid = f.placement_fragment_id
            value = fragments.get(fid) if fragments else None
            if value is None:
                value = _fragment_from_native(f, ranks)
            fragment_map[fid] = value
            part_fragments.append(value)
        r = part.rank
        rank = ranks.setdefault((r.dp, r.tp, r.pp, r.ep), rank_from_native(r))
        parts.append(trusted(WeightPlacementPart, part, {
            "resource_id": part.resource_id,
            "revision": part.revision,
            "weight_generation": part.weight_generation,
            "placement_set_id": part.placement_set_id,
            "topology_id": part.topology_id,
            "participant_id": part.participant_id,
            "rank": rank,
            "tensors": tuple(tensor_map[t.tensor_id] for t in part.tensors),
            "fragments": tuple(part_fragments),
        }))
    return trusted(WeightPlacementManifest, native, {
        "resource_id": native.resource_id,
        "placement_id": native.placement_id,
        "revision": native.revision,
        "weight_generation": native.weight_generation,
        "placement_set_id": native.placement_set_id,
        "topology": topology,
        "parts": tuple(parts),
        "tensors": tuple(tensor_map[k] for k in sorted(tensor_map)),
        "fragments": tuple(fragment_map[k] for k in sorted(fragment_map)),
    })


# ----------------------------------------------------- binding validation


def validate_runtime_binding(placement, binding):
    """Checks one participant's binding against its placement (rules
    29-36): identity fence, the participant's exact fragment set, byte
    sizes, shapes, itemsizes, canonical contiguous strides and
    non-overlapping address ranges. Raises ValueError."""
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    if not isinstance(binding, WeightRuntimeBindingManifest):
        raise ValueError("binding must be a WeightRuntimeBindingManifest")
    _R.validate_runtime_binding(placement.to_native(), binding.to_native())


def validate_runtime_bindings(placement, bindings):
    """Checks the exact binding set of a placement (rules 34-38): one
    binding per participant that owns fragments and no other, unique
    runtime fragment ids, and address ranges across bindings of one
    instance. Raises ValueError."""
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    items = require_items(bindings, "runtime bindings",
                          WeightRuntimeBindingManifest)
    _R.validate_runtime_bindings(placement.to_native(),
                                 [b.to_native() for b in items])


# ------------------------------------------------------------------ serde


def weight_placement_to_json(placement):
    """The canonical wire JSON of a placement (sorted keys, compact,
    ensure_ascii): the bytes `digest` hashes."""
    if not isinstance(placement, WeightPlacementManifest):
        raise ValueError("placement must be a WeightPlacementManifest")
    return placement.to_native().to_json()


def weight_placement_from_json(value):
    """Decodes the canonical wire JSON (str, bytes or bytearray): exact
    field sets, no duplicate keys or non-finite numbers, then every
    constructor rule and the supplied placement_id / topology_id."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value)
    elif not isinstance(value, str):
        raise ValueError("placement JSON must be str, bytes or bytearray")
    return placement_from_native(_R.WeightPlacementManifest.from_json(value))
