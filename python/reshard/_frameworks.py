"""Framework-neutral pieces of the framework helpers (``reshard.torch``).

* Axis rules (``Split``, ``Replicated``, ``Ownership``: other names of
  ``reshard.SplitAxis``, ``ReplicatedAxis``, ``OwnershipAxis``, which they
  return) and ``Shard``, the layout of one local tensor;
* topologies from axis sizes (``grid_topology``, ``topology_from_ranks``);
* ``build_part_from_shapes``: one participant's ``WeightPlacementPart``
  from the local shapes and dtypes of its tensors and their layouts;
* ``part_to_json`` / ``part_from_json``: the JSON record of a part (the
  native codec, ``WeightPlacementPart.to_json`` / ``from_json``);
* ``gather_placement``: every process publishes its parts through a
  rendezvous and every process assembles the same placement.

Every refusal is a ``reshard.InvalidArgumentError`` (a ``ValueError``)
naming the tensor, participant or record, except the rendezvous errors of
``gather_placement`` (``AlreadyExistsError``, ``UnavailableError``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple, Union)

from reshard import _reshard
from reshard._api import check_seconds

KINDS = ("dp", "pp", "ep", "tp")  # the contract's axis order
_KEY_COMPONENT = re.compile(r"^[A-Za-z0-9_~%-][A-Za-z0-9._~%-]*$")
GATHER_RECORD = "weight-placement-parts"


def _error(message: str) -> Exception:
    return _reshard.InvalidArgumentError(message)


def _check_kind(kind: Any, what: str) -> str:
    if not isinstance(kind, str) or kind not in KINDS:
        raise _error(f"{what}: unsupported parallel axis kind {kind!r} "
                     "(dp, pp, ep or tp)")
    return kind


# ---------------------------------------------------------------------------
# Axis rules and tensor layouts.


class _AxisName(type):
    """The metaclass of the helpers' axis names (``Split``, ``Replicated``,
    ``Ownership``): each is another name of a native axis factory of the one
    axis vocabulary (``reshard.SplitAxis``, ``reshard.ReplicatedAxis``,
    ``reshard.OwnershipAxis``). Calling the name returns the native
    ``reshard.ParallelAxis``; ``isinstance(a, Split)`` is true of every
    native axis of that semantics."""

    def __call__(cls, kind: Any, *args: Any, **kwargs: Any
                 ) -> _reshard.ParallelAxis:
        if cls._semantics != "split":  # their words since 0.1
            _check_kind(kind, cls.__name__)
        return cls._factory(kind, *args, **kwargs)

    def __instancecheck__(cls, value: Any) -> bool:
        return (isinstance(value, _reshard.ParallelAxis)
                and value.semantics == cls._semantics)


class Split(metaclass=_AxisName):
    """``Split(kind, dim)`` is ``reshard.SplitAxis(kind, dim)``: the ranks of
    axis `kind` (tp or ep) partition the tensor along `dim`: rank r of n
    holds extent ``local[dim]`` at offset ``r * local[dim]`` (an even split;
    give ``Shard(global_shape=..., global_offset=...)`` for an uneven one).
    EP splits must use dim 0 (grouped experts)."""

    _factory = staticmethod(_reshard.SplitAxis)
    _semantics = "split"


class Replicated(metaclass=_AxisName):
    """``Replicated(kind)`` is ``reshard.ReplicatedAxis(kind)``: every rank of
    axis `kind` holds a complete, independent copy (e.g.
    ``Replicated("dp")``, or layer norms under TP: ``Replicated("tp")``)."""

    _factory = staticmethod(_reshard.ReplicatedAxis)
    _semantics = "replicated"


class Ownership(metaclass=_AxisName):
    """``Ownership(kind)`` is ``reshard.OwnershipAxis(kind)``: only the ranks
    of axis `kind` that hold the tensor own it: PP stage ownership
    (``Ownership("pp")``: the tensor exists only on its stage), separately
    allocated experts (``Ownership("ep")`` with an expert_id) or DP-owned
    tensors."""

    _factory = staticmethod(_reshard.OwnershipAxis)
    _semantics = "ownership"


Axis = _reshard.ParallelAxis


def _axis_of(value: Any, what: str) -> Axis:
    """A native ParallelAxis, or the error naming `what`."""
    if isinstance(value, _reshard.ParallelAxis):
        return value
    raise _error(f"{what}: {value!r} is not an axis rule (Split, Replicated, "
                 "Ownership or a reshard ParallelAxis)")


@dataclasses.dataclass(frozen=True)
class Shard:
    """The layout of one local tensor in its global tensor.

    axes: the tensor's axis rules; they are merged over the ``default_axes``
        of ``build_part`` (a rule here replaces a default of the same kind).
    global_shape, global_offset: the box this rank holds. Without them the
        box is derived from the Split axes (an even split); with
        global_shape only, the local shape is checked against it; with
        both, the box is taken as given (an uneven split) and checked to
        lie inside the tensor.
    tensor_id: the tensor's id in the placement (default: the local name),
        e.g. the global layer name of a stage-local PP parameter.
    layer_id, expert_id: descriptor fields (expert_id for separately
        allocated experts, with ``Ownership("ep")``).
    aliases: the alias group of the fragment (tied tensors), incl. itself.
    pipeline_stage_id: the virtual pipeline stage of the fragment.
    layout_fingerprint: replaces the default of ``build_part``.
    """

    axes: Sequence[Any] = ()
    global_shape: Optional[Sequence[int]] = None
    global_offset: Optional[Sequence[int]] = None
    tensor_id: Optional[str] = None
    layer_id: Optional[int] = None
    expert_id: Optional[int] = None
    aliases: Sequence[str] = ()
    pipeline_stage_id: Optional[int] = None
    layout_fingerprint: Optional[str] = None


def as_shard(value: Any, name: str) -> Shard:
    """A layout value as a Shard: a Shard, one axis rule or a sequence of
    axis rules (``[]``: the whole tensor, with the default axes only)."""
    if isinstance(value, Shard):
        if isinstance(value.axes, _reshard.ParallelAxis):
            return dataclasses.replace(value, axes=(value.axes,))
        return value
    if value is None:
        raise _error(f"tensor '{name}' has no layout: give its split axes "
                     "(e.g. Split('tp', dim=0)) or its global shape and "
                     "offset (Shard(global_shape=..., global_offset=...))")
    if isinstance(value, _reshard.ParallelAxis):
        return Shard(axes=(value,))
    if isinstance(value, (list, tuple)):
        return Shard(axes=tuple(value))
    raise _error(f"tensor '{name}': layout {value!r} is not a Shard, an axis "
                 "rule or a list of axis rules")


# ---------------------------------------------------------------------------
# Topologies.


def participant_name(rank: _reshard.ParallelRank) -> str:
    """The default participant id of a rank: ``p-d{dp}-p{pp}-e{ep}-t{tp}``."""
    return f"p-d{rank.dp}-p{rank.pp}-e{rank.ep}-t{rank.tp}"


def grid_ranks(*, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
               order: str = "tp-ep-dp-pp") -> List[_reshard.ParallelRank]:
    """Every rank of the Cartesian grid, in process order: the first axis
    of `order` varies fastest (the default is Megatron's ``tp-cp-ep-dp-pp``
    without CP: TP peers on consecutive processes, PP stages outermost).
    ``grid_ranks(...)[i]`` is process i's rank."""
    kinds = order.split("-")
    if sorted(kinds) != sorted(KINDS):
        raise _error(f"order {order!r} must name each of dp, pp, ep, tp once")
    sizes = dict(tp=tp, pp=pp, ep=ep, dp=dp)
    for kind, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise _error(f"{kind} size must be an integer >= 1, got {size!r}")
    ranks = []
    for index in range(math.prod(sizes.values())):
        coords = {}
        for kind in kinds:
            coords[kind] = index % sizes[kind]
            index //= sizes[kind]
        ranks.append(_reshard.ParallelRank(**coords))
    return ranks


