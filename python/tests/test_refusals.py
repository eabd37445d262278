"""Refusals: each raises the right exception with a message naming the
tensor, participant, fragment or field, and nothing is written.

Invalid manifest JSON gives the library's message (the CLI's ``reshard
validate --json`` error without its file prefix); tensors of the wrong
dtype or itemsize, too small, too large, non-contiguous, read-only targets,
tensors on a device, unknown participants, tensors and fragments, tensors
given twice; non-integer (bool, float) and out-of-range (negative u64)
fields of every constructor and option.
"""

import json
import os
import pathlib

import numpy as np
import pytest
import torch

import reshard
from patterns import Buffers, split_placement

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
SCENARIO_DIR = DATA / "scenarios"
FIXTURE = DATA / "fixtures" / "placements" / "placement_100.json"
LIBS = ["torch", "numpy"]


@pytest.fixture(scope="module")
def pair(tp_split_pair):
    return tp_split_pair


class Case:
    """Filled sources, poisoned targets, and one bf16 target fragment."""

    def __init__(self, pair, lib):
        self.src, self.dst = pair
        self.lib = lib
        self.sources = Buffers(self.src, lib, fill=True)
        self.targets = Buffers(self.dst, lib)
        self.targets.poison(0xD7)
        part = self.dst.parts[1]
        self.pid = part.participant_id
        self.frag = [f for f in part.fragments
                     if f.tensor_id == "layers.0.proj.weight"][0]
        self.fid = self.frag.placement_fragment_id
        self.prefix = (f"target tensor 'layers.0.proj.weight' (participant "
                       f"'{self.pid}', fragment {self.fid})")

    def run_with(self, tensor, key_by="fragment"):
        """Reshards with the bf16 target fragment replaced by `tensor`."""
        if key_by == "fragment":
            targets = self.targets.by_fragment()
            targets[self.fid] = tensor
        else:
            targets = self.targets.by_participant()
            targets[self.pid]["layers.0.proj.weight"] = tensor
        return reshard.reshard(self.src, self.sources.by_fragment(), self.dst,
                               targets)

    def refused(self, tensor, message, key_by="fragment",
                error=reshard.InvalidArgumentError):
        with pytest.raises(error) as e:
            self.run_with(tensor, key_by)
        assert str(e.value) == message
        assert isinstance(e.value, ValueError)
        self.nothing_written()

    def nothing_written(self):
        for b in self.targets.fragments.values():
            assert bool((b.raw.view(np.uint8) == 0xD7).all()), \
                "a refused reshard wrote a target"

    def zeros(self, shape, dtype):
        if self.lib == "torch":
            return torch.zeros(shape, dtype=dtype)
        return np.zeros(shape, dtype=dtype)

    @property
    def bf16(self):
        return torch.bfloat16 if self.lib == "torch" else np.uint16

    @property
    def shape(self):
        return self.frag.local_shape


@pytest.fixture(params=LIBS)
def case(request, pair):
    return Case(pair, request.param)


def test_the_case_reshards_when_nothing_is_wrong(case):
    case.run_with(case.zeros(case.shape, case.bf16))
    assert case.targets.mismatch().startswith(f"fragment {case.fid} ")
    case.targets.poison()
    reshard.reshard(case.src, case.sources.by_fragment(), case.dst,
                    case.targets.by_fragment())
    assert case.targets.mismatch() == ""


def test_wrong_dtype(case):
    f16 = torch.float16 if case.lib == "torch" else np.float16
    case.refused(case.zeros(case.shape, f16),
                 f"{case.prefix} has dtype float16; the placement declares "
                 "bfloat16")
    i16 = torch.int16 if case.lib == "torch" else np.int16
    case.refused(case.zeros(case.shape, i16),
                 f"{case.prefix} has dtype int16; the placement declares "
                 "bfloat16", key_by="participant")


def test_wrong_itemsize(case):
    f32 = torch.float32 if case.lib == "torch" else np.float32
    case.refused(case.zeros(case.shape, f32),
                 f"{case.prefix} has itemsize 4; the placement declares "
                 "bfloat16 with itemsize 2")
    u8 = torch.uint8 if case.lib == "torch" else np.uint8
    case.refused(case.zeros(case.frag.nbytes, u8),
                 f"{case.prefix} has itemsize 1; the placement declares "
                 "bfloat16 with itemsize 2")


