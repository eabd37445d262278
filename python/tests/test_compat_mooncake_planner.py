"""reshard.compat.mooncake planning: the reference's plan shape over the
native planner.

Counts come from the golden fixtures (tests/data/fixtures/plans and the
scenario expectations, which state regions, segments under the reference's
geometry, bytes, routes and which source DP replica each target DP rank
reads); geometry from the specification's worked vectors A-E.
"""

import dataclasses
import json
import math
import pickle

import numpy as np
import pytest

import reshard

from reshard.compat.mooncake import (
    LogicalTransferPlan,
    OwnershipAxis,
    ParallelRank,
    ParallelTopology,
    PlacementExecutorPlan,
    PipelineRouteGroup,
    PlacementFragment,
    PlanningLimits,
    SplitAxis,
    StoredFragment,
    TensorDescriptor,
    TopologyParticipant,
    TransferRegion,
    WeightManifest,
    WeightPlacementManifest,
    plan_placement_transfer,
    plan_placement_transfer_to_local_target,
    plan_stored_transfer_to_target_placement,
    weight_placement_from_json,
    weight_placement_to_json,
)

R = ParallelRank
NO_SEGMENT_LIMITS = PlanningLimits(max_segments_per_region=2 ** 40,
                                   max_total_lowered_segments=2 ** 40)


@pytest.fixture(scope="module")
def scenarios(data_dir):
    root = data_dir / "scenarios"
    expected = json.loads((root / "expected.json").read_text())["plans"]
    cache = {}

    def load(name):
        if name not in cache:
            e = expected[name]
            cache[name] = (
                weight_placement_from_json((root / e["source"]).read_text()),
                weight_placement_from_json((root / e["target"]).read_text()),
                e)
        return cache[name]
    load.names = sorted(expected)
    return load


def check_plan_invariants(plan):
    """Canonical order, canonical geometry, executor and route views."""
    ops = plan.operations
    keys = [(op.target.fragment_id, op.target_base_offset,
             op.source.fragment_id, op.source_base_offset) for op in ops]
    assert keys == sorted(keys)
    for op in ops:
        rebuilt = TransferRegion(
            op.tensor_id, op.source, op.target, op.overlap_offset,
            op.overlap_shape, op.source_base_offset, op.target_base_offset,
            op.inner_bytes, op.outer_loop_counts, op.source_strides,
            op.target_strides)
        assert rebuilt == op
    covered = {}
    for op in ops:
        covered[op.target.fragment_id] = (
            covered.get(op.target.fragment_id, 0) + op.total_bytes)
    seen = []
    for executor in plan.target_executors:
        indices = plan.operation_indices_for_executor(executor, "target")
        assert indices == tuple(sorted(indices)) and indices
        assert all(ops[i].target.fragment_id in
                   executor.placement_fragment_ids for i in indices)
        for fid in executor.placement_fragment_ids:
            assert covered[fid] == plan.target_placement._fragment_by_id(
                fid).nbytes
        seen.extend(indices)
    assert sorted(seen) == list(range(len(ops)))
    ranks = [(e.rank.dp, e.rank.pp, e.rank.ep, e.rank.tp)
             for e in plan.source_executors]
    assert ranks == sorted(ranks)
    for executor in plan.source_executors:
        assert plan.operation_indices_for_executor(executor, "source")
    routed = sorted(i for r in plan.pipeline_routes
                    for i in r.operation_indices)
    assert routed == list(range(len(ops)))
    assert plan.total_bytes == sum(op.total_bytes for op in ops)


# --------------------------------------------------------------- fixtures


def test_fixture_plans_match_expected_counts(fixtures):
    for name, e in fixtures["plan_expected"].items():
        source = weight_placement_from_json(
            (fixtures["plans"] / e["source"]).read_text())
        target = weight_placement_from_json(
            (fixtures["plans"] / e["target"]).read_text())
        plan = plan_placement_transfer(source, target)
        assert len(plan.operations) == e["regions"], name
        assert sum(op.segment_count for op in plan.operations) == \
            e["segments"], name
        assert plan.total_bytes == e["bytes"], name
        assert plan.source_placement is source
        assert plan.target_placement is target
        assert plan.source_placement_id == source.placement_id
        assert plan.source_manifest is None
        assert plan.source_manifest_identity is None
        assert plan.source_tensors == source.tensors
        assert plan.target_tensors == target.tensors
        check_plan_invariants(plan)
        summary = plan.native_plan.summary
        assert (summary["regions"], summary["segments"], summary["bytes"]) \
            == (e["regions"], e["segments"], e["bytes"])


