"""Planner entry points and plan values of the mooncake compat layer.

The regions (which source fragment serves which box of which target
fragment) come from the native planner ``reshard._reshard.plan``; this
module converts them into the reference's plan shape: ``TransferRegion``
operations between compat fragments, with the reference's canonical loop
geometry (outer loops never merged, see ``region_geometry``), sorted by
(target fragment id, target base offset, source fragment id, source base
offset), plus executors, pipeline routes and the reference's planning
limits.
"""

import math
from dataclasses import dataclass, field
from typing import Optional, Tuple

from reshard import _reshard as _R
from reshard.compat._checks import require_str
from reshard.compat._mooncake_contract import (
    OwnershipAxis,
    ParallelRank,
    PlacementFragment,
    WeightPlacementManifest,
)
from reshard.compat._mooncake_regions import (  # noqa: F401 (re-exported)
    LogicalTransferOperation,
    LogicalTransferRegion,
    TransferRegion,
    _region,
    fragment_itemsize,
    region_geometry,
)
from reshard.compat._mooncake_store import (
    StoredFragment,
    StoredManifestIdentity,
    WeightManifest,
)


@dataclass(frozen=True)
class PlanningLimits:
    """Fail-closed planning bounds: regions per plan, segments (contiguous
    runs of the canonical geometry) per region and in total."""

    max_transfer_regions: int = 1_000_000
    max_segments_per_region: int = 1_000_000
    max_total_lowered_segments: int = 10_000_000

    def __post_init__(self):
        for name in ("max_transfer_regions", "max_segments_per_region",
                     "max_total_lowered_segments"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(
                    f"planning limit {name} must be a positive integer")


# -------------------------------------------------------- plan components


@dataclass(frozen=True)
class PipelineRouteGroup:
    """The operations (plan indices, in plan order) of one pipeline route:
    (source pp or None for a stored source, source stage, target pp, target
    stage)."""

    source_pp: Optional[int]
    source_pipeline_stage_id: Optional[int]
    target_pp: int
    target_pipeline_stage_id: Optional[int]
    operation_indices: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "operation_indices",
                           tuple(self.operation_indices))
        for name in ("source_pp", "source_pipeline_stage_id", "target_pp",
                     "target_pipeline_stage_id"):
            value = getattr(self, name)
            if value is None and name != "target_pp":
                continue
            if type(value) is not int or value < 0:
                raise ValueError(f"pipeline route {name} must be non-negative")
        if any(type(i) is not int or i < 0 for i in self.operation_indices):
            raise ValueError(
                "pipeline route indices must be non-negative integers")
        if len(set(self.operation_indices)) != len(self.operation_indices):
            raise ValueError("pipeline route has duplicate operation indices")


@dataclass(frozen=True)
class PlacementExecutorPlan:
    """One participant that takes part in a plan: its placement, rank and
    every fragment id of its part (sorted)."""

    placement_id: str
    participant_id: str
    rank: ParallelRank
    placement_fragment_ids: Tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "placement_fragment_ids",
                           tuple(self.placement_fragment_ids))
        if (not self.placement_id or not self.participant_id
                or not self.placement_fragment_ids):
            raise ValueError(
                "placement executor identifiers must not be empty")
        if (len(set(self.placement_fragment_ids))
                != len(self.placement_fragment_ids)):
            raise ValueError("placement executor has duplicate fragment IDs")


def _route_key(operation):
    source = operation.source
    if isinstance(source, PlacementFragment):
        source_key = (source.rank.pp, source.pipeline_stage_id)
    else:
        source_key = (None, None)
    return source_key + (operation.target.rank.pp,
                         operation.target.pipeline_stage_id)


def _pipeline_routes(operations):
    groups = {}
    for index, operation in enumerate(operations):
        groups.setdefault(_route_key(operation), []).append(index)
    order = sorted(groups, key=lambda k: tuple(-1 if v is None else v
                                               for v in k))
    return tuple(PipelineRouteGroup(*key, tuple(groups[key])) for key in order)


# -------------------------------------------------------------------- plan


_PLAN_CACHES = ("_native", "_views")