def test_too_small_and_too_large(case):
    n = case.frag.nbytes // 2
    shape = case.frag.local_shape
    case.refused(case.zeros(n - 1, case.bf16),
                 f"{case.prefix} is too small: {2 * (n - 1)} bytes for a "
                 f"fragment of {case.frag.nbytes} bytes (shape {shape})")
    case.refused(case.zeros((n + 1,), case.bf16),
                 f"{case.prefix} is larger than its fragment: {2 * (n + 1)} "
                 f"bytes for {case.frag.nbytes} (shape {shape})")
    # The element count decides, not the shape: a flat tensor of the right
    # size is the fragment's bytes.
    case.run_with(case.zeros(n, case.bf16))


def test_non_contiguous(case):
    rows, cols = case.shape
    if case.lib == "torch":
        t = torch.zeros((cols, rows), dtype=torch.bfloat16).t()
        assert t.shape == (rows, cols)
        case.refused(t, f"{case.prefix} is not contiguous (strides "
                        f"{tuple(t.stride())} for shape {tuple(t.shape)}); "
                        "pass .contiguous()")
        wide = torch.zeros((rows, 2 * cols), dtype=torch.bfloat16)[:, ::2]
        case.refused(wide, f"{case.prefix} is not contiguous (strides "
                           f"{tuple(wide.stride())} for shape "
                           f"{tuple(wide.shape)}); pass .contiguous()")
    else:
        a = np.zeros((rows, 2 * cols), np.uint16)[:, ::2]
        case.refused(a, f"{case.prefix} is not contiguous (strides "
                        f"{a.strides} for shape {a.shape}); pass "
                        "numpy.ascontiguousarray(...)")
        f = np.asfortranarray(np.zeros((rows, cols), np.uint16))
        case.refused(f, f"{case.prefix} is not contiguous (strides "
                        f"{f.strides} for shape {f.shape}); pass "
                        "numpy.ascontiguousarray(...)")


def test_read_only_target(pair):
    c = Case(pair, "numpy")
    a = np.zeros(c.shape, np.uint16)
    a.setflags(write=False)
    c.refused(a, f"{c.prefix} is read-only; a target must be writable")
    c.refused(bytes(c.frag.nbytes),
              f"{c.prefix} is read-only; a target must be writable")
    # A read-only source is fine.
    sources = c.sources.by_fragment()
    for fid, b in c.sources.fragments.items():
        ro = b.raw.copy()
        ro.setflags(write=False)
        sources[fid] = ro.view(b.obj.dtype) if hasattr(b.obj, "dtype") else \
            memoryview(ro.view(np.uint8).tobytes())
    reshard.reshard(c.src, sources, c.dst, c.targets.by_fragment())
    assert c.targets.mismatch() == ""


class _OnDevice:
    """A tensor of another library on a DLPack device (no memory here)."""

    def __init__(self, device):
        self.device = device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        raise AssertionError("a device tensor must not be exported")


def test_device_tensors(pair):
    # (CUDA tensors bind as cuda fragments: test_cuda_tensors.py.)
    c = Case(pair, "torch")
    c.refused(_OnDevice((10, 1)),
              f"{c.prefix} is on device rocm:1; reshard moves host and CUDA "
              "memory only")
    c.refused(_OnDevice((4, 0)),
              f"{c.prefix} is on device opencl:0; reshard moves host and "
              "CUDA memory only")
    c.refused(torch.zeros(c.shape, dtype=torch.bfloat16, device="meta"),
              f"{c.prefix} is on device meta; reshard moves host and CUDA "
              "memory only")
    # A source on a device, too.
    sources = c.sources.by_fragment()
    sid = c.src.parts[0].fragments[0].placement_fragment_id
    sources[sid] = _OnDevice((10, 3))
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(c.src, sources, c.dst, c.targets.by_fragment())
    assert "source tensor '" in str(e.value)
    assert str(e.value).endswith(f"fragment {sid}) is on device rocm:3; "
                                 "reshard moves host and CUDA memory only")
    c.nothing_written()


