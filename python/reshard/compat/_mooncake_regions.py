"""Transfer regions of the mooncake compat layer: the reference's
``TransferRegion`` (one overlap box copied from a source to a target
fragment, checked on construction: rule 46) and its canonical loop
geometry (``region_geometry``: outer loops never merged). The planner
(``_mooncake_planner.py``) builds them from the native plan's regions.
"""

import math
from dataclasses import dataclass
from typing import Generic, Tuple, TypeVar

_SourceT = TypeVar("_SourceT")
_TargetT = TypeVar("_TargetT")


# ---------------------------------------------------------------- geometry


def fragment_itemsize(fragment):
    """nbytes / number of elements of a fragment (exact, >= 1)."""
    elements = math.prod(fragment.local_shape)
    if elements <= 0 or fragment.nbytes % elements != 0:
        raise ValueError("transfer region fragment byte size is invalid")
    return fragment.nbytes // elements


def region_geometry(source, target, overlap_offset, overlap_shape, itemsize):
    """The canonical loop geometry of the overlap box of two row-major
    contiguous fragments: (source_base_offset, target_base_offset,
    inner_bytes, outer_loop_counts, source_strides, target_strides).

    The contiguous suffix merges dimension d into inner_bytes while both
    sides' byte stride of d equals the bytes merged so far; the remaining
    leading dimensions are the outer loops, one per dimension (extent-1
    dimensions included), never merged with each other."""
    ndim = len(overlap_shape)
    s_shape, t_shape = source.local_shape, target.local_shape
    s_off, t_off = source.global_offset, target.global_offset
    s_strides = [0] * ndim
    t_strides = [0] * ndim
    s_base = t_base = 0
    s_run = t_run = itemsize
    for d in range(ndim - 1, -1, -1):
        s_strides[d] = s_run
        t_strides[d] = t_run
        s_base += (overlap_offset[d] - s_off[d]) * s_run
        t_base += (overlap_offset[d] - t_off[d]) * t_run
        s_run *= s_shape[d]
        t_run *= t_shape[d]
    first = ndim - 1
    inner = overlap_shape[-1] * itemsize
    for d in range(ndim - 2, -1, -1):
        if s_strides[d] != inner or t_strides[d] != inner:
            break
        inner *= overlap_shape[d]
        first = d
    return (s_base, t_base, inner, tuple(overlap_shape[:first]),
            tuple(s_strides[:first]), tuple(t_strides[:first]))


def _contains(offset, shape, inner_offset, inner_shape):
    return all(o <= io and io + ie <= o + e for o, e, io, ie in
               zip(offset, shape, inner_offset, inner_shape))


def _check_outer_strides(counts, strides, inner, side):
    span = inner
    for count, stride in zip(reversed(counts), reversed(strides)):
        if count > 1 and stride < span:
            raise ValueError(f"transfer region {side} strides overlap")
        span += (count - 1) * stride


_INT_TUPLES = ("overlap_offset", "overlap_shape", "outer_loop_counts",
               "source_strides", "target_strides")


