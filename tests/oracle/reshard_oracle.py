#!/usr/bin/env python3
"""Independent reference oracle for the weight-placement wire format.

Standard library only.  Recomputes the canonical identities of placement files
(placement_fragment_id, topology_id, placement_id, digest) and, for a
source/target pair, the logical transfer plan counts (regions, segments, bytes,
pipeline routes) using a straightforward box-intersection planner.

Usage:
  reshard_oracle.py PLACEMENT.json [...]          one canonical summary line per file
  reshard_oracle.py --check PLACEMENT.json [...]  also verify ids and byte-exact round trip
  reshard_oracle.py --expected EXP.json FILES...  compare with an expected.json map
  reshard_oracle.py --plan SOURCE.json TARGET.json
  reshard_oracle.py --canonicalize FILE.json       canonical JSON, ensure_ascii=True
  reshard_oracle.py --canonicalize-utf8 FILE.json  canonical JSON, ensure_ascii=False
"""

import argparse
import hashlib
import json
import os
import sys

KIND_ORDER = ("dp", "pp", "ep", "tp")
U64_MAX = 2**64 - 1
MAX_SEGMENTS_PER_REGION = 1_000_000
MAX_TRANSFER_REGIONS = 1_000_000
MAX_TOTAL_LOWERED_SEGMENTS = 10_000_000


# ---------------------------------------------------------------------------
# Canonical JSON and hashing
# ---------------------------------------------------------------------------

def canonical(obj, ensure_ascii=True):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=ensure_ascii)


