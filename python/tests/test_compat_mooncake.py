"""reshard.compat.mooncake: the reference's contract values, JSON wire,
runtime-binding validation and stored manifests, backed by the native core.

Expectations come from the specification of the reference API (fields,
defaults, normalisation, rule numbers and message fragments) and the golden
fixtures; canonical ids are recomputed here from their definitions (SHA-256
of sorted-key compact JSON) and compared with the native ones.
"""

import dataclasses
import hashlib
import json
import pickle

import pytest

import reshard
from reshard.compat import mooncake as mc
from reshard.compat.mooncake import (
    OwnershipAxis,
    ParallelRank,
    ParallelTopology,
    PlacementFragment,
    ReplicatedAxis,
    RuntimeBindingFragment,
    SplitAxis,
    StoredFragment,
    TensorDescriptor,
    TopologyParticipant,
    WeightManifest,
    WeightPlacementManifest,
    WeightPlacementPart,
    WeightRuntimeBindingManifest,
    validate_runtime_binding,
    validate_runtime_bindings,
    weight_placement_from_json,
    weight_placement_to_json,
)

R = ParallelRank


def canonical_id(obj):
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def tensor(tid="w", shape=(4, 6), axes=(SplitAxis("tp", 0),), shard=(0,),
           **kw):
    return TensorDescriptor(tid, shape, "bfloat16", 2, shard, "row-major",
                            axes, **kw)


def frag(offset, shape, rank, tid="w", itemsize=2, **kw):
    n = itemsize
    for e in shape:
        n *= e
    return PlacementFragment(tid, offset, shape, n, rank, **kw)


def topology(tp=2):
    return ParallelTopology(
        tp_size=tp, pp_size=1, ep_size=1, dp_size=1,
        participants=[TopologyParticipant(f"p{i}", R(tp=i))
                      for i in reversed(range(tp))])


TOPO = topology()
T = tensor()
F0 = frag((0, 0), (2, 6), R(tp=0))
F1 = frag((2, 0), (2, 6), R(tp=1))


def part(pid, rank, fragments, tensors=(T,), **kw):
    fields = dict(resource_id="m", revision="r1", weight_generation=1,
                  placement_set_id="s", topology_id=TOPO.topology_id,
                  participant_id=pid, rank=rank, tensors=tensors,
                  fragments=fragments)
    fields.update(kw)
    return WeightPlacementPart(**fields)


def manifest(parts, topo=TOPO, **kw):
    fields = dict(resource_id="m", revision="r1", weight_generation=1,
                  placement_set_id="s", topology=topo, parts=parts)
    fields.update(kw)
    return WeightPlacementManifest(**fields)


P0 = part("p0", R(tp=0), [F0])
P1 = part("p1", R(tp=1), [F1])
M = manifest([P1, P0])


# ------------------------------------------------------------ public names


def test_public_names_and_aliases():
    for name in ("ParallelRank", "ParallelTopology", "PlacementFragment",
                 "WeightPlacementManifest", "WeightPlacementPart",
                 "RuntimeBindingFragment", "WeightRuntimeBindingManifest",
                 "SplitAxis", "ReplicatedAxis", "OwnershipAxis",
                 "TensorDescriptor", "TopologyParticipant",
                 "validate_runtime_binding", "validate_runtime_bindings",
                 "weight_placement_from_json", "weight_placement_to_json",
                 "StoredFragment", "WeightManifest", "StoredWeightManifest",
                 "LogicalTransferPlan", "LogicalTransferOperation",
                 "PipelineRouteGroup", "PlacementExecutorPlan",
                 "PlanningLimits", "TransferRegion", "plan_placement_transfer",
                 "plan_placement_transfer_to_local_target",
                 "plan_stored_transfer_to_target_placement"):
        assert name in mc.__all__ and hasattr(mc, name), name
    assert mc.StoredWeightManifest is mc.WeightManifest
    assert mc.StoredFragmentSnapshot is mc.StoredFragment
    assert mc.LogicalTransferOperation is mc.TransferRegion


# ------------------------------------------------------------ ranks, axes


def test_parallel_rank_defaults_order_and_value_semantics():
    assert R() == R(0, 0, 0, 0)
    r = R(1, 2, 3, 4)
    assert (r.dp, r.tp, r.pp, r.ep) == (1, 2, 3, 4)
    assert len({R(dp=1), R(dp=1), R(tp=1)}) == 2
    assert repr(R(tp=1)) == "ParallelRank(dp=0, tp=1, pp=0, ep=0)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.dp = 0
    assert dataclasses.replace(r, ep=0) == R(1, 2, 3, 0)
    assert pickle.loads(pickle.dumps(r)) == r


@pytest.mark.parametrize("kw, message", [
    ({"dp": True}, "parallel rank dp must be an integer"),
    ({"tp": 1.0}, "parallel rank tp must be an integer"),
    ({"pp": -1}, "parallel rank pp must be at least 0"),
])
def test_parallel_rank_rejects(kw, message):
    with pytest.raises(ValueError, match=message):
        R(**kw)


