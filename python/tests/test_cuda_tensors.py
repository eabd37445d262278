"""CUDA tensors in the Python paths: a DLPack tensor of device type 2
(kDLCUDA) becomes a ``cuda:<ordinal>`` fragment instead of being refused
at intake, and the path it is handed to moves it or refuses it in one
line naming the fragment. This machine has no CUDA device (and Debian's
torch is CPU-only), so the tensors are stand-ins exporting a DLPack
capsule of device type 2 over host memory that nothing may touch: every
path refuses before a byte moves, with the library's exact message.
"""

import ctypes

import numpy as np
import pytest

import reshard
from patterns import Buffers

NO_DEVICE = "CUDA executor unavailable: no CUDA device on this machine"

# dlpack.h's DLDataType codes and bits of the placement dtypes used here.
_DL_TYPES = {"bfloat16": (4, 16), "uint8": (1, 8), "float32": (2, 32),
             "float16": (2, 16), "int8": (0, 8)}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaTensor:
    """A tensor on CUDA device `ordinal` as DLPack describes it: device
    type 2, the fragment's shape and dtype, no deleter. Its memory is a
    host buffer poisoned 0xD7, so that a refused path is seen to leave it
    alone."""

    def __init__(self, shape, dtype, ordinal):
        code, bits = _DL_TYPES[dtype]
        count = int(np.prod(shape)) if shape else 1
        self.host = np.full(count * bits // 8, 0xD7, np.uint8)
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = self.host.ctypes.data
        t.device = _DLDevice(2, ordinal)
        t.ndim = len(shape)
        t.dtype = _DLDataType(code, bits, 1)
        t.shape = self._shape
        self.ordinal = ordinal

    def __dlpack_device__(self):
        return (2, self.ordinal)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def untouched(self):
        return bool((self.host == 0xD7).all())


@pytest.fixture(scope="module")
def pair(tp_split_pair):
    return tp_split_pair


def _on_device(placement, part, ordinal):
    """{fragment id: FakeCudaTensor} for every fragment of `part`."""
    dtypes = {t.tensor_id: t.dtype for t in placement.tensors}
    return {f.placement_fragment_id:
            FakeCudaTensor(tuple(f.local_shape), dtypes[f.tensor_id], ordinal)
            for f in part.fragments}


def _first(fakes):
    """The fragment a refusal names: the binding's first by id."""
    return min(fakes)


def test_a_cuda_dlpack_tensor_binds_as_a_cuda_fragment(pair):
    src, _ = pair
    part = src.parts[0]
    fakes = _on_device(src, part, 3)
    binding = reshard.bind_tensors(src, part.participant_id, fakes,
                                   writable=False)
    assert sorted(f.device for f in binding.fragments) == \
        ["cuda:3"] * len(fakes)
    by_id = {f.placement_fragment_id: f for f in binding.fragments}
    for fid, fake in fakes.items():
        assert by_id[fid].address == fake.host.ctypes.data


def test_local_reshard_into_cuda_targets_is_refused_naming_the_fragment(pair):
    src, dst = pair
    sources = Buffers(src, "numpy", fill=True)
    targets = Buffers(dst, "numpy")
    targets.poison(0xD7)
    part = dst.parts[1]
    fakes = _on_device(dst, part, 1)
    given = targets.by_fragment()
    given.update(fakes)
    line = ("local executor cannot move cuda memory: target fragment "
            f"{_first(fakes)} of participant {part.participant_id} (device "
            f"\"cuda:1\"); {NO_DEVICE}")
    with pytest.raises(reshard.FailedPreconditionError) as e:
        reshard.reshard(src, sources.by_fragment(), dst, given)
    assert str(e.value) == line
    # With a plan made earlier: the same executor choice, the same line.
    with pytest.raises(reshard.FailedPreconditionError) as e:
        reshard.reshard(src, sources.by_fragment(), dst, given,
                        plan=reshard.plan(src, dst))
    assert str(e.value) == line
    assert all(f.untouched() for f in fakes.values())
    for b in targets.fragments.values():
        assert bool((b.raw.view(np.uint8) == 0xD7).all())


def test_store_upload_and_load_of_cuda_tensors_are_refused(pair, tmp_path):
    src, dst = pair
    store = reshard.WeightStore(str(tmp_path / "store"))
    part = src.parts[0]
    sources = Buffers(src, "numpy", fill=True).by_fragment()
    fakes = _on_device(src, part, 0)
    sources.update(fakes)
    with pytest.raises(reshard.FailedPreconditionError) as e:
        store.upload(src, sources)
    assert str(e.value) == (
        "store upload executor cannot move cuda memory: source fragment "
        f"{_first(fakes)} of participant {part.participant_id} (device "
        f"\"cuda:0\"); {NO_DEVICE}")
    written = [p for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert written == []

    manifest = store.upload(src, Buffers(src, "numpy", fill=True).by_fragment())
    targets = Buffers(dst, "numpy")
    targets.poison(0xD7)
    tpart = dst.parts[2]
    tfakes = _on_device(dst, tpart, 2)
    given = targets.by_fragment()
    given.update(tfakes)
    before = sorted(p for p in (tmp_path / "store").rglob("*") if p.is_file())
    with pytest.raises(reshard.FailedPreconditionError) as e:
        store.load(manifest, dst, given)
    assert str(e.value) == (
        "store load executor cannot move cuda memory: target fragment "
        f"{_first(tfakes)} of participant {tpart.participant_id} (device "
        f"\"cuda:2\"); {NO_DEVICE}")
    after = sorted(p for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert after == before  # no lease, nothing else
    assert all(f.untouched() for f in tfakes.values())
    for b in targets.fragments.values():
        assert bool((b.raw.view(np.uint8) == 0xD7).all())


def test_one_participant_is_on_one_device(pair):
    src, _ = pair
    part = src.parts[0]
    fakes = _on_device(src, part, 0)
    first, second = sorted(fakes)[:2]
    fakes[second] = _on_device(src, part, 1)[second]
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.bind_tensors(src, part.participant_id, fakes, writable=False)
    assert str(e.value).endswith(
        f"is on device cuda:1 and {first} on cuda:0: one binding is on one "
        "device")


def test_other_dlpack_devices_are_still_refused(pair):
    src, dst = pair
    part = dst.parts[0]
    fid = part.fragments[0].placement_fragment_id

    class OnRocm:
        def __dlpack_device__(self):
            return (10, 1)

        def __dlpack__(self, stream=None):
            raise AssertionError("a device tensor must not be exported")

    targets = Buffers(dst, "numpy").by_fragment()
    targets[fid] = OnRocm()
    with pytest.raises(reshard.InvalidArgumentError) as e:
        reshard.reshard(src, Buffers(src, "numpy", fill=True).by_fragment(),
                        dst, targets)
    assert str(e.value).endswith(
        f"fragment {fid}) is on device rocm:1; reshard moves host and CUDA "
        "memory only")