def test_not_a_tensor(pair):
    c = Case(pair, "torch")
    tail = ("not a tensor: pass a torch tensor, a numpy array or an object "
            "with DLPack, the buffer protocol or __array_interface__")
    c.refused(5, f"{c.prefix} is a int, {tail}")
    c.refused(None, f"{c.prefix} is a NoneType, {tail}")
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(c.src, [1, 2], c.dst, c.targets.by_fragment())
    assert str(e.value) == "source tensors must be a mapping, got list"


def test_unknown_names(case):
    src, dst = case.src, case.dst
    sources = case.sources.by_fragment()

    def refused(targets, message):
        with pytest.raises(reshard.InvalidArgumentError) as e:
            reshard.reshard(src, sources, dst, targets)
        assert str(e.value) == message
        case.nothing_written()

    targets = case.targets.by_participant()
    targets["nobody"] = {}
    refused(targets, "target tensors name participant 'nobody', which is not "
                     "in the placement")
    targets = case.targets.by_participant()
    targets[case.pid]["no.such.tensor"] = case.zeros(4, case.bf16)
    refused(targets, f"target tensor 'no.such.tensor' of participant "
                     f"'{case.pid}' matches no fragment of it")
    targets = case.targets.by_fragment()
    targets["sha256:" + "0" * 64] = case.zeros(4, case.bf16)
    refused(targets, f"target tensors name fragment 'sha256:{'0' * 64}', "
                     "which is not in the placement")
    # A fragment of the source layout is not one of the target's.
    targets = case.targets.by_fragment()
    sid = src.parts[0].fragments[0].placement_fragment_id
    targets[sid] = case.zeros(4, case.bf16)
    refused(targets, f"target tensors name fragment '{sid}', which is not in "
                     "the placement")
    # A participant that owns fragments but was not given.
    targets = case.targets.by_participant()
    del targets[case.pid]
    refused(targets, f"target bindings: missing runtime binding participant: "
                     f"{case.pid}")


def test_fragment_given_twice(case):
    targets = case.targets.by_fragment()
    targets[case.pid] = {"layers.0.proj.weight": case.zeros(case.shape,
                                                            case.bf16)}
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(case.src, case.sources.by_fragment(), case.dst,
                        targets)
    assert str(e.value) == f"{case.prefix} is given more than once"
    case.nothing_written()


def test_tensor_with_several_fragments_keyed_by_tensor_id():
    rank = reshard.ParallelRank()
    topology = reshard.ParallelTopology(
        participants=[reshard.TopologyParticipant("solo", rank)])
    p = reshard.Placement.from_fragments(
        "m", "r", 1, "s", topology,
        [reshard.TensorDescriptor("w", [4, 2], "uint8", 1)],
        [reshard.PlacementFragment("w", [0, 0], [2, 2], 4, rank),
         reshard.PlacementFragment("w", [2, 0], [2, 2], 4, rank)])
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(
            p, {"solo": {"w": torch.zeros(2, 2, dtype=torch.uint8)}}, p, {})
    assert str(e.value) == ("source tensor 'w' of participant 'solo' has 2 "
                            "fragments; key them by placement fragment id")
    # Keyed by fragment id under the participant, it works.
    sources = Buffers(p, "torch", fill=True)
    targets = Buffers(p, "numpy")
    assert set(sources.by_participant()["solo"]) == \
        {f.placement_fragment_id for f in p.fragments}
    reshard.reshard(p, sources.by_participant(), p, targets.by_participant())
    assert targets.mismatch() == ""


def test_reused_plan_of_other_placements(case):
    wrong = reshard.plan(case.dst, case.src)
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(case.src, case.sources.by_fragment(), case.dst,
                        case.targets.by_fragment(), plan=wrong)
    assert str(e.value) == "logical plan and source placement IDs differ"
    case.nothing_written()
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(case.src, case.sources.by_fragment(), case.dst,
                        case.targets.by_fragment(), plan="a plan")
    assert str(e.value) == "plan must be a LogicalTransferPlan"


@pytest.mark.parametrize("threads,message", [
    (True, "threads must be an integer, got bool"),
    (2.0, "threads must be an integer, got float"),
    (-1, "threads must fit in an unsigned 64-bit integer"),
    (0, "threads must be >= 1"),
])
def test_threads(case, threads, message):
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(case.src, case.sources.by_fragment(), case.dst,
                        case.targets.by_fragment(), threads=threads)
    assert str(e.value) == message
    case.nothing_written()


