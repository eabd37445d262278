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

from dataclasses import dataclass, field
from typing import Optional, Tuple

from reshard import _reshard as _R
from reshard.compat._checks import require_str
from reshard.compat._mooncake_contract import (
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


def _native_plan(source, target, limits, target_participant_id=None,
                 source_selection="balanced"):
    """The native plan; source_selection "reference" is the native
    replica_policy of the reference planner (docs/planner.md)."""
    try:
        return _R.plan(source.to_native(), target.to_native(),
                       target_participant_id=target_participant_id,
                       max_transfer_regions=limits.max_transfer_regions,
                       replica_policy=source_selection)
    except _R.ResourceExhaustedError as error:
        raise ValueError("logical transfer plan exceeds max_transfer_regions: "
                         f"{limits.max_transfer_regions}") from error
    except _R.Error as error:
        if isinstance(error, ValueError):
            raise
        raise ValueError(str(error)) from error


def _operations(native, source_lookup, target, itemsizes):
    by_target = {}
    for r in native.regions():
        by_target.setdefault(r["target_fragment_id"], []).append(
            (r["overlap_offset"], r["overlap_shape"],
             source_lookup(r["source_fragment_id"])))
    operations = []
    for fid, found in by_target.items():
        fragment = target._fragment_by_id(fid)
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
              target_tensors, limits, target_participant_ids=None):
    itemsizes = {t.tensor_id: t.itemsize for t in target_tensors}
    if source_placement is not None:
        lookup = source_placement._fragment_by_id
        source_tensors = source_placement.tensors
    else:
        lookup = source_manifest._fragment_by_id
        source_tensors = tuple(sorted(source_manifest.tensors,
                                      key=lambda t: t.tensor_id))
    operations = _operations(native, lookup, target_placement, itemsizes)
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
    reference planner; "balanced" the native planner's default choice,
    which spreads the bytes over every replica and replicated copy. Both
    are the native planner's replica_policy (docs/planner.md)."""
    limits = _limits(planning_limits)
    _require_selection(source_selection)
    _require_placement(source_placement, "source")
    _require_placement(target_placement, "target")
    native = _native_plan(source_placement, target_placement, limits,
                          source_selection=source_selection)
    return _assemble(native, source_placement=source_placement,
                     source_manifest=None, target_placement=target_placement,
                     target_tensors=target_placement.tensors, limits=limits)


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
                          target_participant_id, source_selection)
    plan = _assemble(native, source_placement=source_placement,
                     source_manifest=None, target_placement=target_placement,
                     target_tensors=part.tensors, limits=limits,
                     target_participant_ids=frozenset({target_participant_id}))
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
