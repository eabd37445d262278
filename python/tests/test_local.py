"""Local reshards between torch tensors and numpy arrays, checked element by
element.

Every source fragment is filled from the global element index
(patterns.py), resharded with ``reshard.reshard`` into targets of another
layout, and every element of every target fragment must then hold the
pattern of its own global index. Targets are poisoned first with 0x00 and
then with 0xFF (a byte never written cannot hold its pattern under both).
Covers the scenario pairs (cross-dim, aliases, DP replicas and ownership,
EP regrouping, PP routing, FP8 with scales, virtual stages) and the fixture
pairs, plan reuse, threads > 1, both ways of keying tensors, subsets, other
tensor-like objects, and that the GIL is released while bytes move.
"""

import json
import os
import pathlib
import sys
import threading
import time

import numpy as np
import pytest
import torch

import reshard
from patterns import Buffers, split_placement

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
FIXTURE_DIR = DATA / "fixtures" / "plans"
SCENARIO_DIR = DATA / "scenarios"
PLACEMENT_DIR = DATA / "fixtures" / "placements"

# Pairs small enough to fill and check element by element (the GiB-sized
# scenarios are planned in test_plan.py; the large cross-dim move is below).
LIMIT = 64 << 20
PAIRS = []
for _name, _entry in sorted(json.loads(
        (FIXTURE_DIR / "expected.json").read_text()).items()):
    PAIRS.append((f"fixture/{_name}", FIXTURE_DIR, _entry))
for _name, _entry in sorted(json.loads(
        (SCENARIO_DIR / "expected.json").read_text())["plans"].items()):
    if "error" not in _entry and _entry["bytes"] <= LIMIT:
        PAIRS.append((f"scenario/{_name}", SCENARIO_DIR, _entry))
LIBS = ["torch", "numpy"]


def _load(directory, name):
    return reshard.Placement.from_json((directory / name).read_text("utf-8"))


def _check(buffers, what):
    problem = buffers.mismatch()
    assert problem == "", f"{what}: {problem}"


