"""One checkpoint written by several processes: ``reshard.hf.write(...,
rank=r, ranks=n)``.

A generated Llama checkpoint is loaded into a TP4 layout; two spawned
processes each write the tensors of two participants into one directory;
the result equals the one-process write of the same tensors byte for byte
(every file, the index included) and the source checkpoint.
"""

import multiprocessing as mp
import os
import pathlib
import sys

import pytest
import torch

import reshard
import reshard.hf

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
sys.path.insert(0, str(DATA.parent / "cli"))
import hf_checkpoints as hfc  # noqa: E402


def _loaded(ckpt_dir):
    """The checkpoint's TP4 layout and every participant's tensors."""
    ckpt = reshard.hf.Checkpoint(ckpt_dir)
    placement = reshard.hf.layout(ckpt, tp=4)
    tensors = {}
    for part in placement.parts:
        frags = {}
        for f in part.fragments:
            assert placement.find_tensor(f.tensor_id).dtype == "bfloat16"
            frags[f.placement_fragment_id] = torch.zeros(
                tuple(f.local_shape), dtype=torch.bfloat16)
        tensors[part.participant_id] = frags
    reshard.hf.load(ckpt, placement, tensors)
    return placement, tensors


def _writer(rank, ckpt_dir, out_dir, max_file_bytes, results):
    try:
        placement, tensors = _loaded(ckpt_dir)
        ids = sorted(tensors)
        mine = {p: tensors[p] for p in ids[rank * 2:rank * 2 + 2]}
        report = reshard.hf.write(placement, mine, out_dir, rank=rank,
                                  ranks=2, max_file_bytes=max_file_bytes,
                                  timeout=60)
        results.put((rank, dict(report)))
    except BaseException as error:
        results.put((rank, f"{type(error).__name__}: {error}"))


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_two_process_write_equals_the_one_process_write(tmp_path):
    source = hfc.write_checkpoint(tmp_path / "ckpt", hfc.CONFIGS["llama"])
    total = sum(len(v[2]) for v in source.values())
    max_file_bytes = total // 2 + 1
    placement, tensors = _loaded(tmp_path / "ckpt")
    one = reshard.hf.write(placement, tensors, tmp_path / "one",
                           max_file_bytes=max_file_bytes)
    assert one.files >= 2

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_writer,
                         args=(r, str(tmp_path / "ckpt"), str(tmp_path / "two"),
                               max_file_bytes, results))
             for r in range(2)]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(isinstance(v, dict) for v in out.values()), out
    # Each wrote its share; together every byte once.
    assert out[0]["bytes"] > 0 and out[1]["bytes"] > 0
    assert out[0]["bytes"] + out[1]["bytes"] == one.bytes == total
    assert out[0]["files"] == one.files
    # Byte for byte the one-process result (the rendezvous is gone).
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    assert hfc.read_checkpoint(tmp_path / "two") == source


def test_a_rank_without_its_peer_times_out(tmp_path):
    hfc.write_checkpoint(tmp_path / "ckpt", hfc.CONFIGS["llama"])
    placement, tensors = _loaded(tmp_path / "ckpt")
    with pytest.raises(reshard.UnavailableError,
                       match=r"timed out after 0.3 s waiting for rank\(s\) "
                             r"1 to write their fragments"):
        reshard.hf.write(placement, tensors, tmp_path / "out", rank=0,
                         ranks=2, timeout=0.3)
    # Nothing was published: no index, only partial files.
    assert not (tmp_path / "out" / "model.safetensors.index.json").exists()
    with pytest.raises(reshard.InvalidArgumentError, match="not in"):
        reshard.hf.write(placement, tensors, tmp_path / "x", rank=2, ranks=2)