def topology_from_ranks(ranks: Iterable[Any], *, tp: int = 1, pp: int = 1,
                        ep: int = 1, dp: int = 1,
                        participant_id: Callable[[Any], str] = participant_name
                        ) -> _reshard.ParallelTopology:
    """A topology of axis sizes and participants: `ranks` are ParallelRanks
    (named by `participant_id`) or (participant id, ParallelRank) pairs.
    Axes may share workers (e.g. EP coupled to TP: ranks with ep == tp)."""
    participants = []
    for r in ranks:
        if isinstance(r, _reshard.ParallelRank):
            participants.append(_reshard.TopologyParticipant(participant_id(r),
                                                             r))
        else:
            pid, rank = r
            participants.append(_reshard.TopologyParticipant(pid, rank))
    return _reshard.ParallelTopology(tp_size=tp, pp_size=pp, ep_size=ep,
                                     dp_size=dp, participants=participants)


def grid_topology(*, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
                  participant_id: Callable[[Any], str] = participant_name
                  ) -> _reshard.ParallelTopology:
    """The topology of the full Cartesian grid tp x pp x ep x dp."""
    return topology_from_ranks(grid_ranks(tp=tp, pp=pp, ep=ep, dp=dp), tp=tp,
                               pp=pp, ep=ep, dp=dp,
                               participant_id=participant_id)