def test_scenarios_match_reference_counts_routes_and_replicas(scenarios):
    for name in scenarios.names:
        source, target, e = scenarios(name)
        if "error" in e:
            with pytest.raises(ValueError, match=e["error"]):
                plan_placement_transfer(source, target)
            continue
        plan = plan_placement_transfer(source, target,
                                       planning_limits=NO_SEGMENT_LIMITS)
        ops = plan.operations
        assert len(ops) == e["regions"], name
        assert sum(op.segment_count for op in ops) == e["segments"], name
        assert plan.total_bytes == e["bytes"], name
        assert max(op.segment_count for op in ops) == \
            e["max_segments_per_region"], name
        routes = [[r.source_pp, r.source_pipeline_stage_id, r.target_pp,
                   r.target_pipeline_stage_id, len(r.operation_indices)]
                  for r in plan.pipeline_routes]
        assert routes == e["routes"], name
        reads = {}
        for op in ops:
            reads.setdefault(op.target.rank.dp, set()).add(op.source.rank.dp)
        if e["target_dp_reads"]:
            assert sorted((t, sorted(s)) for t, s in reads.items()) == [
                (t, [s]) for t, s in e["target_dp_reads"]], name
        if e["within_default_limits"]:
            plan_placement_transfer(source, target)
        check_plan_invariants(plan)


def test_reference_selection_takes_first_copy_of_each_box(scenarios):
    source, target, _ = scenarios("dp_replicas_dp2tp2_to_dp3tp4")
    plan = plan_placement_transfer(source, target)
    by_box = {}
    for f in source.fragments:
        by_box.setdefault((f.tensor_id, f.global_offset, f.local_shape,
                           f.rank.dp), []).append(f)
    for op in plan.operations:
        s = op.source
        candidates = by_box[(s.tensor_id, s.global_offset, s.local_shape,
                             s.rank.dp)]
        first = min(candidates, key=lambda f: (
            f.rank.dp, f.rank.pp, f.rank.ep, f.rank.tp, f.fragment_id))
        assert s is first
    assert [e.rank.dp for e in plan.source_executors] == sorted(
        e.rank.dp for e in plan.source_executors)
    assert {e.rank.dp for e in plan.source_executors} == {0, 1}


def owner_key(tensor, fragment):
    return tuple((a.kind, getattr(fragment.rank, a.kind))
                 for a in tensor.parallel_axes if isinstance(a, OwnershipAxis))


def test_reference_selection_of_owner_and_copy(fixtures):
    """Pairs whose sources hold several copies of a box on one DP rank
    (replicated axes, several owners): each tensor reads from its smallest
    owner key on the chosen DP rank, each box from the first copy by
    (dp, pp, ep, tp, fragment id) of that owner."""
    for name, e in fixtures["plan_expected"].items():
        source = weight_placement_from_json(
            (fixtures["plans"] / e["source"]).read_text())
        target = weight_placement_from_json(
            (fixtures["plans"] / e["target"]).read_text())
        plan = plan_placement_transfer(source, target)
        tensors = {t.tensor_id: t for t in source.tensors}
        owners = {}
        for f in source.fragments:
            owners.setdefault((f.tensor_id, f.rank.dp), set()).add(
                owner_key(tensors[f.tensor_id], f))
        copies = {}
        for f in source.fragments:
            key = (f.tensor_id, f.global_offset, f.local_shape, f.rank.dp,
                   owner_key(tensors[f.tensor_id], f))
            copies.setdefault(key, []).append(f)
        multi = 0
        for op in plan.operations:
            s = op.source
            t = tensors[s.tensor_id]
            if not any(isinstance(a, OwnershipAxis) and a.kind == "dp"
                       for a in t.parallel_axes):
                assert owner_key(t, s) == min(owners[(s.tensor_id,
                                                      s.rank.dp)]), name
            group = copies[(s.tensor_id, s.global_offset, s.local_shape,
                            s.rank.dp, owner_key(t, s))]
            multi += len(group) > 1
            assert s is min(group, key=lambda f: (
                f.rank.dp, f.rank.pp, f.rank.ep, f.rank.tp,
                f.fragment_id)), name
        assert multi > 0, name


