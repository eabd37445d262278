"""Hugging Face checkpoints: load one straight into any layout's tensors,
write any layout's tensors back as one.

    import reshard.hf
    ckpt = reshard.hf.Checkpoint("Qwen3-8B")           # headers checked
    layout = reshard.hf.layout(ckpt, tp=4, pp=2)       # engine sharding
    mine = {"p-d0-p1-e0-t3": {tensor_id: tensor, ...}}  # this rank's tensors
    report = reshard.hf.load(ckpt, layout, mine)       # only its bytes read

``layout`` reads the model's ``config.json`` (from the checkpoint's
directory, or ``config=`` a path or JSON text) and uses the checkpoint's
own tensor names, dtypes and shapes. ``load`` reads every bound fragment
with ranged reads straight into its tensor (each rank only its own bytes);
``write`` lays a placement's tensors out as a sharded checkpoint with
positional writes (docs/hf-checkpoints.md). bfloat16 tensors are torch
tensors; float8 travels in uint8/int8 tensors (bit patterns).
"""

from __future__ import annotations

import os
import time
from typing import Mapping, Optional, Union

from reshard import _reshard
from reshard._api import Report, check_seconds, check_share_arguments
from reshard._files import read_text
from reshard._tensors import fragment_views


class Checkpoint:
    """A checkpoint directory: every ``.safetensors`` header checked
    strictly, the files kept open read-only while this object lives."""

    def __init__(self, directory: Union[str, os.PathLike]) -> None:
        self.directory = os.fspath(directory)
        self._native = _reshard.HfCheckpoint.open(self.directory)

    @property
    def tensors(self) -> list:
        """[{name, file, dtype, itemsize, shape, offset, nbytes}], by name."""
        return [Report(t) for t in self._native.tensors]

    @property
    def files(self) -> list:
        """[{name, size, header_bytes, metadata}], by name."""
        return [Report(f) for f in self._native.files]

    @property
    def tensor_bytes(self) -> int:
        return self._native.tensor_bytes

    def __repr__(self) -> str:
        return f"reshard.hf.Checkpoint({self.directory!r})"


def _config_text(checkpoint: Optional[Checkpoint],
                 config: Optional[str]) -> str:
    if config is None:
        if checkpoint is None:
            raise _reshard.InvalidArgumentError(
                "hf.layout needs a checkpoint or a config")
        config = os.path.join(checkpoint.directory, "config.json")
    if config.lstrip().startswith("{"):
        return config
    return read_text(config)


def layout(checkpoint: Optional[Checkpoint] = None, *,
           config: Optional[str] = None, tp: int = 1, pp: int = 1,
           ep: int = 1, dp: int = 1, resource_id: str = "",
           revision: str = "hf", weight_generation: int = 0,
           quantize: str = "", fp8_block: Optional[tuple] = None,
           dtype: str = "") -> _reshard.WeightPlacementManifest:
    """The model laid out on a tp x pp x ep x dp grid with the sharding
    inference engines use (participants ``p-d<dp>-p<pp>-e<ep>-t<tp>``).
    With a checkpoint, exactly its tensors, dtypes and shapes; a tensor the
    architecture does not name raises. ``quantize="fp8"`` gives the FP8
    form (``fp8_block=(rows, cols)``, default (128, 128)), ``dtype`` a
    float form (docs/conversion.md)."""
    text = _config_text(checkpoint, config)
    native = checkpoint._native if checkpoint is not None else None
    return _reshard.hf_layout(text, tp=tp, pp=pp, ep=ep, dp=dp,
                              checkpoint=native, resource_id=resource_id,
                              revision=revision,
                              weight_generation=weight_generation,
                              quantize=quantize, fp8_block=fp8_block,
                              dtype=dtype)


def load(checkpoint: Checkpoint, target: _reshard.WeightPlacementManifest,
         tensors: Mapping, *, progress=None, convert: bool = False,
         fp8_block: Optional[tuple] = None) -> Report:
    """Reads the fragments of `tensors` ({participant id: {tensor id:
    tensor}} or {placement fragment id: tensor}) straight from the
    checkpoint; returns {bytes, bytes_read, read_requests, ranges,
    regions, bytes_copied, staging_bytes}.

    `progress(done, total)`, if given, is called with the bytes delivered
    so far, from this thread with the GIL held, at most a few hundred
    times plus ten a second (first with 0, last with total); an exception
    it raises is raised once the load has finished. With ``convert=True``
    target tensors whose dtype differs from the checkpoint's convert
    (docs/conversion.md; ``fp8_block=(rows, cols)``, default (128, 128))."""
    addresses, keep = fragment_views(target, tensors, "checkpoint load target",
                                     True)
    report = _reshard.load_checkpoint_buffers(checkpoint._native, target,
                                              addresses, progress=progress,
                                              convert=convert,
                                              fp8_block=fp8_block)
    del keep
    return Report(report)