def test_store_refusals(tmp_path, pair):
    src, dst = pair
    store = reshard.WeightStore("fs://" + str(tmp_path))
    sources = Buffers(src, "torch", fill=True)
    bad = sources.by_fragment()
    fid = src.parts[0].fragments[0].placement_fragment_id
    bad[fid] = torch.zeros(3, dtype=torch.uint8)
    with pytest.raises(reshard.InvalidArgumentError) as e:
        store.upload(src, bad)
    assert str(e.value).startswith("upload source tensor '")
    assert f"fragment {fid})" in str(e.value)
    assert store.ls() == []
    manifest = store.upload(src, sources.by_fragment())
    c = Case(pair, "numpy")
    a = np.zeros(c.shape, np.uint16)
    a.setflags(write=False)
    targets = c.targets.by_fragment()
    targets[c.fid] = a
    with pytest.raises(reshard.InvalidArgumentError) as e:
        store.load(manifest.manifest_key, dst, targets)
    assert str(e.value) == ("load target" + c.prefix[len("target"):] +
                            " is read-only; a target must be writable")
    c.nothing_written()
    other = split_placement("w", (8, 6), "uint8", 1, 2, 0, "x")
    with pytest.raises(reshard.InvalidArgumentError) as e:
        store.load(manifest.manifest_key, other,
                   Buffers(other, "torch").by_fragment())
    assert str(e.value) == ("target placement revision mismatch: stored "
                            "demo-model@step-1, target split-model@r1")


# ------------------------------------------------------------ manifests


def _mutated(mutate):
    doc = json.loads(FIXTURE.read_text("utf-8"))
    mutate(doc)
    return json.dumps(doc, ensure_ascii=False, sort_keys=True,
                      separators=(",", ":"))


def _frag0(doc):
    return doc["parts"][0]["fragments"][0]


_TEXT = FIXTURE.read_text("utf-8")
_FID = ("sha256:0e1a5559d98ec52a40e30cca0349beeb7be7c21ac379d5711c4731a804"
        "67817b")