def test_dp_owned_tensors_read_from_their_owner(scenarios):
    source, target, _ = scenarios("dp_ownership")
    plan = plan_placement_transfer(source, target)
    assert sorted({(op.tensor_id, op.source.rank.dp, op.target.rank.dp)
                   for op in plan.operations}) == [
        ("layers.0.owned_0", 0, 0), ("layers.0.owned_0", 0, 1),
        ("layers.0.owned_1", 1, 0), ("layers.0.owned_1", 1, 1)]


def test_balanced_selection_keeps_the_native_choice(scenarios):
    source, target, e = scenarios("dp_replicas_dp2tp2_to_dp3tp4")
    plan = plan_placement_transfer(source, target, source_selection="balanced")
    assert len(plan.operations) == e["regions"]
    assert plan.total_bytes == e["bytes"]
    native = {(r["target_fragment_id"], r["source_fragment_id"],
               r["overlap_offset"]) for r in plan.native_plan.regions()}
    assert {(op.target.fragment_id, op.source.fragment_id,
             op.overlap_offset) for op in plan.operations} == native
    check_plan_invariants(plan)
    with pytest.raises(ValueError, match="source_selection must be"):
        plan_placement_transfer(source, target, source_selection="fastest")


# --------------------------------------------------------------- geometry


def box(offset, shape, rank=R(), tid="t", itemsize=2):
    return PlacementFragment(tid, offset, shape,
                             math.prod(shape) * itemsize, rank)


SRC = box((1, 0, 0), (2, 6, 8))


def test_vector_a_outer_loop_over_dim0():
    dst = box((0, 2, 0), (4, 3, 8), R(tp=1))
    r = TransferRegion("t", SRC, dst, (1, 2, 0), (2, 3, 8), 32, 48, 48, (2,),
                       (96,), (48,))
    assert (r.segment_count, r.total_bytes) == (2, 96)
    assert list(r.iter_segments(max_segments=2)) == [(32, 48, 48),
                                                     (128, 96, 48)]
    assert (r.source_offset, r.target_offset, r.nbytes, r.repeat) == (
        32, 48, 48, 2)
    assert (r.source_stride, r.target_stride) == (96, 48)
    with pytest.raises(ValueError, match="loop geometry is not canonical"):
        TransferRegion("t", SRC, dst, (1, 2, 0), (2, 3, 8), 32, 48, 16,
                       (2, 3), (96, 16), (48, 16))


def test_vector_b_two_outer_loops_and_the_rejected_alternative():
    dst = box((0, 0, 4), (4, 6, 4), R(tp=1))
    r = TransferRegion("t", SRC, dst, (1, 0, 4), (2, 6, 4), 8, 48, 8, (2, 6),
                       (96, 16), (48, 8))
    assert r.segment_count == 12 and r.total_bytes == 96
    segments = list(r.iter_segments(max_segments=12))
    assert segments[:3] == [(8, 48, 8), (24, 56, 8), (40, 64, 8)]
    assert segments[6] == (104, 96, 8)
    with pytest.raises(ValueError, match="multiple source strides"):
        r.source_stride
    with pytest.raises(ValueError, match="loop geometry is not canonical"):
        TransferRegion("t", SRC, dst, (1, 0, 4), (2, 6, 4), 8, 48, 16,
                       (2, 3), (96, 16), (80, 16))


@pytest.mark.parametrize("changes, message", [
    ({"source_base_offset": 40}, "source base offset is inconsistent"),
    ({"target_base_offset": 0}, "target base offset is inconsistent"),
    ({"overlap_offset": (0, 2, 0)}, "exceeds source logical fragment"),
    ({"overlap_shape": (2, 4, 8)}, "exceeds target logical fragment"),
    ({"tensor_id": "u"}, "transfer region tensor mismatch"),
    ({"overlap_shape": (2, 3)}, "transfer region logical rank mismatch"),
    ({"outer_loop_counts": "2"}, "outer_loop_counts must contain integers"),
    ({"inner_bytes": 48.0}, "inner_bytes must be an integer"),
    ({"outer_loop_counts": (3,)}, "loop geometry does not match overlap"),
    ({"source_strides": ()}, "outer loop rank mismatch"),
])
def test_transfer_region_rules(changes, message):
    dst = box((0, 2, 0), (4, 3, 8), R(tp=1))
    fields = dict(tensor_id="t", source=SRC, target=dst,
                  overlap_offset=(1, 2, 0), overlap_shape=(2, 3, 8),
                  source_base_offset=32, target_base_offset=48,
                  inner_bytes=48, outer_loop_counts=(2,),
                  source_strides=(96,), target_strides=(48,))
    fields.update(changes)
    with pytest.raises(ValueError, match=message):
        TransferRegion(**fields)


