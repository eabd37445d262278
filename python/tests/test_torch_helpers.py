"""reshard.torch: parts and bindings from torch tensors, and gathering parts
through a rendezvous.

Placements built by the helpers for TP, PP, EP and DP layouts must be the
golden scenario placements exactly (placement_id and wire bytes) or equal
hand-built ones; refusals name the tensor; gather_placement runs across
processes with a temporary directory rendezvous.
"""

import json
import multiprocessing

import pytest
import torch

import reshard
import reshard.torch as rt
from reshard.torch import Ownership, Replicated, Shard, Split

HEADER = dict(resource_id="demo-model", revision="step-1",
              weight_generation=1)


def scenario(data_dir, name):
    return reshard.Placement.from_json(
        (data_dir / "scenarios" / f"{name}.json").read_bytes())


def expected_id(data_dir, name):
    expected = json.loads((data_dir / "scenarios" / "expected.json")
                          .read_text())
    return expected["placements"][f"{name}.json"]["placement_id"]


def build(topology, ranks, make, placement_set_id, **kw):
    """The placement of make(rank) -> (tensors, layout) over `ranks`."""
    parts = []
    for r in ranks:
        tensors, layout = make(r)
        parts.append(rt.build_part(tensors, layout, topology=topology, rank=r,
                                   placement_set_id=placement_set_id,
                                   **HEADER, **kw))
    return rt.placement_of(parts, topology), parts


def assert_is_scenario(data_dir, placement, name):
    golden = scenario(data_dir, name)
    assert placement.placement_id == expected_id(data_dir, name)
    assert placement.placement_id == golden.placement_id
    assert placement.to_json() == golden.to_json()


# ---------------------------------------------------------------------------
# Placements equal to the golden scenarios.


