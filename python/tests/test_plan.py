"""Plans from Python equal the C++ CLI's, byte for byte.

For every fixture pair (tests/data/fixtures/plans) and every scenario pair
(tests/data/scenarios), ``reshard.plan(src, dst).to_json()`` is exactly
what ``reshard plan SRC DST --json`` prints; the summary counts equal
expected.json; regions(), region_arrays(), the fragment lists, the traffic
and the pipeline routes agree with each other and with the JSON; the
regions' strided copies move exactly the bytes the fragment geometry says;
per-participant plans (target_participant_id) equal the CLI's
``--target-participant`` plans and partition the full plan.
"""

import itertools
import json
import os
import pathlib

import numpy as np
import pytest

import reshard

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
FIXTURE_DIR = DATA / "fixtures" / "plans"
SCENARIO_DIR = DATA / "scenarios"
FIXTURE_PAIRS = json.loads((FIXTURE_DIR / "expected.json").read_text())
SCENARIO_PAIRS = json.loads((SCENARIO_DIR / "expected.json").read_text())[
    "plans"]

PAIRS = (
    [(f"fixture/{k}", FIXTURE_DIR, v)
     for k, v in sorted(FIXTURE_PAIRS.items())]
    + [(f"scenario/{k}", SCENARIO_DIR, v)
       for k, v in sorted(SCENARIO_PAIRS.items()) if "error" not in v])
ERROR_PAIRS = [(k, v) for k, v in sorted(SCENARIO_PAIRS.items())
               if "error" in v]


def _load(directory, name):
    return reshard.Placement.from_json((directory / name).read_text("utf-8"))


def _pair(directory, entry):
    return _load(directory, entry["source"]), _load(directory, entry["target"])


@pytest.fixture(scope="module")
def plans():
    """name -> (source, target, plan)."""
    out = {}
    for name, directory, entry in PAIRS:
        src, dst = _pair(directory, entry)
        out[name] = (src, dst, reshard.plan(src, dst))
    return out