@dataclass(frozen=True)
class LogicalTransferPlan:
    """An address-free plan from one source (a placement, or a stored
    manifest) to a target placement: `operations` are TransferRegions in
    canonical order; `source_executors` / `target_executors` the
    participants that take part. Derived: pipeline_routes, total_bytes,
    operation_indices_for_executor. `native_plan` is the native plan the
    operations were converted from (None for a plan built by hand)."""

    resource_id: str
    revision: str
    source_placement: Optional[WeightPlacementManifest]
    target_placement: WeightPlacementManifest
    source_tensors: tuple
    target_tensors: tuple
    operations: tuple
    source_manifest: Optional[WeightManifest] = None
    planning_limits: PlanningLimits = field(default_factory=PlanningLimits)
    source_executors: Tuple[PlacementExecutorPlan, ...] = ()
    target_executors: Tuple[PlacementExecutorPlan, ...] = ()
    source_manifest_identity: Optional[StoredManifestIdentity] = field(
        init=False, default=None)

    def __post_init__(self):
        for name in ("source_tensors", "target_tensors", "operations",
                     "source_executors", "target_executors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.resource_id or not self.revision:
            raise ValueError(
                "logical transfer plan identifiers must not be empty")
        if not isinstance(self.target_placement, WeightPlacementManifest):
            raise ValueError(
                "logical transfer plan target placement is invalid")
        if not isinstance(self.planning_limits, PlanningLimits):
            raise ValueError(
                "logical transfer plan planning_limits is invalid")
        if len(self.operations) > self.planning_limits.max_transfer_regions:
            raise ValueError(
                "logical transfer plan exceeds max_transfer_regions")
        self._check_provenance()
        self._check_operations()
        if not all(isinstance(e, PlacementExecutorPlan)
                   for e in self.source_executors + self.target_executors):
            raise ValueError(
                "logical transfer plan has invalid canonical executor "
                "metadata")
        self._check_target_coverage()
        identity = (self.source_manifest.manifest_identity
                    if self.source_manifest is not None else None)
        object.__setattr__(self, "source_manifest_identity", identity)
        object.__setattr__(self, "_native", None)

    def _check_provenance(self):
        if self.source_placement is not None and not isinstance(
                self.source_placement, WeightPlacementManifest):
            raise ValueError(
                "logical transfer plan source placement is invalid")
        if self.source_manifest is not None and not isinstance(
                self.source_manifest, WeightManifest):
            raise ValueError(
                "logical transfer plan source manifest is invalid")
        if (self.source_placement is None) == (self.source_manifest is None):
            raise ValueError(
                "logical transfer plan requires exactly one source provenance")
        for side, p in (("source", self.source_placement),
                        ("target", self.target_placement)):
            if p is not None and (p.resource_id != self.resource_id
                                  or p.revision != self.revision):
                raise ValueError(
                    f"logical transfer plan {side} placement identity differs")
        generation = self.target_placement.weight_generation
        if (self.source_placement is not None
                and self.source_placement.weight_generation != generation):
            raise ValueError("logical transfer plan source and target "
                             "weight_generation differs")
        m = self.source_manifest
        if m is not None and (m.resource_id != self.resource_id
                              or m.revision != self.revision
                              or m.weight_generation != generation):
            raise ValueError(
                "logical transfer plan source manifest identity differs")

    def _check_operations(self):
        source_type = (PlacementFragment if self.source_placement is not None
                       else StoredFragment)
        limits = self.planning_limits
        total = 0
        for op in self.operations:
            if not isinstance(op, TransferRegion):
                raise ValueError("logical transfer plan requires a canonical "
                                 "transfer operation")
            if not isinstance(op.target, PlacementFragment):
                raise ValueError(
                    "logical transfer plan target must be a placement")
            if not isinstance(op.source, source_type):
                raise ValueError(
                    "logical transfer plan source must be a placement"
                    if source_type is PlacementFragment else
                    "logical transfer plan source has no placement")
            op.validate_bounds()
            if op.segment_count > limits.max_segments_per_region:
                raise ValueError(
                    "logical transfer plan exceeds max_segments_per_region")
            total += op.segment_count
            if total > limits.max_total_lowered_segments:
                raise ValueError(
                    "logical transfer plan exceeds max_total_lowered_segments")

    def _check_target_coverage(self):
        # Volume check: overlaps lie inside their fragment (checked by
        # TransferRegion) and the planner never emits overlapping regions.
        covered = {}
        for op in self.operations:
            fid = op.target.placement_fragment_id
            covered[fid] = covered.get(fid, 0) + op.total_bytes
        for executor in self.target_executors:
            for fid in executor.placement_fragment_ids:
                fragment = self.target_placement._fragment_by_id(fid)
                if fragment is None or covered.get(fid, 0) != fragment.nbytes:
                    raise ValueError(
                        f"logical target fragment is not fully covered: {fid}")

    @property
    def native_plan(self):
        """The reshard._reshard.LogicalTransferPlan behind this plan, or
        None for a plan constructed directly."""
        return self.__dict__.get("_native")

    @property
    def total_bytes(self):
        """Bytes moved by all operations."""
        return sum(op.total_bytes for op in self.operations)

    @property
    def source_placement_id(self):
        """The source placement id, or None for a stored source."""
        return (self.source_placement.placement_id
                if self.source_placement is not None else None)

    @property
    def target_placement_id(self):
        """The target placement id."""
        return self.target_placement.placement_id

    @property
    def pipeline_routes(self):
        """PipelineRouteGroups covering every operation exactly once,
        sorted by route with None as -1."""
        return self._operation_views()[0]

    def operation_indices_for_executor(self, executor, side):
        """Plan indices of the operations whose `side` ("source" or
        "target") fragment belongs to `executor`, in plan order."""
        if side not in ("source", "target"):
            raise ValueError(f"invalid executor side: {side}")
        executors = (self.source_executors if side == "source"
                     else self.target_executors)
        if executor not in executors:
            raise ValueError(
                f"{side} executor is not part of this logical plan")
        views = self._operation_views()[1 if side == "source" else 2]
        return views.get(executor, ())

    def _operation_views(self):
        views = self.__dict__.get("_views")
        if views is None:
            views = (_pipeline_routes(self.operations),
                     self._executor_indices("source"),
                     self._executor_indices("target"))
            object.__setattr__(self, "_views", views)
        return views

    def _executor_indices(self, side):
        executors = (self.source_executors if side == "source"
                     else self.target_executors)
        # Positions, not executors, as keys: an executor hashes all of its
        # fragment ids.
        by_fragment = {}
        for position, executor in enumerate(executors):
            for fid in executor.placement_fragment_ids:
                by_fragment.setdefault(fid, []).append(position)
        indices = [[] for _ in executors]
        for index, op in enumerate(self.operations):
            fragment = getattr(op, side)
            if not isinstance(fragment, PlacementFragment):
                continue
            for position in by_fragment.get(fragment.placement_fragment_id,
                                            ()):
                indices[position].append(index)
        return {executor: tuple(found)
                for executor, found in zip(executors, indices)}

    @classmethod
    def _from_planner(cls, native, **fields):
        """A plan of planner output: operations canonical by construction
        and already checked against the limits and for coverage, so only
        the cheap provenance checks run."""
        plan = object.__new__(cls)
        for key, value in fields.items():
            object.__setattr__(plan, key, value)
        plan._check_provenance()
        identity = (plan.source_manifest.manifest_identity
                    if plan.source_manifest is not None else None)
        object.__setattr__(plan, "source_manifest_identity", identity)
        object.__setattr__(plan, "_native", native)
        return plan

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items()
                if k not in _PLAN_CACHES}

    def __setstate__(self, state):
        for key, value in state.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_native", None)


