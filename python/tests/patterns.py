"""Tensors of a placement filled from the global element index, and checks.

Every element of a tensor gets a bit pattern derived from its global
row-major linear index and from the tensor (its alias group, so tied
tensors agree), of the tensor's itemsize. A source layout filled this way
and resharded into any target layout must give every target element the
pattern of its own global index: `verify` checks every element of every
target fragment and names the first wrong one.

Tensors are allocated as torch tensors or numpy arrays of the placement's
dtype. Where the library has no such dtype (torch 1.13 has no float8;
numpy has neither bfloat16 nor float8) the fragment is backed by memory of
the same itemsize that the intake accepts: numpy uint16 for bfloat16, and
an untyped byte view (a memoryview of the torch or numpy storage) for
float8.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import zlib
from typing import Any, Dict, Iterable, Optional

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - torch is part of the test image
    torch = None

# The scenario placements of tests/data (ctest sets RESHARD_TEST_DATA).
SCENARIO_DIR = pathlib.Path(os.environ.get("RESHARD_TEST_DATA",
                                           "tests/data")) / "scenarios"

UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
# Largest primes below 2**8, 2**16 and 2**32.
PRIME = {1: 251, 2: 65521, 4: 4294967291}
# Elements computed at once when filling or checking a large fragment.
CHUNK_ELEMENTS = 1 << 22

NUMPY_DTYPES = {
    "float64": np.float64, "float32": np.float32, "float16": np.float16,
    "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
    "uint8": np.uint8, "bool": np.bool_, "bfloat16": np.uint16,
}


def torch_dtype(name: str):
    """The torch dtype of a placement dtype name, or None if torch lacks it."""
    return getattr(torch, name, None) if torch is not None else None


def _salt(desc, fragment_aliases: Iterable[str], prime: int) -> int:
    group = min([desc.tensor_id, *fragment_aliases])
    return zlib.crc32(group.encode()) % prime


def global_index(global_shape, offset, shape, row_start: int = 0,
                 row_stop: Optional[int] = None) -> np.ndarray:
    """Global row-major linear index of every element of the box
    `offset`/`shape`, restricted to rows [row_start, row_stop) of dim 0."""
    ndim = len(shape)
    if ndim == 0:
        return np.zeros((), np.uint64)
    strides = [1] * ndim
    for d in range(ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * global_shape[d + 1]
    row_stop = shape[0] if row_stop is None else row_stop
    local = [row_stop - row_start, *shape[1:]]
    idx = np.zeros(local, np.uint64)
    for d in range(ndim):
        start = offset[d] + (row_start if d == 0 else 0)
        axis = np.arange(start, start + local[d], dtype=np.uint64)
        view = [1] * ndim
        view[d] = local[d]
        idx += axis.reshape(view) * np.uint64(strides[d])
    return idx


def pattern(desc, aliases, idx: np.ndarray) -> np.ndarray:
    """The bit pattern (unsigned ints of the tensor's itemsize, or bytes for
    other itemsizes, as a trailing axis) of the elements at `idx`."""
    k = desc.itemsize
    if desc.dtype == "bool":
        return ((idx + np.uint64(_salt(desc, aliases, 2))) % np.uint64(2)
                ).astype(np.uint8)
    if k in (1, 2, 4):
        p = np.uint64(PRIME[k])
        mult = np.uint64({1: 1, 2: 3, 4: 40503}[k])
        salt = np.uint64(_salt(desc, aliases, PRIME[k]))
        return ((idx % p) * mult % p + salt) % p
    if k == 8:
        p = np.uint64(PRIME[4])
        salt = np.uint64(_salt(desc, aliases, PRIME[4]))
        lo = (idx % p + salt) % p
        hi = (idx * np.uint64(7) % p + np.uint64(1)) % p
        return lo | (hi << np.uint64(32))
    b = np.arange(k, dtype=np.uint64)
    salt = np.uint64(_salt(desc, aliases, 251))
    return ((idx[..., None] * np.uint64(k) + b) * np.uint64(131) + salt) % \
        np.uint64(251)


@dataclasses.dataclass
class Fragment:
    """One allocated fragment: `obj` goes to the library, `raw` is an
    unsigned-int numpy view of the same memory (shape local_shape, plus a
    byte axis for itemsizes without an integer type)."""

    participant_id: str
    fragment: Any
    desc: Any
    obj: Any
    raw: np.ndarray


def _untyped(storage: np.ndarray, shape, k: int):
    """`storage` of shape (*shape, k) bytes as an untyped memoryview, and
    its raw view."""
    raw = storage.view(UNSIGNED[k]).reshape(tuple(shape)) if k in UNSIGNED \
        else storage
    return memoryview(storage), raw


def _allocate(desc, shape, lib: str):
    k = desc.itemsize
    if lib == "torch":
        dt = torch_dtype(desc.dtype)
        if dt is not None and k in UNSIGNED:
            t = torch.zeros(tuple(shape), dtype=dt)
            signed = getattr(torch, np.dtype(SIGNED[k]).name)
            return t, t.view(signed).numpy().view(UNSIGNED[k])
        # No torch dtype: the bytes of a torch uint8 tensor, untyped.
        return _untyped(torch.zeros((*shape, k), dtype=torch.uint8).numpy(),
                        shape, k)
    if lib == "numpy":
        dt = NUMPY_DTYPES.get(desc.dtype)
        if dt is not None and np.dtype(dt).itemsize == k:
            a = np.zeros(tuple(shape), dtype=dt)
            return a, a.view(UNSIGNED[k])
        return _untyped(np.zeros((*shape, k), dtype=np.uint8), shape, k)
    raise ValueError(f"unknown tensor library {lib!r}")


class Buffers:
    """Every fragment of `placement` allocated with `lib` ("torch" or
    "numpy"), zeroed, or filled with the pattern when `fill` is set."""

    def __init__(self, placement, lib: str = "torch", fill: bool = False,
                 participants: Optional[Iterable[str]] = None) -> None:
        self.placement = placement
        self.lib = lib
        self.fragments: Dict[str, Fragment] = {}
        wanted = set(participants) if participants is not None else None
        for part in placement.parts:
            if wanted is not None and part.participant_id not in wanted:
                continue
            for f in part.fragments:
                desc = placement.find_tensor(f.tensor_id)
                obj, raw = _allocate(desc, f.local_shape, lib)
                self.fragments[f.placement_fragment_id] = Fragment(
                    part.participant_id, f, desc, obj, raw)
        if fill:
            self.fill()

    def by_fragment(self) -> Dict[str, Any]:
        """{placement fragment id: tensor}."""
        return {fid: b.obj for fid, b in self.fragments.items()}

    def by_participant(self) -> Dict[str, Dict[str, Any]]:
        """{participant: {tensor id: tensor}}, keyed by placement fragment id
        where a participant holds several fragments of one tensor."""
        count: Dict[tuple, int] = {}
        for b in self.fragments.values():
            key = (b.participant_id, b.fragment.tensor_id)
            count[key] = count.get(key, 0) + 1
        out: Dict[str, Dict[str, Any]] = {}
        for fid, b in self.fragments.items():
            key = (b.participant_id, b.fragment.tensor_id)
            name = b.fragment.tensor_id if count[key] == 1 else fid
            out.setdefault(b.participant_id, {})[name] = b.obj
        return out

    def _chunks(self, b: Fragment):
        shape = b.fragment.local_shape
        if not shape:
            yield 0, None, global_index(b.desc.global_shape,
                                        b.fragment.global_offset, shape)
            return
        row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
        step = max(1, CHUNK_ELEMENTS // row)
        for start in range(0, shape[0], step):
            stop = min(shape[0], start + step)
            yield start, stop, global_index(
                b.desc.global_shape, b.fragment.global_offset, shape,
                start, stop)

    def fill(self) -> None:
        """Writes the pattern into every fragment."""
        for b in self.fragments.values():
            for start, stop, idx in self._chunks(b):
                bits = pattern(b.desc, b.fragment.aliases, idx)
                if stop is None:
                    b.raw[...] = bits.astype(b.raw.dtype)
                else:
                    b.raw[start:stop] = bits.astype(b.raw.dtype)

    def poison(self, byte: int = 0xD7) -> None:
        """Overwrites every byte of every fragment with `byte`."""
        for b in self.fragments.values():
            b.raw.view(np.uint8)[...] = byte

    def mismatch(self) -> str:
        """'' when every element of every fragment holds its pattern, else
        the first wrong element: fragment, tensor, index, expected, got."""
        for fid, b in self.fragments.items():
            for start, stop, idx in self._chunks(b):
                want = pattern(b.desc, b.fragment.aliases, idx).astype(
                    b.raw.dtype)
                got = b.raw if stop is None else b.raw[start:stop]
                bad = np.argwhere(got != want)
                if bad.size:
                    at = tuple(int(i) for i in bad[0])
                    local = (at[0] + start, *at[1:]) if stop is not None \
                        else at
                    return (f"fragment {fid} of tensor "
                            f"'{b.fragment.tensor_id}' (participant "
                            f"'{b.participant_id}') element {local}: "
                            f"expected {want[at]:#x}, got {got[at]:#x}")
        return ""

    @property
    def nbytes(self) -> int:
        return sum(b.fragment.nbytes for b in self.fragments.values())


def split_placement(tensor_id: str, global_shape, dtype: str, itemsize: int,
                    tp: int, dim: int, set_id: str, *,
                    resource_id: str = "split-model", revision: str = "r1"):
    """One tensor split along `dim` over `tp` tensor-parallel ranks, built
    from Python parts (participant ``t<rank>``)."""
    import reshard

    assert global_shape[dim] % tp == 0
    desc = reshard.TensorDescriptor(
        tensor_id, list(global_shape), dtype, itemsize, shard_dims=[dim],
        parallel_axes=[reshard.SplitAxis("tp", dim)])
    participants = [reshard.TopologyParticipant(f"t{r}",
                                                reshard.ParallelRank(tp=r))
                    for r in range(tp)]
    topology = reshard.ParallelTopology(tp_size=tp, participants=participants)
    step = global_shape[dim] // tp
    fragments = []
    for r in range(tp):
        offset = [0] * len(global_shape)
        offset[dim] = r * step
        shape = list(global_shape)
        shape[dim] = step
        nbytes = itemsize * int(np.prod(shape, dtype=np.int64))
        fragments.append(reshard.PlacementFragment(
            tensor_id, offset, shape, nbytes, reshard.ParallelRank(tp=r)))
    return reshard.WeightPlacementManifest.from_fragments(
        resource_id, revision, 1, set_id, topology, [desc], fragments)


def load_scenario(name: str):
    """The placement of scenario file `name` (tests/data/scenarios)."""
    import reshard

    return reshard.Placement.from_json(
        (SCENARIO_DIR / name).read_text("utf-8"))