def write(placement: _reshard.WeightPlacementManifest, tensors: Mapping,
          out_dir: Union[str, os.PathLike], *,
          max_file_bytes: int = 5_000_000_000,
          staging_bytes: int = 64 << 20, rank: Optional[int] = None,
          ranks: Optional[int] = None, rendezvous: Optional[str] = None,
          timeout: float = 600.0, progress=None) -> Report:
    """Writes `tensors` (every fragment of `placement`) as a sharded
    checkpoint in `out_dir` (created; an existing checkpoint there is
    refused); returns {bytes, writes, files}.

    With `rank` and `ranks`, `ranks` processes write one checkpoint
    together, each passing its own share of the tensors (every byte is
    written by the one participant the plan assigns it to, so the result
    equals the one-process write byte for byte): rank 0 lays the files out,
    every rank writes its bytes, rank 0 finishes (index last) once every
    rank wrote, and every rank returns once the checkpoint is complete,
    with its own bytes and writes. The processes meet in `rendezvous` (a
    directory or ``fs://DIR`` every process sees, or a Redis URI; default:
    ``<out_dir>/.reshard-write``, removed at the end). A rank that fails
    makes the others fail naming it; waiting longer than `timeout` seconds
    raises ``UnavailableError`` naming the ranks waited for. `timeout` must
    be a finite number of seconds >= 0 (NaN, the infinities and negative
    values are refused, with `ranks` or not).

    `progress(done, total)` as in ``load``: the tensor bytes written (of
    one process's write; not with `ranks`).
    """
    timeout = check_seconds("hf.write", "timeout", timeout)
    check_share_arguments("hf.write", "write", rank, ranks, progress)
    addresses, keep = fragment_views(placement, tensors,
                                     "checkpoint write source", False)
    out = os.fspath(out_dir)
    try:
        if ranks is None:
            return Report(_reshard.write_checkpoint_buffers(
                placement, addresses, out, max_file_bytes=max_file_bytes,
                staging_bytes=staging_bytes, progress=progress))
        return Report(_SharedWrite(placement, out, rank, ranks, rendezvous,
                                   timeout, max_file_bytes).run(
                                       addresses, staging_bytes))
    finally:
        del keep


class _SharedWrite:
    """One rank's part of a checkpoint written by several processes.

    Records (put once, in the rendezvous): ``created`` (rank 0 laid the
    files out), ``written/<rank>`` (a rank wrote its bytes),
    ``failed/<rank>`` (why a rank gave up). The index file, written last by
    rank 0, says the checkpoint is complete.
    """

    def __init__(self, placement, out_dir: str, rank: int, ranks: int,
                 rendezvous: Optional[str], timeout: float,
                 max_file_bytes: int) -> None:
        if not isinstance(ranks, int) or not isinstance(rank, int) or \
                isinstance(rank, bool) or ranks < 1 or not 0 <= rank < ranks:
            raise _reshard.InvalidArgumentError(
                f"hf.write: rank {rank!r} is not in [0, {ranks!r})")
        self.placement = placement
        self.out_dir = out_dir
        self.rank = rank
        self.ranks = ranks
        self.timeout = timeout
        self.max_file_bytes = max_file_bytes
        self.own_rendezvous = rendezvous is None
        self.where = rendezvous or os.path.join(out_dir, ".reshard-write")
        if self.own_rendezvous:
            os.makedirs(self.where, exist_ok=True)
        self.records = _reshard.Rendezvous(self.where)
        self.deadline = time.monotonic() + timeout

    def _get(self, key: str) -> Optional[bytes]:
        try:
            return self.records.get(key)
        except _reshard.Error:
            return None  # not there (yet), or removed at the end

    def _fail(self, error: BaseException) -> None:
        try:
            self.records.put(f"failed/{self.rank}",
                             f"{type(error).__name__}: {error}".encode())
        except _reshard.Error:
            pass

    def _wait(self, ready, what) -> None:
        while not ready():
            for r in range(self.ranks):
                why = self._get(f"failed/{r}") if r != self.rank else None
                if why is not None:
                    raise _reshard.AbortedError(
                        f"hf.write of {self.out_dir}: rank {r} failed: "
                        f"{why.decode(errors='replace')}")
            if time.monotonic() >= self.deadline:
                raise _reshard.UnavailableError(
                    f"hf.write of {self.out_dir}: timed out after "
                    f"{self.timeout:g} s waiting for {what()}")
            time.sleep(0.02)

    def run(self, addresses, staging_bytes: int) -> dict:
        try:
            plan = _reshard.plan_checkpoint_write(
                self.placement, max_file_bytes=self.max_file_bytes)
            if self.rank == 0:
                _reshard.create_checkpoint_files(plan, self.out_dir)
                self.records.put("created", b"")
            else:
                self._wait(lambda: self._get("created") is not None,
                           lambda: "rank 0 to lay the files out")
            report = _reshard.write_checkpoint_fragment_buffers(
                plan, self.placement, addresses, self.out_dir,
                staging_bytes=staging_bytes)
            self.records.put(f"written/{self.rank}", b"")
            index = os.path.join(self.out_dir, "model.safetensors.index.json")
            if self.rank == 0:
                missing = []

                def all_written() -> bool:
                    missing[:] = [r for r in range(self.ranks)
                                  if self._get(f"written/{r}") is None]
                    return not missing

                self._wait(all_written, lambda: "rank(s) " + ", ".join(
                    map(str, missing)) + " to write their fragments")
                _reshard.finish_checkpoint(plan, self.out_dir)
                self._clean_up()
            else:
                self._wait(lambda: os.path.exists(index),
                           lambda: "rank 0 to finish the checkpoint")
        except BaseException as error:
            self._fail(error)
            raise
        report["files"] = len(plan.files)
        return report

    def _clean_up(self) -> None:
        """Removes the default rendezvous directory (every rank has written;
        the others now wait for the index only)."""
        if not self.own_rendezvous:
            return
        import shutil
        shutil.rmtree(self.where, ignore_errors=True)


def source(checkpoint: Checkpoint, target: _reshard.WeightPlacementManifest
           ) -> _reshard.StoredWeightManifest:
    """The checkpoint as the stored manifest a `target` load plans from:
    each tensor a byte range of its file."""
    return _reshard.checkpoint_source(checkpoint._native, target)
