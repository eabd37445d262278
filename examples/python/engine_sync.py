"""A Megatron-style trainer updates a vLLM-style engine every step.

Two processes (multiprocessing, spawn) share a temporary rendezvous
directory and one standing ``reshard.LiveSession``:

* rank 0, the trainer: Megatron-Core TP2 x PP2 (four participants), each
  a ``torch.nn.Module`` whose ``named_parameters()`` are Megatron's names
  (``decoder.layers.0.self_attention.linear_qkv.weight``, stage-local
  layers, q/k/v interleaved per query group, a padded vocabulary);
* rank 1, the engine: vLLM TP4 (four participants, ``qkv_proj`` with each
  KV head on two ranks, ``gate_up_proj``, padded vocabulary partitions).

Both layouts come from one config with ``reshard.engines.layout``; each
process binds its modules' parameters with ``layout.bind``. Every step the
trainer writes new weights (each canonical tensor element's bytes derived
from the tensor, the element's global index and the step) into its fused
parameters, both processes call ``update()``, and the engine checks every
byte of every parameter: each fragment piece against the canonical values,
each padding piece zero. Then it poisons the pieces for the next step.

Usage: python3 engine_sync.py [--steps N] [--timeout SECONDS]
Exits 0 only when every byte of every step was checked; the last line
summarises.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import traceback
import zlib

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 16, "vocab_size": 54, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 24, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
TRAINER = dict(engine="megatron", tp=2, pp=2, make_vocab_size_divisible_by=4)
ENGINE = dict(engine="vllm", tp=4)


def layouts():
    import reshard.engines
    return (reshard.engines.layout(CONFIG, **TRAINER),
            reshard.engines.layout(CONFIG, **ENGINE))


def module_of(parameters):
    """A torch.nn.Module tree whose named_parameters() are `parameters`
    ({dotted name: (shape, dtype)}), zero-filled."""
    import torch
    root = torch.nn.Module()
    for name, (shape, dtype) in parameters.items():
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, torch.nn.Parameter(
            torch.zeros(shape, dtype=getattr(torch, dtype)),
            requires_grad=False))
    return root


def expected_bytes(placement, fragment_id, step):
    """The bytes of a fragment at `step`: a function of its tensor, each
    element's global index and the step."""
    import numpy as np
    f = placement.find_fragment(fragment_id)
    t = placement.find_tensor(f.tensor_id)
    grid = np.indices(f.local_shape).reshape(len(f.local_shape), -1)
    offset = np.array(f.global_offset).reshape(-1, 1)
    index = np.ravel_multi_index(tuple(grid + offset), t.global_shape)
    seed = zlib.crc32(f.tensor_id.encode()) + 7919 * step
    element = (index.astype(np.uint64) * np.uint64(2654435761)
               + np.uint64(seed))
    byte = np.arange(t.itemsize, dtype=np.uint64)
    value = (element[:, None] >> (np.uint64(3) + byte[None, :]))
    return (value & np.uint64(0xFF)).astype(np.uint8).reshape(-1)


def pieces(layout, participant, module):
    """(bytes view of a parameter's piece, piece) for every piece."""
    import torch
    named = dict(module.named_parameters())
    for name, q in layout.parameter_maps(participant).items():
        flat = named[name].data.reshape(-1).view(torch.uint8)
        for piece in q.pieces:
            yield flat[piece.offset:piece.offset + piece.nbytes], piece


def run(rank, rendezvous, steps, timeout, errors):
    try:
        import numpy as np
        import torch
        import reshard
        trainer, engine = layouts()
        mine = trainer if rank == 0 else engine
        modules = {p: module_of(mine.parameters(p))
                   for p in mine.participants}
        views = {}
        for p, m in modules.items():
            views.update(mine.bind(p, m.named_parameters()))
        checked = 0
        with reshard.LiveSession(rendezvous, "engine-sync", rank=rank,
                                 ranks=2, source=trainer.placement,
                                 target=engine.placement,
                                 timeout=timeout) as session:
            for step in range(1, steps + 1):
                if rank == 0:
                    for p, m in modules.items():
                        for view, piece in pieces(trainer, p, m):
                            if piece.fragment is not None:
                                view.copy_(torch.from_numpy(expected_bytes(
                                    trainer.placement, piece.fragment,
                                    step)))
                    session.update(sources=views)
                    continue
                session.update(targets=views)
                for p, m in modules.items():
                    for view, piece in pieces(engine, p, m):
                        got = view.numpy()
                        want = (np.zeros(piece.nbytes, np.uint8)
                                if piece.fragment is None else expected_bytes(
                                    engine.placement, piece.fragment, step))
                        if not np.array_equal(got, want):
                            bad = int(np.flatnonzero(got != want)[0])
                            raise AssertionError(
                                f"step {step}: {p} byte {piece.offset + bad}"
                                f" of a piece is {got[bad]}, not {want[bad]}")
                        checked += piece.nbytes
                        if piece.fragment is not None:
                            view.fill_(0xEE)  # poison for the next step
        errors.put((rank, None, checked))
    except BaseException:  # reported by the parent
        errors.put((rank, traceback.format_exc(), 0))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    with tempfile.TemporaryDirectory(prefix="engine-sync-") as rendezvous:
        procs = [context.Process(target=run, args=(r, rendezvous, args.steps,
                                                   args.timeout, errors))
                 for r in range(2)]
        for p in procs:
            p.start()
        results = [errors.get(timeout=args.timeout * (args.steps + 2))
                   for _ in procs]
        for p in procs:
            p.join()
    failed = [(r, e) for r, e, _ in results if e is not None]
    for r, e in failed:
        print(f"rank {r} failed:\n{e}", file=sys.stderr)
    if failed or any(p.exitcode != 0 for p in procs):
        return 1
    checked = sum(c for _, _, c in results)
    trainer, engine = layouts()
    print(f"engine_sync: {args.steps} steps, megatron tp2 pp2 "
          f"({len(trainer.participants)} participants) -> vllm tp4 "
          f"({len(engine.participants)} participants), "
          f"{checked // args.steps} bytes checked per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