def test_iter_segments_is_bounded_and_lazy():
    dst = box((0, 0, 4), (4, 6, 4), R(tp=1))
    r = TransferRegion("t", SRC, dst, (1, 0, 4), (2, 6, 4), 8, 48, 8, (2, 6),
                       (96, 16), (48, 8))
    segments = r.iter_segments(max_segments=11)
    with pytest.raises(ValueError, match="exceeds max_segments: 12 > 11"):
        next(segments)
    with pytest.raises(ValueError, match="max_segments must be a positive"):
        list(r.iter_segments(max_segments=0))
    whole = TransferRegion("t", SRC, SRC, (1, 0, 0), (2, 6, 8), 0, 0, 192, (),
                           (), ())
    assert list(whole.iter_segments(max_segments=1)) == [(0, 0, 192)]
    assert (whole.segment_count, whole.source_stride) == (1, 0)


def region_between(plan, tensor_id, source_ep, target_tp):
    matches = [op for op in plan.operations if op.tensor_id == tensor_id
               and op.source.rank.ep == source_ep
               and op.target.rank.tp == target_tp]
    assert len(matches) == 1
    return matches[0]


def geometry(op):
    return (op.overlap_offset, op.overlap_shape, op.source_base_offset,
            op.target_base_offset, op.inner_bytes, op.outer_loop_counts,
            op.source_strides, op.target_strides)


def test_vectors_c_and_d_from_planning(scenarios):
    source, target, _ = scenarios("cross_dim_ep2_to_tp2")
    plan = plan_placement_transfer(source, target)
    assert sum(op.tensor_id == "layers.0.experts.c"
               for op in plan.operations) == 4
    assert geometry(region_between(plan, "layers.0.experts.c", 0, 1)) == (
        (0, 3, 0), (2, 3, 8), 48, 0, 48, (2,), (96,), (48,))
    assert geometry(region_between(plan, "layers.0.experts.d", 0, 1)) == (
        (0, 0, 4), (2, 6, 4), 8, 0, 8, (2, 6), (96, 16), (48, 8))


def test_vector_e_ep8_dim0_to_tp8_dim2(scenarios):
    source, target, _ = scenarios("cross_dim_ep8_to_tp8_dim2")
    plan = plan_placement_transfer(source, target)
    assert len(plan.operations) == 64
    for op in plan.operations:
        assert op.segment_count == 8192 and op.inner_bytes == 2048
        assert op.outer_loop_counts == (1, 8192)
        assert op.source_strides == (2 * 8192 * 8192, 16384)
        assert op.target_strides == (2 * 8192 * 1024, 2048)
    assert plan.total_bytes == 8 * 8192 * 8192 * 2


def test_dim0_to_dim2_lowers_to_two_million_segments(scenarios):
    source, target, e = scenarios("cross_dim_tp4_dim0_to_dim2")
    plan = plan_placement_transfer(source, target)
    assert len(plan.operations) == 16
    assert {(op.inner_bytes, op.outer_loop_counts, op.segment_count)
            for op in plan.operations} == {(4096, (32, 4096), 131072)}
    assert sum(op.segment_count for op in plan.operations) == 2_097_152
    # The native plan is one strided operation per region.
    assert plan.native_plan.summary["operations"] == 16


# ----------------------------------------------------------------- limits


def test_planning_limits_defaults_and_rules():
    limits = PlanningLimits()
    assert (limits.max_transfer_regions, limits.max_segments_per_region,
            limits.max_total_lowered_segments) == (1_000_000, 1_000_000,
                                                   10_000_000)
    for kw in ({"max_transfer_regions": 0},
               {"max_segments_per_region": True},
               {"max_total_lowered_segments": 1.5}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"planning limit {name} must be "
                           "a positive integer"):
            PlanningLimits(**kw)


