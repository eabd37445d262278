"""Placement identities from Python equal the C++ CLI's, for every fixture.

For every golden placement (tests/data/fixtures/placements and every
scenario placement) ``reshard.Placement.from_json`` gives the placement_id,
digest and topology_id of expected.json and of ``reshard validate --json``,
``to_json()`` gives the file back byte for byte, and the same placement
built in Python from its parts (TensorDescriptor, PlacementFragment,
TopologyParticipant, ParallelTopology, WeightPlacementPart,
WeightPlacementManifest, from_fragments) has the same identities and wire.
"""

import json
import os
import pathlib

import pytest

import reshard

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
PLACEMENTS = sorted(
    (DATA / "fixtures" / "placements").glob("placement_*.json"))
SCENARIOS = sorted(p for p in (DATA / "scenarios").glob("*.json")
                   if p.name != "expected.json")
ALL = PLACEMENTS + SCENARIOS


def _expected(path):
    if path.parent.name == "placements":
        return json.loads(
            (path.parent / "expected.json").read_text())[path.name]
    return json.loads((path.parent / "expected.json").read_text())[
        "placements"][path.name]


def _id(path):
    return f"{path.parent.name}/{path.name}"


# ------------------------------------------------------------ from the wire


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_identities_equal_expected_and_cli(path, cli):
    text = path.read_text(encoding="utf-8")
    p = reshard.Placement.from_json(text)
    want = _expected(path)
    assert p.placement_id == want["placement_id"]
    assert p.digest == want["digest"]
    assert p.topology_id == want["topology_id"]
    assert p.topology.topology_id == want["topology_id"]
    assert len(p.fragments) == want["fragments"]
    sizes = {"dp": p.topology.dp_size, "ep": p.topology.ep_size,
             "pp": p.topology.pp_size, "tp": p.topology.tp_size}
    assert sizes == want["sizes"]
    if "tensors" in want:
        assert len(p.tensors) == want["tensors"]
        assert len(p.topology.participants) == want["participants"]

    out = cli("validate", path, "--json").stdout
    assert out.endswith("\n")
    got = json.loads(out)
    assert got == {
        "bindings": 0,
        "digest": p.digest,
        "fragments": len(p.fragments),
        "participants": len(p.topology.participants),
        "placement_id": p.placement_id,
        "resource_id": p.resource_id,
        "revision": p.revision,
        "tensors": len(p.tensors),
        "topology_id": p.topology_id,
        "valid": True,
        "weight_generation": p.weight_generation,
    }


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_to_json_round_trips_byte_for_byte(path):
    raw = path.read_bytes()
    p = reshard.Placement.from_json(raw.decode("utf-8"))
    assert p.to_json().encode("utf-8") == raw
    # bytes in, the same placement out.
    q = reshard.Placement.from_json(raw)
    assert q == p and q.digest == p.digest and hash(q) == hash(p)
    again = reshard.Placement.from_json(p.to_json())
    assert again.to_json() == p.to_json()


def test_accessors_of_a_fixture(fixtures):
    path = fixtures["placements"] / "placement_100.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    p = reshard.Placement.from_json(path.read_text(encoding="utf-8"))
    assert p.resource_kind == "model_weight"
    assert (p.resource_id, p.revision, p.weight_generation,
            p.placement_set_id) == ("fixture-model", "step-7", 0, "set-0")
    assert [t.tensor_id for t in p.tensors] == \
        [t["tensor_id"] for t in doc["tensors"]]
    assert [q.participant_id for q in p.parts] == \
        [q["participant_id"] for q in doc["parts"]]
    assert p.topology.world_size == 4
    # Non-ASCII tensor ids survive.
    t = p.find_tensor("layers.3.été.3")
    assert t is not None and t.global_shape == (3, 2) and t.itemsize == 4
    assert t.nbytes == 24 and t.num_elements == 6
    assert p.find_tensor("nope") is None
    assert p.find_part("nope") is None and p.find_fragment("nope") is None
    for part in doc["parts"]:
        got = p.find_part(part["participant_id"])
        assert got.rank == reshard.ParallelRank(**part["rank"])
        assert [f.placement_fragment_id for f in got.fragments] == \
            [f["placement_fragment_id"] for f in part["fragments"]]
        for f in part["fragments"]:
            frag = p.find_fragment(f["placement_fragment_id"])
            assert frag.tensor_id == f["tensor_id"]
            assert frag.global_offset == tuple(f["global_offset"])
            assert frag.local_shape == tuple(f["local_shape"])
            assert frag.nbytes == f["nbytes"]
            assert frag.fragment_id == frag.placement_fragment_id
    split = p.find_tensor("embed.0.x0").parallel_axes
    assert split == (reshard.OwnershipAxis("pp"), reshard.SplitAxis("ep", 0))
    assert split[1].semantics == "split" and split[1].kind == "ep"
    assert split[1].dim == 0 and split[0].dim is None
    assert repr(split[1]) == "SplitAxis('ep', 0)"
    assert repr(reshard.ReplicatedAxis("tp")) == "ReplicatedAxis('tp')"


# ------------------------------------------------------- built from parts


def _rank(d):
    return reshard.ParallelRank(dp=d["dp"], tp=d["tp"], pp=d["pp"], ep=d["ep"])


def _axis(d):
    if d["semantics"] == "split":
        return reshard.SplitAxis(d["kind"], d["dim"])
    if d["semantics"] == "replicated":
        return reshard.ReplicatedAxis(d["kind"])
    assert d["semantics"] == "ownership", d
    return reshard.OwnershipAxis(d["kind"])