def test_axes_fields_and_rules():
    assert SplitAxis("tp", 1) == SplitAxis(kind="tp", dim=1)
    assert ReplicatedAxis("dp").kind == "dp"
    assert OwnershipAxis("ep").kind == "ep"
    assert [f.name for f in dataclasses.fields(SplitAxis)] == ["kind", "dim"]
    for make, message in (
            (lambda: ReplicatedAxis("xp"),
             "unsupported parallel axis kind: xp"),
            (lambda: OwnershipAxis(""), "must be a non-empty string"),
            (lambda: SplitAxis("dp", 0), "dp cannot use split semantics"),
            (lambda: SplitAxis("pp", 0), "pp cannot use split semantics"),
            (lambda: SplitAxis("ep", 1),
             "EP must split the leading logical expert dimension"),
            (lambda: SplitAxis("tp", True),
             "split axis dim must be an integer"),
            (lambda: SplitAxis("tp", -1),
             "split axis dim must be at least 0")):
        with pytest.raises(ValueError, match=message):
            make()


def test_descriptors_take_reshards_own_axes():
    # reshard.SplitAxis & co. are the one vocabulary; the prototype's
    # spellings wrap them, and a descriptor takes either.
    assert SplitAxis("tp", 1).to_native() == reshard.SplitAxis("tp", 1)
    mixed = TensorDescriptor("w", [4, 6], "bf16", 2, [1], "fp",
                             [reshard.SplitAxis("tp", 1),
                              reshard.ReplicatedAxis("dp")])
    assert mixed.parallel_axes == (ReplicatedAxis("dp"), SplitAxis("tp", 1))
    assert mixed == TensorDescriptor("w", [4, 6], "bf16", 2, [1], "fp",
                                     [SplitAxis("tp", 1),
                                      ReplicatedAxis("dp")])
    with pytest.raises(ValueError, match=r"^partial split axis \(tp split on "
                       r"dim 0 over its first 2 ranks\) is a reshard "
                       "extension the prototype contract cannot express"):
        TensorDescriptor("w", [4], "bf16", 2, [0], "fp",
                         [reshard.PartialSplitAxis("tp", 0, 2)])


# ---------------------------------------------------------------- tensors


def test_tensor_descriptor_normalises():
    t = TensorDescriptor("w", [4, 6, 8], "bf16", 2, [0, 2], "fp",
                         [SplitAxis("tp", 2), ReplicatedAxis("dp"),
                          SplitAxis("ep", 0), OwnershipAxis("pp")])
    assert t.global_shape == (4, 6, 8) and t.shard_dims == (0, 2)
    assert [a.kind for a in t.parallel_axes] == ["dp", "pp", "ep", "tp"]
    assert t.layer_id is None and t.expert_id is None
    assert t == TensorDescriptor("w", (4, 6, 8), "bf16", 2, (0, 2), "fp",
                                 tuple(t.parallel_axes))
    assert hash(t) == hash(dataclasses.replace(t))
    native = t.to_native()
    assert isinstance(native, reshard.TensorDescriptor)
    assert native.shard_dims == (0, 2) and native.global_shape == (4, 6, 8)


@pytest.mark.parametrize("kw, message", [
    ({"shape": ()}, "global_shape must not be empty"),
    ({"shape": (0, 6)}, "global_shape must be at least 1"),
    ({"shape": "46"}, "global_shape must contain integers"),
    ({"shard": (0, 0), "axes": ()}, "shard_dims must not contain duplicates"),
    ({"shard": (1, 0), "axes": ()}, "shard_dims must be sorted"),
    ({"shard": (2,), "axes": ()}, "shard_dims contains an out-of-range"),
    ({"axes": (SplitAxis("tp", 0), ReplicatedAxis("tp"))},
     "parallel_axes must not contain duplicate kinds"),
    ({"axes": (SplitAxis("tp", 0), SplitAxis("ep", 0))},
     "split axes must not share a dimension"),
    ({"shard": (1,)},
     "parallel axis split dimensions conflict with shard_dims"),
    ({"axes": (SplitAxis("ep", 0),), "expert_id": 3},
     "an individually allocated expert requires explicit EP ownership"),
    ({"axes": ("tp",)}, "parallel_axes must contain explicit axis values"),
    ({"layer_id": -1}, "layer_id must be at least 0"),
    ({"expert_id": False, "axes": (), "shard": ()},
     "expert_id must be an integer"),
])
def test_tensor_descriptor_rules(kw, message):
    with pytest.raises(ValueError, match=message):
        tensor(**kw)