# ----------------------------------------------------------------- planning


def _limits(planning_limits):
    if planning_limits is None:
        return PlanningLimits()
    if not isinstance(planning_limits, PlanningLimits):
        raise ValueError("planning_limits must be a PlanningLimits")
    return planning_limits


def _require_selection(value):
    if value not in ("reference", "balanced"):
        raise ValueError(
            "source_selection must be 'reference' or 'balanced'")


def _require_placement(value, side):
    if not isinstance(value, WeightPlacementManifest):
        raise ValueError(
            f"{side} requires one complete WeightPlacementManifest")


def _native_plan(source, target, limits, target_participant_id=None):
    try:
        return _R.plan(source.to_native(), target.to_native(),
                       target_participant_id=target_participant_id,
                       max_transfer_regions=limits.max_transfer_regions)
    except _R.ResourceExhaustedError as error:
        raise ValueError("logical transfer plan exceeds max_transfer_regions: "
                         f"{limits.max_transfer_regions}") from error
    except _R.Error as error:
        if isinstance(error, ValueError):
            raise
        raise ValueError(str(error)) from error


class _ReferenceSources:
    """The reference's choice of source fragments for a placement source.

    Per DP rank, a tensor's fragments are grouped by owner key (its
    OwnershipAxis coordinates); a DP rank is a complete replica when every
    owner group of every tensor that is not DP-owned covers the tensor
    (identical boxes counted once). Target DP rank t reads from the sorted
    complete replicas R[t mod |R|], using the smallest owner key there; a
    DP-owned tensor reads from its unique complete owner. Among fragments
    with the same box, the first by (dp, pp, ep, tp, fragment id) serves."""

    def __init__(self, placement):
        self._table = {}
        self._dps_by_tensor = {}
        kinds = {t.tensor_id: tuple(a.kind for a in t.parallel_axes
                                    if isinstance(a, OwnershipAxis))
                 for t in placement.tensors}
        for f in placement.fragments:
            owner = tuple((k, getattr(f.rank, k)) for k in kinds[f.tensor_id])
            cell = self._table.get((f.rank.dp, f.tensor_id))
            if cell is None:
                cell = self._table[(f.rank.dp, f.tensor_id)] = {}
                self._dps_by_tensor.setdefault(f.tensor_id, []).append(
                    f.rank.dp)
            boxes = cell.setdefault(owner, {})
            box = (f.global_offset, f.local_shape)
            current = boxes.get(box)
            if current is None or _rank_key(f) < _rank_key(current):
                boxes[box] = f
        volumes = {t.tensor_id: math.prod(t.global_shape)
                   for t in placement.tensors}
        self._dp_owner = self._dp_owners(placement, volumes)
        self._replicas = self._complete_replicas(placement, volumes)
        self._replica_dps = sorted(self._replicas)

    @staticmethod
    def _covers(boxes, volume):
        return sum(math.prod(shape) for _, shape in boxes) == volume

    def _dp_owners(self, placement, volumes):
        result = {}
        for t in placement.tensors:
            if not any(isinstance(a, OwnershipAxis) and a.kind == "dp"
                       for a in t.parallel_axes):
                continue
            owners = {owner: boxes
                      for dp in self._dps_by_tensor.get(t.tensor_id, ())
                      for owner, boxes in self._table[(dp,
                                                       t.tensor_id)].items()}
            complete = sorted(o for o, boxes in owners.items()
                              if self._covers(boxes, volumes[t.tensor_id]))
            if not complete:
                raise ValueError("DP-owned source tensor has no complete "
                                 f"declared owner: {t.tensor_id}")
            if len(complete) != 1 or len(owners) != 1:
                raise ValueError("DP-owned source tensor has ambiguous "
                                 f"declared owners: {t.tensor_id}")
            result[t.tensor_id] = (dict(complete[0])["dp"], complete[0])
        return result

    def _complete_replicas(self, placement, volumes):
        tensors = [t.tensor_id for t in placement.tensors
                   if t.tensor_id not in self._dp_owner]
        if not tensors:
            return {}
        replicas = {}
        for dp in sorted({f.rank.dp for f in placement.fragments}):
            owners = {}
            for tid in tensors:
                cell = self._table.get((dp, tid))
                if not cell or not all(self._covers(b, volumes[tid])
                                       for b in cell.values()):
                    break
                owners[tid] = min(cell)
            else:
                replicas[dp] = owners
        if not replicas:
            raise ValueError("source manifests have no complete DP replica; "
                             "tensors are not fully covered")
        return replicas

    def boxes(self, target):
        """{(global_offset, local_shape): source fragment} that serve
        `target` (a target PlacementFragment)."""
        tid = target.tensor_id
        if tid in self._dp_owner:
            dp, owner = self._dp_owner[tid]
        else:
            dp = self._replica_dps[target.rank.dp % len(self._replica_dps)]
            owner = self._replicas[dp][tid]
        return self._table[(dp, tid)][owner]


