"""Hints for tensor names that a fused parameter covers.

Engines fuse projections that training code keeps apart (q, k and v into
``qkv_proj``; gate and up into ``gate_up_proj``, ``w13`` or ``fc1``). A
tensor looked up under one form while the placement (or the tensors given)
has the other is a naming mismatch, not a missing weight; these helpers
say so. The rule is general: a dotted name segment of a known family
(``q_proj``) and the same name with the family's other form in that
segment (``qkv_proj``).
"""

from __future__ import annotations

from typing import Collection, List, Sequence, Tuple

# (unfused members, fused forms): one family per fusion engines use.
FAMILIES: Tuple[Tuple[Tuple[str, ...], Tuple[str, ...]], ...] = (
    (("q_proj", "k_proj", "v_proj"), ("qkv_proj",)),
    (("gate_proj", "up_proj"), ("gate_up_proj", "fc1")),
    (("w1", "w3"), ("w13",)),
)


def _replace(segments: Sequence[str], i: int, new: str) -> str:
    return ".".join(list(segments[:i]) + [new] + list(segments[i + 1:]))


def _fused_of(name: str, known: Collection[str]) -> List[Tuple[str, str]]:
    """[(fused name in `known`, member)] for an unfused `name`."""
    segments = name.split(".")
    out = []
    for i, segment in enumerate(segments):
        for members, fused in FAMILIES:
            if segment in members:
                out += [(_replace(segments, i, f), segment) for f in fused
                        if _replace(segments, i, f) in known]
    return out


def _members_of(name: str, known: Collection[str]) -> List[str]:
    """The unfused names in `known` a fused `name` covers."""
    segments = name.split(".")
    for i, segment in enumerate(segments):
        for members, fused in FAMILIES:
            if segment in fused:
                have = [_replace(segments, i, m) for m in members
                        if _replace(segments, i, m) in known]
                if have:
                    return have
    return []


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def hint_for_unknown(name: str, placement_names: Collection[str]) -> str:
    """A hint for a tensor `name` given for a placement that has no such
    tensor: '' or '; ...' naming the placement's fused or unfused form."""
    fused = _fused_of(name, placement_names)
    if fused:
        f, member = fused[0]
        return (f"; the placement holds the fused tensor '{f}', which covers "
                f"{member}: pass the fused parameter under that name, or lay "
                "the placement out with unfused tensors")
    members = _members_of(name, placement_names)
    if members:
        return (f"; the placement holds the unfused tensors "
                f"{_names(members)}: bind them as views of the fused "
                "parameter (its slices along the fused dimension, e.g. "
                "torch.split), keyed by those names")
    return ""


def hint_for_missing(name: str, given_names: Collection[str]) -> str:
    """A hint for a placement tensor `name` that was not given while the
    given tensors hold its fused or unfused form: '' or '; ...'."""
    fused = _fused_of(name, given_names)
    if fused:
        f, member = fused[0]
        return (f"; the tensors given include the fused '{f}': bind the "
                f"placement's {member} as a view of it (its slice along the "
                "fused dimension, e.g. torch.split)")
    members = _members_of(name, given_names)
    if members:
        return (f"; the tensors given hold the unfused {_names(members)}, "
                "but the placement declares one fused tensor: pass one "
                "tensor holding them (the engine's fused parameter), or lay "
                "the placement out with unfused tensors")
    return ""