@pytest.mark.parametrize("field, value, message", [
    ("tensor_id", "", "tensor_id must be a non-empty string"),
    ("dtype", "", "dtype must be a non-empty string"),
    ("itemsize", True, "itemsize must be an integer"),
    ("itemsize", 0, "itemsize must be at least 1"),
    ("layout_fingerprint", "",
     "layout_fingerprint must be a non-empty string"),
])
def test_tensor_descriptor_scalars(field, value, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(T, **{field: value})


# -------------------------------------------------------------- fragments


def fragment_identity(f, stage=None):
    obj = {"schema": "weight-placement-fragment", "tensor_id": f.tensor_id,
           "global_offset": list(f.global_offset),
           "local_shape": list(f.local_shape), "nbytes": f.nbytes,
           "rank": dataclasses.asdict(f.rank), "aliases": list(f.aliases)}
    if stage is not None:
        obj["pipeline_stage_id"] = stage
    return canonical_id(obj)


def test_placement_fragment_canonical_id_and_fields():
    f = PlacementFragment("w", [2, 0], [2, 6], 24, R(tp=1),
                          aliases=["w", "a"])
    assert f.global_offset == (2, 0) and f.local_shape == (2, 6)
    assert f.aliases == ("a", "w")
    assert f.placement_fragment_id == fragment_identity(f)
    assert f.fragment_id == f.placement_fragment_id
    assert f.pipeline_stage_id is None
    staged = PlacementFragment("w", (2, 0), (2, 6), 24, R(tp=1),
                               ("a", "w"), pipeline_stage_id=3)
    assert staged.placement_fragment_id == fragment_identity(f, stage=3)
    explicit = PlacementFragment("w", (0, 0), (2, 6), 24, R(),
                                 placement_fragment_id="frag-0")
    assert explicit.fragment_id == "frag-0"
    copy = dataclasses.replace(F0)
    assert copy == F0 and hash(copy) == hash(F0)
    assert F0.to_native().placement_fragment_id == F0.placement_fragment_id
    assert [f.name for f in dataclasses.fields(PlacementFragment)][:7] == [
        "tensor_id", "global_offset", "local_shape", "nbytes", "rank",
        "aliases", "placement_fragment_id"]


@pytest.mark.parametrize("args, kw, message", [
    (("w", (0, 0), (2, 6), 24, R()), {"aliases": ("w", "w")},
     "aliases must not contain duplicates"),
    (("w", (0, 0), (2, 6), 24, R()), {"aliases": ("w",)},
     "alias group must contain at least two tensor IDs"),
    (("w", (0, 0), (2, 6), 24, R()), {"aliases": ("a", "b")},
     "alias group must contain the fragment tensor_id"),
    (("w", (0, 0), (2, 6), 24, R()), {"aliases": ("w", "")},
     "aliases must contain non-empty strings"),
    (("w", (0, 0), (2, 6), 2 ** 64, R()), {},
     "nbytes must fit in an unsigned 64-bit integer"),
    (("w", (0, 0), (2, 6), 0, R()), {}, "nbytes must be at least 1"),
    (("w", (0, 0), (2, 6), True, R()), {}, "nbytes must be an integer"),
    (("w", (0, 0), (2, 6), 24, (0, 0, 0, 0)), {},
     "rank must be a ParallelRank"),
    (("w", (-1, 0), (2, 6), 24, R()), {}, "global_offset must be at least 0"),
    (("w", (0, 0), (0, 6), 24, R()), {}, "local_shape must be at least 1"),
    (("", (0, 0), (2, 6), 24, R()), {},
     "tensor_id must be a non-empty string"),
    (("w", (0, 0), (2, 6), 24, R()), {"placement_fragment_id": ""},
     "placement_fragment_id must be a non-empty string"),
    (("w", (0,), (2, 6), 24, R()), {}, "fragment rank mismatch"),
])
def test_placement_fragment_rules(args, kw, message):
    with pytest.raises(ValueError, match=message):
        PlacementFragment(*args, **kw)


def runtime(f, address, **kw):
    fields = dict(placement_fragment_id=f.fragment_id,
                  fragment_id="rt-" + f.fragment_id[7:19], address=address,
                  nbytes=f.nbytes, worker_id="worker-0", endpoint="host:1",
                  device="cpu", itemsize=2, local_shape=f.local_shape,
                  strides_bytes=(12, 2), storage_address=address,
                  storage_nbytes=f.nbytes, storage_offset_bytes=0)
    fields.update(kw)
    return RuntimeBindingFragment(**fields)


def test_runtime_fragment_normalises_singleton_strides_and_hides_owner():
    f = runtime(F0, 4096, local_shape=[1, 12], strides_bytes=[999, 2],
                owner=object())
    assert f.local_shape == (1, 12) and f.strides_bytes == (24, 2)
    twin = dataclasses.replace(f, owner="another")
    assert f == twin and hash(f) == hash(twin)
    assert "owner" not in repr(f)
    restored = pickle.loads(pickle.dumps(f))
    assert restored == f and restored.owner is None
    assert f.to_native().strides_bytes == (24, 2)


@pytest.mark.parametrize("kw, message", [
    ({"address": 0, "storage_address": 0}, "address must be at least 1"),
    ({"nbytes": -1}, "nbytes must fit in an unsigned 64-bit integer"),
    ({"worker_id": ""}, "worker_id must be a non-empty string"),
    ({"itemsize": 0}, "runtime itemsize must be at least 1"),
    ({"strides_bytes": (2,)}, "same rank as local_shape"),
    ({"strides_bytes": (0, 2)}, "stride 0 is only allowed on extent-1"),
    ({"storage_address": 4000, "storage_nbytes": 200},
     "address must equal storage_address \\+ storage_offset_bytes"),
    ({"storage_nbytes": 10}, "view exceeds its storage allocation"),
    ({"address": 2 ** 64 - 8, "storage_address": 2 ** 64 - 8},
     "address \\+ nbytes must fit in an unsigned 64-bit integer"),
])
def test_runtime_fragment_rules(kw, message):
    kw = dict(kw)
    address = kw.pop("address", 4096)
    with pytest.raises(ValueError, match=message):
        runtime(F0, address, **kw)


# --------------------------------------------------------------- topology


def test_topology_sorts_participants_and_computes_canonical_id():
    t = TOPO
    assert [p.participant_id for p in t.participants] == ["p0", "p1"]
    assert t.world_size == 2 and t.participant("p1").rank == R(tp=1)
    expected = canonical_id({
        "schema": "weight-parallel-topology", "tp_size": 2, "pp_size": 1,
        "ep_size": 1, "dp_size": 1,
        "participants": [{"participant_id": p.participant_id,
                          "rank": dataclasses.asdict(p.rank)}
                         for p in t.participants]})
    assert t.topology_id == expected == t.to_native().topology_id
    again = ParallelTopology(tp_size=2, pp_size=1, ep_size=1, dp_size=1,
                             participants=t.participants,
                             topology_id=expected)
    assert again == t
    with pytest.raises(TypeError):
        ParallelTopology(2, 1, 1, 1, t.participants)
    with pytest.raises(ValueError, match="unknown topology participant: p9"):
        t.participant("p9")


@pytest.mark.parametrize("kw, message", [
    ({"participants": ()}, "participants must not be empty"),
    ({"tp_size": 0}, "tp_size must be at least 1"),
    ({"dp_size": True}, "dp_size must be an integer"),
    ({"participants": [TopologyParticipant("p0", R()),
                       TopologyParticipant("p0", R(tp=1))]},
     "duplicate topology participant_id"),
    ({"participants": [TopologyParticipant("p0", R()),
                       TopologyParticipant("p1", R())]},
     "duplicate topology parallel rank"),
    ({"tp_size": 1}, "tp rank is out of range for participant p1"),
    ({"topology_id": "sha256:" + "0" * 64},
     "topology_id does not match canonical topology"),
    ({"participants": [("p0", R())]},
     "ParallelTopology participants must contain TopologyParticipant"),
])
def test_topology_rules(kw, message):
    fields = dict(tp_size=2, pp_size=1, ep_size=1, dp_size=1,
                  participants=TOPO.participants)
    fields.update(kw)
    with pytest.raises(ValueError, match=message):
        ParallelTopology(**fields)


def test_topology_participant_rules():
    with pytest.raises(ValueError, match="participant_id must be a non-empty"):
        TopologyParticipant("", R())
    with pytest.raises(ValueError, match="rank must be a ParallelRank"):
        TopologyParticipant("p0", None)


# -------------------------------------------------------- parts, placement


def test_placement_assembles_sorted_union_and_ids():
    assert [p.participant_id for p in M.parts] == ["p0", "p1"]
    assert M.tensors == (T,)
    assert M.fragments == tuple(sorted((F0, F1),
                                       key=lambda f: f.placement_fragment_id))
    assert M.resource_kind == "model_weight"
    assert M.resource_kind is mc.ResourceKind.MODEL_WEIGHT
    assert M.placement_id.startswith("sha256:") and len(M.digest) == 64
    text = weight_placement_to_json(M)
    assert M.digest == hashlib.sha256(text.encode()).hexdigest()
    assert manifest([P0, P1], placement_id=M.placement_id) == M
    fields = [f.name for f in dataclasses.fields(WeightPlacementManifest)]
    assert fields == ["resource_id", "placement_id", "revision",
                      "weight_generation", "placement_set_id", "topology",
                      "parts", "tensors", "fragments"]
    with pytest.raises(TypeError):
        WeightPlacementManifest("m", "r1", 1, "s", TOPO, [P0, P1])
    restored = pickle.loads(pickle.dumps(M))
    assert restored == M and restored.digest == M.digest


def test_part_sorts_and_may_be_empty():
    p = part("p0", R(tp=0), [F0], tensors=[T])
    assert p.tensors == (T,) and p.fragments == (F0,)
    empty = part("p0", R(tp=0), [], tensors=[])
    assert empty.fragments == () and empty.tensors == ()


@pytest.mark.parametrize("make, message", [
    (lambda: part("p0", R(tp=1), [F0]),
     "placement part fragment rank differs from part rank"),
    (lambda: part("p0", R(tp=0), [F0], tensors=(T, tensor("x"))),
     "placement part contains an unreferenced tensor: x"),
    (lambda: part("p0", R(), [frag((3, 0), (2, 6), R())]),
     "fragment is out of bounds"),
    (lambda: part("p0", R(),
                  [PlacementFragment("w", (0, 0), (2, 6), 23, R())]),
     "fragment byte size mismatch: .*: expected 24, got 23"),
    (lambda: part("p0", R(), [frag((0,), (2,), R())]),
     "fragment rank mismatch"),
    (lambda: part("p0", R(), [F0], tensors=(T, T)), "duplicate tensor_id"),
    (lambda: part("p0", R(), [F0], tensors=()), "unknown tensor_id"),
    (lambda: part("p0", R(), [F0, frag((0, 0), (2, 6), R(),
                                       placement_fragment_id="other")]),
     "duplicate logical fragment for tensor and parallel rank"),
    (lambda: part("p0", R(), [F0, frag((1, 0), (2, 6), R())]),
     "logical fragment boxes overlap for tensor and parallel rank"),
    (lambda: part("p0", R(), [F0, frag((2, 0), (2, 6), R(),
                                       placement_fragment_id=F0.fragment_id)]),
     "duplicate fragment_id"),
    (lambda: part("p0", R(), [F0], weight_generation=-1),
     "weight_generation must fit in an unsigned 64-bit integer"),
    (lambda: part("p0", R(), [F0], revision=""),
     "revision must be a non-empty string"),
    (lambda: part("p0", (0,), [F0]),
     "placement part rank must be a ParallelRank"),
    (lambda: part("p0", R(), [object()]),
     "WeightPlacementPart fragments must contain PlacementFragment"),
])
def test_part_rules(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def undeclared(kind):
    """A replicated tensor with no axis for the active `kind` (size 2)."""
    topo = ParallelTopology(
        tp_size=2 if kind == "tp" else 1, pp_size=2 if kind == "pp" else 1,
        ep_size=1, dp_size=1,
        participants=[TopologyParticipant(f"p{i}", R(**{kind: i}))
                      for i in range(2)])
    t = tensor(axes=(), shard=())
    parts = [WeightPlacementPart("m", "r1", 1, "s", topo.topology_id, f"p{i}",
                                 R(**{kind: i}), [t],
                                 [frag((0, 0), (4, 6), R(**{kind: i}))])
             for i in range(2)]
    return manifest(parts, topo=topo)


@pytest.mark.parametrize("make, message", [
    (lambda: manifest([P0]), "missing topology participant: p1"),
    (lambda: manifest([P0, P0, P1]), "duplicate placement participant: p0"),
    (lambda: manifest([P0, P1, part("p2", R(tp=0), [F0])]),
     "unknown topology participant: p2"),
    (lambda: manifest([P0, part("p1", R(tp=1), [F1], revision="r2")]),
     "placement part revision differs"),
    (lambda: manifest([P0, part("p1", R(tp=1), [F1], placement_set_id="t")]),
     "placement part placement_set_id differs"),
    (lambda: manifest([P0, part("p1", R(tp=0), [frag((2, 0), (2, 6),
                                                      R(tp=0))])]),
     "placement part rank differs from topology"),
    (lambda: manifest([P0, part("p1", R(tp=1), [frag((2, 0), (1, 6),
                                                      R(tp=1))])]),
     "global placement tensor is not fully covered: w"),
    (lambda: manifest([P0, part("p1", R(tp=1), [F1], tensors=(
        dataclasses.replace(T, dtype="fp16"),))]),
     "placement part tensor descriptor mismatch: w"),
    (lambda: manifest([P0, P1], placement_id="sha256:" + "0" * 64),
     "placement_id does not match canonical logical content"),
    (lambda: manifest([P0, P1], topology=None),
     "topology must be a ParallelTopology"),
    (lambda: manifest([P0, P1], weight_generation=True),
     "weight_generation must be an integer"),
    (lambda: manifest([
        part("p0", R(tp=0), [frag((0, 0), (2, 6), R(tp=0),
                                  aliases=("w", "ghost"))]),
        part("p1", R(tp=1), [frag((2, 0), (2, 6), R(tp=1),
                                  aliases=("w", "ghost"))])]),
     "alias group references unknown tensor: ghost"),
    (lambda: manifest([
        part(f"p{i}", R(tp=i),
             [frag((2 * i, 0), (2, 6), R(tp=i), aliases=("w", "v")),
              frag((2 * i, 0), (2, 6), R(tp=i), "v")],
             tensors=(T, tensor("v"))) for i in range(2)]),
     "alias group is not declared consistently for tensor: v"),
    (lambda: manifest([
        part("p0", R(tp=0), [frag((0, 0), (2, 3), R(tp=0)),
                             frag((2, 3), (2, 3), R(tp=0))]),
        part("p1", R(tp=1), [frag((2, 0), (2, 3), R(tp=1)),
                             frag((0, 3), (2, 3), R(tp=1))])]),
     "split-axis rank geometry conflicts with declared dimension: w: "
     "tp -> dim 0"),
    (lambda: manifest([
        part("p0", R(tp=0), [frag((0, 0), (4, 6), R(tp=0))],
             tensors=(tensor(axes=(ReplicatedAxis("tp"),), shard=()),)),
        part("p1", R(tp=1), [], tensors=())]),
     "missing or unexpected replicated-axis participant for w"),
    (lambda: manifest([part("p0", R(tp=0), [frag((0, 0), (4, 6), R(tp=0))]),
                       part("p1", R(tp=1), [], tensors=())]),
     "missing or unexpected split-axis participant for w"),
    (lambda: undeclared("tp"),
     "global placement tensor varies across undeclared tp axis: w"),
    (lambda: undeclared("pp"), "global placement tensor requires explicit "
     "parallel semantics for active undeclared pp axis: w"),
])
def test_placement_rules(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_from_fragments_groups_by_rank():
    built = WeightPlacementManifest.from_fragments(
        resource_id="m", revision="r1", weight_generation=1,
        placement_set_id="s", topology=TOPO, tensors=[T], fragments=[F1, F0])
    assert built == M and built.placement_id == M.placement_id
    assert built.parts[0].fragments[0] is F0
    for kw, message in (
            ({"tensors": [T, T]}, "duplicate tensor_id"),
            ({"tensors": []}, "unknown tensor_id"),
            ({"tensors": [T, tensor("x")]}, "unreferenced tensor"),
            ({"fragments": [F0, F1, frag((0, 0), (4, 6), R(ep=1), "w")]},
             "placement fragment rank has no topology participant"),
            ({"placement_id": "sha256:" + "1" * 64},
             "placement_id does not match canonical logical content")):
        fields = dict(resource_id="m", revision="r1", weight_generation=1,
                      placement_set_id="s", topology=TOPO, tensors=[T],
                      fragments=[F0, F1])
        fields.update(kw)
        with pytest.raises(ValueError, match=message):
            WeightPlacementManifest.from_fragments(**fields)


# ------------------------------------------------------------------- JSON


def rebuild(p):
    """The same placement built again from constructors only."""
    participants = [TopologyParticipant(x.participant_id, R(
        x.rank.dp, x.rank.tp, x.rank.pp, x.rank.ep))
        for x in p.topology.participants]
    topo = ParallelTopology(
        tp_size=p.topology.tp_size, pp_size=p.topology.pp_size,
        ep_size=p.topology.ep_size, dp_size=p.topology.dp_size,
        participants=participants[::-1])
    axis = {"split": lambda a: SplitAxis(a.kind, a.dim),
            "replicated": lambda a: ReplicatedAxis(a.kind),
            "ownership": lambda a: OwnershipAxis(a.kind)}
    parts = []
    for q in p.parts:
        tensors = [TensorDescriptor(
            t.tensor_id, list(t.global_shape), t.dtype, t.itemsize,
            list(t.shard_dims), t.layout_fingerprint,
            [axis[a.semantics](a) for a in reversed(t.parallel_axes)],
            t.layer_id, t.expert_id) for t in q.tensors]
        fragments = [PlacementFragment(
            f.tensor_id, list(f.global_offset), list(f.local_shape), f.nbytes,
            R(f.rank.dp, f.rank.tp, f.rank.pp, f.rank.ep),
            list(reversed(f.aliases)),
            pipeline_stage_id=f.pipeline_stage_id) for f in q.fragments]
        parts.append(WeightPlacementPart(
            q.resource_id, q.revision, q.weight_generation,
            q.placement_set_id, topo.topology_id, q.participant_id,
            R(q.rank.dp, q.rank.tp, q.rank.pp, q.rank.ep),
            tensors[::-1], fragments[::-1]))
    return WeightPlacementManifest(
        resource_id=p.resource_id, revision=p.revision,
        weight_generation=p.weight_generation,
        placement_set_id=p.placement_set_id, topology=topo, parts=parts[::-1])


def test_fixture_placements_round_trip(fixtures):
    for name, expected in fixtures["placement_expected"].items():
        text = (fixtures["placements"] / name).read_text().strip()
        p = weight_placement_from_json(text)
        assert p.placement_id == expected["placement_id"], name
        assert p.digest == expected["digest"], name
        assert p.topology.topology_id == expected["topology_id"], name
        assert len(p.fragments) == expected["fragments"], name
        sizes = {k: getattr(p.topology, k + "_size")
                 for k in ("dp", "ep", "pp", "tp")}
        assert sizes == expected["sizes"], name
        assert weight_placement_to_json(p) == text, name
        assert weight_placement_from_json(text.encode()) == p
        again = rebuild(p)
        assert again == p, name
        assert (again.placement_id, again.digest) == (p.placement_id, p.digest)
        for f in p.fragments:
            assert f.placement_fragment_id == fragment_identity(
                f, f.pipeline_stage_id), name


def test_stage_fragments_round_trip(data_dir):
    path = data_dir / "scenarios" / "virtual_pp_stages_source.json"
    text = path.read_text()
    p = weight_placement_from_json(text)
    stages = sorted(f.pipeline_stage_id for f in p.fragments)
    assert stages == [0, 0, 1, 1]
    for f in p.fragments:
        assert f.placement_fragment_id == fragment_identity(
            f, f.pipeline_stage_id)
    assert rebuild(p).placement_id == p.placement_id


def test_json_decoder_rules(fixtures):
    text = (fixtures["placements"] / "placement_100.json").read_text().strip()
    raw = json.loads(text)

    def decode(mutate):
        data = json.loads(text)
        mutate(data)
        return weight_placement_from_json(json.dumps(data))

    kind = '"resource_kind":"model_weight"'
    for bad, message in (
            (text.replace(kind, kind + "," + kind), "duplicate JSON field"),
            (text.replace('"weight_generation":', '"weight_generation":NaN,'
                          '"x":'), "non-finite JSON number is unsupported"),
            (text.replace(kind, '"resource_kind":"kv_cache"'),
             "placement manifest resource_kind must be model_weight"),
            (text.replace(kind + ",", ""),
             "schema fields do not match contract")):
        with pytest.raises(ValueError, match=message):
            weight_placement_from_json(bad)
    for mutate, message in (
            (lambda d: d.update(placement_id="sha256:" + "0" * 64),
             "placement_id does not match canonical logical content"),
            (lambda d: d["topology"].update(topology_id="sha256:" + "1" * 64),
             "topology_id does not match canonical topology"),
            (lambda d: d["tensors"].append(dict(d["tensors"][0],
                                                tensor_id="zzz")),
             "placement JSON contains an unreferenced tensor"),
            (lambda d: d["parts"][0].update(extra=1),
             "schema fields do not match contract")):
        with pytest.raises(ValueError, match=message):
            decode(mutate)
    with pytest.raises(ValueError, match="must be str, bytes or bytearray"):
        weight_placement_from_json(raw)
    with pytest.raises(ValueError, match="must be a WeightPlacementManifest"):
        weight_placement_to_json(M.to_native())


def test_cli_agrees_on_ids_of_a_constructed_placement(cli, tmp_path):
    path = tmp_path / "placement.json"
    path.write_text(weight_placement_to_json(M))
    report = json.loads(cli("validate", "--json", path).stdout)
    assert report["valid"] is True
    assert report["placement_id"] == M.placement_id
    assert report["digest"] == M.digest
    assert report["topology_id"] == M.topology.topology_id


# ---------------------------------------------------------- runtime binding


def binding(pid, fragments, **kw):
    fields = dict(resource_id="m", placement_id=M.placement_id,
                  placement_digest=M.digest, instance_id="i0", generation=1,
                  lease_id="lease-0", revision="r1", participant_id=pid,
                  fragments=fragments)
    fields.update(kw)
    return WeightRuntimeBindingManifest(**fields)


B0 = binding("p0", [runtime(F0, 4096)])
B1 = binding("p1", [runtime(F1, 8192)])


def test_runtime_bindings_accepted():
    validate_runtime_binding(M, B0)
    validate_runtime_binding(M, B1)
    validate_runtime_bindings(M, [B0, B1])
    validate_runtime_bindings(M, (B1, B0))
    assert B0.resource_kind == "model_weight"
    assert [f.name for f in dataclasses.fields(WeightRuntimeBindingManifest)
            ][:6] == ["resource_id", "placement_id", "placement_digest",
                      "instance_id", "generation", "lease_id"]
    two = binding("p0", [runtime(F1, 9000), runtime(F0, 4096)])
    assert [f.placement_fragment_id for f in two.fragments] == sorted(
        [F0.fragment_id, F1.fragment_id])
    assert pickle.loads(pickle.dumps(B0)) == B0


@pytest.mark.parametrize("make, message", [
    (lambda: binding("p0", [], placement_digest="ABC"),
     "placement_digest must be a lowercase SHA-256 digest"),
    (lambda: binding("p0", [], generation=-1),
     "generation must fit in an unsigned 64-bit integer"),
    (lambda: binding("", []), "participant_id must be a non-empty string"),
    (lambda: binding("p0", [runtime(F0, 4096),
                            runtime(F0, 9000, fragment_id="other")]),
     "duplicate placement fragment"),
    (lambda: binding("p0", [runtime(F0, 4096),
                            runtime(F1, 9000, fragment_id=B0.fragments[0]
                                    .fragment_id)]),
     "duplicate runtime fragment_id"),
])
def test_binding_manifest_rules(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("b, message", [
    (binding("p0", [runtime(F0, 4096)], resource_id="x"),
     "resource_id differ"),
    (binding("p0", [runtime(F0, 4096)], placement_id="sha256:x"),
     "placement_id and runtime binding placement_id differ"),
    (binding("p0", [runtime(F0, 4096)], placement_digest="0" * 64),
     "placement digest and runtime binding placement digest differ"),
    (binding("p0", [runtime(F0, 4096)], revision="r2"),
     "placement and runtime binding revision differ"),
    (binding("p9", [runtime(F0, 4096)]),
     "unknown runtime binding participant: p9"),
    (binding("p0", [runtime(F0, 4096), runtime(F1, 9000)]),
     "unknown placement fragment in runtime binding: " + F1.fragment_id),
    (binding("p0", []),
     "missing placement fragment in runtime binding: " + F0.fragment_id),
    (binding("p0", [runtime(F0, 4096, nbytes=12)]),
     "runtime binding byte size does not match placement"),
    (binding("p0", [runtime(F0, 4096, local_shape=(6, 2),
                            strides_bytes=(4, 2))]),
     "runtime binding local_shape does not match placement"),
    (binding("p0", [runtime(F0, 4096, itemsize=4, strides_bytes=(24, 4))]),
     "runtime binding itemsize does not match"),
    (binding("p0", [runtime(F0, 4096, strides_bytes=(14, 2),
                            storage_nbytes=64)]),
     "stride does not describe a canonical contiguous view"),
])
def test_validate_runtime_binding_rejects(b, message):
    with pytest.raises(ValueError, match=message):
        validate_runtime_binding(M, b)


@pytest.mark.parametrize("bindings, message", [
    ([B0], "missing runtime binding participant: p1"),
    ([B0, B0, B1], "duplicate runtime binding participant: p0"),
    ([B0, binding("p1", [runtime(F1, 8192, fragment_id=B0.fragments[0]
                                 .fragment_id)])],
     "duplicate runtime fragment_id across participants"),
    ([B0, binding("p1", [runtime(F1, 4100)])],
     "runtime binding address ranges overlap"),
    ([B0, binding("p1", [runtime(F1, 4120, storage_address=4000,
                                 storage_offset_bytes=120,
                                 storage_nbytes=200)])],
     "runtime binding storage allocation ranges overlap"),
    ([B0, object()],
     "runtime bindings must contain WeightRuntimeBindingManifest"),
])
def test_validate_runtime_bindings_rejects(bindings, message):
    with pytest.raises(ValueError, match=message):
        validate_runtime_bindings(M, bindings)


def test_binding_validation_refuses_duck_types():
    with pytest.raises(ValueError, match="placement must be a "
                       "WeightPlacementManifest"):
        validate_runtime_binding(M.to_native(), B0)
    with pytest.raises(ValueError, match="binding must be a "
                       "WeightRuntimeBindingManifest"):
        validate_runtime_binding(M, B0.to_native())


def test_separate_instances_may_reuse_addresses():
    other = binding("p1", [runtime(F1, 4096)], instance_id="i1")
    validate_runtime_bindings(M, [B0, other])
    same_worker_other_device = binding(
        "p1", [runtime(F1, 4096, device="cuda:0")])
    validate_runtime_bindings(M, [B0, same_worker_other_device])


# ---------------------------------------------------------- stored manifest

GROUP = "default/m/r1"
S0 = StoredFragment("s0", "w", [0, 0], [2, 6], GROUP + "/payload/0", 0, 24)
S1 = StoredFragment("s1", "w", (2, 0), (2, 6), GROUP + "/payload/0", 24, 24)


def stored(fragments=(S0, S1), **kw):
    fields = dict(namespace="default", resource_id="m", revision="r1",
                  weight_generation=1, group_id=GROUP,
                  manifest_key=GROUP + "/manifest", tensors=(T,),
                  fragments=fragments, created_at="2026-07-23T00:00:00Z")
    fields.update(kw)
    return WeightManifest(**fields)


def test_stored_manifest_json_digest_and_identity():
    m = stored()
    text = m.to_json()
    assert m.manifest_digest == hashlib.sha256(text.encode()).hexdigest()
    assert text == m.to_native().to_json()
    assert m.to_native().manifest_digest == m.manifest_digest
    data = json.loads(text)
    assert set(data) == {"resource_kind", "namespace", "resource_id",
                         "revision", "weight_generation", "group_id",
                         "manifest_key", "tensors", "fragments", "created_at"}
    assert set(data["fragments"][0]) == {
        "fragment_id", "tensor_id", "global_offset", "local_shape",
        "object_key", "object_offset", "nbytes", "aliases"}
    assert WeightManifest.from_json(text) == m
    assert WeightManifest.from_json(text.encode()) == m
    assert WeightManifest.from_dict(data) == m
    reordered = stored(fragments=(S1, S0))
    assert [f.fragment_id for f in reordered.fragments] == ["s1", "s0"]
    assert WeightManifest.from_json(reordered.to_json()) == reordered
    identity = m.manifest_identity
    assert (identity.manifest_key, identity.content_sha256) == (
        GROUP + "/manifest", m.manifest_digest)
    assert m.resource_kind == "model_weight"
    assert pickle.loads(pickle.dumps(m)) == m
    unicode = stored(created_at="2026-07-23T00:00:00Z \u00e9")
    assert "\u00e9" in unicode.to_json()


@pytest.mark.parametrize("kw, message", [
    ({"manifest_key": GROUP + "/man"},
     "manifest_key must use the canonical manifest suffix"),
    ({"manifest_key": "other/manifest"}, "manifest_key must be <group_id>"),
    ({"fragments": (S0, dataclasses.replace(S1, object_key="x/payload/1"))},
     "payload object_key does not belong to manifest group"),
    ({"fragments": (S0,)}, "tensor is not fully covered: w"),
    ({"fragments": (S0, dataclasses.replace(S1, object_offset=10))},
     "stored fragment object ranges overlap"),
    ({"fragments": (S0, S1, dataclasses.replace(
        S1, fragment_id="s9", object_key=GROUP + "/payload/9"))},
     "duplicate fragment geometry"),
    ({"fragments": (S0, dataclasses.replace(S1, fragment_id="s0"))},
     "duplicate fragment_id"),
    ({"fragments": (S0, dataclasses.replace(S1, nbytes=20))},
     "fragment byte size mismatch"),
    ({"created_at": ""}, "created_at must be a non-empty string"),
    ({"weight_generation": 2 ** 64}, "must fit in an unsigned 64-bit integer"),
    ({"fragments": (S0, F1)},
     "WeightManifest fragments must contain StoredFragment"),
])
def test_stored_manifest_rules(kw, message):
    with pytest.raises(ValueError, match=message):
        stored(**kw)


def test_stored_fragment_and_json_rules():
    with pytest.raises(ValueError, match="alias group must contain the "
                       "fragment tensor_id"):
        StoredFragment("s", "w", (0,), (1,), "k", 0, 2, aliases=("a", "b"))
    with pytest.raises(ValueError, match="object_offset must fit"):
        StoredFragment("s", "w", (0,), (1,), "k", -1, 2)
    with pytest.raises(ValueError, match="nbytes must be at least 1"):
        StoredFragment("s", "w", (0,), (1,), "k", 0, 0)
    text = stored().to_json()
    for bad, message in (
            (text.replace('"namespace":"default"',
                          '"namespace":"default","namespace":"default"'),
             "duplicate JSON field"),
            (text.replace("model_weight", "kv_cache"),
             "resource_kind must be model_weight"),
            (text[:-1] + ',"x":1}', "schema fields do not match contract")):
        with pytest.raises(ValueError, match=message):
            WeightManifest.from_json(bad)