def _rank_key(f):
    r = f.rank
    return (r.dp, r.pp, r.ep, r.tp, f.placement_fragment_id)


def _overlap(source, target):
    offset = tuple(max(a, b) for a, b in
                   zip(source.global_offset, target.global_offset))
    end = tuple(min(a + e, b + g) for a, e, b, g in
                zip(source.global_offset, source.local_shape,
                    target.global_offset, target.local_shape))
    shape = tuple(e - o for o, e in zip(offset, end))
    if any(x <= 0 for x in shape):
        return None
    return offset, shape


def _reselect(target, found, sources):
    """The (overlap offset, shape, source) list of `target` with the
    reference's sources: the native overlaps with each source swapped for
    the reference's fragment of the same box or, when the reference's
    replica tiles the tensor differently, the overlaps with its boxes."""
    boxes = sources.boxes(target)
    swapped = []
    for offset, shape, source in found:
        chosen = boxes.get((source.global_offset, source.local_shape))
        if chosen is None:
            break
        swapped.append((offset, shape, chosen))
    else:
        return swapped
    result = []
    for source in boxes.values():
        box = _overlap(source, target)
        if box is not None:
            result.append(box + (source,))
    if sum(math.prod(shape) for _, shape, _ in result) != math.prod(
            target.local_shape):
        raise ValueError(
            f"target fragment is not fully covered: {target.fragment_id}")
    return result