@pytest.mark.parametrize("name,directory,entry", PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_plan_json_equals_cli(name, directory, entry, plans, cli):
    src, dst, plan = plans[name]
    out = cli("plan", directory / entry["source"], directory / entry["target"],
              "--json").stdout
    assert out.endswith("\n")
    assert plan.to_json() == out[:-1]


@pytest.mark.parametrize("name,directory,entry", PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_summary_equals_expected(name, directory, entry, plans):
    src, dst, plan = plans[name]
    s = plan.summary
    assert (s["bytes"], s["regions"], s["segments"]) == (
        entry["bytes"], entry["regions"], entry["segments"])
    assert plan.num_regions == entry["regions"]
    assert plan.source_kind == "placement"
    assert plan.source_placement_id == src.placement_id
    assert plan.target_placement_id == dst.placement_id
    assert plan.resource_id == dst.resource_id
    assert plan.revision == dst.revision
    doc = json.loads(plan.to_json())
    for key in ("bytes", "regions", "segments", "operations",
                "max_source_bytes", "max_target_bytes",
                "source_fragments_used"):
        assert s[key] == doc[key], key
    assert s["mean_source_bytes"] == pytest.approx(doc["mean_source_bytes"],
                                                   abs=1)
    assert len(plan.source_fragments) == doc["source_fragments"]
    assert len(plan.target_fragments) == doc["target_fragments"]
    for side in ("source", "target"):
        assert [(p["participant_id"], p["bytes"])
                for p in doc[f"{side}_participants"]] == list(zip(
                    getattr(plan, f"{side}_participants"),
                    getattr(plan, f"{side}_bytes")))
    assert [(t["source"], t["target"], t["bytes"])
            for t in doc["traffic"]] == list(plan.traffic)
    assert sum(b for _, _, b in plan.traffic) == s["bytes"]
    routes = [{k: r[k] for k in ("source_pp", "source_stage", "target_pp",
                                 "target_stage", "operations", "bytes")}
              for r in doc["pipeline_routes"]]
    assert plan.pipeline_routes == routes
    if "routes" in entry:
        # expected.json: [source_pp, source_stage, target_pp, target_stage,
        # operations], a stage of null is -1 in the plan.
        got = [[r["source_pp"], r["source_stage"], r["target_pp"],
                r["target_stage"], r["operations"]]
               for r in plan.pipeline_routes]
        want = [[-1 if v is None else v for v in r] for r in entry["routes"]]
        assert got == want
    if "max_segments_per_region" in entry:
        assert int(plan.region_arrays()["segments"].max()) == \
            entry["max_segments_per_region"]


@pytest.mark.parametrize("name,directory,entry", PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_region_arrays_agree_with_regions(name, directory, entry, plans):
    src, dst, plan = plans[name]
    regions = plan.regions()
    arrays = plan.region_arrays()
    n = len(regions)
    assert n == plan.num_regions
    assert set(arrays) == {"tensor", "source_fragment", "target_fragment",
                           "loops", "source_base_offset", "target_base_offset",
                           "inner_bytes", "segments", "bytes"}
    for key, column in arrays.items():
        assert isinstance(column, np.ndarray) and column.shape == (n,), key
    assert arrays["tensor"].dtype == np.uint32
    assert arrays["bytes"].dtype == np.uint64
    tensors = plan.tensors
    sources = plan.source_fragments
    targets = plan.target_fragments
    for i, r in enumerate(regions):
        assert tensors[arrays["tensor"][i]] == r["tensor_id"]
        assert sources[arrays["source_fragment"][i]]["fragment_id"] == \
            r["source_fragment_id"]
        assert targets[arrays["target_fragment"][i]]["fragment_id"] == \
            r["target_fragment_id"]
        assert arrays["loops"][i] == len(r["loops"])
        for key in ("source_base_offset", "target_base_offset", "inner_bytes",
                    "segments", "bytes"):
            assert arrays[key][i] == r[key], (i, key)
    assert int(arrays["bytes"].sum()) == plan.summary["bytes"]
    assert int(arrays["segments"].sum()) == plan.summary["segments"]
    if n:
        assert plan.region(0) == regions[0]
        assert plan.region(n - 1) == regions[-1]
        assert isinstance(plan.describe_region(0), str)
    with pytest.raises(IndexError):
        plan.region(n)
    # The fragment lists describe the placements' fragments.
    for side, placement in ((sources, src), (targets, dst)):
        for f in side:
            frag = placement.find_fragment(f["fragment_id"])
            assert frag is not None
            assert f["tensor_id"] == frag.tensor_id
            assert f["global_offset"] == frag.global_offset
            assert f["local_shape"] == frag.local_shape
            assert f["nbytes"] == frag.nbytes
            assert f["rank"] == frag.rank
            assert placement.find_part(f["participant_id"]).rank == frag.rank


def _element_pairs(src_frag, dst_frag, itemsize, offset, shape):
    """Byte offsets (source, target) of every element of the box."""
    out = []
    for g in itertools.product(*[range(o, o + s)
                                 for o, s in zip(offset, shape)]):
        def linear(frag):
            idx = 0
            for d, v in enumerate(g):
                idx = (idx * frag["local_shape"][d]
                       + v - frag["global_offset"][d])
            return idx * itemsize
        out.append((linear(src_frag), linear(dst_frag)))
    return out


def _region_pairs(r, itemsize):
    """Byte offsets (source, target) of every element the strided copy
    moves, in copy order."""
    out = []
    ranges = [range(count) for count, _, _ in r["loops"]]
    for idx in itertools.product(*ranges):
        s = r["source_base_offset"]
        t = r["target_base_offset"]
        for i, (_, ss, ts) in zip(idx, r["loops"]):
            s += i * ss
            t += i * ts
        for b in range(0, r["inner_bytes"], itemsize):
            out.append((s + b, t + b))
    return out


SMALL = [p for p in PAIRS if p[2]["bytes"] <= 1 << 18]


@pytest.mark.parametrize("name,directory,entry", SMALL,
                         ids=[p[0] for p in SMALL])
def test_region_geometry_moves_exactly_the_overlaps(name, directory, entry,
                                                    plans):
    src, dst, plan = plans[name]
    sources = {f["fragment_id"]: f for f in plan.source_fragments}
    targets = {f["fragment_id"]: f for f in plan.target_fragments}
    written = {}
    for r in plan.regions():
        s = sources[r["source_fragment_id"]]
        t = targets[r["target_fragment_id"]]
        itemsize = dst.find_tensor(t["tensor_id"]).itemsize
        for d, (o, n) in enumerate(zip(r["overlap_offset"],
                                       r["overlap_shape"])):
            assert max(s["global_offset"][d], t["global_offset"][d]) == o
            assert min(s["global_offset"][d] + s["local_shape"][d],
                       t["global_offset"][d] + t["local_shape"][d]) == o + n
        assert r["bytes"] == itemsize * int(np.prod(r["overlap_shape"],
                                                    dtype=np.int64))
        assert r["segments"] == int(np.prod([c for c, _, _ in r["loops"]],
                                            dtype=np.int64))
        assert r["bytes"] == r["segments"] * r["inner_bytes"]
        want = _element_pairs(s, t, itemsize, r["overlap_offset"],
                              r["overlap_shape"])
        assert _region_pairs(r, itemsize) == want, r
        for _, toff in want:
            key = (t["fragment_id"], toff)
            assert key not in written, f"target byte written twice: {key}"
            written[key] = True
    # Every target element of every target fragment is written once.
    assert len(written) == sum(
        f["nbytes"] // dst.find_tensor(f["tensor_id"]).itemsize
        for f in plan.target_fragments)


@pytest.mark.parametrize("name,entry", ERROR_PAIRS,
                         ids=[p[0] for p in ERROR_PAIRS])
def test_scenario_that_must_fail(name, entry, cli):
    src, dst = _pair(SCENARIO_DIR, entry)
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(src, dst)
    assert str(e.value) == entry["error"]
    proc = cli("plan", SCENARIO_DIR / entry["source"],
               SCENARIO_DIR / entry["target"], "--json", check=False)
    assert proc.returncode != 0
    assert entry["error"] in proc.stderr


PARTICIPANT_PAIRS = [p for p in PAIRS if p[0] in (
    "fixture/pair_201", "fixture/pair_202", "fixture/pair_205",
    "scenario/dp_replicas_dp2tp2_to_dp3tp4", "scenario/four_axis",
    "scenario/fp8_fused_moe", "scenario/virtual_pp_stages")]


@pytest.mark.parametrize("name,directory,entry", PARTICIPANT_PAIRS,
                         ids=[p[0] for p in PARTICIPANT_PAIRS])
def test_target_participant_plans(name, directory, entry, plans, cli):
    src, dst, full = plans[name]
    total = 0
    owners = [p.participant_id for p in dst.parts if p.fragments]
    for i, pid in enumerate(owners):
        plan = reshard.plan(src, dst, target_participant_id=pid)
        ids = {f.placement_fragment_id for f in dst.find_part(pid).fragments}
        assert {f["fragment_id"] for f in plan.target_fragments} == ids
        assert all(f["participant_id"] == pid for f in plan.target_fragments)
        # Every byte of the participant's fragments is planned (the source
        # replica a local plan reads may differ from the full plan's).
        covered = {}
        for r in plan.regions():
            covered[r["target_fragment_id"]] = \
                covered.get(r["target_fragment_id"], 0) + r["bytes"]
        assert covered == {f.placement_fragment_id: f.nbytes
                           for f in dst.find_part(pid).fragments}
        assert plan.target_participants == (pid,)
        assert plan.target_bytes == [sum(covered.values())]
        total += plan.summary["bytes"]
        if i < 3 or i == len(owners) - 1:
            out = cli("plan", directory / entry["source"],
                      directory / entry["target"], "--target-participant",
                      pid, "--json").stdout
            assert plan.to_json() == out[:-1]
    assert total == full.summary["bytes"]


def test_plan_limits_and_options(plans):
    src, dst, full = plans["fixture/pair_201"]
    with pytest.raises(reshard.ResourceExhaustedError) as e:
        reshard.plan(src, dst, max_transfer_regions=10)
    assert "max_transfer_regions" in str(e.value)
    with pytest.raises(reshard.ResourceExhaustedError) as e:
        reshard.plan(src, dst, max_operations=215)
    assert str(e.value) == "plan exceeds max_operations: 216 > 215"
    at_limit = reshard.plan(src, dst, max_transfer_regions=216,
                            max_operations=216)
    assert at_limit.to_json() == full.to_json()
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(src, dst, target_participant_id="nobody")
    assert str(e.value) == "unknown target participant: nobody"
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(src, "not a placement")
    assert str(e.value) == "plan target must be a WeightPlacementManifest"
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan("not a placement", dst)
    assert "plan source" in str(e.value)
    assert repr(full) == "LogicalTransferPlan(216 regions, 2592 bytes)"


def test_target_participant_without_fragments(cli):
    entry = SCENARIO_PAIRS["fp8_fused_moe"]
    src, dst = _pair(SCENARIO_DIR, entry)
    empty = [p.participant_id for p in dst.parts if not p.fragments]
    assert empty, "fp8_fused_moe has empty target parts"
    message = (f"local target manifest is missing fragments: participant "
               f"{empty[0]} holds none")
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(src, dst, target_participant_id=empty[0])
    assert str(e.value) == message
    proc = cli("plan", SCENARIO_DIR / entry["source"],
               SCENARIO_DIR / entry["target"], "--target-participant",
               empty[0], "--json", check=False)
    assert proc.returncode != 0 and message in proc.stderr


def _replica_scenario(name):
    return reshard.Placement.from_json(
        (SCENARIO_DIR / f"{name}.json").read_text("utf-8"))


def test_plan_replica_policy():
    # Two whole DP replicas read by a DP2 x TP2 target: the reference reads
    # target DP rank d from replica d for both TP halves; the balanced
    # policy (the default) alternates the replicas region by region.
    source = _replica_scenario("dp_replicas_dp2tp2_to_dp3tp4_source")
    target = _replica_scenario("dp_replicas_dp2tp2_to_dp3tp4_target")
    reference = reshard.plan(source, target, replica_policy="reference")
    balanced = reshard.plan(source, target)
    assert reshard.plan(source, target, replica_policy="balanced").regions() \
        == balanced.regions()
    assert reference.summary["bytes"] == balanced.summary["bytes"]
    dp_of = {f.placement_fragment_id: f.rank.dp for f in source.fragments}
    target_dp = {f.placement_fragment_id: f.rank.dp for f in target.fragments}
    replicas = sorted({dp_of[f.placement_fragment_id]
                       for f in source.fragments})
    for r in reference.regions():
        want = replicas[target_dp[r["target_fragment_id"]] % len(replicas)]
        assert dp_of[r["source_fragment_id"]] == want
    assert {(target_dp[r["target_fragment_id"]], dp_of[r["source_fragment_id"]])
            for r in balanced.regions()} != {
        (target_dp[r["target_fragment_id"]], dp_of[r["source_fragment_id"]])
        for r in reference.regions()}
    with pytest.raises(reshard.InvalidArgumentError,
                       match="^plan.replica_policy must be 'balanced' or "
                             "'reference', got 'first'$"):
        reshard.plan(source, target, replica_policy="first")
