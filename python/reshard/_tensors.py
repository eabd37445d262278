"""Tensor intake: caller tensors -> fragment addresses for the native core.

Anything with DLPack (``__dlpack__``/``__dlpack_device__``), the buffer
protocol or ``__array_interface__`` is accepted: torch tensors, numpy
arrays, bytearrays, memoryviews. Every tensor is checked against the
fragment it backs before the core sees its address: host memory or CUDA
memory (a torch ``cuda`` tensor or a DLPack device of type kDLCUDA becomes
a ``cuda:<ordinal>`` fragment, which the core's path moves or refuses
naming the fragment; a tensor on any other device is refused, never taken
for host memory), C-contiguous, the fragment's itemsize and, where both are
known, its dtype, exactly the fragment's byte size, and writable for
targets. Errors are ``reshard.InvalidArgumentError`` (a ``ValueError``)
naming the tensor, its participant and fragment.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from reshard import _reshard
from reshard._fused import hint_for_missing, hint_for_unknown

# Placement dtype names -> (torch dtype name, numpy dtype name). The
# placement's dtype is opaque to the planner; these are the names whose
# meaning is unambiguous, so a tensor of another known dtype is refused.
_DTYPE_NAMES = {
    "float64": ("float64", "float64"),
    "float32": ("float32", "float32"),
    "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", None),
    "int64": ("int64", "int64"),
    "int32": ("int32", "int32"),
    "int16": ("int16", "int16"),
    "int8": ("int8", "int8"),
    "uint8": ("uint8", "uint8"),
    "bool": ("bool", "bool"),
    "float8_e4m3fn": ("float8_e4m3fn", None),
    "float8_e5m2": ("float8_e5m2", None),
}
_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
            "half": "float16", "float": "float32", "double": "float64"}

# DLPack device types (dlpack.h DLDeviceType).
_DL_CPU = 1
_DL_CUDA = 2
_DL_DEVICE_NAMES = {2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan",
                    8: "metal", 9: "vpi", 10: "rocm", 11: "rocm_host",
                    13: "cuda_managed", 14: "oneapi"}


@dataclasses.dataclass(frozen=True)
class HostView:
    """A checked view of caller memory."""

    address: int
    nbytes: int
    itemsize: Optional[int]  # None: untyped bytes (a bytearray, bytes)
    dtype: Optional[str]  # canonical name when known
    keepalive: Any
    device: str = "cpu"  # or "cuda:<ordinal>" (with cuda=True only)


# float8, which neither torch 1.13 nor numpy can represent, travels in
# uint8/int8 tensors (bit patterns). (numpy's bfloat16 container, uint16,
# is not a known dtype name and so always passes; a torch int16 tensor for
# a bfloat16 fragment stays a mistake.)
_BIT_CONTAINERS = {
    "float8_e4m3fn": ("uint8", "int8"),
    "float8_e5m2": ("uint8", "int8"),
}


def _bit_container(have: str, want: str) -> bool:
    return have in _BIT_CONTAINERS.get(want, ())


def canonical_dtype(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    name = _ALIASES.get(name, name)
    return name if name in _DTYPE_NAMES else None


def _error(message: str) -> Exception:
    return _reshard.InvalidArgumentError(message)


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _torch_view(t: Any, what: str, writable: bool,
                cuda: bool = False) -> HostView:
    device = "cpu"
    if cuda and t.device.type == "cuda":
        device = f"cuda:{t.device.index or 0}"
    elif t.device.type != "cpu":
        raise _error(f"{what} is on device {t.device}; {_moves(cuda)}")
    if not t.is_contiguous():
        raise _error(f"{what} is not contiguous (strides {tuple(t.stride())} "
                     f"for shape {tuple(t.shape)}); pass .contiguous()")
    if t.is_sparse if hasattr(t, "is_sparse") else False:
        raise _error(f"{what} is a sparse tensor")
    if t.is_conj() if hasattr(t, "is_conj") else False:
        raise _error(f"{what} has an unresolved conjugate bit")
    if t.is_neg() if hasattr(t, "is_neg") else False:
        raise _error(f"{what} has an unresolved negative bit")
    dtype = str(t.dtype).replace("torch.", "")
    return HostView(t.data_ptr(), t.numel() * t.element_size(),
                    t.element_size(), canonical_dtype(dtype), t, device)


def _numpy_view(a: np.ndarray, what: str, writable: bool) -> HostView:
    if not a.flags.c_contiguous:
        raise _error(f"{what} is not contiguous (strides {a.strides} for "
                     f"shape {a.shape}); pass numpy.ascontiguousarray(...)")
    if writable and not a.flags.writeable:
        raise _error(f"{what} is read-only; a target must be writable")
    address = a.__array_interface__["data"][0]
    return HostView(address, a.nbytes, a.itemsize,
                    canonical_dtype(a.dtype.name), a)


def _dlpack_view(obj: Any, what: str, cuda: bool = False) -> HostView:
    # Read from the capsule (DLPack has no read-only flag; producers such as
    # numpy refuse to export read-only memory).
    v = _reshard.dlpack_view(obj, what)
    _require_host(v["device_type"], v["device_id"], what, cuda)
    if not v["contiguous"]:
        raise _error(f"{what} is not contiguous")
    return HostView(v["address"], v["nbytes"], v["itemsize"],
                    canonical_dtype(v["dtype"] or None), (obj, v["keepalive"]),
                    v["device"])


def _moves(cuda: bool) -> str:
    return ("reshard moves host and CUDA memory only" if cuda else
            "this build moves host memory only")


def _require_host(device_type: int, device_id: int, what: str,
                  cuda: bool = False) -> None:
    """Refuses memory on a DLPack device other than the CPU (and CUDA,
    with `cuda`)."""
    if device_type != _DL_CPU and not (cuda and device_type == _DL_CUDA):
        name = _DL_DEVICE_NAMES.get(device_type, f"type {device_type}")
        raise _error(f"{what} is on device {name}:{device_id}; "
                     f"{_moves(cuda)}")


def _dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    probe = getattr(obj, "__dlpack_device__", None)
    if probe is None:
        return None
    device = probe()
    return int(device[0]), int(device[1])


def host_view(obj: Any, what: str, writable: bool,
              cuda: bool = False) -> HostView:
    """Checks `obj` is contiguous host memory (or CUDA memory, with `cuda`)
    and returns where it is."""
    if _is_torch(obj):
        return _torch_view(obj, what, writable, cuda)
    if isinstance(obj, np.ndarray):
        return _numpy_view(obj, what, writable)
    device = _dlpack_device(obj)
    if device is not None:
        _require_host(device[0], device[1], what, cuda)
    if device is not None and hasattr(obj, "__dlpack__"):
        return _dlpack_view(obj, what, cuda)
    if hasattr(obj, "__array_interface__"):
        return _numpy_view(np.asarray(obj), what, writable)
    try:
        view = memoryview(obj)
    except TypeError:
        raise _error(f"{what} is a {type(obj).__name__}, not a tensor: pass "
                     "a torch tensor, a numpy array or an object with DLPack, "
                     "the buffer protocol or __array_interface__") from None
    if writable and view.readonly:
        raise _error(f"{what} is read-only; a target must be writable")
    if not view.c_contiguous:
        raise _error(f"{what} is not contiguous")
    # numpy finds the address of any contiguous buffer without a copy; a
    # byte buffer (format B, b or c) is untyped.
    flat = np.frombuffer(view.cast("B") if view.ndim != 1 or view.itemsize != 1
                         else view, dtype=np.uint8)
    typed = view.format not in ("B", "b", "c")
    return HostView(flat.__array_interface__["data"][0], view.nbytes,
                    view.itemsize if typed else None, None, (obj, flat))


@dataclasses.dataclass(frozen=True)
class _Fragment:
    participant_id: str
    placement_fragment_id: str
    tensor_id: str
    local_shape: Tuple[int, ...]
    nbytes: int
    dtype: str
    itemsize: int


@dataclasses.dataclass(frozen=True)
class _Index:
    by_id: Dict[str, _Fragment]
    # participant -> tensor id -> its fragments of that tensor
    by_participant: Dict[str, Dict[str, Tuple[_Fragment, ...]]]


@functools.lru_cache(maxsize=16)
def _index_of_digest(digest: str, placement) -> _Index:
    del digest  # the cache key: equal digests are equal placements
    by_id: Dict[str, _Fragment] = {}
    by_participant: Dict[str, Dict[str, Tuple[_Fragment, ...]]] = {}
    descriptors = {t.tensor_id: t for t in placement.tensors}
    for part in placement.parts:
        tensors: Dict[str, list] = {}
        for f in part.fragments:
            desc = descriptors[f.tensor_id]
            frag = _Fragment(part.participant_id, f.placement_fragment_id,
                             f.tensor_id, f.local_shape, f.nbytes, desc.dtype,
                             desc.itemsize)
            by_id[frag.placement_fragment_id] = frag
            tensors.setdefault(f.tensor_id, []).append(frag)
        by_participant[part.participant_id] = {
            k: tuple(v) for k, v in tensors.items()}
    return _Index(by_id, by_participant)


def _index(placement) -> _Index:
    """Every fragment of `placement` by id and by (participant, tensor),
    built once per placement content."""
    return _index_of_digest(placement.digest, placement)


def fragment_views(placement, tensors: Mapping, side: str,
                   writable: bool) -> Tuple[Dict[str, Dict[str, int]], list]:
    """Resolves `tensors` to {participant: {fragment id: address}}.

    `tensors` is either {placement fragment id: tensor} or
    {participant id: {tensor id or placement fragment id: tensor}}; a
    tensor id names the participant's one fragment of that tensor.
    Returns the addresses and the objects that must stay alive.
    """
    if not isinstance(tensors, Mapping):
        raise _error(f"{side} tensors must be a mapping, got "
                     f"{type(tensors).__name__}")
    index = _index(placement)
    out: Dict[str, Dict[str, int]] = {}
    keep = []
    for key, value in tensors.items():
        if isinstance(value, Mapping):
            if key not in index.by_participant:
                raise _error(f"{side} tensors name participant '{key}', which "
                             "is not in the placement")
            for name, tensor in value.items():
                frag = _fragment_of(index, key, name, side)
                _add(out, keep, frag, tensor, side, writable)
        else:
            frag = index.by_id.get(key)
            if frag is None:
                raise _error(f"{side} tensors name fragment '{key}', which is "
                             "not in the placement")
            _add(out, keep, frag, value, side, writable)
    _require_whole_participants(index, out, side)
    return out, keep


def _require_whole_participants(index: _Index, out, side: str) -> None:
    """Every participant given must be given all its fragments (a binding
    covers a whole participant); a missing tensor whose fused or unfused
    form was given says so."""
    for participant, given in out.items():
        tensors = index.by_participant[participant]
        for name, frags in sorted(tensors.items()):
            lacking = [f for f in frags if f.placement_fragment_id not in given]
            if not lacking:
                continue
            given_names = {index.by_id[fid].tensor_id for fid in given}
            hint = hint_for_missing(name, given_names)
            raise _error(f"{side} tensors of participant '{participant}' "
                         f"lack tensor '{name}' (fragment "
                         f"{lacking[0].placement_fragment_id}){hint}")


def _fragment_of(index: _Index, participant: str, name: str,
                 side: str) -> _Fragment:
    frag = index.by_id.get(name)
    if frag is not None and frag.participant_id == participant:
        return frag
    of_tensor = index.by_participant[participant].get(name, ())
    if not of_tensor:
        hint = hint_for_unknown(name, index.by_participant[participant])
        raise _error(f"{side} tensor '{name}' of participant "
                     f"'{participant}' matches no fragment of it{hint}")
    if len(of_tensor) > 1:
        raise _error(f"{side} tensor '{name}' of participant "
                     f"'{participant}' has {len(of_tensor)} fragments; "
                     "key them by placement fragment id")
    return of_tensor[0]


def _add(out, keep, frag: _Fragment, tensor, side: str,
         writable: bool) -> None:
    what = (f"{side} tensor '{frag.tensor_id}' (participant "
            f"'{frag.participant_id}', fragment {frag.placement_fragment_id})")
    if frag.placement_fragment_id in out.get(frag.participant_id, {}):
        raise _error(f"{what} is given more than once")
    view = host_view(tensor, what, writable, cuda=True)
    if view.itemsize is not None and view.itemsize != frag.itemsize:
        raise _error(f"{what} has itemsize {view.itemsize}; the placement "
                     f"declares {frag.dtype} with itemsize {frag.itemsize}")
    want = canonical_dtype(frag.dtype)
    if want is not None and view.dtype is not None and view.dtype != want \
            and not _bit_container(view.dtype, want):
        raise _error(f"{what} has dtype {view.dtype}; the placement declares "
                     f"{frag.dtype}")
    if view.nbytes < frag.nbytes:
        raise _error(f"{what} is too small: {view.nbytes} bytes for a "
                     f"fragment of {frag.nbytes} bytes (shape "
                     f"{frag.local_shape})")
    if view.nbytes > frag.nbytes:
        raise _error(f"{what} is larger than its fragment: {view.nbytes} "
                     f"bytes for {frag.nbytes} (shape {frag.local_shape})")
    if view.address == 0:
        raise _error(f"{what} has no storage (address 0)")
    # Device memory travels with its device: the core binds the
    # participant there (one device per participant).
    out.setdefault(frag.participant_id, {})[frag.placement_fragment_id] = \
        view.address if view.device == "cpu" else (view.address, view.device)
    keep.append(view.keepalive)