def _size(topology: _reshard.ParallelTopology, kind: str) -> int:
    return getattr(topology, f"{kind}_size")


def resolve_participant(topology: _reshard.ParallelTopology,
                        rank: Optional[_reshard.ParallelRank],
                        participant_id: Optional[str]
                        ) -> Tuple[str, _reshard.ParallelRank]:
    """(participant id, rank) of one participant of `topology`, found by
    either; both given must name the same participant."""
    if rank is None and participant_id is None:
        raise _error("give the rank or the participant_id of the part")
    for p in topology.participants:
        if participant_id is not None and p.participant_id != participant_id:
            continue
        if rank is not None and p.rank != rank:
            continue
        return p.participant_id, p.rank
    if participant_id is not None and rank is not None:
        raise _error(f"topology has no participant '{participant_id}' at rank "
                     f"{rank!r}")
    if participant_id is not None:
        raise _error(f"topology has no participant '{participant_id}'")
    raise _error(f"topology has no participant at rank {rank!r}")


# ---------------------------------------------------------------------------
# One participant's part.


@dataclasses.dataclass(frozen=True)
class LocalTensor:
    """What build_part_from_shapes needs of one local tensor."""

    name: str
    shape: Tuple[int, ...]
    dtype: str
    itemsize: int


@dataclasses.dataclass(frozen=True)
class Piece:
    """One fragment of a local tensor as built."""

    name: str
    descriptor: _reshard.TensorDescriptor
    fragment: _reshard.PlacementFragment


def _merge_axes(defaults: Sequence[Axis], own: Sequence[Any],
                name: str) -> List[Axis]:
    axes: Dict[str, Axis] = {a.kind: a for a in defaults}
    seen = set()
    for value in own:
        axis = _axis_of(value, f"tensor '{name}'")
        if axis.kind in seen:
            raise _error(f"tensor '{name}' declares axis {axis.kind} twice")
        seen.add(axis.kind)
        axes[axis.kind] = axis
    return [axes[k] for k in KINDS if k in axes]


def _ints(value: Any, what: str) -> Tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _error(f"{what} must be a list or tuple of integers, got "
                     f"{value!r}")
    return tuple(value)