def test_limits_are_enforced(scenarios):
    source, target, _ = scenarios("tp_cube_dim0_to_dim2_stress")
    with pytest.raises(ValueError, match="logical transfer region exceeds "
                       "max_segments_per_region: 1048576 > 1000000"):
        plan_placement_transfer(source, target)
    raised = PlanningLimits(max_segments_per_region=1_048_576,
                            max_total_lowered_segments=16_777_216)
    plan = plan_placement_transfer(source, target, planning_limits=raised)
    assert plan.planning_limits is raised
    assert sum(op.segment_count for op in plan.operations) == 16_777_216
    total = dataclasses.replace(raised, max_total_lowered_segments=16_777_215)
    with pytest.raises(ValueError, match="logical transfer plan exceeds "
                       "max_total_lowered_segments: 16777216 > 16777215"):
        plan_placement_transfer(source, target, planning_limits=total)
    regions = dataclasses.replace(raised, max_transfer_regions=15)
    with pytest.raises(ValueError, match="logical transfer plan exceeds "
                       "max_transfer_regions: 15"):
        plan_placement_transfer(source, target, planning_limits=regions)
    with pytest.raises(ValueError, match="planning_limits must be a "
                       "PlanningLimits"):
        plan_placement_transfer(source, target, planning_limits={})


# ------------------------------------------------------------ local target


def test_local_target_plans_one_participant(fixtures):
    e = fixtures["plan_expected"]["pair_201"]
    source = weight_placement_from_json(
        (fixtures["plans"] / e["source"]).read_text())
    target = weight_placement_from_json(
        (fixtures["plans"] / e["target"]).read_text())
    whole = plan_placement_transfer(source, target)
    parts = [p for p in target.parts if p.fragments]
    for part in parts[::7]:
        local = plan_placement_transfer_to_local_target(
            source, target, part.participant_id)
        executor, = local.target_executors
        assert executor.participant_id == part.participant_id
        assert executor in whole.target_executors
        assert local.target_tensors == part.tensors
        assert local.source_tensors == source.tensors
        mine = set(executor.placement_fragment_ids)
        assert local.operations == tuple(
            op for op in whole.operations if op.target.fragment_id in mine)
        check_plan_invariants(local)
    with pytest.raises(ValueError, match="target_participant_id is required "
                       "for a multi-participant target"):
        plan_placement_transfer_to_local_target(source, target)
    with pytest.raises(ValueError, match="unknown target participant: nope"):
        plan_placement_transfer_to_local_target(source, target, "nope")


def test_local_target_of_one_participant_and_of_an_empty_part(scenarios):
    source, target, _ = scenarios("aliases_tied_embeddings")
    local = plan_placement_transfer_to_local_target(source, target)
    assert len(local.operations) == 2 and len(local.target_executors) == 1
    source, target, _ = scenarios("fp8_fused_moe")
    empty = next(p for p in target.parts if not p.fragments)
    with pytest.raises(ValueError, match="local target manifest is missing "
                       "fragments"):
        plan_placement_transfer_to_local_target(source, target,
                                                empty.participant_id)


# ------------------------------------------------------------ stored source


def stored_from(placement, group="default/{}/{}"):
    """One complete replica of `placement` (DP rank 0, one copy per box) as
    a committed manifest, one payload object per fragment."""
    group = group.format(placement.resource_id, placement.revision)
    seen = set()
    fragments = []
    for f in placement.fragments:
        key = (f.tensor_id, f.global_offset, f.local_shape)
        if f.rank.dp != 0 or key in seen:
            continue
        seen.add(key)
        fragments.append(StoredFragment(
            f"stored-{len(fragments):04d}", f.tensor_id, f.global_offset,
            f.local_shape, f"{group}/payload/{len(fragments)}", 0, f.nbytes,
            f.aliases))
    return WeightManifest(
        namespace="default", resource_id=placement.resource_id,
        revision=placement.revision,
        weight_generation=placement.weight_generation, group_id=group,
        manifest_key=group + "/manifest", tensors=placement.tensors,
        fragments=tuple(fragments), created_at="2026-07-23T00:00:00Z")


def test_stored_source_plans_like_the_placement(scenarios, cli, tmp_path):
    for name in ("dp_replicas_dp2tp2_to_dp3tp4", "cross_dim_ep2_to_tp2",
                 "aliases_cross_dim", "pp_routing_4_to_2"):
        source, target, e = scenarios(name)
        manifest = stored_from(source)
        plan = plan_stored_transfer_to_target_placement(manifest, target)
        assert len(plan.operations) == e["regions"], name
        assert sum(op.segment_count for op in plan.operations) == \
            e["segments"], name
        assert plan.total_bytes == e["bytes"], name
        assert all(isinstance(op.source, StoredFragment)
                   for op in plan.operations)
        assert plan.source_placement is None
        assert plan.source_placement_id is None
        assert plan.source_manifest is manifest
        assert plan.source_manifest_identity == manifest.manifest_identity
        assert plan.source_executors == ()
        assert {r.source_pp for r in plan.pipeline_routes} == {None}
        check_plan_invariants(plan)
        (tmp_path / "m.json").write_text(manifest.to_json())
        (tmp_path / "t.json").write_text(weight_placement_to_json(target))
        report = json.loads(cli("plan", "--json", tmp_path / "m.json",
                                tmp_path / "t.json").stdout)
        assert (report["regions"], report["segments"], report["bytes"]) == (
            e["regions"], e["segments"], e["bytes"]), name


