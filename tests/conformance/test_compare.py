"""The conformance comparison on hand-made files (no vLLM needed):
/usr/bin/python3 -m pytest tests/conformance/test_compare.py"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_part  # noqa: E402
import safetensors_raw  # noqa: E402
import vllm_part  # noqa: E402


def write_st(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] in file order."""
    header, off, blob = {}, 0, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def make_case(tmp, vllm, reshard, reshard_order=None):
    vdir = os.path.join(tmp, "v")
    rdir = os.path.join(tmp, "r")
    os.makedirs(vdir)
    os.makedirs(os.path.join(rdir, "load"))
    write_st(os.path.join(vdir, "rank0.safetensors"), vllm)
    with open(os.path.join(vdir, "rank0.params.json"), "w") as f:
        json.dump([{"name": n, "shape": s, "dtype": "bfloat16"}
                   for n, _, s, _ in vllm], f)
    pid = "p-d0-p0-e0-t0"
    write_st(os.path.join(rdir, "load", pid + ".safetensors"), reshard)
    order = reshard_order or [n for n, _, _, _ in reshard]
    with open(os.path.join(rdir, "params.json"), "w") as f:
        json.dump({"participants": [{"participant_id": pid, "parameters":
                                     [{"name": n} for n in order]}]}, f)
    return vllm_part.compare_rank(vdir, 0, rdir, pid)


A = ("a.weight", "BF16", [2], b"\x01\x00\x02\x00")
B = ("b.weight", "BF16", [2], b"\x03\x00\x04\x00")


def test_strict(tmp_path):
    out = make_case(str(tmp_path), [A, B], [B, A], ["a.weight", "b.weight"])
    assert out["result"] == "strict"
    assert out["order_matches"] is True


def test_order_difference_is_reported_apart(tmp_path):
    out = make_case(str(tmp_path), [A, B], [A, B], ["b.weight", "a.weight"])
    assert out["result"] == "strict"
    assert out["order_matches"] is False
    assert out["order_first"] == {"index": 0, "vllm": "a.weight", "reshard": "b.weight"}


def test_name_only_difference(tmp_path):
    renamed = ("x.routed.a.weight",) + A[1:]
    out = make_case(str(tmp_path), [renamed, B], [A, B])
    assert out["result"] == "names"
    assert out["renamed"] == {"x.routed.a.weight": "a.weight"}


def test_bytes_differ_names_the_element(tmp_path):
    other = ("a.weight", "BF16", [2], b"\x01\x00\x09\x00")
    out = make_case(str(tmp_path), [A, B], [other, B])
    assert out["result"] == "mismatch"
    assert out["first_difference"] == {
        "parameter": "a.weight", "reshard_parameter": "a.weight",
        "why": "bytes differ from element 1"}


def test_unwritten_vllm_memory_is_named(tmp_path):
    nan = ("a.weight", "BF16", [2], b"\x01\x00\xc0\x7f")
    zero = ("a.weight", "BF16", [2], b"\x01\x00\x00\x00")
    out = make_case(str(tmp_path), [nan], [zero])
    assert out["first_difference"]["why"] == (
        "bytes differ from element 1 (vLLM's element is NaN: memory its "
        "load_weights never wrote)")


def test_missing_and_extra_parameters(tmp_path):
    out = make_case(str(tmp_path / "m"), [A, B], [A])
    assert out["first_difference"]["parameter"] == "b.weight"
    assert out["first_difference"]["why"].startswith("vLLM holds it;")
    out = make_case(str(tmp_path / "e"), [A], [A, B])
    assert out["first_difference"]["parameter"] == "b.weight"
    assert out["first_difference"]["why"].startswith("reshard's engine load writes it;")


def test_shape_and_dtype(tmp_path):
    f32 = ("a.weight", "F32", [1], b"\x01\x00\x02\x00")
    out = make_case(str(tmp_path / "d"), [A], [f32])
    assert out["first_difference"]["why"] == "dtype: vLLM BF16, reshard F32"
    wide = ("a.weight", "BF16", [1, 2], A[3])
    out = make_case(str(tmp_path / "s"), [A], [wide])
    assert out["first_difference"]["why"] == "shape: vLLM [2], reshard [1, 2]"


def test_rank_coordinates_follow_vllms_grid():
    # world rank = (d * pp + p) * tp + t
    assert vllm_part.rank_coords(0, 2, 2) == (0, 0, 0)
    assert vllm_part.rank_coords(3, 2, 2) == (0, 1, 1)
    assert vllm_part.rank_coords(5, 2, 2) == (1, 0, 1)


def test_box_of_a_tensor():
    # 2 x 3 BF16 tensor, elements 0..5; the box [0:2, 1:3] is 1, 2, 4, 5.
    data = b"".join(struct.pack("<H", i) for i in range(6))
    box = hf_part._box(("BF16", [2, 3], data), [0, 1], [2, 2])
    assert box == b"".join(struct.pack("<H", i) for i in (1, 2, 4, 5))


def test_compare_tensors_names_the_first_difference():
    want = {"a": ("BF16", [1], b"\x01\x00"), "b": ("BF16", [1], b"\x02\x00")}
    assert hf_part.compare_tensors(want, dict(want)) is None
    assert hf_part.compare_tensors(want, {"a": want["a"]}) == "b: missing"
    got = dict(want, b=("F32", [1], b"\x02\x00\x00\x00"))
    assert hf_part.compare_tensors(want, got) == "b: dtype F32, original BF16"
    assert safetensors_raw.first_difference("BF16", b"\x01\x00\x02\x00",
                                            b"\x01\x00\x03\x00") == 1
