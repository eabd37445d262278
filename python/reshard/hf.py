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
from typing import Mapping, Optional, Union

from reshard import _reshard
from reshard._api import Report
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
    with open(config, encoding="utf-8") as f:
        return f.read()


def layout(checkpoint: Optional[Checkpoint] = None, *,
           config: Optional[str] = None, tp: int = 1, pp: int = 1,
           ep: int = 1, dp: int = 1, resource_id: str = "",
           revision: str = "hf",
           weight_generation: int = 0) -> _reshard.WeightPlacementManifest:
    """The model laid out on a tp x pp x ep x dp grid with the sharding
    inference engines use (participants ``p-d<dp>-p<pp>-e<ep>-t<tp>``).
    With a checkpoint, exactly its tensors, dtypes and shapes; a tensor the
    architecture does not name raises."""
    text = _config_text(checkpoint, config)
    native = checkpoint._native if checkpoint is not None else None
    return _reshard.hf_layout(text, tp=tp, pp=pp, ep=ep, dp=dp,
                              checkpoint=native, resource_id=resource_id,
                              revision=revision,
                              weight_generation=weight_generation)


def load(checkpoint: Checkpoint, target: _reshard.WeightPlacementManifest,
         tensors: Mapping) -> Report:
    """Reads the fragments of `tensors` ({participant id: {tensor id:
    tensor}} or {placement fragment id: tensor}) straight from the
    checkpoint; returns {bytes, bytes_read, read_requests, ranges,
    regions, bytes_copied, staging_bytes}."""
    addresses, keep = fragment_views(target, tensors, "checkpoint load target",
                                     True)
    report = _reshard.load_checkpoint_buffers(checkpoint._native, target,
                                              addresses)
    del keep
    return Report(report)


def write(placement: _reshard.WeightPlacementManifest, tensors: Mapping,
          out_dir: Union[str, os.PathLike], *,
          max_file_bytes: int = 5_000_000_000,
          staging_bytes: int = 64 << 20) -> Report:
    """Writes `tensors` (every fragment of `placement`) as a sharded
    checkpoint in `out_dir` (created; an existing checkpoint there is
    refused); returns {bytes, writes, files}."""
    addresses, keep = fragment_views(placement, tensors,
                                     "checkpoint write source", False)
    report = _reshard.write_checkpoint_buffers(
        placement, addresses, os.fspath(out_dir),
        max_file_bytes=max_file_bytes, staging_bytes=staging_bytes)
    del keep
    return Report(report)


def source(checkpoint: Checkpoint, target: _reshard.WeightPlacementManifest
           ) -> _reshard.StoredWeightManifest:
    """The checkpoint as the stored manifest a `target` load plans from:
    each tensor a byte range of its file."""
    return _reshard.checkpoint_source(checkpoint._native, target)