def _operations(native, source_lookup, target, itemsizes, sources=None):
    by_target = {}
    for r in native.regions():
        by_target.setdefault(r["target_fragment_id"], []).append(
            (r["overlap_offset"], r["overlap_shape"],
             source_lookup(r["source_fragment_id"])))
    operations = []
    for fid, found in by_target.items():
        fragment = target._fragment_by_id(fid)
        if sources is not None:
            found = _reselect(fragment, found, sources)
        itemsize = itemsizes[fragment.tensor_id]
        for offset, shape, source in found:
            operations.append(_region(fragment.tensor_id, source, fragment,
                                      offset, shape, itemsize))
    operations.sort(key=lambda op: (op.target.fragment_id,
                                    op.target_base_offset,
                                    op.source.fragment_id,
                                    op.source_base_offset))
    return tuple(operations)


def _check_limits(operations, limits):
    if len(operations) > limits.max_transfer_regions:
        raise ValueError("logical transfer plan exceeds max_transfer_regions: "
                         f"{limits.max_transfer_regions}")
    total = 0
    for op in operations:
        count = op.segment_count
        if count > limits.max_segments_per_region:
            raise ValueError(
                "logical transfer region exceeds max_segments_per_region: "
                f"{count} > {limits.max_segments_per_region}")
        total += count
        if total > limits.max_total_lowered_segments:
            raise ValueError(
                "logical transfer plan exceeds max_total_lowered_segments: "
                f"{total} > {limits.max_total_lowered_segments}")


def _executors(placement, operations, side, participant_ids=None):
    used = {getattr(op, side).fragment_id for op in operations}
    result = []
    for part in placement.parts:
        if participant_ids is not None and (
                part.participant_id not in participant_ids):
            continue
        ids = tuple(f.placement_fragment_id for f in part.fragments)
        if not any(fid in used for fid in ids):
            continue
        result.append(PlacementExecutorPlan(
            placement.placement_id, part.participant_id, part.rank, ids))
    result.sort(key=lambda e: (e.rank.dp, e.rank.pp, e.rank.ep, e.rank.tp))
    return tuple(result)


