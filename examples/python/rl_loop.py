"""An RL weight-sync loop: a trainer updates, the rollout engines receive.

Four processes (multiprocessing, spawn) share a temporary rendezvous
directory:

* ranks 0-1, the trainer: Megatron-style TP2 with the 4 experts of each
  MoE layer folded onto the TP ranks (EP2, ranks with ep == tp);
* ranks 2-3, the rollout: an inference engine with two DP replicas of
  TP1 (every replica holds the whole model).

Each process builds its part with ``reshard.torch.build_part`` from its
torch tensors, and ``reshard.torch.gather_placement`` assembles the
trainer and the rollout placements on every process (a process
contributes no part to the other group's placement). Then, ten times, the
trainer writes new weights (values derived from each element's global
index and the step), every process calls ``LiveSession.update()`` once,
and each rollout process checks every byte it received against the step's
values before poisoning its tensors for the next step.

Usage: python3 rl_loop.py [--steps N] [--timeout SECONDS]
Exits 0 only when every byte of every update was checked on both rollout
replicas; the last line summarises.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import example_model as em  # noqa: E402

LAYERS = 2
TRAINER = 2  # processes; ranks [0, TRAINER) train, the rest roll out
ROLLOUT = 2


def trainer_topology():
    import reshard
    import reshard.torch as rt
    ranks = [reshard.ParallelRank(tp=i, ep=i) for i in range(TRAINER)]
    return rt.topology_from_ranks(ranks, tp=TRAINER, ep=TRAINER)


def rollout_topology():
    import reshard.torch as rt
    return rt.grid_topology(dp=ROLLOUT)


def build_local(rank: int):
    """(trainer RankPart or None, rollout RankPart or None) of a process."""
    import reshard
    import reshard.torch as rt
    from reshard.torch import Replicated
    header = dict(resource_id=em.RESOURCE, revision="rl")
    if rank < TRAINER:
        r = reshard.ParallelRank(tp=rank, ep=rank)
        tensors, layout = em.megatron_rank(r, tp=TRAINER, pp=1, ep=TRAINER,
                                           layers=LAYERS,
                                           ep_folded_on_tp=True)
        return rt.build_part(tensors, layout, topology=trainer_topology(),
                             rank=r, placement_set_id="trainer",
                             **header), None
    r = reshard.ParallelRank(dp=rank - TRAINER)
    tensors, layout = em.engine_rank(r, tp=1, ep=1, layers=LAYERS)
    return None, rt.build_part(tensors, layout, topology=rollout_topology(),
                               rank=r, placement_set_id="rollout",
                               default_axes=[Replicated("dp")], **header)


def run_rank(rank: int, ranks: int, rendezvous: str, steps: int,
             timeout: float, results) -> None:
    try:
        results.put((rank, "ok", _run_rank(rank, ranks, rendezvous, steps,
                                           timeout)))
    except BaseException:  # reported to the parent, which fails the run
        results.put((rank, "error", traceback.format_exc()))


def _run_rank(rank, ranks, rendezvous, steps, timeout):
    import reshard
    import reshard.torch as rt
    trainer, rollout = build_local(rank)
    source = rt.gather_placement(
        rendezvous, "placement.trainer", rank, ranks,
        [trainer.part] if trainer else [], trainer_topology(), timeout=timeout)
    target = rt.gather_placement(
        rendezvous, "placement.rollout", rank, ranks,
        [rollout.part] if rollout else [], rollout_topology(),
        timeout=timeout)
    session = reshard.LiveSession(rendezvous, "rl", rank=rank, ranks=ranks,
                                  source=source, target=target,
                                  timeout=timeout)
    checked = 0
    moved = 0
    for step in range(1, steps + 1):
        if trainer:
            em.fill_part(trainer, source, step)  # the optimizer step
            report = session.update(sources=trainer.by_participant())
        else:
            em.poison(rollout)
            report = session.update(targets=rollout.by_participant())
            checked += em.check_part(rollout, target, step)
            if not report.ready:
                raise AssertionError(f"rank {rank}: step {step} not ready")
        moved += report.bytes_received
        if report.step != step:
            raise AssertionError(f"rank {rank}: update {report.step} at step "
                                 f"{step}")
    return dict(checked=checked, received=moved,
                source=source.placement_id, target=target.placement_id)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    ranks = TRAINER + ROLLOUT
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="rl-loop-") as rendezvous:
        results = ctx.Queue()
        procs = [ctx.Process(target=run_rank, args=(r, ranks, rendezvous,
                                                    args.steps, args.timeout,
                                                    results))
                 for r in range(ranks)]
        for p in procs:
            p.start()
        out = {}
        deadline = time.monotonic() + args.timeout * (args.steps + 3)
        try:
            while len(out) < ranks and time.monotonic() < deadline:
                try:
                    rank, status, value = results.get(timeout=0.5)
                    out[rank] = (status, value)
                except queue.Empty:  # a rank that died without a word
                    dead = [r for r, p in enumerate(procs) if r not in out
                            and p.exitcode not in (None, 0)]
                    for r in dead:
                        out[r] = ("error", f"exited with {procs[r].exitcode}")
        finally:
            for p in procs:
                p.join(timeout=args.timeout)
                if p.is_alive():
                    p.kill()
    errors = {r: v for r, (s, v) in out.items() if s != "ok"}
    if errors or len(out) != ranks:
        for r, text in sorted(errors.items()):
            print(f"rank {r} failed:\n{text}", file=sys.stderr)
        print(f"rl_loop: FAILED ({len(errors)} rank(s) failed, "
              f"{ranks - len(out)} gave no result)")
        return 1
    reports = [out[r][1] for r in range(ranks)]
    if len({(x["source"], x["target"]) for x in reports}) != 1:
        print("rl_loop: FAILED (the ranks assembled different placements)")
        return 1
    checked = [reports[r]["checked"] for r in range(TRAINER, ranks)]
    want = sum(f.nbytes for f in build_local(TRAINER)[1].part.fragments)
    if checked != [want * args.steps] * ROLLOUT:
        print(f"rl_loop: FAILED (checked {checked} bytes, expected "
              f"{want * args.steps} per rollout rank)")
        return 1
    print(f"rl_loop: {args.steps} updates from trainer TP{TRAINER}/EP{TRAINER}"
          f" to rollout DP{ROLLOUT}xTP1, {sum(checked)} bytes checked byte for"
          f" byte on {ROLLOUT} rollout ranks, placements "
          f"{reports[0]['source'][:15]} -> {reports[0]['target'][:15]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
