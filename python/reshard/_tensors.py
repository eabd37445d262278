"""Tensor intake: caller tensors -> fragment addresses for the native core.

Anything with DLPack (``__dlpack__``/``__dlpack_device__``), the buffer
protocol or ``__array_interface__`` is accepted: torch tensors, numpy
arrays, bytearrays, memoryviews. Every tensor is checked against the
fragment it backs before the core sees its address: host memory (a
tensor on a device this build cannot move is refused, never taken for
host memory), C-contiguous, the fragment's itemsize and, where both are
known, its dtype, exactly the fragment's byte size, and writable for
targets. Errors are ``reshard.InvalidArgumentError`` (a ``ValueError``)
naming the tensor, its participant and fragment.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from reshard import _reshard

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


def canonical_dtype(name: Optional[str]) -> Optional[str]:
    if name is None:
        return None
    name = _ALIASES.get(name, name)
    return name if name in _DTYPE_NAMES else None


def _error(message: str) -> Exception:
    return _reshard.InvalidArgumentError(message)


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _torch_view(t: Any, what: str, writable: bool) -> HostView:
    if t.device.type != "cpu":
        raise _error(f"{what} is on device {t.device}; this build moves host "
                     "memory only")
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
                    t.element_size(), canonical_dtype(dtype), t)


def _numpy_view(a: np.ndarray, what: str, writable: bool) -> HostView:
    if not a.flags.c_contiguous:
        raise _error(f"{what} is not contiguous (strides {a.strides} for "
                     f"shape {a.shape}); pass numpy.ascontiguousarray(...)")
    if writable and not a.flags.writeable:
        raise _error(f"{what} is read-only; a target must be writable")
    address = a.__array_interface__["data"][0]
    return HostView(address, a.nbytes, a.itemsize,
                    canonical_dtype(a.dtype.name), a)


def _dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    probe = getattr(obj, "__dlpack_device__", None)
    if probe is None:
        return None
    device = probe()
    return int(device[0]), int(device[1])


def host_view(obj: Any, what: str, writable: bool) -> HostView:
    """Checks `obj` is contiguous host memory and returns where it is."""
    if _is_torch(obj):
        return _torch_view(obj, what, writable)
    if isinstance(obj, np.ndarray):
        return _numpy_view(obj, what, writable)
    device = _dlpack_device(obj)
    if device is not None and device[0] != _DL_CPU:
        name = _DL_DEVICE_NAMES.get(device[0], f"type {device[0]}")
        raise _error(f"{what} is on device {name}:{device[1]}; this build "
                     "moves host memory only")
    if device is not None and hasattr(obj, "__dlpack__"):
        return _numpy_view(np.from_dlpack(obj), what, writable)
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
    out: Dict[str, Dict[str, int]] = {}
    keep = []
    for key, value in tensors.items():
        if isinstance(value, Mapping):
            part = placement.find_part(key)
            if part is None:
                raise _error(f"{side} tensors name participant '{key}', which "
                             "is not in the placement")
            for name, tensor in value.items():
                frag = _fragment_of(part, name, side)
                _add(out, keep, placement, part.participant_id, frag, tensor,
                     side, writable)
        else:
            frag = placement.find_fragment(key)
            if frag is None:
                raise _error(f"{side} tensors name fragment '{key}', which is "
                             "not in the placement")
            owner = _owner_of(placement, key)
            _add(out, keep, placement, owner, frag, value, side, writable)
    return out, keep


def _fragment_of(part, name: str, side: str):
    by_id = [f for f in part.fragments if f.placement_fragment_id == name]
    if by_id:
        return by_id[0]
    of_tensor = [f for f in part.fragments if f.tensor_id == name]
    if not of_tensor:
        raise _error(f"{side} tensor '{name}' of participant "
                     f"'{part.participant_id}' matches no fragment of it")
    if len(of_tensor) > 1:
        raise _error(f"{side} tensor '{name}' of participant "
                     f"'{part.participant_id}' has {len(of_tensor)} fragments; "
                     "key them by placement fragment id")
    return of_tensor[0]


def _owner_of(placement, fragment_id: str) -> str:
    for part in placement.parts:
        for f in part.fragments:
            if f.placement_fragment_id == fragment_id:
                return part.participant_id
    raise _error(f"fragment '{fragment_id}' belongs to no part")


def _add(out, keep, placement, participant: str, frag, tensor, side: str,
         writable: bool) -> None:
    what = (f"{side} tensor '{frag.tensor_id}' (participant '{participant}', "
            f"fragment {frag.placement_fragment_id})")
    if frag.placement_fragment_id in out.get(participant, {}):
        raise _error(f"{what} is given more than once")
    view = host_view(tensor, what, writable)
    desc = placement.find_tensor(frag.tensor_id)
    if view.itemsize is not None and view.itemsize != desc.itemsize:
        raise _error(f"{what} has itemsize {view.itemsize}; the placement "
                     f"declares {desc.dtype} with itemsize {desc.itemsize}")
    want = canonical_dtype(desc.dtype)
    if want is not None and view.dtype is not None and view.dtype != want:
        raise _error(f"{what} has dtype {view.dtype}; the placement declares "
                     f"{desc.dtype}")
    if view.nbytes < frag.nbytes:
        raise _error(f"{what} is too small: {view.nbytes} bytes for a "
                     f"fragment of {frag.nbytes} bytes (shape "
                     f"{frag.local_shape})")
    if view.nbytes > frag.nbytes:
        raise _error(f"{what} is larger than its fragment: {view.nbytes} "
                     f"bytes for {frag.nbytes} (shape {frag.local_shape})")
    if view.address == 0:
        raise _error(f"{what} has no storage (address 0)")
    out.setdefault(participant, {})[frag.placement_fragment_id] = view.address
    keep.append(view.keepalive)