def _descriptor(d):
    assert set(d) == {"tensor_id", "global_shape", "dtype", "itemsize",
                      "shard_dims", "layout_fingerprint", "parallel_axes",
                      "layer_id", "expert_id"}, sorted(d)
    return reshard.TensorDescriptor(
        d["tensor_id"], d["global_shape"], d["dtype"], d["itemsize"],
        shard_dims=d["shard_dims"], layout_fingerprint=d["layout_fingerprint"],
        parallel_axes=[_axis(a) for a in d["parallel_axes"]],
        layer_id=d["layer_id"], expert_id=d["expert_id"])


def _fragment(d, with_id):
    assert set(d) <= {"tensor_id", "global_offset", "local_shape", "nbytes",
                      "rank", "aliases", "placement_fragment_id",
                      "pipeline_stage_id"}, sorted(d)
    return reshard.PlacementFragment(
        d["tensor_id"], d["global_offset"], d["local_shape"], d["nbytes"],
        _rank(d["rank"]), aliases=d["aliases"],
        placement_fragment_id=d["placement_fragment_id"] if with_id else None,
        pipeline_stage_id=d.get("pipeline_stage_id"))


def _topology(d, with_id):
    return reshard.ParallelTopology(
        tp_size=d["tp_size"], pp_size=d["pp_size"], ep_size=d["ep_size"],
        dp_size=d["dp_size"],
        participants=[reshard.TopologyParticipant(p["participant_id"],
                                                  _rank(p["rank"]))
                      for p in d["participants"]],
        topology_id=d["topology_id"] if with_id else None)


def _header(doc):
    return (doc["resource_id"], doc["revision"], doc["weight_generation"],
            doc["placement_set_id"])


def build_from_parts(doc, with_ids):
    """The placement of wire document `doc`, built from Python parts."""
    descs = {t["tensor_id"]: _descriptor(t) for t in doc["tensors"]}
    topology = _topology(doc["topology"], with_ids)
    parts = []
    for part in doc["parts"]:
        used = sorted({f["tensor_id"] for f in part["fragments"]})
        parts.append(reshard.WeightPlacementPart(
            *_header(doc), topology.topology_id, part["participant_id"],
            _rank(part["rank"]), tensors=[descs[t] for t in used],
            fragments=[_fragment(f, with_ids) for f in part["fragments"]]))
    return reshard.WeightPlacementManifest(
        *_header(doc), topology, parts,
        placement_id=doc["placement_id"] if with_ids else None)


def build_from_fragments(doc):
    """The placement of `doc` from a flat inventory (no ids supplied)."""
    return reshard.WeightPlacementManifest.from_fragments(
        *_header(doc), _topology(doc["topology"], False),
        [_descriptor(t) for t in doc["tensors"]],
        [_fragment(f, False) for part in doc["parts"]
         for f in part["fragments"]])


@pytest.mark.parametrize("with_ids", [True, False], ids=["ids", "no-ids"])
@pytest.mark.parametrize("path", ALL, ids=_id)
def test_built_from_parts_equals_fixture(path, with_ids):
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    want = _expected(path)
    p = build_from_parts(doc, with_ids)
    assert p.placement_id == want["placement_id"]
    assert p.digest == want["digest"]
    assert p.topology_id == want["topology_id"]
    assert p.to_json() == text
    assert p == reshard.Placement.from_json(text)


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_from_fragments_equals_fixture(path):
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    want = _expected(path)
    p = build_from_fragments(doc)
    assert (p.placement_id, p.digest, p.topology_id) == (
        want["placement_id"], want["digest"], want["topology_id"])
    assert p.to_json() == text


def test_fragment_and_topology_ids_are_computed(fixtures):
    doc = json.loads((fixtures["placements"] / "placement_102.json").read_text(
        encoding="utf-8"))
    for part in doc["parts"]:
        for f in part["fragments"]:
            assert _fragment(f, False).placement_fragment_id == \
                f["placement_fragment_id"]
    assert _topology(doc["topology"], False).topology_id == \
        doc["topology"]["topology_id"]


def test_value_types_compare_and_hash():
    a = reshard.ParallelRank(dp=1, tp=2)
    assert a == reshard.ParallelRank(1, 2, 0, 0)
    assert hash(a) == hash(reshard.ParallelRank(dp=1, tp=2))
    # Ordered by (dp, pp, ep, tp), the planner's order.
    order = [reshard.ParallelRank(dp=1), reshard.ParallelRank(pp=1),
             reshard.ParallelRank(ep=1), reshard.ParallelRank(tp=5)]
    assert sorted(order) == order[::-1]
    assert repr(a) == "ParallelRank(dp=1, tp=2, pp=0, ep=0)"
    d = reshard.TensorDescriptor("w", [4, 2], "bfloat16", 2, shard_dims=[0],
                                 parallel_axes=[reshard.SplitAxis("tp", 0)])
    assert d.global_shape == (4, 2) and d.layout_fingerprint == "row-major"
    assert d.layer_id is None and d.expert_id is None
    assert d == reshard.TensorDescriptor(
        "w", (4, 2), "bfloat16", 2, shard_dims=(0,),
        parallel_axes=(reshard.SplitAxis("tp", 0),))
    assert repr(d) == "TensorDescriptor('w', (4, 2), 'bfloat16')"


def test_descriptor_sizes_are_exact_beyond_64_bits():
    """The core's element count saturates at 2^64 - 1; Python's is exact."""
    t = reshard.TensorDescriptor("w", (2**62, 2**62), "float32", 4)
    assert t.num_elements == 2**124
    assert t.nbytes == 2**126
    t = reshard.TensorDescriptor("w", (3, 5), "float32", 4)
    assert (t.num_elements, t.nbytes) == (15, 60)