def _box(t: LocalTensor, shard: Shard, axes: Sequence[Axis],
         topology: _reshard.ParallelTopology, rank: _reshard.ParallelRank
         ) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(global shape, global offset) of the local tensor `t`."""
    tid = shard.tensor_id or t.name
    who = f"tensor '{tid}'" + (f" (local '{t.name}')" if tid != t.name else "")
    local = t.shape
    ndim = len(local)
    splits = {a.dim: a for a in axes if isinstance(a, Split)}
    for dim, a in splits.items():
        if dim >= ndim:
            raise _error(f"{who}: Split('{a.kind}', dim={dim}) is out of "
                         f"range for its {ndim}-dimensional local shape "
                         f"{local}")
    if shard.global_offset is not None and shard.global_shape is None:
        raise _error(f"{who}: global_offset {tuple(shard.global_offset)} "
                     "needs its global_shape")
    if shard.global_shape is None:
        shape = list(local)
        offset = [0] * ndim
        for dim, a in splits.items():
            shape[dim] = local[dim] * _size(topology, a.kind)
            offset[dim] = local[dim] * getattr(rank, a.kind)
        return tuple(shape), tuple(offset)
    shape = _ints(shard.global_shape, f"{who}: global_shape")
    if len(shape) != ndim:
        raise _error(f"{who}: local shape {local} has {ndim} dimension(s), "
                     f"global_shape {shape} has {len(shape)}")
    if any(e < 1 for e in shape):
        raise _error(f"{who}: global_shape {shape} must have extents >= 1")
    if shard.global_offset is None:
        offset = [0] * ndim
        for dim in range(ndim):
            a = splits.get(dim)
            if a is None:
                if local[dim] != shape[dim]:
                    raise _error(
                        f"{who}: local shape {local} differs from global "
                        f"shape {shape} on dim {dim}, which no Split axis "
                        "covers (declare the split, or give global_offset)")
                continue
            n = _size(topology, a.kind)
            if local[dim] * n != shape[dim]:
                raise _error(
                    f"{who}: dim {dim} is split over {a.kind} (size {n}) but "
                    f"local extent {local[dim]} x {n} != global extent "
                    f"{shape[dim]} (give global_offset for an uneven split)")
            offset[dim] = local[dim] * getattr(rank, a.kind)
        return shape, tuple(offset)
    offset = _ints(shard.global_offset, f"{who}: global_offset")
    if len(offset) != ndim:
        raise _error(f"{who}: local shape {local} has {ndim} dimension(s), "
                     f"global_offset {offset} has {len(offset)}")
    for dim in range(ndim):
        if offset[dim] < 0 or offset[dim] + local[dim] > shape[dim]:
            raise _error(
                f"{who}: offset out of range on dim {dim}: global_offset "
                f"{offset} + local shape {local} exceeds global shape {shape}")
        if dim not in splits and local[dim] != shape[dim]:
            raise _error(f"{who}: local shape {local} differs from global "
                         f"shape {shape} on dim {dim}, which no Split axis "
                         "covers")
    return shape, offset


def _check_declared(tid: str, axes: Sequence[Axis],
                    topology: _reshard.ParallelTopology) -> None:
    # The contract needs explicit semantics for every active DP and PP axis
    # (rule 21); active TP/EP axes may stay undeclared only where they are
    # coupled to declared ones, which the assembled placement checks.
    declared = {a.kind for a in axes}
    for kind in ("dp", "pp"):
        n = _size(topology, kind)
        if n > 1 and kind not in declared:
            raise _error(
                f"tensor '{tid}' declares no semantics for the active {kind} "
                f"axis (size {n}): add Replicated('{kind}') or "
                f"Ownership('{kind}') to its axes or the default axes")


def build_pieces(locals_: Sequence[LocalTensor], layout: Any, *,
                 topology: _reshard.ParallelTopology,
                 rank: _reshard.ParallelRank,
                 default_axes: Sequence[Any] = (),
                 layout_fingerprint: str = "row-major") -> List[Piece]:
    """The descriptor and fragment of each local tensor (one piece each).

    `layout` maps local names to layouts (see ``as_shard``) or is a
    callable ``name -> layout`` (None: no layout, refused).
    """
    defaults = [_axis_of(a, "default_axes") for a in default_axes]
    if len({a.kind for a in defaults}) != len(defaults):
        raise _error("default_axes declare one axis kind twice")
    pieces: List[Piece] = []
    ids: Dict[str, str] = {}
    for t in locals_:
        value = layout(t.name) if callable(layout) else layout.get(t.name)
        shard = as_shard(value, t.name)
        tid = shard.tensor_id or t.name
        if tid in ids:
            raise _error(f"tensor '{tid}' is given twice (local '{ids[tid]}' "
                         f"and '{t.name}')")
        ids[tid] = t.name
        if not t.shape or any(e < 1 for e in t.shape):
            raise _error(f"tensor '{tid}' has shape {t.shape}: a fragment "
                         "needs at least one dimension and extents >= 1")
        axes = _merge_axes(defaults, shard.axes, tid)
        _check_declared(tid, axes, topology)
        shape, offset = _box(t, shard, axes, topology, rank)
        split_dims = sorted(a.dim for a in axes if isinstance(a, Split))
        descriptor = _reshard.TensorDescriptor(
            tid, list(shape), t.dtype, t.itemsize, split_dims,
            shard.layout_fingerprint or layout_fingerprint,
            list(axes), shard.layer_id, shard.expert_id)
        fragment = _reshard.PlacementFragment(
            tid, list(offset), list(t.shape), math.prod(t.shape) * t.itemsize,
            rank, list(shard.aliases),
            pipeline_stage_id=shard.pipeline_stage_id)
        pieces.append(Piece(t.name, descriptor, fragment))
    return pieces


def make_part(pieces: Sequence[Piece], *, topology: _reshard.ParallelTopology,
              participant_id: str, rank: _reshard.ParallelRank,
              resource_id: str, revision: str, weight_generation: int,
              placement_set_id: str) -> _reshard.WeightPlacementPart:
    return _reshard.WeightPlacementPart(
        resource_id, revision, weight_generation, placement_set_id,
        topology.topology_id, participant_id, rank,
        [p.descriptor for p in pieces], [p.fragment for p in pieces])


def assemble(parts: Iterable[_reshard.WeightPlacementPart],
             topology: _reshard.ParallelTopology
             ) -> _reshard.WeightPlacementManifest:
    """The validated placement of every participant's part (the header is
    the parts'; the contract requires it to be the same in all)."""
    parts = list(parts)
    if not parts:
        raise _error("a placement needs at least one part")
    h = parts[0]
    return _reshard.WeightPlacementManifest(
        h.resource_id, h.revision, h.weight_generation, h.placement_set_id,
        topology, parts)