INVALID = {
    "truncated": (_TEXT[:100],
                  "invalid JSON: A string is opened, but never closed."),
    "unknown field": (_mutated(lambda d: d.update(x=1)),
                      '$: placement manifest schema fields do not match '
                      'contract: unknown field "x"'),
    "missing field": (_mutated(lambda d: d.pop("revision")),
                      '$: placement manifest schema fields do not match '
                      'contract: missing field "revision"'),
    "duplicate field": (_TEXT.replace('"revision":"step-7"',
                                      '"revision":"step-7","revision":"x"'),
                        '$: duplicate JSON field "revision"'),
    "bool u64": (_mutated(lambda d: d.update(weight_generation=True)),
                 "weight_generation must be an integer"),
    "float u64": (_mutated(lambda d: d.update(weight_generation=1.0)),
                  "weight_generation must be an integer"),
    "negative u64": (_mutated(lambda d: d.update(weight_generation=-1)),
                     "weight_generation must fit in an unsigned 64-bit "
                     "integer"),
    "u64 overflow": (_mutated(lambda d: d.update(weight_generation=2 ** 64)),
                     "JSON integer must fit in an unsigned 64-bit integer"),
    "string dim": (_mutated(lambda d: d["tensors"][0].update(
        global_shape=["4", 1, 1])),
        "tensors[0].global_shape[0] must be an integer"),
    "byte size": (_mutated(lambda d: _frag0(d).update(nbytes=33)),
                  f"parts[0]: fragment byte size mismatch: {_FID}: expected "
                  "32, got 33"),
    "out of bounds": (_mutated(lambda d: _frag0(d).update(
        global_offset=[1, 0, 0])),
        f"parts[0]: fragment is out of bounds: {_FID}: tensor layers.2.w2 "
        "dim 0: offset 1 + extent 4 > 4"),
    "placement_id": (_mutated(lambda d: d.update(
        placement_id="sha256:" + "0" * 64)),
        "placement_id does not match canonical logical content: got sha256:"
        + "0" * 64 + ", expected sha256:6dcd4abfe80254f5ea304bf0689df9c2a047"
        "9807368a8c07622c4d3b69542c88"),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_manifest_json(name, tmp_path, cli):
    text, message = INVALID[name]
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.Placement.from_json(text)
    assert isinstance(e.value, ValueError)
    assert str(e.value) == message
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.Placement.from_json(text.encode("utf-8"))
    assert str(e.value) == message
    path = tmp_path / "placement.json"
    path.write_text(text, encoding="utf-8")
    proc = cli("validate", path, "--json", check=False)
    assert proc.returncode != 0
    assert json.loads(proc.stdout) == {"error": f"{path}: {message}",
                                       "valid": False}


def test_from_json_of_a_non_string():
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.Placement.from_json(5)
    assert str(e.value) == "placement JSON must be a string, got int"


# ----------------------------------------------------- constructor fields

_R = reshard.ParallelRank


def _desc(**kw):
    args = dict(tensor_id="w", global_shape=[4, 2], dtype="uint8", itemsize=1)
    args.update(kw)
    return lambda: reshard.TensorDescriptor(**args)


def _frag(**kw):
    args = dict(tensor_id="w", global_offset=[0, 0], local_shape=[4, 2],
                nbytes=8, rank=_R())
    args.update(kw)
    return lambda: reshard.PlacementFragment(**args)


def _topo(**kw):
    return lambda: reshard.ParallelTopology(**kw)


def _manifest(**kw):
    rank = _R()
    top = reshard.ParallelTopology(
        participants=[reshard.TopologyParticipant("solo", rank)])
    args = dict(resource_id="m", revision="r", weight_generation=1,
                placement_set_id="s", topology=top,
                tensors=[reshard.TensorDescriptor("w", [2], "uint8", 1)],
                fragments=[reshard.PlacementFragment("w", [0], [2], 2, rank)])
    args.update(kw)
    return lambda: reshard.Placement.from_fragments(**args)


FIELDS = {
    "rank bool": (lambda: _R(tp=True),
                  "ParallelRank.tp must be an integer, got bool"),
    "rank negative": (lambda: _R(ep=-1), "ParallelRank.ep must be >= 0"),
    "rank overflow": (lambda: _R(dp=2 ** 63),
                      "ParallelRank.dp must fit in a signed 64-bit integer"),
    "split dim bool": (lambda: reshard.SplitAxis("tp", True),
                       "SplitAxis.dim must be an integer, got bool"),
    "axis kind": (lambda: reshard.SplitAxis("xx", 0),
                  'unsupported parallel axis kind: "xx"'),
    "axis kind type": (lambda: reshard.ReplicatedAxis(1),
                       "ReplicatedAxis.kind must be a string, got int"),
    "itemsize bool": (_desc(itemsize=True),
                      "TensorDescriptor.itemsize must be an integer, got "
                      "bool"),
    "shape bool": (_desc(global_shape=[4, True]),
                   "TensorDescriptor.global_shape must be an integer, got "
                   "bool"),
    "shape type": (_desc(global_shape="42"),
                   "TensorDescriptor.global_shape must be a list or tuple of "
                   "integers, got str"),
    "layer bool": (_desc(layer_id=False),
                   "TensorDescriptor.layer_id must be an integer, got bool"),
    "tensor_id type": (_desc(tensor_id=7),
                       "TensorDescriptor.tensor_id must be a string, got int"),
    "tensor_id surrogate": (_desc(tensor_id="w\udc80"),
                            "TensorDescriptor.tensor_id must be valid Unicode "
                            "(no lone surrogates)"),
    "axes type": (_desc(parallel_axes=["tp"]),
                  "TensorDescriptor.parallel_axes must contain only "
                  "ParallelAxis objects, got str"),
    "nbytes bool": (_frag(nbytes=True),
                    "PlacementFragment.nbytes must be an integer, got bool"),
    "nbytes float": (_frag(nbytes=8.0),
                     "PlacementFragment.nbytes must be an integer, got float"),
    "nbytes negative": (_frag(nbytes=-8),
                        "PlacementFragment.nbytes must fit in an unsigned "
                        "64-bit integer"),
    "nbytes overflow": (_frag(nbytes=2 ** 64),
                        "PlacementFragment.nbytes must fit in an unsigned "
                        "64-bit integer"),
    "offset bool": (_frag(global_offset=[False, 0]),
                    "PlacementFragment.global_offset must be an integer, got "
                    "bool"),
    "stage bool": (_frag(pipeline_stage_id=True),
                   "PlacementFragment.pipeline_stage_id must be an integer, "
                   "got bool"),
    "aliases type": (_frag(aliases="w"),
                     "PlacementFragment.aliases must be a list or tuple of "
                     "strings, got str"),
    "tp_size bool": (_topo(tp_size=True),
                     "ParallelTopology.tp_size must be an integer, got bool"),
    "dp_size zero": (_topo(dp_size=0), "topology dp_size must be >= 1"),
    "generation bool": (_manifest(weight_generation=True),
                        "WeightPlacementManifest.weight_generation must be an "
                        "integer, got bool"),
    "generation negative": (_manifest(weight_generation=-1),
                            "WeightPlacementManifest.weight_generation must "
                            "fit in an unsigned 64-bit integer"),
    "unreferenced tensor": (_manifest(tensors=[
        reshard.TensorDescriptor("w", [2], "uint8", 1),
        reshard.TensorDescriptor("v", [2], "uint8", 1)]),
        "placement fragment inventory contains an unreferenced tensor: v"),
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_constructor_fields(name):
    make, message = FIELDS[name]
    with pytest.raises(reshard.InvalidArgumentError) as e:
        make()
    assert str(e.value) == message


def test_the_manifest_of_the_field_cases_is_valid():
    assert _manifest()().placement_id.startswith("sha256:")
    assert _frag()().nbytes == 8 and _desc()().itemsize == 1


@pytest.mark.parametrize("option,value,message", [
    ("max_operations", True, "plan.max_operations must be an integer, got "
                             "bool"),
    ("max_operations", -1, "plan.max_operations must fit in an unsigned "
                           "64-bit integer"),
    ("max_transfer_regions", 1.5, "plan.max_transfer_regions must be an "
                                  "integer, got float"),
    ("target_participant_id", 3, "plan.target_participant_id must be a "
                                 "string, got int"),
])
def test_plan_options(pair, option, value, message):
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.plan(*pair, **{option: value})
    assert str(e.value) == message


def test_bind_tensors_refusals(pair):
    src, dst = pair
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(dst, "nobody", {})
    assert str(e.value) == ("binding tensors name participant 'nobody', which "
                            "is not in the placement")
    part = dst.parts[0]
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(dst, part.participant_id, {})
    f = part.fragments[0]
    assert str(e.value) == (
        f"cannot bind buffers of participant {part.participant_id}: no buffer "
        f"for placement fragment {f.placement_fragment_id} (tensor "
        f"{f.tensor_id})")
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(dst, part.participant_id, {}, generation=-1)
    assert "generation" in str(e.value)


def test_float8_travels_in_byte_tensors_but_not_in_wider_ones():
    """torch 1.13 and numpy have no float8: uint8/int8 tensors carry its
    bits; any other dtype is still refused."""
    tensor = reshard.TensorDescriptor("w", (4, 8), "float8_e4m3fn", 1)
    frag = reshard.PlacementFragment("w", (0, 0), (4, 8), 32,
                                     reshard.ParallelRank())
    topo = reshard.ParallelTopology(participants=[
        reshard.TopologyParticipant("p0", reshard.ParallelRank())])
    p = reshard.Placement.from_fragments("m", "r", 1, "s", topo, [tensor],
                                         [frag])
    src = torch.arange(32, dtype=torch.uint8).reshape(4, 8)
    for container in (torch.uint8, torch.int8):
        dst = torch.zeros(4, 8, dtype=container)
        reshard.reshard(p, {"p0": {"w": src}}, p, {"p0": {"w": dst}})
        assert dst.view(torch.uint8).tolist() == src.tolist()
    with pytest.raises(reshard.InvalidArgumentError,
                       match="has dtype bool; the placement declares "
                             "float8_e4m3fn"):
        reshard.reshard(p, {"p0": {"w": src}}, p,
                        {"p0": {"w": torch.zeros(4, 8, dtype=torch.bool)}})
