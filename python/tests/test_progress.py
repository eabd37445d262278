"""`progress(done, total)` callbacks of the long calls: hf.load, hf.write,
WeightStore.upload and WeightStore.load report their bytes from 0 to the
total, in order, on the calling thread; a callback that raises makes the
call raise once the work is done; tqdm (Debian's python3-tqdm) as the
docs show it.
"""

import io
import os
import pathlib
import sys
import threading

import pytest
import torch

import reshard
import reshard.hf

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
sys.path.insert(0, str(DATA.parent / "cli"))
import hf_checkpoints as hfc  # noqa: E402

CONFIG = dict(hfc.CONFIGS["llama"], hidden_size=256, vocab_size=1024,
              intermediate_size=512, num_attention_heads=8,
              num_key_value_heads=4, head_dim=32)


def _tensors(placement):
    return {p.participant_id: {f.placement_fragment_id: torch.zeros(
        tuple(f.local_shape), dtype=torch.bfloat16) for f in p.fragments}
        for p in placement.parts if p.fragments}


class Recorder:
    def __init__(self):
        self.calls = []
        self.threads = set()

    def __call__(self, done, total):
        self.calls.append((done, total))
        self.threads.add(threading.get_ident())

    def check(self, total):
        assert self.calls[0] == (0, total)
        assert self.calls[-1] == (total, total)
        done = [d for d, _ in self.calls]
        assert done == sorted(done)
        assert {t for _, t in self.calls} == {total}
        assert self.threads == {threading.get_ident()}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    source = hfc.write_checkpoint(d, CONFIG)
    return reshard.hf.Checkpoint(d), sum(len(v[2]) for v in source.values())


def test_hf_load_and_write_report_every_byte(checkpoint, tmp_path):
    ckpt, total = checkpoint
    placement = reshard.hf.layout(ckpt, tp=2)
    tensors = _tensors(placement)
    loading = Recorder()
    report = reshard.hf.load(ckpt, placement, tensors, progress=loading)
    loading.check(report.bytes)
    writing = Recorder()
    written = reshard.hf.write(placement, tensors, tmp_path / "out",
                               progress=writing)
    assert written.bytes == total
    writing.check(total)


def test_store_upload_and_load_report_every_byte(checkpoint, tmp_path):
    ckpt, total = checkpoint
    source = reshard.hf.layout(ckpt, tp=2)
    tensors = _tensors(source)
    reshard.hf.load(ckpt, source, tensors)
    store = reshard.WeightStore("fs://" + str(tmp_path / "store"))
    uploading = Recorder()
    manifest = store.upload(source, tensors, progress=uploading)
    uploading.check(total)
    target = reshard.hf.layout(ckpt, tp=4, pp=2)
    loading = Recorder()
    report = store.load(manifest, target, _tensors(target), progress=loading)
    loading.check(report.bytes)


def test_a_raising_callback_raises_after_the_work(checkpoint, tmp_path):
    ckpt, _ = checkpoint
    placement = reshard.hf.layout(ckpt, tp=1)
    tensors = _tensors(placement)
    calls = []

    def fails(done, total):
        calls.append(done)
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt, match="stop"):
        reshard.hf.load(ckpt, placement, tensors, progress=fails)
    assert calls == [0]  # never called again after raising
    with pytest.raises(reshard.InvalidArgumentError, match="progress"):
        reshard.hf.load(ckpt, placement, tensors, progress=42)


def test_tqdm_as_documented(checkpoint):
    tqdm = pytest.importorskip("tqdm")  # Debian: python3-tqdm
    ckpt, _ = checkpoint
    placement = reshard.hf.layout(ckpt, tp=2)
    tensors = _tensors(placement)
    with tqdm.tqdm(unit="B", unit_scale=True, file=io.StringIO()) as bar:
        def progress(done, total):
            bar.total = total
            bar.update(done - bar.n)
        report = reshard.hf.load(ckpt, placement, tensors, progress=progress)
    assert bar.n == bar.total == report.bytes