def test_stored_source_rules(scenarios):
    source, target, _ = scenarios("cross_dim_ep2_to_tp2")
    manifest = stored_from(source)
    with pytest.raises(ValueError, match="source requires one complete "
                       "WeightManifest"):
        plan_stored_transfer_to_target_placement(manifest.to_native(), target)
    with pytest.raises(ValueError, match="requires one complete "
                       "WeightPlacementManifest"):
        plan_stored_transfer_to_target_placement(manifest, manifest)
    small_manifest = stored_from(small(2))
    with pytest.raises(ValueError, match="source and target revision differ"):
        plan_stored_transfer_to_target_placement(small_manifest,
                                                 small(1, revision="r2"))
    plan = plan_stored_transfer_to_target_placement(small_manifest, small(1))
    assert [(op.source.global_offset, op.target_base_offset)
            for op in plan.operations] == [((0, 0), 0), ((2, 0), 24)]
    assert {op.source.fragment_id for op in plan.operations} == {
        "stored-0000", "stored-0001"}


# --------------------------------------------------------------- planning


def small(tp, shape=(4, 6), resource="m", revision="r1", dtype="bf16",
          fingerprint="row-major"):
    """A [4, 6] tensor split on dim 0 over `tp` participants."""
    axes = (SplitAxis("tp", 0),) if tp > 1 else ()
    t = TensorDescriptor("w", shape, dtype, 2, (0,) if tp > 1 else (),
                         fingerprint, axes)
    topo = ParallelTopology(
        tp_size=tp, pp_size=1, ep_size=1, dp_size=1,
        participants=[TopologyParticipant(f"p{i}", R(tp=i))
                      for i in range(tp)])
    rows = shape[0] // tp
    fragments = [box((i * rows, 0), (rows, shape[1]), R(tp=i), "w")
                 for i in range(tp)]
    return WeightPlacementManifest.from_fragments(
        resource_id=resource, revision=revision, weight_generation=1,
        placement_set_id="s", topology=topo, tensors=[t],
        fragments=fragments)


@pytest.mark.parametrize("target, message", [
    (small(1, revision="r2"), "source and target revision differ"),
    (small(1, resource="n"), "source and target resource_id differ"),
    (small(1, fingerprint="col-major"), "layout mismatch for tensor w"),
    (small(1, dtype="fp16"),
     r"tensor descriptor mismatch: w: dtype bf16 \(source\) vs fp16 "
     r"\(target\)"),
])
def test_planner_rejects_incompatible_targets(target, message):
    with pytest.raises(ValueError, match=message):
        plan_placement_transfer(small(2), target)


def test_planner_requires_equal_tensor_sets():
    source = small(1)
    t = source.tensors[0]
    extra = dataclasses.replace(t, tensor_id="x")
    one = source.topology
    wider = WeightPlacementManifest.from_fragments(
        resource_id="m", revision="r1", weight_generation=1,
        placement_set_id="s", topology=one, tensors=[t, extra],
        fragments=[box((0, 0), (4, 6), R(), "w"),
                   box((0, 0), (4, 6), R(), "x")])
    with pytest.raises(ValueError, match="target manifests are missing "
                       "tensors: x"):
        plan_placement_transfer(wider, source)
    with pytest.raises(ValueError, match="target manifests contain unknown "
                       "tensors: x"):
        plan_placement_transfer(source, wider)
    local = plan_placement_transfer_to_local_target(wider, source)
    assert [t.tensor_id for t in local.source_tensors] == ["w", "x"]
    assert [t.tensor_id for t in local.target_tensors] == ["w"]


