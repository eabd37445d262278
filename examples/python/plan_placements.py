"""Plans a reshard between two placements and prints its summary.

Usage: python3 plan_placements.py [SOURCE.json TARGET.json] [--json]

Without arguments the pair tests/data/scenarios/tp_split_4_to_8_*.json of
this repository is planned. Prints what moves: tensors, fragments,
regions, bytes, the busiest source and target participants and the
pipeline routes; ``--json`` prints the summary JSON instead (byte for byte
what ``reshard plan --json`` prints). The last line summarises; exits 0
when both placements are valid and every target byte has a source.
"""

from __future__ import annotations

import argparse
import os
import sys

import reshard

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_DEFAULT = [os.path.join(_REPO, "tests", "data", "scenarios",
                         f"tp_split_4_to_8_{side}.json")
            for side in ("source", "target")]


def load(path: str) -> reshard.Placement:
    with open(path, "rb") as f:
        return reshard.Placement.from_json(f.read())


def describe(plan: reshard.Plan, source: reshard.Placement,
             target: reshard.Placement) -> str:
    s = plan.summary
    lines = [
        f"source {source.placement_id} ({len(source.parts)} participants, "
        f"{len(source.fragments)} fragments)",
        f"target {target.placement_id} ({len(target.parts)} participants, "
        f"{len(target.fragments)} fragments)",
        f"tensors {len(target.tensors)}  regions {s['regions']}  operations "
        f"{s['operations']}  segments {s['segments']}  bytes {s['bytes']}",
        f"source load: max {s['max_source_bytes']} B, mean "
        f"{s['mean_source_bytes']:.0f} B; source fragments used "
        f"{s['source_fragments_used']} of {len(source.fragments)}",
    ]
    sent: dict = {}
    received: dict = {}
    for src, dst, nbytes in plan.traffic:
        sent[src] = sent.get(src, 0) + nbytes
        received[dst] = received.get(dst, 0) + nbytes
    for title, load_ in (("sources", sent), ("targets", received)):
        busiest = sorted(load_.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        lines.append(f"most loaded {title}: " + ", ".join(
            f"{p} {b} B" for p, b in busiest))
    for r in plan.pipeline_routes:
        lines.append(f"route pp {r['source_pp']} -> {r['target_pp']}: "
                     f"{r['operations']} operations, {r['bytes']} bytes")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("placements", nargs="*", metavar="PLACEMENT",
                        help="source and target placement JSON files")
    parser.add_argument("--json", action="store_true",
                        help="print the plan summary JSON")
    args = parser.parse_args(argv)
    if len(args.placements) not in (0, 2):
        parser.error("give a source and a target placement, or neither")
    paths = args.placements or _DEFAULT
    try:
        source, target = (load(p) for p in paths)
        plan = reshard.plan(source, target)
    except (OSError, reshard.Error) as e:
        print(f"plan_placements: FAILED ({e})")
        return 1
    print(plan.to_json() if args.json else describe(plan, source, target))
    if plan.summary["bytes"] != sum(f.nbytes for f in target.fragments):
        print("plan_placements: FAILED (the plan does not fill the target)")
        return 1
    print(f"plan_placements: {os.path.basename(paths[0])} -> "
          f"{os.path.basename(paths[1])}: {plan.summary['regions']} regions, "
          f"{plan.summary['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