def test_pairs_cover_the_scenarios():
    names = {p[0] for p in PAIRS}
    for must in ("aliases_cross_dim", "aliases_tied_embeddings",
                 "cross_dim_ep2_to_tp2", "cross_dim_ep4_to_tp4_uint8",
                 "dp_ownership", "dp_replicas_dp2tp2_to_dp3tp4",
                 "ep_ownership_8_to_2", "ep_regroup_2_to_8", "four_axis",
                 "fp8_fused_moe", "fp8_weight_scale_tp4_to_tp8",
                 "pp_routing_mod_4_to_2", "virtual_pp_stages"):
        assert f"scenario/{must}" in names
    assert {"fixture/pair_201", "fixture/pair_205"} <= names


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("name,directory,entry", PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_reshard_every_element(name, directory, entry, lib):
    src = _load(directory, entry["source"])
    dst = _load(directory, entry["target"])
    sources = Buffers(src, lib, fill=True)
    targets = Buffers(dst, lib)
    assert targets.nbytes == entry["bytes"] or name.startswith("fixture/")

    # Planned inside the call, tensors keyed by placement fragment id.
    targets.poison(0x00)
    report = reshard.reshard(src, sources.by_fragment(), dst,
                             targets.by_fragment())
    assert isinstance(report, reshard.Report)
    assert report.bytes == report["bytes"] == entry["bytes"]
    assert report.regions == entry["regions"]
    assert report.segments == entry["segments"]
    assert report.transfer_seconds >= 0 and report.bind_seconds >= 0
    _check(targets, "first reshard")
    _check(sources, "sources after the reshard")

    # The plan reused, two threads, {participant: {tensor id: tensor}}.
    plan = reshard.plan(src, dst)
    targets.poison(0xFF)
    again = reshard.reshard(src, sources.by_participant(), dst,
                            targets.by_participant(), plan=plan, threads=2)
    assert again.bytes == entry["bytes"]
    assert again.plan_seconds == 0
    _check(targets, "reshard with a reused plan")
    _check(sources, "sources after the second reshard")


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize(
    "path", sorted(PLACEMENT_DIR.glob("placement_*.json")),
    ids=lambda p: p.name)
def test_reshard_placement_onto_itself(path, lib):
    p = reshard.Placement.from_json(path.read_text("utf-8"))
    sources = Buffers(p, lib, fill=True)
    targets = Buffers(p, lib)
    targets.poison(0xA5)
    report = reshard.reshard(p, sources.by_fragment(), p,
                             targets.by_fragment())
    assert report.bytes == targets.nbytes
    _check(targets, path.name)


def test_numpy_sources_into_torch_targets():
    entry = json.loads((SCENARIO_DIR / "expected.json").read_text())["plans"][
        "dp_replicas_dp2tp2_to_dp3tp4"]
    src = _load(SCENARIO_DIR, entry["source"])
    dst = _load(SCENARIO_DIR, entry["target"])
    sources = Buffers(src, "numpy", fill=True)
    targets = Buffers(dst, "torch")
    targets.poison()
    reshard.reshard(src, sources.by_participant(), dst, targets.by_fragment())
    _check(targets, "numpy -> torch")
    back = Buffers(src, "numpy")
    back.poison()
    reshard.reshard(dst, targets.by_fragment(), src, back.by_participant())
    _check(back, "torch -> numpy")


def test_subset_reshard_of_one_target_participant():
    src = _load(FIXTURE_DIR, "pair_201_source.json")
    dst = _load(FIXTURE_DIR, "pair_201_target.json")
    pid = [p.participant_id for p in dst.parts if p.fragments][1]
    plan = reshard.plan(src, dst, target_participant_id=pid)
    sources = Buffers(src, "torch", fill=True,
                      participants=plan.source_participants)
    targets = Buffers(dst, "torch", participants=[pid])
    targets.poison()
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(src, sources.by_participant(), dst,
                        targets.by_participant(), plan=plan)
    assert "missing runtime binding participant" in str(e.value)
    report = reshard.reshard(src, sources.by_participant(), dst,
                             targets.by_participant(), plan=plan, subset=True)
    assert report.bytes == plan.summary["bytes"] == targets.nbytes
    _check(targets, f"subset target {pid}")


class _Interface:
    """Only __array_interface__."""

    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self.keep = a


class _DLPack:
    """Only DLPack (a CPU tensor of another library, say)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def _objects_pair():
    src = split_placement("w", (8, 6), "uint8", 1, 2, 0, "objs-src")
    dst = split_placement("w", (8, 6), "uint8", 1, 3, 1, "objs-dst")
    return src, dst


def test_other_tensor_like_objects():
    """bytearray, memoryview, DLPack and __array_interface__ objects."""
    src, dst = _objects_pair()
    sources = Buffers(src, "torch", fill=True)
    targets = Buffers(dst, "numpy")
    targets.poison()
    sf = [sources.fragments[f.placement_fragment_id] for f in src.fragments]
    tf = [targets.fragments[f.placement_fragment_id] for f in dst.fragments]
    src_objs = {sf[0].fragment.placement_fragment_id: _DLPack(sf[0].obj),
                sf[1].fragment.placement_fragment_id:
                bytearray(sf[1].raw.tobytes())}
    t_objs = {tf[0].fragment.placement_fragment_id: memoryview(tf[0].raw),
              tf[1].fragment.placement_fragment_id: _Interface(tf[1].raw),
              tf[2].fragment.placement_fragment_id:
              bytearray(tf[2].raw.nbytes)}
    reshard.reshard(src, src_objs, dst, t_objs)
    tf[2].raw[...] = np.frombuffer(
        t_objs[tf[2].fragment.placement_fragment_id],
        np.uint8).reshape(tf[2].raw.shape)
    _check(targets, "DLPack/bytearray -> memoryview/interface/bytearray")


def test_writable_dlpack_object_as_target():
    src, dst = _objects_pair()
    sources = Buffers(src, "numpy", fill=True)
    targets = Buffers(dst, "torch")
    targets.poison()
    t_objs = {fid: _DLPack(f.obj) for fid, f in targets.fragments.items()}
    reshard.reshard(src, sources.by_fragment(), dst, t_objs)
    _check(targets, "into DLPack targets")


def test_bf16_and_fp32_cross_dim_medium():
    """Two MiB of bf16 and four of fp32, TP4 dim 0 -> TP8 dim 2 and back."""
    for dtype, itemsize, torch_dtype in (("bfloat16", 2, torch.bfloat16),
                                         ("float32", 4, torch.float32)):
        a = split_placement("w", (16, 64, 512), dtype, itemsize, 4, 0, "a")
        b = split_placement("w", (16, 64, 512), dtype, itemsize, 8, 2, "b")
        for lib in LIBS:
            sources = Buffers(a, lib, fill=True)
            targets = Buffers(b, lib)
            if lib == "torch":
                assert all(f.obj.dtype == torch_dtype
                           for f in targets.fragments.values())
            targets.poison()
            report = reshard.reshard(a, sources.by_participant(), b,
                                     targets.by_participant(), threads=2)
            # 4 x 8 boxes [4, 64, 64], each 256 rows of 64 elements.
            assert (report.bytes, report.regions, report.segments) == (
                16 * 64 * 512 * itemsize, 32, 32 * 256)
            _check(targets, f"{dtype} {lib} dim0 -> dim2")
            back = Buffers(a, lib)
            back.poison()
            reshard.reshard(b, targets.by_fragment(), a, back.by_fragment())
            _check(back, f"{dtype} {lib} dim2 -> dim0")


def test_gil_released_during_transfer():
    """A 256 MiB cross-dim reshard runs in a worker thread while the main
    thread counts and watches the targets.

    With forced GIL switching disabled (a huge switch interval) the main
    thread can run only while the worker has released the GIL: if the
    native call held it, the counter could not advance between the
    worker's reads just before and just after the call, and no partly
    written target could ever be observed. Both must happen.
    """
    shape = (256, 1024, 1024)
    src = split_placement("big", shape, "uint8", 1, 4, 0, "gil-src")
    dst = split_placement("big", shape, "uint8", 1, 4, 2, "gil-dst")
    sources = {f.placement_fragment_id: torch.full(f.local_shape, 0x5A,
                                                   dtype=torch.uint8)
               for f in src.fragments}
    targets = {f.placement_fragment_id: torch.zeros(f.local_shape,
                                                    dtype=torch.uint8)
               for f in dst.fragments}
    flat = [t.view(-1) for t in targets.values()]
    plan = reshard.plan(src, dst)
    counter = [0]
    old = sys.getswitchinterval()
    results = []
    try:
        sys.setswitchinterval(1000.0)
        for attempt in range(3):
            for t in flat:
                t[0] = 0
                t[-1] = 0
            state = {"done": False}

            def worker():
                try:
                    state["before"] = counter[0]
                    state["report"] = reshard.reshard(src, sources, dst,
                                                      targets, plan=plan)
                    state["after"] = counter[0]
                except BaseException as e:  # reported below
                    state["error"] = e
                finally:
                    state["done"] = True

            thread = threading.Thread(target=worker)
            partial = 0
            thread.start()
            while not state["done"]:
                counter[0] += 1
                ends = [int(t[0]) for t in flat] + [int(t[-1]) for t in flat]
                if any(ends) and not all(ends):
                    partial += 1
                time.sleep(0.0005)  # lets the worker take the GIL back
            thread.join()
            assert "error" not in state, state.get("error")
            advanced = state["after"] - state["before"]
            results.append((advanced, partial,
                            state["report"].transfer_seconds))
            if advanced > 0 and partial > 0:
                break
    finally:
        sys.setswitchinterval(old)
    advanced, partial, _ = results[-1]
    assert advanced > 0 and partial > 0, (
        f"the main thread never ran during the transfer: {results}")
    for t in targets.values():
        assert bool((t == 0x5A).all())


@pytest.mark.parametrize("lib", LIBS)
def test_the_checker_names_a_wrong_element(lib):
    """The verifier itself: one flipped bit, one unwritten fragment."""
    entry = json.loads((SCENARIO_DIR / "expected.json").read_text())["plans"][
        "cross_dim_ep2_to_tp2"]
    src = _load(SCENARIO_DIR, entry["source"])
    dst = _load(SCENARIO_DIR, entry["target"])
    sources = Buffers(src, lib, fill=True)
    targets = Buffers(dst, lib)
    reshard.reshard(src, sources.by_fragment(), dst, targets.by_fragment())
    assert targets.mismatch() == ""
    fid, frag = next(iter(targets.fragments.items()))
    frag.raw[(1,) * frag.raw.ndim] ^= 1
    problem = targets.mismatch()
    assert problem.startswith(f"fragment {fid} of tensor "
                              f"'{frag.fragment.tensor_id}'")
    assert f"element {(1,) * frag.raw.ndim}" in problem
    frag.raw[(1,) * frag.raw.ndim] ^= 1
    assert targets.mismatch() == ""
    for value in (0x00, 0xFF):
        frag.raw.view(np.uint8)[...] = value
        assert f"fragment {fid}" in targets.mismatch()


def test_bind_tensors_names_the_callers_memory():
    dst = _load(SCENARIO_DIR, "tp_split_4_to_8_target.json")
    targets = Buffers(dst, "torch")
    part = dst.parts[2]
    tensors = targets.by_participant()[part.participant_id]
    binding = reshard.bind_tensors(dst, part.participant_id, tensors,
                                   instance_id="inst", generation=7,
                                   lease_id="lease-7", worker_id="w2")
    reshard.validate_runtime_binding(dst, binding)
    assert (binding.participant_id, binding.instance_id, binding.generation,
            binding.lease_id) == (part.participant_id, "inst", 7, "lease-7")
    assert binding.placement_id == dst.placement_id
    assert binding.placement_digest == dst.digest
    by_id = {f.placement_fragment_id: f for f in binding.fragments}
    assert set(by_id) == {f.placement_fragment_id for f in part.fragments}
    for f in part.fragments:
        t = targets.fragments[f.placement_fragment_id].obj
        b = by_id[f.placement_fragment_id]
        assert (b.address, b.nbytes, b.worker_id, b.local_shape) == (
            t.data_ptr(), f.nbytes, "w2", f.local_shape)
    again = reshard.RuntimeBinding.from_json(binding.to_json())
    assert again.to_json() == binding.to_json()