def test_plan_values_and_direct_construction():
    source, target = small(2), small(1)
    plan = plan_placement_transfer(source, target)
    assert len(plan.operations) == 2
    assert [op.source.rank.tp for op in plan.operations] == [0, 1]
    route, = plan.pipeline_routes
    assert route == PipelineRouteGroup(0, None, 0, None, (0, 1))
    executor, = plan.target_executors
    assert executor == PlacementExecutorPlan(
        target.placement_id, "p0", R(), (target.fragments[0].fragment_id,))
    assert plan.operation_indices_for_executor(executor, "target") == (0, 1)
    assert [plan.operation_indices_for_executor(e, "source")
            for e in plan.source_executors] == [(0,), (1,)]
    with pytest.raises(ValueError, match="invalid executor side: both"):
        plan.operation_indices_for_executor(executor, "both")
    with pytest.raises(ValueError, match="source executor is not part of "
                       "this logical plan"):
        plan.operation_indices_for_executor(executor, "source")
    restored = pickle.loads(pickle.dumps(plan))
    assert restored == plan and restored.native_plan is None
    assert restored.pipeline_routes == plan.pipeline_routes

    fields = {f.name: getattr(plan, f.name)
              for f in dataclasses.fields(LogicalTransferPlan) if f.init}
    again = LogicalTransferPlan(**fields)
    assert again == plan and again.native_plan is None
    for changes, message in (
            ({"source_placement": None}, "requires exactly one source "
             "provenance"),
            ({"target_placement": None}, "target placement is invalid"),
            ({"operations": plan.operations[:1]},
             "logical target fragment is not fully covered"),
            ({"operations": ("op",)}, "requires a canonical transfer "
             "operation"),
            ({"target_executors": ("e",)}, "invalid canonical executor "
             "metadata"),
            ({"revision": ""}, "identifiers must not be empty"),
            ({"planning_limits": PlanningLimits(max_transfer_regions=1)},
             "exceeds max_transfer_regions"),
            ({"source_manifest": "m"}, "source manifest is invalid")):
        with pytest.raises(ValueError, match=message):
            LogicalTransferPlan(**dict(fields, **changes))


def test_plan_component_rules():
    with pytest.raises(ValueError, match="pipeline route target_pp must be "
                       "non-negative"):
        PipelineRouteGroup(None, None, -1, None, ())
    with pytest.raises(ValueError, match="duplicate operation indices"):
        PipelineRouteGroup(0, None, 0, None, (1, 1))
    with pytest.raises(ValueError, match="identifiers must not be empty"):
        PlacementExecutorPlan("sha256:x", "p0", R(), ())
    with pytest.raises(ValueError, match="duplicate fragment IDs"):
        PlacementExecutorPlan("sha256:x", "p0", R(), ("a", "a"))


@pytest.mark.parametrize("tilings", [
    ("split", "whole"), ("whole", "split"), ("whole", "split", "split")])
def test_reference_selection_prefers_the_smallest_complete_owner(tilings):
    """A tensor held completely by several PP owners, tiled differently, is
    read from the pp 0 owner's boxes, also when the native planner
    intersected another owner's tiling (the one most owners share)."""
    pp = len(tilings)
    topo = ParallelTopology(
        tp_size=1, pp_size=pp, ep_size=1, dp_size=1,
        participants=[TopologyParticipant(f"s{i}", R(pp=i))
                      for i in range(pp)])
    t = TensorDescriptor("w", (4, 2), "bf16", 2, (), "row-major",
                         (OwnershipAxis("pp"),))
    boxes = {"whole": [((0, 0), (4, 2))],
             "split": [((0, 0), (2, 2)), ((2, 0), (2, 2))]}
    source = WeightPlacementManifest.from_fragments(
        resource_id="m", revision="r1", weight_generation=1,
        placement_set_id="s", topology=topo, tensors=[t],
        fragments=[box(o, shape, R(pp=i), "w")
                   for i, tiling in enumerate(tilings)
                   for o, shape in boxes[tiling]])
    one = ParallelTopology(tp_size=1, pp_size=1, ep_size=1, dp_size=1,
                           participants=[TopologyParticipant("t0", R())])
    target = WeightPlacementManifest.from_fragments(
        resource_id="m", revision="r1", weight_generation=1,
        placement_set_id="t", topology=one,
        tensors=[dataclasses.replace(t, parallel_axes=())],
        fragments=[box((0, 0), (4, 2), R(), "w")])
    for selection in ("reference", "balanced"):
        plan = plan_placement_transfer(source, target,
                                       source_selection=selection)
        check_plan_invariants(plan)
        assert plan.total_bytes == 16
    plan = plan_placement_transfer(source, target)
    assert [op.overlap_offset for op in plan.operations] == [
        o for o, _ in boxes[tilings[0]]]
    assert {op.source.rank.pp for op in plan.operations} == {0}
    assert [r.source_pp for r in plan.pipeline_routes] == [0]
    assert [e.participant_id for e in plan.source_executors] == ["s0"]