# ---------------------------------------------------------------------------
# JSON form of a part.


def part_object(part: _reshard.WeightPlacementPart) -> Dict[str, Any]:
    """The part as a JSON-ready dict: the decoded ``part_to_json`` record."""
    return json.loads(part.to_json())


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)


def part_to_json(part: _reshard.WeightPlacementPart) -> str:
    """The canonical JSON of a part (keys sorted, compact; the native
    ``WeightPlacementPart.to_json``); ``part_from_json`` reads it back to an
    equal part."""
    return part.to_json()


class _Reader:
    """Strict reading of a decoded gather record; errors name `where` and
    the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, what: str) -> Exception:
        return _error(f"{self.where}: {what}")

    def fields(self, obj: Any, path: str,
               required: Sequence[str]) -> Dict[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(f"{path} must be an object, got "
                            f"{type(obj).__name__}")
        missing = [k for k in required if k not in obj]
        unknown = sorted(k for k in obj if k not in required)
        if missing:
            raise self.fail(f"{path} lacks field(s) {', '.join(missing)}")
        if unknown:
            raise self.fail(f"{path} has unknown field(s) "
                            f"{', '.join(unknown)}")
        return obj

    def int(self, value: Any, path: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{path} must be an integer, got {value!r}")
        return value

    def list(self, value: Any, path: str) -> list:
        if not isinstance(value, list):
            raise self.fail(f"{path} must be a list, got "
                            f"{type(value).__name__}")
        return value


def _strict_loads(text: Union[str, bytes], where: str) -> Any:
    def pairs(items):
        out = {}
        for k, v in items:
            if k in out:
                raise _error(f"{where}: duplicate JSON field {k!r}")
            out[k] = v
        return out

    def constant(name):
        raise _error(f"{where}: non-finite JSON number {name} is unsupported")

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _error(f"{where}: not UTF-8 ({e})") from None
    try:
        return json.loads(text, object_pairs_hook=pairs,
                          parse_constant=constant)
    except json.JSONDecodeError as e:
        raise _error(f"{where}: not JSON ({e})") from None


def part_from_object(obj: Any, where: str) -> _reshard.WeightPlacementPart:
    """Rebuilds a part from ``part_object`` output through the native
    reader (``WeightPlacementPart.from_json``: every contract rule, and the
    part must be in canonical form); errors name `where`."""
    try:
        return _reshard.WeightPlacementPart.from_json(dumps(obj))
    except _reshard.Error as e:
        raise type(e)(f"{where}: {e}") from None


def part_from_json(text: Union[str, bytes],
                   where: str = "placement part JSON"
                   ) -> _reshard.WeightPlacementPart:
    """The part of ``part_to_json`` text; refuses anything else (unknown or
    missing fields, wrong types, duplicate keys, a part the contract
    rejects) with an error naming `where`."""
    return part_from_object(_strict_loads(text, where), where)


# ---------------------------------------------------------------------------
# Gathering parts through a rendezvous.


def _check_key(key: str, what: str) -> None:
    if not isinstance(key, str) or not key or not all(
            _KEY_COMPONENT.match(c) for c in key.split("/")):
        raise _error(f"{what} {key!r} must be record-key components of "
                     "[A-Za-z0-9._~%-] (none empty or starting with '.') "
                     "joined by '/'")


def _open(rendezvous: Any) -> _reshard.Rendezvous:
    if isinstance(rendezvous, _reshard.Rendezvous):
        return rendezvous
    if isinstance(rendezvous, str):
        return _reshard.Rendezvous(rendezvous)
    if hasattr(rendezvous, "__fspath__"):
        return _reshard.Rendezvous(str(rendezvous.__fspath__()))
    raise _error(f"rendezvous must be a reshard.Rendezvous, a directory or an "
                 f"fs:// URI, got {type(rendezvous).__name__}")


def _records_of(store: _reshard.Rendezvous, prefix: str, ranks: int,
                who: str) -> Dict[int, str]:
    out = {}
    for key in store.list(prefix):
        digits = key[len(prefix):]
        if (not digits.isdigit() or (len(digits) > 1 and digits[0] == "0")
                or int(digits) >= ranks):
            raise _error(f"{who}: record {key} names no rank of {ranks}")
        out[int(digits)] = key
    return out


def _read_record(store: _reshard.Rendezvous, key: str, rank: int, ranks: int,
                 who: str) -> List[_reshard.WeightPlacementPart]:
    where = f"{who}: malformed part record {key} of rank {rank}"
    obj = _strict_loads(store.get(key), where)
    r = _Reader(where)
    obj = r.fields(obj, "record", ("record", "rank", "ranks", "parts"))
    if obj["record"] != GATHER_RECORD:
        raise r.fail(f"record must be {GATHER_RECORD!r}, got "
                     f"{obj['record']!r}")
    if r.int(obj["rank"], "rank") != rank:
        raise r.fail(f"it says rank {obj['rank']}")
    if r.int(obj["ranks"], "ranks") != ranks:
        raise r.fail(f"rank {rank} joined with {obj['ranks']} ranks, this "
                     f"rank with {ranks}")
    return [part_from_object(p, f"{where}: parts[{i}]")
            for i, p in enumerate(r.list(obj["parts"], "parts"))]


def gather_placement(rendezvous: Any, session: str, rank: int, ranks: int,
                     part: Union[_reshard.WeightPlacementPart,
                                 Sequence[_reshard.WeightPlacementPart]],
                     topology: _reshard.ParallelTopology, *,
                     resource_id: Optional[str] = None,
                     revision: Optional[str] = None,
                     weight_generation: Optional[int] = None,
                     placement_set_id: Optional[str] = None,
                     timeout: float = 60.0
                     ) -> _reshard.WeightPlacementManifest:
    """Assembles one placement from the parts of `ranks` processes.

    Every process calls this with the same `rendezvous` (a directory,
    ``fs://DIR`` or a ``reshard.Rendezvous``), `session`, `ranks` and
    `topology`, its own `rank` (0 <= rank < ranks) and the part(s) of the
    participants it hosts (one part, a sequence, or none: ``[]``). Each
    process publishes its parts once under ``<session>/part/<rank>``, waits
    for every rank's record, reads each strictly and assembles the
    placement; every process gets the same placement (same placement_id).

    The header (resource_id, revision, weight_generation,
    placement_set_id) is checked against the given values, else against
    the parts of the lowest rank that has any. Refuses: a session in which
    this rank already published (AlreadyExistsError: use a new session
    key), a malformed record, a part of another topology or header, a
    participant published twice (InvalidArgumentError naming the record's
    key), an incomplete or invalid placement; after `timeout` seconds
    without every rank's record, UnavailableError naming the missing ranks
    (`timeout`: a finite number of seconds > 0, checked first). Records are
    never removed: a session key names one gather.
    """
    timeout = check_seconds("gather_placement", "timeout", timeout,
                            above_minimum=True)
    _check_key(session, "gather_placement session")
    who = f"gather_placement session {session}"
    if (not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1
            or not isinstance(rank, int) or isinstance(rank, bool)
            or not 0 <= rank < ranks):
        raise _error(f"{who}: rank {rank!r} must be in [0, ranks) for ranks "
                     f"{ranks!r} >= 1")
    parts = [part] if isinstance(part, _reshard.WeightPlacementPart) else \
        list(part)
    for p in parts:
        if not isinstance(p, _reshard.WeightPlacementPart):
            raise _error(f"{who}: part {p!r} is not a WeightPlacementPart")
    store = _open(rendezvous)
    prefix = f"{session}/part/"
    key = f"{prefix}{rank}"
    if store.list(key + "/") or key in store.list(key):
        raise _reshard.AlreadyExistsError(
            f"{who}: rank {rank} already published its parts ({key}) in an "
            "earlier run; use a new session key")
    record = {"record": GATHER_RECORD, "rank": rank, "ranks": ranks,
              "parts": [part_object(p) for p in parts]}
    try:
        store.put(key, dumps(record).encode())
    except _reshard.AlreadyExistsError:
        raise _reshard.AlreadyExistsError(
            f"{who}: rank {rank} already published its parts ({key}); use a "
            "new session key") from None
    deadline = time.monotonic() + timeout
    sleep = 0.001
    while True:
        keys = _records_of(store, prefix, ranks, who)
        if len(keys) == ranks:
            break
        if time.monotonic() >= deadline:
            missing = ", ".join(str(r) for r in range(ranks) if r not in keys)
            raise _reshard.UnavailableError(
                f"{who}: timed out after {timeout:g} s waiting for the part "
                f"record(s) of rank(s) {missing}")
        time.sleep(sleep)
        sleep = min(sleep * 2, 0.05)
    gathered: List[Tuple[str, _reshard.WeightPlacementPart]] = []
    for r in range(ranks):
        if r == rank:
            gathered.extend((key, p) for p in parts)
        else:
            gathered.extend((keys[r], p) for p in
                            _read_record(store, keys[r], r, ranks, who))
    return _assemble_gathered(gathered, topology, who, dict(
        resource_id=resource_id, revision=revision,
        weight_generation=weight_generation,
        placement_set_id=placement_set_id))


def _assemble_gathered(gathered, topology, who, header):
    if not gathered:
        raise _error(f"{who}: no rank published a part")
    first_key, first = gathered[0]
    expect = {k: (v if v is not None else getattr(first, k))
              for k, v in header.items()}
    owner: Dict[str, str] = {}
    for key, p in gathered:
        for field, want in expect.items():
            got = getattr(p, field)
            if got != want:
                source = "expected" if header[field] is not None else \
                    f"has in {first_key}"
                raise _error(f"{who}: part of participant '{p.participant_id}'"
                             f" ({key}) has {field} {got!r}; the session "
                             f"{source} {want!r}")
        if p.topology_id != topology.topology_id:
            raise _error(f"{who}: part of participant '{p.participant_id}' "
                         f"({key}) has topology_id {p.topology_id}, not the "
                         f"topology's {topology.topology_id}")
        if p.participant_id in owner:
            raise _error(f"{who}: participant '{p.participant_id}' is "
                         f"published twice ({owner[p.participant_id]} and "
                         f"{key})")
        owner[p.participant_id] = key
    parts = [p for _, p in gathered]
    try:
        return _reshard.WeightPlacementManifest(
            expect["resource_id"], expect["revision"],
            expect["weight_generation"], expect["placement_set_id"], topology,
            parts)
    except _reshard.Error as e:
        raise type(e)(f"{who}: {e}") from None