@dataclass(frozen=True)
class TransferRegion(Generic[_SourceT, _TargetT]):
    """One overlap box copied from `source` to `target` (fragments with
    tensor_id, global_offset, local_shape, nbytes): `inner_bytes` contiguous
    on both sides, repeated over the outer loops (last loop fastest) from
    the base byte offsets. Construction checks rule 46, including that the
    geometry is the canonical one for the overlap."""

    tensor_id: str
    source: _SourceT
    target: _TargetT
    overlap_offset: Tuple[int, ...]
    overlap_shape: Tuple[int, ...]
    source_base_offset: int
    target_base_offset: int
    inner_bytes: int
    outer_loop_counts: Tuple[int, ...]
    source_strides: Tuple[int, ...]
    target_strides: Tuple[int, ...]

    def __post_init__(self):
        for name in _INT_TUPLES:
            value = getattr(self, name)
            try:
                if isinstance(value, (str, bytes, bytearray)):
                    raise TypeError
                value = tuple(value)
            except TypeError as error:
                raise ValueError(
                    f"transfer region {name} must contain integers") from error
            if any(type(v) is not int for v in value):
                raise ValueError(
                    f"transfer region {name} must contain integers")
            object.__setattr__(self, name, value)
        if not self.tensor_id:
            raise ValueError("transfer region tensor_id must not be empty")
        self._check_boxes()
        self._check_scalars()
        self._check_geometry()

    def _check_boxes(self):
        if (self.source.tensor_id != self.tensor_id
                or self.target.tensor_id != self.tensor_id):
            raise ValueError("transfer region tensor mismatch")
        ndim = len(self.overlap_offset)
        if (ndim == 0 or len(self.overlap_shape) != ndim
                or len(self.source.global_offset) != ndim
                or len(self.target.global_offset) != ndim):
            raise ValueError("transfer region logical rank mismatch")
        if (any(o < 0 for o in self.overlap_offset)
                or any(e <= 0 for e in self.overlap_shape)):
            raise ValueError("transfer region logical box is invalid")
        for side in ("source", "target"):
            f = getattr(self, side)
            if not _contains(f.global_offset, f.local_shape,
                             self.overlap_offset, self.overlap_shape):
                raise ValueError(
                    f"transfer region exceeds {side} logical fragment")

    def _check_scalars(self):
        for name in ("source_base_offset", "target_base_offset",
                     "inner_bytes"):
            if type(getattr(self, name)) is not int:
                raise ValueError(f"transfer region {name} must be an integer")
        if self.source_base_offset < 0 or self.target_base_offset < 0:
            raise ValueError(
                "transfer region base offsets must be non-negative")
        if self.inner_bytes <= 0:
            raise ValueError("transfer region inner_bytes must be positive")
        if not (len(self.outer_loop_counts) == len(self.source_strides)
                == len(self.target_strides)):
            raise ValueError("transfer region outer loop rank mismatch")
        if any(c <= 0 for c in self.outer_loop_counts):
            raise ValueError(
                "transfer region outer loop counts must be positive")
        if (any(s < 0 for s in self.source_strides)
                or any(s < 0 for s in self.target_strides)):
            raise ValueError("transfer region strides must be non-negative")

    def _check_geometry(self):
        itemsize = fragment_itemsize(self.source)
        if fragment_itemsize(self.target) != itemsize:
            raise ValueError(
                "transfer region source and target itemsize differ")
        s_base, t_base, inner, counts, s_strides, t_strides = region_geometry(
            self.source, self.target, self.overlap_offset, self.overlap_shape,
            itemsize)
        if self.total_bytes != math.prod(self.overlap_shape) * itemsize:
            raise ValueError(
                "transfer region loop geometry does not match overlap")
        if self.source_base_offset != s_base:
            raise ValueError(
                "transfer region source base offset is inconsistent")
        if self.target_base_offset != t_base:
            raise ValueError(
                "transfer region target base offset is inconsistent")
        if (self.inner_bytes, self.outer_loop_counts, self.source_strides,
                self.target_strides) != (inner, counts, s_strides, t_strides):
            raise ValueError("transfer region loop geometry is not canonical")
        _check_outer_strides(self.outer_loop_counts, self.source_strides,
                             self.inner_bytes, "source")
        _check_outer_strides(self.outer_loop_counts, self.target_strides,
                             self.inner_bytes, "target")
        self.validate_bounds()

    @property
    def segment_count(self):
        """Product of the outer loop counts (1 without outer loops)."""
        return math.prod(self.outer_loop_counts)

    @property
    def total_bytes(self):
        """inner_bytes * segment_count."""
        return self.inner_bytes * self.segment_count

    @property
    def source_offset(self):
        """Legacy name of source_base_offset."""
        return self.source_base_offset

    @property
    def target_offset(self):
        """Legacy name of target_base_offset."""
        return self.target_base_offset

    @property
    def nbytes(self):
        """Legacy name of inner_bytes (bytes per segment)."""
        return self.inner_bytes

    @property
    def repeat(self):
        """Legacy name of segment_count."""
        return self.segment_count

    @property
    def source_stride(self):
        """The one source stride (0 without outer loops); ValueError for
        more than one outer loop."""
        return self._single_stride(self.source_strides, "source")

    @property
    def target_stride(self):
        """The one target stride (0 without outer loops); ValueError for
        more than one outer loop."""
        return self._single_stride(self.target_strides, "target")

    @staticmethod
    def _single_stride(strides, side):
        if not strides:
            return 0
        if len(strides) == 1:
            return strides[0]
        raise ValueError(f"N-D transfer region has multiple {side} strides")

    def validate_bounds(self):
        """Checks that the last byte touched lies inside both fragments."""
        for side, base, strides in (
                ("source", self.source_base_offset, self.source_strides),
                ("target", self.target_base_offset, self.target_strides)):
            end = base + self.inner_bytes + sum(
                (c - 1) * s for c, s in zip(self.outer_loop_counts, strides))
            if end > getattr(self, side).nbytes:
                raise ValueError(f"transfer region exceeds {side} fragment")

    def iter_segments(self, *, max_segments):
        """Yields (source offset, target offset, nbytes) per segment, the
        last outer loop fastest. A generator: on first use it refuses a
        region of more than `max_segments` segments before yielding
        anything; there is no unbounded expansion."""
        if type(max_segments) is not int or max_segments <= 0:
            raise ValueError("max_segments must be a positive integer")
        if self.segment_count > max_segments:
            raise ValueError("transfer region exceeds max_segments: "
                             f"{self.segment_count} > {max_segments}")
        counts = self.outer_loop_counts
        index = [0] * len(counts)
        while True:
            yield (self.source_base_offset + sum(
                i * s for i, s in zip(index, self.source_strides)),
                   self.target_base_offset + sum(
                       i * s for i, s in zip(index, self.target_strides)),
                   self.inner_bytes)
            d = len(counts) - 1
            while d >= 0:
                index[d] += 1
                if index[d] < counts[d]:
                    break
                index[d] = 0
                d -= 1
            if d < 0:
                return


# The reference's operation type is the region type.
LogicalTransferOperation = TransferRegion
LogicalTransferRegion = TransferRegion


_REGION_FIELDS = ("tensor_id", "source", "target", "overlap_offset",
                  "overlap_shape", "source_base_offset", "target_base_offset",
                  "inner_bytes", "outer_loop_counts", "source_strides",
                  "target_strides")


def _region(tensor_id, source, target, overlap_offset, overlap_shape,
            itemsize):
    """A canonical region built without re-validation (planner output)."""
    region = object.__new__(TransferRegion)
    # A frozen dataclass without slots keeps its fields in __dict__.
    region.__dict__.update(zip(_REGION_FIELDS, (
        tensor_id, source, target, tuple(overlap_offset),
        tuple(overlap_shape)) + region_geometry(
            source, target, overlap_offset, overlap_shape, itemsize)))
    return region