def sha256_hex(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_id(obj):
    return "sha256:" + sha256_hex(canonical(obj))


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("duplicate JSON field: %r" % key)
        out[key] = value
    return out


def _no_constants(name):
    raise ValueError("non-finite JSON number is unsupported: %s" % name)


def load_json_text(text):
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def load_json(path):
    with open(path, "rb") as handle:
        raw = handle.read()
    return raw, load_json_text(raw.decode("utf-8"))


# ---------------------------------------------------------------------------
# Identities
# ---------------------------------------------------------------------------

def rank_obj(rank):
    return {"dp": rank["dp"], "tp": rank["tp"], "pp": rank["pp"], "ep": rank["ep"]}


def fragment_identity(fragment):
    ident = {
        "schema": "weight-placement-fragment",
        "tensor_id": fragment["tensor_id"],
        "global_offset": list(fragment["global_offset"]),
        "local_shape": list(fragment["local_shape"]),
        "nbytes": fragment["nbytes"],
        "rank": rank_obj(fragment["rank"]),
        "aliases": sorted(set(fragment["aliases"])),
    }
    if fragment.get("pipeline_stage_id") is not None:
        ident["pipeline_stage_id"] = fragment["pipeline_stage_id"]
    return ident


def fragment_id(fragment):
    return sha256_id(fragment_identity(fragment))


def topology_id(topology):
    return sha256_id({
        "schema": "weight-parallel-topology",
        "tp_size": topology["tp_size"],
        "pp_size": topology["pp_size"],
        "ep_size": topology["ep_size"],
        "dp_size": topology["dp_size"],
        "participants": [
            {"participant_id": p["participant_id"], "rank": rank_obj(p["rank"])}
            for p in topology["participants"]
        ],
    })


def placement_id(placement):
    topo = placement["topology"]
    return sha256_id({
        "schema": "complete-weight-placement",
        "resource_id": placement["resource_id"],
        "revision": placement["revision"],
        "weight_generation": placement["weight_generation"],
        "placement_set_id": placement["placement_set_id"],
        "topology": {
            "tp_size": topo["tp_size"],
            "pp_size": topo["pp_size"],
            "ep_size": topo["ep_size"],
            "dp_size": topo["dp_size"],
            "topology_id": topo["topology_id"],
            "participants": topo["participants"],
        },
        "tensors": placement["tensors"],
        "parts": [
            {"participant_id": part["participant_id"], "rank": part["rank"],
             "fragments": part["fragments"]}
            for part in placement["parts"]
        ],
    })


def digest(placement):
    return sha256_hex(canonical(placement))


def all_fragments(placement):
    return [f for part in placement["parts"] for f in part["fragments"]]


def summarize(path, placement):
    return {
        "file": os.path.basename(path),
        "placement_id": placement_id(placement),
        "digest": digest(placement),
        "topology_id": topology_id(placement["topology"]),
        "fragment_ids": [fragment_id(f) for f in all_fragments(placement)],
        "fragments": len(all_fragments(placement)),
        "tensors": len(placement["tensors"]),
        "participants": len(placement["topology"]["participants"]),
    }


def check(raw, placement, summary):
    """Self-consistency of a wire file: supplied ids and byte-exact encoding."""
    supplied = [f["placement_fragment_id"] for f in all_fragments(placement)]
    return {
        "roundtrip": canonical(placement).encode("utf-8") == raw,
        "trailing_newline": raw.endswith(b"\n"),
        "fragment_ids_match": supplied == summary["fragment_ids"],
        "topology_id_match": placement["topology"]["topology_id"] == summary["topology_id"],
        "placement_id_match": placement["placement_id"] == summary["placement_id"],
    }


# ---------------------------------------------------------------------------
# Validation (structural rules and global placement rules 7-26)
# ---------------------------------------------------------------------------

TOP_FIELDS = {"resource_kind", "resource_id", "revision", "weight_generation",
              "placement_set_id", "placement_id", "topology", "tensors", "parts"}
TOPOLOGY_FIELDS = {"tp_size", "pp_size", "ep_size", "dp_size", "topology_id", "participants"}
TENSOR_FIELDS = {"tensor_id", "global_shape", "dtype", "itemsize", "shard_dims",
                 "layout_fingerprint", "parallel_axes", "layer_id", "expert_id"}
FRAGMENT_FIELDS = {"placement_fragment_id", "tensor_id", "global_offset", "local_shape",
                   "nbytes", "rank", "aliases"}


def _require(cond, message):
    if not cond:
        raise ValueError(message)


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def _overlaps(a, b):
    return all(max(oa, ob) < min(oa + ea, ob + eb)
               for oa, ea, ob, eb in zip(a[0], a[1], b[0], b[1]))


def _exact_cover(shape, boxes):
    if any(o + e > g for off, ext in boxes for o, e, g in zip(off, ext, shape)):
        return False
    if sum(_prod(ext) for _, ext in boxes) != _prod(shape):
        return False
    return not any(_overlaps(boxes[i], boxes[j])
                   for i in range(len(boxes)) for j in range(i + 1, len(boxes)))


def _validate_tensor(t):
    _require(set(t) == TENSOR_FIELDS, "tensor schema fields do not match contract")
    shape = t["global_shape"]
    _require(shape and all(isinstance(e, int) and e >= 1 for e in shape), "bad global_shape")
    _require(t["itemsize"] >= 1, "itemsize must be >= 1")
    kinds = [a["kind"] for a in t["parallel_axes"]]
    _require(all(k in KIND_ORDER for k in kinds), "unsupported parallel axis kind")
    _require(len(set(kinds)) == len(kinds), "parallel axes must not contain duplicate kinds")
    _require(kinds == sorted(kinds, key=KIND_ORDER.index), "parallel axes are not in kind order")
    dims = []
    for a in t["parallel_axes"]:
        if a["semantics"] == "split":
            _require(set(a) == {"semantics", "kind", "dim"}, "bad split axis")
            _require(a["kind"] in ("ep", "tp"), "cannot use split semantics")
            _require(a["kind"] != "ep" or a["dim"] == 0, "EP must split dim 0")
            _require(0 <= a["dim"] < len(shape), "out-of-range dimension")
            dims.append(a["dim"])
        else:
            _require(a["semantics"] in ("replicated", "ownership") and set(a) == {"semantics", "kind"},
                     "bad axis")
    _require(len(set(dims)) == len(dims), "split axes must not share a dimension")
    _require(t["shard_dims"] == sorted(dims), "parallel axis split dimensions conflict with shard_dims")
    _require(t["expert_id"] is None or "ep" not in [a["kind"] for a in t["parallel_axes"]
                                                  if a["semantics"] == "split"],
             "an individually allocated expert requires explicit EP ownership")


def _validate_fragment(f, tensor, part_rank):
    keys = set(f)
    _require(keys == FRAGMENT_FIELDS or keys == FRAGMENT_FIELDS | {"pipeline_stage_id"},
             "fragment schema fields do not match contract")
    fid = f["placement_fragment_id"]
    _require(fid == fragment_id(f), "placement_fragment_id is not canonical: " + fid)
    _require(len(f["global_offset"]) == len(tensor["global_shape"]) == len(f["local_shape"]),
             "fragment rank mismatch: " + fid)
    _require(all(o >= 0 for o in f["global_offset"]) and all(e >= 1 for e in f["local_shape"]),
             "bad fragment box: " + fid)
    _require(all(o + e <= g for o, e, g in zip(f["global_offset"], f["local_shape"],
                                               tensor["global_shape"])),
             "fragment is out of bounds: " + fid)
    _require(f["nbytes"] == _prod(f["local_shape"]) * tensor["itemsize"] <= U64_MAX,
             "fragment byte size mismatch: " + fid)
    al = f["aliases"]
    _require(al == sorted(set(al)), "aliases must be sorted and unique")
    _require(not al or (len(al) >= 2 and f["tensor_id"] in al), "bad alias group: " + fid)
    _require(f["rank"] == part_rank, "placement part fragment rank differs from part rank")
    _require(f.get("pipeline_stage_id", 0) is not None and f.get("pipeline_stage_id", 0) >= 0,
             "bad pipeline_stage_id")


def _validate_axes(tid, tensor, frags, topo, participants):
    axes = _axes(tensor)
    sizes = {k: topo[k + "_size"] for k in KIND_ORDER}
    # Rule 21: undeclared active axes.
    declared_varying = [k for k in axes if len(set(f["rank"][k] for f in frags)) > 1]
    for kind in KIND_ORDER:
        if kind in axes or sizes[kind] <= 1:
            continue
        values = set(f["rank"][kind] for f in frags)
        _require(kind not in ("dp", "pp") and len(values) > 1,
                 "requires explicit parallel semantics for active undeclared %s axis: %s" % (kind, tid))
        _require(declared_varying, "varies across undeclared %s axis: %s" % (kind, tid))
        mapping = {}
        for f in frags:
            key = tuple(f["rank"][k] for k in declared_varying)
            _require(mapping.setdefault(key, f["rank"][kind]) == f["rank"][kind],
                     "varies independently across undeclared %s axis: %s" % (kind, tid))
    own = [k for k in KIND_ORDER if axes.get(k, {}).get("semantics") == "ownership"]
    rep = [k for k in KIND_ORDER if axes.get(k, {}).get("semantics") == "replicated"]
    split = [k for k in KIND_ORDER if axes.get(k, {}).get("semantics") == "split"]
    pick = lambda rank, kinds: tuple(rank[k] for k in kinds)
    owners = sorted(set(pick(f["rank"], own) for f in frags))
    for owner in owners:
        members = [p["rank"] for p in participants if pick(p["rank"], own) == owner]
        mine = [f for f in frags if pick(f["rank"], own) == owner]
        _require(set(pick(f["rank"], rep) for f in mine) == set(pick(r, rep) for r in members),
                 "missing or unexpected replicated-axis participant for " + tid)
        for replica in set(pick(r, rep) for r in members):
            group = [f for f in mine if pick(f["rank"], rep) == replica]
            boxes = [(f["global_offset"], f["local_shape"]) for f in group]
            _require(_exact_cover(tensor["global_shape"], boxes),
                     "global placement tensor is not fully covered: " + tid)
            ranks = [r for r in members if pick(r, rep) == replica]
            for k in split:
                _require(set(r[k] for r in ranks) == set(range(sizes[k])),
                         "missing or unexpected split-axis participant for " + tid)
            observed = set(pick(f["rank"], split) for f in group)
            _require(observed == set(pick(r, split) for r in ranks),
                     "missing or unexpected split-axis participant for " + tid)
            product = [()]
            for i in range(len(split)):
                product = [p + (v,) for p in product for v in sorted(set(o[i] for o in observed))]
            _require(observed == set(product), "non-Cartesian split-axis participant mapping: " + tid)
            for k in split:
                dim = axes[k]["dim"]
                merged = []
                for value in sorted(set(f["rank"][k] for f in group)):
                    spans = sorted((f["global_offset"][dim], f["global_offset"][dim] + f["local_shape"][dim])
                                   for f in group if f["rank"][k] == value)
                    cur = list(spans[0])
                    for b, e in spans[1:]:
                        if b <= cur[1]:
                            cur[1] = max(cur[1], e)
                        else:
                            merged.append(tuple(cur))
                            cur = [b, e]
                    merged.append(tuple(cur))
                merged.sort()
                edge = 0
                for b, e in merged:
                    _require(b == edge, "split-axis rank geometry conflicts with declared dimension: "
                             "%s: %s -> dim %d" % (tid, k, dim))
                    edge = e
                _require(edge == tensor["global_shape"][dim],
                         "split-axis rank geometry conflicts with declared dimension: "
                         "%s: %s -> dim %d" % (tid, k, dim))


def validate(placement):
    """Raise ValueError when the wire placement breaks a contract rule."""
    _require(set(placement) == TOP_FIELDS, "placement schema fields do not match contract")
    _require(placement["resource_kind"] == "model_weight",
             "placement manifest resource_kind must be model_weight")
    topo = placement["topology"]
    _require(set(topo) == TOPOLOGY_FIELDS, "topology schema fields do not match contract")
    participants = topo["participants"]
    _require(participants, "topology participants must not be empty")
    ids = [p["participant_id"] for p in participants]
    _require(ids == sorted(set(ids)), "topology participants must be sorted and unique")
    _require(len(set(canonical(p["rank"]) for p in participants)) == len(participants),
             "duplicate topology parallel rank")
    for p in participants:
        _require(set(p["rank"]) == set(KIND_ORDER), "rank schema fields do not match contract")
        for k in KIND_ORDER:
            _require(0 <= p["rank"][k] < topo[k + "_size"], "%s rank is out of range" % k)
    _require(topo["topology_id"] == topology_id(topo), "topology_id does not match canonical topology")
    tensors = {}
    for t in placement["tensors"]:
        _validate_tensor(t)
        tensors[t["tensor_id"]] = t
    _require(list(tensors) == sorted(tensors) and len(tensors) == len(placement["tensors"]),
             "tensors must be sorted and unique")
    parts = placement["parts"]
    _require([p["participant_id"] for p in parts] == ids, "parts must match topology participants")
    by_tensor, seen_ids = {}, set()
    for part, p in zip(parts, participants):
        _require(set(part) == {"participant_id", "rank", "fragments"}, "part schema fields mismatch")
        _require(part["rank"] == p["rank"], "placement part rank differs from topology")
        fids = [f["placement_fragment_id"] for f in part["fragments"]]
        _require(fids == sorted(fids), "part fragments must be sorted by placement_fragment_id")
        for f in part["fragments"]:
            _require(f["tensor_id"] in tensors, "unknown tensor_id: " + f["tensor_id"])
            _validate_fragment(f, tensors[f["tensor_id"]], part["rank"])
            _require(f["placement_fragment_id"] not in seen_ids, "duplicate fragment_id")
            seen_ids.add(f["placement_fragment_id"])
            by_tensor.setdefault(f["tensor_id"], []).append(f)
        local = {}
        for f in part["fragments"]:
            local.setdefault(f["tensor_id"], []).append((f["global_offset"], f["local_shape"]))
        for boxes in local.values():
            _require(not any(_overlaps(boxes[i], boxes[j]) for i in range(len(boxes))
                             for j in range(i + 1, len(boxes))),
                     "logical fragment boxes overlap for tensor and parallel rank")
    _require(tensors and seen_ids, "global weight placement must contain tensors and fragments")
    for tid, tensor in tensors.items():
        _require(tid in by_tensor, "placement JSON contains an unreferenced tensor: " + tid)
        for f in by_tensor[tid]:
            for member in f["aliases"]:
                _require(member in tensors, "alias group references unknown tensor")
                _require(all(g["aliases"] == f["aliases"] for g in by_tensor[member]),
                         "alias group is not declared consistently for tensor: " + member)
        _validate_axes(tid, tensor, by_tensor[tid], topo, participants)
    _require(placement["placement_id"] == placement_id(placement),
             "placement_id does not match canonical logical content")


# ---------------------------------------------------------------------------
# Reference planner (box intersection; counts only)
# ---------------------------------------------------------------------------

def _axes(tensor):
    return {axis["kind"]: axis for axis in tensor["parallel_axes"]}


def _owner_key(tensor, rank):
    axes = _axes(tensor)
    return tuple(rank[k] for k in KIND_ORDER if axes.get(k, {}).get("semantics") == "ownership")


def _rank_key(fragment):
    r = fragment["rank"]
    return (r["dp"], r["pp"], r["ep"], r["tp"], fragment["placement_fragment_id"])


def _covers(shape, boxes):
    """Distinct boxes exactly tile the tensor (in bounds, no overlap, full volume)."""
    boxes = sorted(set((tuple(o), tuple(s)) for o, s in boxes))
    volume = 1
    for extent in shape:
        volume *= extent
    total = 0
    for off, ext in boxes:
        if any(o + e > g for o, e, g in zip(off, ext, shape)):
            return False
        v = 1
        for e in ext:
            v *= e
        total += v
    if total != volume:
        return False
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            (oa, ea), (ob, eb) = boxes[i], boxes[j]
            if all(max(a, b) < min(a + x, b + y) for a, x, b, y in zip(oa, ea, ob, eb)):
                return False
    return True


def _strides(shape, itemsize):
    strides = [0] * len(shape)
    acc = itemsize
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= shape[d]
    return strides


def region_geometry(src, dst, off, shape, itemsize):
    """Return (inner_bytes, outer_counts) per the canonical row-major derivation."""
    s_src = _strides(src["local_shape"], itemsize)
    s_dst = _strides(dst["local_shape"], itemsize)
    inner = shape[-1] * itemsize
    k = len(shape) - 1
    for d in range(len(shape) - 2, -1, -1):
        if s_src[d] == inner and s_dst[d] == inner:
            inner *= shape[d]
            k = d
        else:
            break
    return inner, list(shape[:k])


class PlanError(ValueError):
    pass


def _select_sources(source):
    """Map (tensor_id, target_dp) -> list of eligible source fragments."""
    tensors = {t["tensor_id"]: t for t in source["tensors"]}
    frags = all_fragments(source)
    by_tensor = {}
    for f in frags:
        by_tensor.setdefault(f["tensor_id"], []).append(f)
    dp_ranks = sorted(set(f["rank"]["dp"] for f in frags))
    chosen = {}  # (dp, tensor) -> owner key
    complete = []
    for dp in dp_ranks:
        ok = True
        for tid, tensor in tensors.items():
            if _axes(tensor).get("dp", {}).get("semantics") == "ownership":
                continue
            groups = {}
            for f in by_tensor.get(tid, []):
                if f["rank"]["dp"] == dp:
                    key = _owner_key(tensor, f["rank"])
                    groups.setdefault(key, []).append((f["global_offset"], f["local_shape"]))
            if not groups or not all(_covers(tensor["global_shape"], g) for g in groups.values()):
                ok = False
                break
            chosen[(dp, tid)] = min(groups)
        if ok:
            complete.append(dp)
    if not complete:
        raise PlanError("source manifests have no complete DP replica; tensors are not fully covered")
    dp_owned = {}
    for tid, tensor in tensors.items():
        if _axes(tensor).get("dp", {}).get("semantics") != "ownership":
            continue
        groups = {}
        for f in by_tensor.get(tid, []):
            groups.setdefault(_owner_key(tensor, f["rank"]), []).append(
                (f["global_offset"], f["local_shape"]))
        full = [k for k, g in groups.items() if _covers(tensor["global_shape"], g)]
        if not full:
            raise PlanError("DP-owned source tensor has no complete declared owner: " + tid)
        if len(full) > 1 or len(groups) > 1:
            raise PlanError("DP-owned source tensor has ambiguous declared owners: " + tid)
        dp_owned[tid] = full[0]
    return tensors, by_tensor, complete, chosen, dp_owned


def plan(source, target):
    for field in ("resource_id", "revision", "weight_generation"):
        if source[field] != target[field]:
            raise PlanError("source and target %s differ" % field)
    s_tensors, by_tensor, complete, chosen, dp_owned = _select_sources(source)
    t_tensors = {t["tensor_id"]: t for t in target["tensors"]}
    if set(s_tensors) != set(t_tensors):
        raise PlanError("source and target tensor sets differ")
    regions = segments = nbytes = max_seg = 0
    routes = {}
    replica_of = {}
    t_frags = sorted(all_fragments(target), key=lambda f: f["placement_fragment_id"])
    for tf in t_frags:
        tid = tf["tensor_id"]
        tensor = s_tensors[tid]
        itemsize = tensor["itemsize"]
        t_dp = tf["rank"]["dp"]
        if tid in dp_owned:
            owner = dp_owned[tid]
            eligible = [f for f in by_tensor[tid] if _owner_key(tensor, f["rank"]) == owner]
        else:
            dp = complete[t_dp % len(complete)]
            replica_of[t_dp] = dp
            owner = chosen[(dp, tid)]
            eligible = [f for f in by_tensor[tid]
                        if f["rank"]["dp"] == dp and _owner_key(tensor, f["rank"]) == owner]
        groups = {}
        for f in sorted(eligible, key=_rank_key):
            groups.setdefault((tuple(f["global_offset"]), tuple(f["local_shape"])), f)
        covered = 0
        for (s_off, s_shape), sf in sorted(groups.items()):
            off, shape = [], []
            for so, se, to, te in zip(s_off, s_shape, tf["global_offset"], tf["local_shape"]):
                begin, end = max(so, to), min(so + se, to + te)
                off.append(begin)
                shape.append(end - begin)
            if any(e <= 0 for e in shape):
                continue
            inner, outer = region_geometry(sf, tf, off, shape, itemsize)
            count = 1
            for c in outer:
                count *= c
            volume = 1
            for e in shape:
                volume *= e
            covered += volume
            regions += 1
            segments += count
            nbytes += volume * itemsize
            max_seg = max(max_seg, count)
            key = (sf["rank"]["pp"], sf.get("pipeline_stage_id"),
                   tf["rank"]["pp"], tf.get("pipeline_stage_id"))
            routes[key] = routes.get(key, 0) + 1
        target_volume = 1
        for e in tf["local_shape"]:
            target_volume *= e
        if covered != target_volume:
            raise PlanError("target fragment is not fully covered: " + tf["placement_fragment_id"])
    none_last = lambda v: -1 if v is None else v
    route_list = [list(k) + [n] for k, n in
                  sorted(routes.items(), key=lambda kv: tuple(none_last(v) for v in kv[0]))]
    return {
        "regions": regions,
        "segments": segments,
        "bytes": nbytes,
        "max_segments_per_region": max_seg,
        "within_default_limits": (max_seg <= MAX_SEGMENTS_PER_REGION
                                  and regions <= MAX_TRANSFER_REGIONS
                                  and segments <= MAX_TOTAL_LOWERED_SEGMENTS),
        "complete_source_replicas": complete,
        "target_dp_reads": [[t, d] for t, d in sorted(replica_of.items())],
        "routes": route_list,
    }


def plan_or_error(source, target):
    try:
        return plan(source, target)
    except PlanError as exc:
        return {"error": str(exc)}


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--canonicalize", action="store_true")
    mode.add_argument("--canonicalize-utf8", action="store_true")
    mode.add_argument("--plan", action="store_true", help="files are SOURCE TARGET")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--expected", metavar="EXPECTED_JSON")
    args = parser.parse_args(argv)

    if args.canonicalize or args.canonicalize_utf8:
        for path in args.files:
            _, obj = load_json(path)
            sys.stdout.buffer.write(canonical(obj, ensure_ascii=args.canonicalize).encode("utf-8"))
            sys.stdout.buffer.write(b"\n" if len(args.files) > 1 else b"")
        return 0

    if args.plan:
        if len(args.files) != 2:
            parser.error("--plan takes SOURCE TARGET")
        _, source = load_json(args.files[0])
        _, target = load_json(args.files[1])
        print(canonical(plan_or_error(source, target)))
        return 0

    expected = None
    if args.expected:
        _, expected = load_json(args.expected)
    failures = 0
    for path in args.files:
        raw, placement = load_json(path)
        summary = summarize(path, placement)
        if args.check:
            summary["check"] = check(raw, placement, summary)
            try:
                validate(placement)
                summary["check"]["valid"] = True
            except (ValueError, KeyError, TypeError) as exc:
                summary["check"]["valid"] = "%s: %s" % (type(exc).__name__, exc)
            bad = [k for k, v in summary["check"].items()
                   if k != "trailing_newline" and v is not True]
            failures += bool(bad)
        if expected is not None:
            want = expected.get(summary["file"])
            diffs = ["missing"] if want is None else [
                k for k in ("placement_id", "digest", "topology_id", "fragments")
                if k in want and want[k] != summary[k]]
            summary["expected_mismatch"] = diffs
            failures += bool(diffs)
        print(canonical(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