# ------------------------------------------------------------- the bytes


def pattern(fragment, tensor):
    """The bytes of a fragment whose every element holds its global
    element index (little endian, truncated to the itemsize)."""
    coords = np.indices(fragment.local_shape).reshape(
        len(fragment.local_shape), -1)
    coords += np.array(fragment.global_offset).reshape(-1, 1)
    index = np.ravel_multi_index(tuple(coords), tensor.global_shape)
    raw = index.astype("<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :tensor.itemsize].reshape(-1)


def execute(plan, source_fragments):
    """Runs the plan's operations segment by segment on byte buffers and
    returns the target buffers."""
    tensors = {t.tensor_id: t for t in plan.source_tensors}
    sources = {f.fragment_id: pattern(f, tensors[f.tensor_id])
               for f in source_fragments}
    targets = {}
    written = {}
    for op in plan.operations:
        fid = op.target.fragment_id
        dst = targets.setdefault(fid, np.zeros(op.target.nbytes, np.uint8))
        src = sources[op.source.fragment_id]
        for s, t, n in op.iter_segments(max_segments=op.segment_count):
            dst[t:t + n] = src[s:s + n]
            written[fid] = written.get(fid, 0) + n
    return targets, written


SMALL = ("aliases_cross_dim", "aliases_tied_embeddings",
         "cross_dim_ep2_to_tp2", "cross_dim_ep4_to_tp4_uint8",
         "dp_ownership", "dp_replicas_dp2tp2_to_dp3tp4",
         "ep_ownership_8_to_2", "ep_regroup_2_to_8", "ep_regroup_8_to_2",
         "four_axis", "four_axis_uint8", "fp8_fused_moe",
         "fp8_weight_scale_tp4_to_tp8", "pp_routing_2_to_4",
         "pp_routing_mod_4_to_2", "tp_merge_8_to_4", "tp_split_4_to_8",
         "virtual_pp_stages")


@pytest.mark.parametrize("selection", ["reference", "balanced"])
def test_operations_move_exactly_the_right_bytes(scenarios, fixtures,
                                                 selection):
    """Executing the compat geometry segment by segment fills every target
    fragment with its own global element indices, for both selections,
    from placements and from a stored manifest."""
    pairs = [scenarios(name)[:2] for name in SMALL]
    for e in fixtures["plan_expected"].values():
        pairs.append(tuple(weight_placement_from_json(
            (fixtures["plans"] / e[side]).read_text())
            for side in ("source", "target")))
    for source, target in pairs:
        plan = plan_placement_transfer(source, target,
                                       source_selection=selection)
        buffers, written = execute(plan, source.fragments)
        tensors = {t.tensor_id: t for t in target.tensors}
        assert set(buffers) == {f.fragment_id for f in target.fragments}
        for f in target.fragments:
            assert written[f.fragment_id] == f.nbytes
            assert np.array_equal(buffers[f.fragment_id],
                                  pattern(f, tensors[f.tensor_id]))
    source, target = pairs[SMALL.index("four_axis")]
    manifest = stored_from(source)
    plan = plan_stored_transfer_to_target_placement(manifest, target)
    buffers, _ = execute(plan, manifest.fragments)
    tensors = {t.tensor_id: t for t in target.tensors}
    for f in target.fragments:
        assert np.array_equal(buffers[f.fragment_id],
                              pattern(f, tensors[f.tensor_id]))


def test_native_plan_drives_reshard_buffers(scenarios):
    """A compat plan's native_plan and to_native() placements run through
    reshard's local executor; the target tensors hold the global element
    indices."""
    source, target, _ = scenarios("dp_replicas_dp2tp2_to_dp3tp4")
    plan = plan_placement_transfer(source, target)
    tensors = {t.tensor_id: t for t in source.tensors}

    def arrays(placement):
        out = {}
        for f in placement.fragments:
            t = tensors[f.tensor_id]
            out[f.fragment_id] = pattern(f, t).view(
                f"<u{t.itemsize}").reshape(f.local_shape).copy()
        return out
    src = arrays(source)
    dst = {fid: np.zeros_like(a) for fid, a in arrays(target).items()}
    report = reshard.reshard(source.to_native(), src, target.to_native(), dst,
                             plan=plan.native_plan)
    assert (report.bytes, report.regions) == (plan.total_bytes,
                                              len(plan.operations))
    expected = arrays(target)
    for fid, a in dst.items():
        assert np.array_equal(a, expected[fid]), fid