@pytest.mark.parametrize("tp,side", [(4, "source"), (8, "target")])
def test_tp_split_is_the_scenario(data_dir, tp, side):
    def make(r):
        return ({"layers.0.bias.bytes": torch.zeros(8 // tp,
                                                    dtype=torch.uint8),
                 "layers.0.proj.weight": torch.zeros(64 // tp, 16,
                                                     dtype=torch.bfloat16)},
                lambda name: Shard([Split("tp", dim=0)], layer_id=0))
    placement, parts = build(rt.grid_topology(tp=tp), rt.grid_ranks(tp=tp),
                             make, f"tp_split_4_to_8-{side}",
                             layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, f"tp_split_4_to_8_{side}")
    d = placement.find_tensor("layers.0.proj.weight")
    assert (d.dtype, d.itemsize, d.shard_dims, d.global_shape) == (
        "bfloat16", 2, (0,), (64, 16))
    assert d.parallel_axes == (reshard.SplitAxis("tp", 0),)
    f = parts[1].part.fragments
    proj = [x for x in f if x.tensor_id == "layers.0.proj.weight"][0]
    assert (proj.global_offset, proj.local_shape, proj.nbytes) == (
        (64 // tp, 0), (64 // tp, 16), 64 // tp * 16 * 2)


@pytest.mark.parametrize("pp,side", [(2, "source"), (4, "target")])
def test_pp_stage_ownership_is_the_scenario(data_dir, pp, side):
    # Stage-local names (layers.<j> on every stage) renamed to global ids.
    per_stage = 4 // pp

    def make(r):
        tensors = {f"layers.{j}.weight": torch.zeros(8, dtype=torch.bfloat16)
                   for j in range(per_stage)}
        layer = lambda j: r.pp * per_stage + j  # noqa: E731
        layout = {f"layers.{j}.weight": Shard(
            [Ownership("pp")], tensor_id=f"layers.{layer(j)}.weight",
            layer_id=layer(j)) for j in range(per_stage)}
        return tensors, layout
    placement, parts = build(rt.grid_topology(pp=pp), rt.grid_ranks(pp=pp),
                             make, f"pp_routing_2_to_4-{side}",
                             layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, f"pp_routing_2_to_4_{side}")
    assert sorted(parts[-1].tensors) == [f"layers.{i}.weight"
                                         for i in range(4 - per_stage, 4)]


@pytest.mark.parametrize("ep,side", [(8, "source"), (2, "target")])
def test_separately_allocated_experts_are_the_scenario(data_dir, ep, side):
    def make(r):
        experts = range(r.ep * 8 // ep, (r.ep + 1) * 8 // ep)
        tensors = {f"layers.0.experts.{e}.weight":
                   torch.zeros(4, 2, dtype=torch.bfloat16) for e in experts}
        layout = {f"layers.0.experts.{e}.weight": Shard(
            [Ownership("ep")], layer_id=0, expert_id=e) for e in experts}
        return tensors, layout
    placement, _ = build(rt.grid_topology(ep=ep), rt.grid_ranks(ep=ep), make,
                         f"ep_ownership_8_to_2-{side}",
                         layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, f"ep_ownership_8_to_2_{side}")
    assert placement.find_tensor("layers.0.experts.5.weight").expert_id == 5


@pytest.mark.parametrize("ep,side", [(2, "source"), (8, "target")])
def test_grouped_experts_split_over_ep_are_the_scenario(data_dir, ep, side):
    def make(r):
        return ({"layers.0.experts.bytes": torch.zeros(8 // ep, 4,
                                                       dtype=torch.uint8),
                 "layers.0.experts.w": torch.zeros(8 // ep, 4, 2,
                                                   dtype=torch.bfloat16)},
                lambda name: Shard([Split("ep", 0)], layer_id=0))
    placement, _ = build(rt.grid_topology(ep=ep), rt.grid_ranks(ep=ep), make,
                         f"ep_regroup_2_to_8-{side}",
                         layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, f"ep_regroup_2_to_8_{side}")


def test_four_axes_dp_pp_ep_tp_are_the_scenario(data_dir):
    # dp2 x pp2 x ep8 x tp4: experts split over EP (dim 0) and TP (dim 1),
    # layers owned by their PP stage, everything replicated over DP.
    def make(r):
        layers = (2 * r.pp, 2 * r.pp + 1)
        tensors = {f"layers.{i}.experts.w": torch.zeros(
            1, 2, 2, dtype=torch.bfloat16) for i in layers}
        layout = {f"layers.{i}.experts.w": Shard(
            [Ownership("pp"), Split("ep", 0), Split("tp", 1)], layer_id=i)
            for i in layers}
        return tensors, layout
    topology = rt.grid_topology(tp=4, pp=2, ep=8, dp=2)
    placement, _ = build(topology, rt.grid_ranks(tp=4, pp=2, ep=8, dp=2),
                         make, "four_axis-source",
                         layout_fingerprint="hidden:v1",
                         default_axes=[Replicated("dp")])
    assert_is_scenario(data_dir, placement, "four_axis_source")


def test_dp_replicas_are_the_scenario(data_dir):
    def make(r):
        return ({"layers.0.bytes": torch.zeros(4, dtype=torch.uint8),
                 "layers.0.proj.weight": torch.zeros(16, 4,
                                                     dtype=torch.bfloat16)},
                {"layers.0.bytes": Shard([Split("tp", 0)], layer_id=0),
                 "layers.0.proj.weight": Shard([Split("tp", 1)], layer_id=0)})
    placement, _ = build(rt.grid_topology(tp=2, dp=2),
                         rt.grid_ranks(tp=2, dp=2), make,
                         "dp_replicas_dp2tp2_to_dp3tp4-source",
                         layout_fingerprint="hidden:v1",
                         default_axes=[Replicated("dp")])
    assert_is_scenario(data_dir, placement,
                       "dp_replicas_dp2tp2_to_dp3tp4_source")


def test_dp_owned_tensors_are_the_scenario(data_dir):
    # Each DP rank owns one tensor (present only there), split over TP.
    def make(r):
        name = f"layers.0.owned_{r.dp}"
        return ({name: torch.zeros(4, 4, dtype=torch.bfloat16)},
                {name: Shard([Ownership("dp"), Split("tp", 0)], layer_id=0)})
    placement, _ = build(rt.grid_topology(tp=2, dp=2),
                         rt.grid_ranks(tp=2, dp=2), make,
                         "dp_ownership-source",
                         layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, "dp_ownership_source")


def test_tied_embeddings_and_virtual_stages_are_the_scenarios(data_dir):
    group = ["lm_head.weight", "model.embed_tokens.weight"]

    def tied(r):
        name = group[1] if r.pp == 0 else group[0]
        return ({name: torch.zeros(32, dtype=torch.bfloat16)},
                {name: Shard([Ownership("pp")], layer_id=0, aliases=group)})
    placement, _ = build(rt.grid_topology(pp=2), rt.grid_ranks(pp=2), tied,
                         "aliases_tied_embeddings-source",
                         layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, "aliases_tied_embeddings_source")

    def staged(r):
        return ({f"layers.{i}.weight": torch.zeros(4, dtype=torch.bfloat16)
                 for i in (0, 1)},
                lambda name: Shard([Split("tp", 0)],
                                   layer_id=int(name.split(".")[1]),
                                   pipeline_stage_id=int(name.split(".")[1])))
    placement, _ = build(rt.grid_topology(tp=2), rt.grid_ranks(tp=2), staged,
                         "virtual_pp_stages-source",
                         layout_fingerprint="hidden:v1")
    assert_is_scenario(data_dir, placement, "virtual_pp_stages_source")


def test_part_equals_a_hand_built_part():
    topology = rt.grid_topology(tp=2, dp=2)
    rank = reshard.ParallelRank(dp=1, tp=1)
    local = rt.build_part(
        {"qkv": torch.zeros(6, 4, dtype=torch.bfloat16),
         "norm": torch.zeros(4, dtype=torch.float32),
         "scale": torch.tensor(2.0, dtype=torch.float64)},
        {"qkv": Split("tp", dim=0), "norm": Replicated("tp"),
         "scale": [Replicated("tp")]},
        topology=topology, rank=rank, resource_id="m", revision="r",
        weight_generation=3, placement_set_id="s",
        default_axes=[Replicated("dp")])
    dp, tp = reshard.ReplicatedAxis("dp"), reshard.ReplicatedAxis("tp")
    hand = reshard.WeightPlacementPart(
        "m", "r", 3, "s", topology.topology_id, "p-d1-p0-e0-t1", rank,
        [reshard.TensorDescriptor("qkv", [12, 4], "bfloat16", 2, [0],
                                  "row-major",
                                  [dp, reshard.SplitAxis("tp", 0)]),
         reshard.TensorDescriptor("norm", [4], "float32", 4, [], "row-major",
                                  [dp, tp]),
         reshard.TensorDescriptor("scale", [1], "float64", 8, [],
                                  "row-major", [dp, tp])],
        [reshard.PlacementFragment("qkv", [6, 0], [6, 4], 48, rank),
         reshard.PlacementFragment("norm", [0], [4], 16, rank),
         reshard.PlacementFragment("scale", [0], [1], 8, rank)])
    assert local.part.tensors == hand.tensors
    assert local.part.fragments == hand.fragments
    assert rt.part_to_json(local.part) == rt.part_to_json(hand)
    assert local.participant_id == "p-d1-p0-e0-t1"
    assert local.tensors["scale"].shape == (1,)  # 0-d as shape (1,)
    assert local.tensors["scale"].data_ptr() == local.tensors[
        "scale"].data_ptr()


def test_uneven_split_with_explicit_boxes_validates():
    topology = rt.grid_topology(tp=2)
    boxes = {0: (0, 3), 1: (3, 2)}  # rows [0, 3) and [3, 5)

    def make(r):
        offset, rows = boxes[r.tp]
        return ({"w": torch.zeros(rows, 4, dtype=torch.int32)},
                {"w": Shard([Split("tp", 0)], global_shape=[5, 4],
                            global_offset=[offset, 0])})
    placement, parts = build(topology, rt.grid_ranks(tp=2), make, "uneven")
    assert [p.part.fragments[0].global_offset for p in parts] == [(0, 0),
                                                                  (3, 0)]
    assert placement.find_tensor("w").global_shape == (5, 4)


def test_global_shape_checks_an_even_split():
    local = rt.build_part(
        {"w": torch.zeros(2, 8)}, {"w": Shard([Split("tp", 1)],
                                              global_shape=[2, 16])},
        topology=rt.grid_topology(tp=2), rank=reshard.ParallelRank(tp=1),
        placement_set_id="s", **HEADER)
    assert local.part.fragments[0].global_offset == (0, 8)


def test_coupled_ep_on_tp_ranks_validates():
    # EP folded onto the TP ranks (ep == tp): dense weights declare TP only,
    # grouped experts EP only; the undeclared axis follows the declared one.
    ranks = [reshard.ParallelRank(tp=i, ep=i) for i in range(2)]
    topology = rt.topology_from_ranks(ranks, tp=2, ep=2)

    def make(r):
        return ({"dense": torch.zeros(4, 8), "experts": torch.zeros(2, 3, 8)},
                {"dense": Split("tp", 0), "experts": Split("ep", 0)})
    placement, _ = build(topology, ranks, make, "coupled")
    assert placement.find_tensor("experts").global_shape == (4, 3, 8)
    assert placement.find_tensor("dense").global_shape == (8, 8)


# ---------------------------------------------------------------------------
# Bindings built from the same tensors.


def pattern(shape, offset, global_shape, dtype=torch.int32):
    """Every element's global row-major index (as `dtype`)."""
    index = torch.zeros(shape, dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[d] = shape[d]
        index = index + (torch.arange(offset[d], offset[d] + shape[d]) *
                         stride).view(view)
        stride *= global_shape[d]
    return index.to(dtype)


def test_bind_and_reshard_tp2_to_dp2_byte_exact():
    src_topology = rt.grid_topology(tp=2)
    dst_topology = rt.grid_topology(dp=2)
    layout = {"a": Split("tp", 0), "b": Split("tp", 1)}
    src = []
    for r in rt.grid_ranks(tp=2):
        src.append(rt.build_part(
            {"a": pattern((3, 4), (3 * r.tp, 0), (6, 4)),
             "b": pattern((2, 5), (0, 5 * r.tp), (2, 10), torch.int16)},
            layout, topology=src_topology, rank=r, placement_set_id="src",
            **HEADER))
    dst = [rt.build_part(
        {"a": torch.full((6, 4), -1, dtype=torch.int32),
         "b": torch.full((2, 10), -1, dtype=torch.int16)},
        {"a": [], "b": []}, topology=dst_topology, rank=r,
        placement_set_id="dst", default_axes=[Replicated("dp")], **HEADER)
        for r in rt.grid_ranks(dp=2)]
    source = rt.placement_of(src, src_topology)
    target = rt.placement_of(dst, dst_topology)
    for local, placement in [(p, source) for p in src] + [(p, target)
                                                          for p in dst]:
        binding = local.bind(placement)
        reshard.validate_runtime_binding(placement, binding)
        assert binding.participant_id == local.participant_id
        by_fragment = {f.placement_fragment_id: f.tensor_id
                       for f in local.part.fragments}
        for f in binding.fragments:
            t = local.tensors[by_fragment[f.placement_fragment_id]]
            assert (f.address, f.nbytes) == (t.data_ptr(),
                                             t.numel() * t.element_size())
    sources, targets = {}, {}
    for p in src:
        sources.update(p.by_participant())
    for p in dst:
        targets.update(p.by_participant())
    report = reshard.reshard(source, sources, target, targets)
    assert report.bytes == 2 * (6 * 4 * 4 + 2 * 10 * 2)
    for p in dst:
        assert torch.equal(p.tensors["a"], pattern((6, 4), (0, 0), (6, 4)))
        assert torch.equal(p.tensors["b"], pattern((2, 10), (0, 0), (2, 10),
                                                   torch.int16))


def test_fused_local_tensor_as_views_of_separate_global_tensors():
    # An engine's fused gate_up_proj [gate_r; up_r] on TP rank r holds
    # shards of two global tensors: described as two views of its storage,
    # it loads from a trainer that keeps gate and up apart.
    F, H = 4, 3
    src_topology, dst_topology = rt.grid_topology(), rt.grid_topology(tp=2)
    src = rt.build_part(
        {"gate": pattern((F, H), (0, 0), (F, H)),
         "up": pattern((F, H), (0, 0), (F, H)) + 1000},
        {"gate": Shard(tensor_id="mlp.gate_proj.weight"),
         "up": Shard(tensor_id="mlp.up_proj.weight")},
        topology=src_topology, rank=reshard.ParallelRank(),
        placement_set_id="trainer", **HEADER)
    fused = {r.tp: torch.full((F, H), -1, dtype=torch.int32)
             for r in rt.grid_ranks(tp=2)}
    dst = [rt.build_part(
        {"gate": fused[r.tp][:F // 2], "up": fused[r.tp][F // 2:]},
        {"gate": Shard([Split("tp", 0)], tensor_id="mlp.gate_proj.weight"),
         "up": Shard([Split("tp", 0)], tensor_id="mlp.up_proj.weight")},
        topology=dst_topology, rank=r, placement_set_id="engine", **HEADER)
        for r in rt.grid_ranks(tp=2)]
    assert dst[1].tensors["mlp.up_proj.weight"].data_ptr() == \
        fused[1].data_ptr() + F // 2 * H * 4
    source = rt.placement_of([src], src_topology)
    target = rt.placement_of(dst, dst_topology)
    for p in dst:
        reshard.validate_runtime_binding(target, p.bind(target))
    targets = {}
    for p in dst:
        targets.update(p.by_participant())
    reshard.reshard(source, src.by_participant(), target, targets)
    for r in (0, 1):
        rows = slice(r * F // 2, (r + 1) * F // 2)
        assert torch.equal(fused[r], torch.cat([
            pattern((F, H), (0, 0), (F, H))[rows],
            pattern((F, H), (0, 0), (F, H))[rows] + 1000]))


def test_bind_refuses_a_placement_without_the_part():
    topology = rt.grid_topology(tp=2)
    parts = [rt.build_part({"w": torch.zeros(2)}, {"w": Split("tp", 0)},
                           topology=topology, rank=r, placement_set_id="s",
                           **HEADER) for r in rt.grid_ranks(tp=2)]
    placement = rt.placement_of(parts, topology)
    other = rt.build_part({"w": torch.zeros(4)}, {"w": []},
                          topology=rt.grid_topology(),
                          participant_id="p-d0-p0-e0-t0",
                          placement_set_id="s", **HEADER)
    with pytest.raises(reshard.InvalidArgumentError,
                       match="holds another part for participant "
                             "'p-d0-p0-e0-t0'"):
        other.bind(placement)


# ---------------------------------------------------------------------------
# Refusals name the tensor.


def one(tensors, layout, topology=None, rank=None, **kw):
    topology = topology or rt.grid_topology(tp=2)
    return rt.build_part(tensors, layout, topology=topology,
                         rank=rank or reshard.ParallelRank(tp=1),
                         placement_set_id="s", **HEADER, **kw)


@pytest.mark.parametrize("tensors,layout,message", [
    ({"w": torch.zeros(4)}, {}, "tensor 'w' has no layout: give its split "
     "axes"),
    ({"w": torch.zeros(4)}, lambda name: None, "tensor 'w' has no layout"),
    ({"w": torch.zeros(4, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_shape=[8, 3])},
     r"tensor 'w': local shape \(4, 2\) differs from global shape \(8, 3\) "
     "on dim 1, which no Split axis covers"),
    ({"w": torch.zeros(3, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_shape=[7, 2])},
     r"tensor 'w': dim 0 is split over tp \(size 2\) but local extent 3 x 2 "
     r"!= global extent 7 \(give global_offset for an uneven split\)"),
    ({"w": torch.zeros(3, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_shape=[5, 2],
                                           global_offset=[3, 0])},
     r"tensor 'w': offset out of range on dim 0: global_offset \(3, 0\) \+ "
     r"local shape \(3, 2\) exceeds global shape \(5, 2\)"),
    ({"w": torch.zeros(3, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_shape=[6, 2],
                                           global_offset=[-1, 0])},
     "tensor 'w': offset out of range on dim 0"),
    ({"w": torch.zeros(3, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_offset=[3, 0])},
     r"tensor 'w': global_offset \(3, 0\) needs its global_shape"),
    ({"w": torch.zeros(3, 2)}, {"w": Shard([Split("tp", 0)],
                                           global_shape=[6, 2, 1])},
     r"tensor 'w': local shape \(3, 2\) has 2 dimension\(s\), global_shape "
     r"\(6, 2, 1\) has 3"),
    ({"w": torch.zeros(3, 2)}, {"w": Split("tp", 2)},
     r"tensor 'w': Split\('tp', dim=2\) is out of range for its "
     r"2-dimensional local shape \(3, 2\)"),
    ({"w": torch.zeros(4, 6).t()}, {"w": Split("tp", 0)},
     r"tensor 'w' is not contiguous \(strides \(1, 6\) for shape \(6, 4\)\)"),
    ({"w": torch.zeros(0, 4)}, {"w": Split("tp", 0)},
     r"tensor 'w' has shape \(0, 4\): a fragment needs at least one "
     "dimension and extents >= 1"),
    ({"w": [1, 2]}, {"w": []}, "tensor 'w' is a list, not a torch tensor"),
    ({"a": torch.zeros(2), "b": torch.zeros(2)},
     {"a": Shard([Split("tp", 0)], tensor_id="x"),
      "b": Shard([Split("tp", 0)], tensor_id="x")},
     r"tensor 'x' is given twice \(local 'a' and 'b'\)"),
    ({"w": torch.zeros(2)}, {"w": [Split("tp", 0), Replicated("tp")]},
     "tensor 'w' declares axis tp twice"),
    ({"w": torch.zeros(2)}, {"w": "tp"},
     "tensor 'w': layout 'tp' is not a Shard, an axis rule or a list"),
])
def test_build_part_refusals_name_the_tensor(tensors, layout, message):
    with pytest.raises(reshard.InvalidArgumentError, match=message):
        one(tensors, layout)


def test_axis_rules_are_the_native_axes():
    # Split, Replicated and Ownership are other names of reshard.SplitAxis,
    # ReplicatedAxis and OwnershipAxis: one axis vocabulary.
    assert Split("tp", dim=1) == reshard.SplitAxis("tp", 1)
    assert type(Split(kind="ep", dim=0)) is reshard.ParallelAxis
    assert Replicated("dp") == reshard.ReplicatedAxis("dp")
    assert Ownership("pp") == reshard.OwnershipAxis("pp")
    assert isinstance(reshard.SplitAxis("tp", 0), Split)
    assert isinstance(reshard.PartialSplitAxis("tp", 0, 2), Split)
    assert not isinstance(reshard.ReplicatedAxis("tp"), Split)
    assert isinstance(reshard.OwnershipAxis("ep"), Ownership)
    assert not isinstance(("tp", 0), Replicated)
    # Native axes and the names mix in one layout, with the same result.
    topology = rt.grid_topology(tp=2)
    rank = reshard.ParallelRank(tp=1)
    assert (one({"w": torch.zeros(2, 3)}, {"w": Split("tp", 1)}, topology,
                rank).part.to_json() ==
            one({"w": torch.zeros(2, 3)}, {"w": reshard.SplitAxis("tp", 1)},
                topology, rank).part.to_json())
    with pytest.raises(reshard.InvalidArgumentError,
                       match="^Ownership: unsupported parallel axis kind "
                             "'cp' \\(dp, pp, ep or tp\\)$"):
        Ownership("cp")


def test_active_dp_and_pp_axes_need_semantics():
    topology = rt.grid_topology(tp=2, dp=2)
    rank = reshard.ParallelRank(dp=1, tp=0)
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"tensor 'w' declares no semantics for the "
                             r"active dp axis \(size 2\): add "
                             r"Replicated\('dp'\) or Ownership\('dp'\)"):
        one({"w": torch.zeros(2)}, {"w": Split("tp", 0)}, topology, rank)
    topology = rt.grid_topology(pp=2)
    with pytest.raises(reshard.InvalidArgumentError,
                       match="tensor 'layers.0.w' declares no semantics for "
                             "the active pp axis"):
        one({"w": torch.zeros(2)}, {"w": Shard(tensor_id="layers.0.w")},
            topology, reshard.ParallelRank(pp=1))


def test_contract_rules_name_the_tensor():
    with pytest.raises(reshard.InvalidArgumentError,
                       match="tensor e3: an individually allocated expert "
                             "requires explicit EP ownership, not an EP "
                             "split"):
        one({"w": torch.zeros(2)}, {"w": Shard([Split("ep", 0)],
                                               tensor_id="e3", expert_id=3)},
            rt.grid_topology(ep=2), reshard.ParallelRank(ep=0))
    with pytest.raises(reshard.InvalidArgumentError,
                       match="EP must split the leading logical expert "
                             "dimension"):
        Split("ep", 1)
    with pytest.raises(reshard.InvalidArgumentError,
                       match="dp axis cannot use split semantics"):
        Split("dp", 0)
    with pytest.raises(reshard.InvalidArgumentError,
                       match="Replicated: unsupported parallel axis kind "
                             "'cp'"):
        Replicated("cp")


def test_unknown_rank_or_participant_is_refused():
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"topology has no participant at rank "
                             r"ParallelRank\(dp=0, tp=2"):
        one({"w": torch.zeros(2)}, {"w": Split("tp", 0)},
            rank=reshard.ParallelRank(tp=2))
    with pytest.raises(reshard.InvalidArgumentError,
                       match="topology has no participant 'worker-9'"):
        rt.build_part({"w": torch.zeros(2)}, {"w": Split("tp", 0)},
                      topology=rt.grid_topology(tp=2),
                      participant_id="worker-9", placement_set_id="s",
                      **HEADER)


def test_assembly_refuses_incomplete_and_undeclared_layouts():
    topology = rt.grid_topology(tp=2)
    parts = [one({"w": torch.zeros(2)}, {"w": Split("tp", 0)}, topology, r)
             for r in rt.grid_ranks(tp=2)]
    with pytest.raises(reshard.InvalidArgumentError,
                       match="missing topology participant: p-d0-p0-e0-t1"):
        rt.placement_of(parts[:1], topology)
    # A whole tensor on every TP rank without Replicated("tp").
    parts = [one({"norm": torch.zeros(2)}, {"norm": []}, topology, r)
             for r in rt.grid_ranks(tp=2)]
    with pytest.raises(reshard.InvalidArgumentError,
                       match="global placement tensor varies across "
                             "undeclared tp axis: norm"):
        rt.placement_of(parts, topology)


# ---------------------------------------------------------------------------
# The JSON form of a part.


def sample_part():
    topology = rt.grid_topology(tp=2, pp=2)
    return one({"a": torch.zeros(2, 3, dtype=torch.bfloat16),
                "b": torch.zeros(4, dtype=torch.uint8)},
               {"a": Shard([Ownership("pp"), Split("tp", 1)], layer_id=1,
                           tensor_id="layers.1.a", pipeline_stage_id=3),
                "b": Shard([Ownership("pp"), Replicated("tp")],
                           aliases=["b", "c"], layout_fingerprint="bytes:v1")},
               topology, reshard.ParallelRank(tp=1, pp=1)).part


def test_part_json_round_trips_canonically():
    part = sample_part()
    text = rt.part_to_json(part)
    obj = json.loads(text)
    assert text == json.dumps(obj, sort_keys=True, separators=(",", ":"))
    assert obj["record"] == "weight-placement-part"
    assert obj["fragments"][0]["pipeline_stage_id"] == 3 or \
        obj["fragments"][1]["pipeline_stage_id"] == 3
    back = rt.part_from_json(text)
    assert back.tensors == part.tensors
    assert back.fragments == part.fragments
    assert (back.participant_id, back.rank, back.topology_id) == (
        part.participant_id, part.rank, part.topology_id)
    assert rt.part_to_json(back) == text
    assert rt.part_from_json(text.encode()).fragments == part.fragments


def test_part_json_is_the_native_record():
    part = sample_part()
    assert rt.part_to_json(part) == part.to_json()
    assert reshard.WeightPlacementPart.from_json(part.to_json()).fragments \
        == part.fragments


def test_part_json_keeps_axis_extensions():
    # A partial split (the wire's "ranks") survives the record's round trip.
    axis = reshard.PartialSplitAxis("tp", 0, 2)
    tensor = reshard.TensorDescriptor("v", [6, 4], "uint8", 1, [0], "bytes",
                                      [axis])
    fragment = reshard.PlacementFragment("v", [4, 0], [2, 4], 8,
                                         reshard.ParallelRank(tp=1), [])
    part = reshard.WeightPlacementPart("r", "v1", 3, "s", "sha256:t", "p1",
                                       reshard.ParallelRank(tp=1), [tensor],
                                       [fragment])
    text = rt.part_to_json(part)
    assert ('"parallel_axes":[{"dim":0,"kind":"tp","ranks":2,'
            '"semantics":"split"}]') in text
    back = rt.part_from_json(text)
    assert back.tensors == (tensor,)
    assert back.tensors[0].parallel_axes[0].ranks == 2


def mutated(edit):
    obj = json.loads(rt.part_to_json(sample_part()))
    edit(obj)
    return json.dumps(obj)


@pytest.mark.parametrize("text,message", [
    ("not json", "placement part JSON: not JSON"),
    (b"\xff\xfe", "placement part JSON: not UTF-8"),
    ("[1, 2]", "placement part JSON: part must be an object, got list"),
    ('{"a": 1, "a": 2}', "placement part JSON: duplicate JSON field 'a'"),
    (mutated(lambda o: o.update(extra=1)),
     "part has unknown field.s. extra"),
    (mutated(lambda o: o.pop("rank")), r"part lacks field\(s\) rank"),
    (mutated(lambda o: o.update(record="other")),
     "part.record must be 'weight-placement-part'"),
    (mutated(lambda o: o.update(weight_generation=True)),
     "placement part JSON: part.weight_generation must be an integer$"),
    (mutated(lambda o: o["tensors"][0].update(itemsize="2")),
     r"part.tensors\[0\].itemsize must be an integer"),
    (mutated(lambda o: o["fragments"][0].update(nbytes=7)),
     "fragment byte size mismatch"),
    (mutated(lambda o: o["tensors"][0]["parallel_axes"][0].update(
        semantics="sharded")),
     r"placement part JSON: part.tensors\[0\].parallel_axes\[0\]: "
     'unsupported parallel axis semantics "sharded"$'),
    (mutated(lambda o: o["fragments"].reverse()),
     "part is not in canonical form"),
    (mutated(lambda o: o["rank"].update(tp=-1)),
     "placement part JSON: part.rank.tp must be >= 0$"),
    (mutated(lambda o: o.update(resource_id="")),
     "placement part JSON: part.resource_id must be a non-empty string$"),
])
def test_part_json_refuses_malformed_text(text, message):
    with pytest.raises(reshard.InvalidArgumentError, match=message):
        rt.part_from_json(text)


def test_part_json_refuses_non_finite_numbers():
    text = rt.part_to_json(sample_part()).replace('"layer_id":1',
                                                  '"layer_id":NaN')
    with pytest.raises(reshard.InvalidArgumentError,
                       match="non-finite JSON number NaN is unsupported"):
        rt.part_from_json(text)


# ---------------------------------------------------------------------------
# gather_placement across processes.

GATHER_TOPOLOGY = dict(tp=2, dp=2)


def gather_part(rank):
    """Process `rank`'s parts: 0 and 1 host the TP ranks of replica 0,
    2 hosts both TP ranks of replica 1, 3 hosts none."""
    hosted = {0: [(0, 0)], 1: [(0, 1)], 2: [(1, 0), (1, 1)], 3: []}[rank]
    topology = rt.grid_topology(**GATHER_TOPOLOGY)
    return [rt.build_part(
        {"w": torch.zeros(2, 3, dtype=torch.bfloat16), "n": torch.zeros(3)},
        {"w": Split("tp", 0), "n": Replicated("tp")}, topology=topology,
        rank=reshard.ParallelRank(dp=dp, tp=tp), placement_set_id="g",
        default_axes=[Replicated("dp")], **HEADER).part
        for dp, tp in hosted]


def gather_worker(rendezvous, session, rank, ranks, timeout, results,
                  garbage=False):
    try:
        if garbage:  # a broken peer: publishes bytes that are no record
            reshard.Rendezvous(rendezvous).put(f"{session}/part/{rank}",
                                               b"\x00garbage{")
            results.put((rank, "garbage", ""))
            return
        placement = rt.gather_placement(
            rendezvous, session, rank, ranks, gather_part(rank),
            rt.grid_topology(**GATHER_TOPOLOGY), timeout=timeout)
        results.put((rank, "ok", placement.placement_id))
    except Exception as e:  # reported to the test
        results.put((rank, type(e).__name__, str(e)))


def run_ranks(rendezvous, session, ranks, launched, timeout=20.0,
              garbage=()):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=gather_worker,
                         args=(rendezvous, session, r, ranks, timeout,
                               results, r in garbage)) for r in launched]
    for p in procs:
        p.start()
    out = dict((r, (s, v)) for r, s, v in
               (results.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return out


def expected_placement():
    parts = [p for r in range(4) for p in gather_part(r)]
    return rt.assemble(parts, rt.grid_topology(**GATHER_TOPOLOGY))


def test_gather_placement_across_processes(tmp_path):
    rendezvous = f"fs://{tmp_path}"
    out = run_ranks(rendezvous, "job1/trainer", 4, range(4))
    want = expected_placement().placement_id
    assert out == {r: ("ok", want) for r in range(4)}
    # The same command run twice: every rank refuses before publishing.
    with pytest.raises(reshard.AlreadyExistsError,
                       match="gather_placement session job1/trainer: rank 2 "
                             r"already published its parts "
                             r"\(job1/trainer/part/2\) in an earlier run; "
                             "use a new session key"):
        rt.gather_placement(rendezvous, "job1/trainer", 2, 4, gather_part(2),
                            rt.grid_topology(**GATHER_TOPOLOGY), timeout=1)
    # Late readers get the same placement from the records.
    store = reshard.Rendezvous(str(tmp_path))
    assert store.list("job1/trainer/") == [f"job1/trainer/part/{r}"
                                           for r in range(4)]


def test_gather_placement_refuses_a_garbage_record(tmp_path):
    # Rank 1 publishes garbage; the other ranks fail naming its key.
    out = run_ranks(str(tmp_path), "s", 3, [0, 1, 2], garbage=[1])
    assert out[1] == ("garbage", "")
    for r in (0, 2):
        status, message = out[r]
        assert status == "InvalidArgumentError"
        assert message == ("gather_placement session s: malformed part "
                           "record s/part/1 of rank 1: not JSON (Expecting "
                           "value: line 1 column 1 (char 0))")


def test_gather_placement_times_out_naming_the_missing_ranks(tmp_path):
    out = run_ranks(str(tmp_path), "late", 4, [0, 2], timeout=1.0)
    for r in (0, 2):
        assert out[r] == ("UnavailableError",
                          "gather_placement session late: timed out after "
                          "1 s waiting for the part record(s) of rank(s) "
                          "1, 3")


def peer_record(rank, ranks, parts, edit=None):
    """A record as rank `rank` would publish it, optionally edited."""
    from reshard import _frameworks
    record = {"record": "weight-placement-parts", "rank": rank,
              "ranks": ranks,
              "parts": [_frameworks.part_object(p) for p in parts]}
    if edit:
        edit(record)
    return json.dumps(record).encode()


def other_topology_part():
    return rt.build_part({"w": torch.zeros(3)}, {"w": []},
                         topology=rt.grid_topology(),
                         rank=reshard.ParallelRank(), placement_set_id="g",
                         **HEADER).part


@pytest.mark.parametrize("record,message", [
    (lambda: peer_record(1, 2, gather_part(1),
                         lambda r: r.update(ranks=3)),
     "malformed part record s/part/1 of rank 1: rank 1 joined with 3 ranks, "
     "this rank with 2"),
    (lambda: peer_record(1, 2, gather_part(1), lambda r: r.update(rank=0)),
     "malformed part record s/part/1 of rank 1: it says rank 0"),
    (lambda: peer_record(1, 2, gather_part(1), lambda r: r.update(parts=[17])),
     r"malformed part record s/part/1 of rank 1: parts\[0\]: part must be "
     "an object, got int"),
    (lambda: peer_record(1, 2, gather_part(1), lambda r: r.pop("parts")),
     r"malformed part record s/part/1 of rank 1: record lacks field\(s\) "
     "parts"),
    (lambda: peer_record(1, 2, gather_part(0)),
     r"participant 'p-d0-p0-e0-t0' is published twice \(s/part/0 and "
     r"s/part/1\)"),
    (lambda: peer_record(1, 2, gather_part(1), lambda r: r["parts"][0].update(
        revision="step-2")),
     r"part of participant 'p-d0-p0-e0-t1' \(s/part/1\) has revision "
     "'step-2'; the session has in s/part/0 'step-1'"),
    (lambda: peer_record(1, 2, [other_topology_part()]),
     r"part of participant 'p-d0-p0-e0-t0' \(s/part/1\) has topology_id "
     "sha256:"),
    (lambda: peer_record(1, 2, gather_part(1), lambda r: r["parts"][0][
        "fragments"][0].update(nbytes=5)),
     r"malformed part record s/part/1 of rank 1: parts\[0\]: fragment "
     "byte size mismatch: sha256:[0-9a-f]{64}: expected 12, got 5"),
    (lambda: peer_record(1, 2, gather_part(1)),
     "missing topology participant: p-d1-p0-e0-t0"),
])
def test_gather_placement_checks_peer_records(tmp_path, record, message):
    store = reshard.Rendezvous(str(tmp_path))
    store.put("s/part/1", record())
    with pytest.raises(reshard.InvalidArgumentError,
                       match="gather_placement session s: .*" + message):
        rt.gather_placement(store, "s", 0, 2, gather_part(0),
                            rt.grid_topology(**GATHER_TOPOLOGY), timeout=5)


def test_gather_placement_refuses_bad_arguments(tmp_path):
    topology = rt.grid_topology(**GATHER_TOPOLOGY)
    with pytest.raises(reshard.InvalidArgumentError,
                       match="gather_placement session 'a//b' must be "
                             "record-key components"):
        rt.gather_placement(str(tmp_path), "a//b", 0, 1, [], topology)
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"rank 2 must be in \[0, ranks\) for ranks 2"):
        rt.gather_placement(str(tmp_path), "x", 2, 2, [], topology)
    store = reshard.Rendezvous(str(tmp_path))
    store.put("y/part/07", b"{}")
    with pytest.raises(reshard.InvalidArgumentError,
                       match="record y/part/07 names no rank of 2"):
        rt.gather_placement(store, "y", 0, 2, gather_part(0), topology,
                            timeout=5)
    # One process hosting every participant.
    placement = rt.gather_placement(
        store, "solo", 0, 1, [p for r in range(4) for p in gather_part(r)],
        topology, placement_set_id="g")
    assert placement.placement_id == expected_placement().placement_id
    with pytest.raises(reshard.InvalidArgumentError,
                       match=r"part of participant 'p-d0-p0-e0-t0' "
                             r"\(solo2/part/0\) has placement_set_id 'g'; "
                             "the session expected 'other'"):
        rt.gather_placement(store, "solo2", 0, 1, gather_part(0), topology,
                            placement_set_id="other")
