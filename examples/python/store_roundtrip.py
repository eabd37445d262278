"""Upload torch tensors at a trainer's layout, load them at an engine's.

The trainer is Megatron-style TP2 x PP2 x EP2 (8 ranks: dense weights
split over TP, owned by their PP stage under stage-local names, replicated
over EP; grouped experts split over EP and, inside each expert, over TP).
The inference engine is TP4 with the experts spread over the same four
workers (EP4, ranks with ep == tp). Both placements are built with
``reshard.torch.build_part`` from the ranks' torch tensors (all ranks live
in this one process here; in a job each rank builds its own part and
``reshard.torch.gather_placement`` assembles them).

The trainer's tensors hold values derived from each element's global
index; they are uploaded to a WeightStore (fs:// in a temporary
directory) as one revision, the revision is verified against its
checksums, and loaded into the engine's tensors, whose every byte is then
checked.

Usage: python3 store_roundtrip.py [--store DIR]
Exits 0 only after every byte was checked; the last line summarises.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import example_model as em  # noqa: E402
import reshard  # noqa: E402
import reshard.torch as rt  # noqa: E402

LAYERS = 4
STEP = 7  # the training step whose weights are published


def trainer_placement():
    tp, pp, ep = 2, 2, 2
    topology = rt.grid_topology(tp=tp, pp=pp, ep=ep)
    parts = []
    for rank in rt.grid_ranks(tp=tp, pp=pp, ep=ep):
        tensors, layout = em.megatron_rank(rank, tp=tp, pp=pp, ep=ep,
                                           layers=LAYERS)
        parts.append(rt.build_part(
            tensors, layout, topology=topology, rank=rank,
            resource_id=em.RESOURCE, revision=f"step-{STEP}",
            placement_set_id="trainer-tp2-pp2-ep2"))
    return rt.placement_of(parts, topology), parts


def engine_placement():
    tp = 4
    ranks = [reshard.ParallelRank(tp=i, ep=i) for i in range(tp)]
    topology = rt.topology_from_ranks(ranks, tp=tp, ep=tp)
    parts = []
    for rank in ranks:
        tensors, layout = em.engine_rank(rank, tp=tp, ep=tp, layers=LAYERS)
        parts.append(rt.build_part(
            tensors, layout, topology=topology, rank=rank,
            resource_id=em.RESOURCE, revision=f"step-{STEP}",
            placement_set_id="engine-tp4-ep4"))
    return rt.placement_of(parts, topology), parts


def by_participant(parts):
    out = {}
    for p in parts:
        out.update(p.by_participant())
    return out


def run(store_dir: str) -> str:
    source, trainer = trainer_placement()
    target, engine = engine_placement()
    for p in trainer:
        em.fill_part(p, source, STEP)
    for p in engine:
        em.poison(p)
    store = reshard.WeightStore(f"fs://{store_dir}")
    manifest = store.upload(source, by_participant(trainer))
    verified = store.verify(manifest.manifest_key)
    report = store.load(manifest.manifest_key, target, by_participant(engine))
    checked = sum(em.check_part(p, target, STEP) for p in engine)
    total = sum(f.nbytes for f in target.fragments)  # replicas included
    if checked != total or report.bytes != total:
        raise AssertionError(f"checked {checked} bytes, loaded {report.bytes}"
                             f", the engine holds {total}")
    return (f"store_roundtrip: {len(source.tensors)} tensors uploaded from "
            f"trainer TP2xPP2xEP2 ({len(trainer)} ranks) as "
            f"{manifest.manifest_key} ({verified.bytes} bytes verified), "
            f"loaded into engine TP4xEP4 ({len(engine)} ranks) in "
            f"{report.read_requests} reads, {checked} bytes checked")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store directory (default: a "
                        "temporary one)")
    args = parser.parse_args(argv)
    if args.store:
        print(run(args.store))
        return 0
    with tempfile.TemporaryDirectory(prefix="store-roundtrip-") as d:
        print(run(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
