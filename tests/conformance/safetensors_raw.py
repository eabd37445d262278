"""Reads safetensors files as raw bytes (header order, dtype, shape, bytes)."""

import json
import struct


def read(path):
    """{"meta": {...}, "tensors": {name: (dtype, shape, bytes)}} of a file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        tensors[name] = (h["dtype"], list(h["shape"]), data[base + b : base + e])
    return {"meta": meta, "tensors": tensors}


ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def first_difference(dtype, a, b):
    """Index of the first differing element of two equal-length buffers."""
    size = ITEMSIZE.get(dtype, 1)
    for i in range(0, len(a), 4096):
        if a[i : i + 4096] != b[i : i + 4096]:
            for j in range(i, min(i + 4096, len(a))):
                if a[j] != b[j]:
                    return j // size
    return None


def is_nan_element(dtype, buf, index):
    """Whether element `index` of buf is a NaN of dtype (the fill torch puts
    into memory it allocated and nobody wrote, under deterministic mode)."""
    size = ITEMSIZE.get(dtype, 1)
    raw = buf[index * size : (index + 1) * size]
    if dtype == "BF16":
        (v,) = struct.unpack("<H", raw)
        return (v & 0x7F80) == 0x7F80 and (v & 0x7F) != 0
    if dtype == "F16":
        (v,) = struct.unpack("<H", raw)
        return (v & 0x7C00) == 0x7C00 and (v & 0x3FF) != 0
    if dtype == "F32":
        (v,) = struct.unpack("<I", raw)
        return (v & 0x7F800000) == 0x7F800000 and (v & 0x7FFFFF) != 0
    if dtype == "F8_E4M3":
        return (raw[0] & 0x7F) == 0x7F
    return False