def _assemble(native, *, source_placement, source_manifest, target_placement,
              target_tensors, limits, target_participant_ids=None,
              source_selection="reference"):
    itemsizes = {t.tensor_id: t.itemsize for t in target_tensors}
    sources = None
    if source_placement is not None:
        lookup = source_placement._fragment_by_id
        source_tensors = source_placement.tensors
        if source_selection == "reference":
            sources = _ReferenceSources(source_placement)
    else:
        lookup = source_manifest._fragment_by_id
        source_tensors = tuple(sorted(source_manifest.tensors,
                                      key=lambda t: t.tensor_id))
    operations = _operations(native, lookup, target_placement, itemsizes,
                             sources)
    _check_limits(operations, limits)
    return LogicalTransferPlan._from_planner(
        native,
        resource_id=target_placement.resource_id,
        revision=target_placement.revision,
        source_placement=source_placement,
        target_placement=target_placement,
        source_tensors=source_tensors,
        target_tensors=tuple(sorted(target_tensors,
                                    key=lambda t: t.tensor_id)),
        operations=operations,
        source_manifest=source_manifest,
        planning_limits=limits,
        source_executors=(_executors(source_placement, operations, "source")
                          if source_placement is not None else ()),
        target_executors=_executors(target_placement, operations, "target",
                                    target_participant_ids))


def plan_placement_transfer(source_placement, target_placement, *,
                            planning_limits=None,
                            source_selection="reference"):
    """Plans every target participant of `target_placement` from
    `source_placement` (two complete placements of the same resource,
    revision and weight generation, with the same tensor set).

    `source_selection` (an extension): "reference" (default) serves each
    target DP rank from one complete source DP replica, round-robin, and
    each box from its first fragment by (dp, pp, ep, tp, id), as the
    reference planner; "balanced" keeps the native planner's choice, which
    spreads the bytes over every replica and replicated copy."""
    limits = _limits(planning_limits)
    _require_selection(source_selection)
    _require_placement(source_placement, "source")
    _require_placement(target_placement, "target")
    native = _native_plan(source_placement, target_placement, limits)
    return _assemble(native, source_placement=source_placement,
                     source_manifest=None, target_placement=target_placement,
                     target_tensors=target_placement.tensors, limits=limits,
                     source_selection=source_selection)


def plan_placement_transfer_to_local_target(source_placement,
                                            target_placement,
                                            target_participant_id=None, *,
                                            planning_limits=None,
                                            source_selection="reference"):
    """Plans only the fragments of one target participant (which may be
    omitted when the target topology has one participant); the plan has
    exactly one target executor. `source_selection` as for
    plan_placement_transfer."""
    limits = _limits(planning_limits)
    _require_selection(source_selection)
    _require_placement(source_placement, "source")
    _require_placement(target_placement, "target")
    if target_participant_id is None:
        if target_placement.topology.world_size != 1:
            raise ValueError("target_participant_id is required for a "
                             "multi-participant target")
        target_participant_id = target_placement.parts[0].participant_id
    require_str(target_participant_id, "target_participant_id")
    part = next((p for p in target_placement.parts
                 if p.participant_id == target_participant_id), None)
    if part is None:
        raise ValueError(
            f"unknown target participant: {target_participant_id}")
    native = _native_plan(source_placement, target_placement, limits,
                          target_participant_id)
    plan = _assemble(native, source_placement=source_placement,
                     source_manifest=None, target_placement=target_placement,
                     target_tensors=part.tensors, limits=limits,
                     target_participant_ids=frozenset({target_participant_id}),
                     source_selection=source_selection)
    if len(plan.target_executors) != 1:
        raise ValueError(
            "local target placement must describe exactly one executor")
    return plan


def plan_stored_transfer_to_target_placement(source_manifest,
                                             target_placement, *,
                                             planning_limits=None):
    """Plans `target_placement` from a committed store manifest: every
    stored fragment is eligible; the plan keeps the manifest and its
    identity and has no source executors."""
    limits = _limits(planning_limits)
    if not isinstance(source_manifest, WeightManifest):
        raise ValueError("source requires one complete WeightManifest")
    _require_placement(target_placement, "target")
    native = _native_plan(source_manifest, target_placement, limits)
    return _assemble(native, source_placement=None,
                     source_manifest=source_manifest,
                     target_placement=target_placement,
                     target_tensors=target_placement.tensors, limits=limits)
