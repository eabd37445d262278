"""Stored (committed store revision) manifest values of the compat layer.

``WeightManifest`` (newer name ``StoredWeightManifest``) keeps the
reference's field order and JSON form; its rules (rule 63: key layout,
fragment geometry, alias groups, exact cover, disjoint object ranges) are
checked by decoding its canonical JSON with the native
``reshard._reshard.StoredWeightManifest``, which is cached for planning.
"""

import hashlib
import json
from dataclasses import dataclass, field
from typing import Tuple

from reshard import _reshard as _R
from reshard.compat._checks import (
    NativeBacked,
    normalize_aliases,
    require_int_tuple,
    require_items,
    require_sha256,
    require_str,
    require_u64,
    trusted,
)
from reshard.compat._mooncake_contract import (
    ResourceKind,
    SplitAxis,
    TensorDescriptor,
    tensor_from_native,
)


@dataclass(frozen=True)
class StoredManifestIdentity:
    """Where a committed manifest lives plus its content digest."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    content_sha256: str

    def __post_init__(self):
        for name in ("namespace", "resource_id", "revision", "group_id",
                     "manifest_key", "content_sha256"):
            require_str(getattr(self, name), name)
        require_u64(self.weight_generation, "weight_generation")
        require_sha256(self.content_sha256, "content_sha256")


@dataclass(frozen=True)
class StoredFragment:
    """One stored fragment: a box of one tensor, the bytes [object_offset,
    object_offset + nbytes) of payload object `object_key`. Aliases follow
    the placement fragment rules (sorted, >= 2 members, own tensor)."""

    fragment_id: str
    tensor_id: str
    global_offset: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    object_key: str
    object_offset: int
    nbytes: int
    aliases: Tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(
            self, "global_offset",
            require_int_tuple(self.global_offset, "global_offset", 0))
        object.__setattr__(
            self, "local_shape",
            require_int_tuple(self.local_shape, "local_shape", 1))
        for name in ("fragment_id", "tensor_id", "object_key"):
            require_str(getattr(self, name), name)
        require_u64(self.object_offset, "object_offset")
        require_u64(self.nbytes, "nbytes", 1)
        object.__setattr__(self, "aliases",
                           normalize_aliases(self.aliases, self.tensor_id))

    def to_dict(self):
        """The wire object of the fragment."""
        return {"fragment_id": self.fragment_id, "tensor_id": self.tensor_id,
                "global_offset": list(self.global_offset),
                "local_shape": list(self.local_shape),
                "object_key": self.object_key,
                "object_offset": self.object_offset, "nbytes": self.nbytes,
                "aliases": list(self.aliases)}


def _axis_wire(axis):
    if isinstance(axis, SplitAxis):
        return {"semantics": "split", "kind": axis.kind, "dim": axis.dim}
    return {"semantics": axis.semantics, "kind": axis.kind}


def _tensor_wire(t):
    return {"tensor_id": t.tensor_id, "global_shape": list(t.global_shape),
            "dtype": t.dtype, "itemsize": t.itemsize, "layer_id": t.layer_id,
            "expert_id": t.expert_id,
            "layout_fingerprint": t.layout_fingerprint,
            "shard_dims": list(t.shard_dims),
            "parallel_axes": [_axis_wire(a) for a in t.parallel_axes]}


@dataclass(frozen=True)
class WeightManifest(NativeBacked):
    """The manifest of a committed store revision: one complete replica of
    every tensor as stored fragments. `manifest_digest` is the hex SHA-256
    of `to_json()` (sorted keys, compact, ensure_ascii=False); tensors and
    fragments keep the given order."""

    namespace: str
    resource_id: str
    revision: str
    weight_generation: int
    group_id: str
    manifest_key: str
    tensors: Tuple[TensorDescriptor, ...]
    fragments: Tuple[StoredFragment, ...]
    created_at: str
    manifest_digest: str = field(init=False)

    _CACHES = ("_native", "_fragment_index")

    @property
    def resource_kind(self):
        """Always ResourceKind.MODEL_WEIGHT."""
        return ResourceKind.MODEL_WEIGHT

    def __post_init__(self):
        for name in ("namespace", "resource_id", "revision", "group_id",
                     "manifest_key", "created_at"):
            require_str(getattr(self, name), name)
        object.__setattr__(self, "tensors", require_items(
            self.tensors, "WeightManifest tensors", TensorDescriptor))
        object.__setattr__(self, "fragments", require_items(
            self.fragments, "WeightManifest fragments", StoredFragment))
        require_u64(self.weight_generation, "weight_generation")
        text = self.to_json()
        native = _R.StoredWeightManifest.from_json(text)
        object.__setattr__(self, "manifest_digest",
                           hashlib.sha256(text.encode("utf-8")).hexdigest())
        object.__setattr__(self, "_native", native)

    @property
    def manifest_identity(self):
        """The StoredManifestIdentity of this manifest."""
        return StoredManifestIdentity(
            namespace=self.namespace, resource_id=self.resource_id,
            revision=self.revision, weight_generation=self.weight_generation,
            group_id=self.group_id, manifest_key=self.manifest_key,
            content_sha256=self.manifest_digest)

    def to_dict(self):
        """The wire object (what to_json encodes)."""
        return {"resource_kind": ResourceKind.MODEL_WEIGHT.value,
                "namespace": self.namespace, "resource_id": self.resource_id,
                "revision": self.revision,
                "weight_generation": self.weight_generation,
                "group_id": self.group_id, "manifest_key": self.manifest_key,
                "tensors": [_tensor_wire(t) for t in self.tensors],
                "fragments": [f.to_dict() for f in self.fragments],
                "created_at": self.created_at}

    def to_json(self):
        """Canonical JSON: sorted keys, compact separators, raw UTF-8."""
        return json.dumps(self.to_dict(), sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, value):
        """Decodes a manifest (str, bytes or bytearray) strictly: exact
        field sets, no duplicate keys or non-finite numbers, every rule."""
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    "weight manifest is not valid UTF-8") from error
        elif not isinstance(value, str):
            raise ValueError("weight manifest JSON must be str or bytes")
        native = _R.StoredWeightManifest.from_json(value)
        raw = json.loads(value)
        tensors = {t.tensor_id: tensor_from_native(t) for t in native.tensors}
        fragments = tuple(
            StoredFragment(**{k: item[k] for k in (
                "fragment_id", "tensor_id", "global_offset", "local_shape",
                "object_key", "object_offset", "nbytes", "aliases")})
            for item in raw["fragments"])
        fields = {k: raw[k] for k in ("namespace", "resource_id", "revision",
                                      "weight_generation", "group_id",
                                      "manifest_key", "created_at")}
        fields["tensors"] = tuple(tensors[t["tensor_id"]]
                                  for t in raw["tensors"])
        fields["fragments"] = fragments
        fields["manifest_digest"] = ""
        manifest = trusted(cls, native, fields)
        object.__setattr__(manifest, "manifest_digest", hashlib.sha256(
            manifest.to_json().encode("utf-8")).hexdigest())
        return manifest

    @classmethod
    def from_dict(cls, raw):
        """Decodes the wire object `raw` (a mapping), as from_json."""
        if not isinstance(raw, dict):
            raise ValueError("weight manifest must be a JSON object")
        return cls.from_json(json.dumps(raw, ensure_ascii=False))

    def _fragment_by_id(self, fragment_id):
        index = self.__dict__.get("_fragment_index")
        if index is None:
            index = {f.fragment_id: f for f in self.fragments}
            object.__setattr__(self, "_fragment_index", index)
        return index.get(fragment_id)

    def _build_native(self):
        return _R.StoredWeightManifest.from_json(self.to_json())


# Newer names of the same contracts.
StoredFragmentSnapshot = StoredFragment
StoredWeightManifest = WeightManifest

__all__ = ["StoredFragment", "StoredFragmentSnapshot",
           "StoredManifestIdentity", "StoredWeightManifest", "WeightManifest"]
