#!/usr/bin/env python3
"""Build the conformance scenario placements (source/target pairs).

Standard library only; hashing and canonical encoding come from reshard_oracle.
Writes <name>_source.json / <name>_target.json (canonical wire, ensure_ascii,
no trailing newline) and expected.json into the scenario directory.

Usage: make_scenarios.py [--out DIR] [--check]
  --check  regenerate in memory and compare with the files on disk (no writes)
"""

import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reshard_oracle as oracle  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "scenarios")
ITEMSIZE = {"bfloat16": 2, "uint8": 1, "float8_e4m3fn": 1, "float32": 4}
KINDS = ("dp", "pp", "ep", "tp")


# ---------------------------------------------------------------------------
# Tensor specification
# ---------------------------------------------------------------------------

def T(tensor_id, shape, dtype, axes, owner=None, layer_id=0, expert_id=None,
      aliases=(), stage=None, fingerprint="hidden:v1"):
    """A tensor on one side.

    axes:  {kind: "replicated" | "ownership" | split dim (int)}
    owner: {kind: coordinate or tuple of coordinates} for every ownership kind
    stage: pipeline_stage_id written on every fragment (None: field omitted)
    """
    owner = dict(owner or {})
    for kind, sem in axes.items():
        assert (sem == "ownership") == (kind in owner), (tensor_id, kind)
    return {"tensor_id": tensor_id, "shape": list(shape), "dtype": dtype, "axes": dict(axes),
            "owner": owner, "layer_id": layer_id, "expert_id": expert_id,
            "aliases": sorted(aliases), "stage": stage, "fingerprint": fingerprint}


def S(dp=1, pp=1, ep=1, tp=1):
    return {"dp": dp, "pp": pp, "ep": ep, "tp": tp}


def axis_wire(kind, sem):
    if isinstance(sem, int):
        return {"semantics": "split", "kind": kind, "dim": sem}
    return {"semantics": sem, "kind": kind}


def descriptor(t):
    axes = [axis_wire(k, t["axes"][k]) for k in KINDS if k in t["axes"]]
    return {
        "tensor_id": t["tensor_id"],
        "global_shape": t["shape"],
        "dtype": t["dtype"],
        "itemsize": ITEMSIZE[t["dtype"]],
        "shard_dims": sorted(a["dim"] for a in axes if a["semantics"] == "split"),
        "layout_fingerprint": t["fingerprint"],
        "parallel_axes": axes,
        "layer_id": t["layer_id"],
        "expert_id": t["expert_id"],
    }


def fragment_for(t, sizes, rank):
    """The box a participant holds for tensor t, or None."""
    for kind, want in t["owner"].items():
        allowed = want if isinstance(want, tuple) else (want,)
        if rank[kind] not in allowed:
            return None
    offset, extent = [0] * len(t["shape"]), list(t["shape"])
    for kind, sem in t["axes"].items():
        if isinstance(sem, int):
            n = sizes[kind]
            assert t["shape"][sem] % n == 0, (t["tensor_id"], kind)
            extent[sem] = t["shape"][sem] // n
            offset[sem] = rank[kind] * extent[sem]
    frag = {
        "tensor_id": t["tensor_id"],
        "global_offset": offset,
        "local_shape": extent,
        "nbytes": oracle._prod(extent) * ITEMSIZE[t["dtype"]],
        "rank": dict(rank),
        "aliases": t["aliases"],
    }
    if t["stage"] is not None:
        frag["pipeline_stage_id"] = t["stage"]
    frag["placement_fragment_id"] = oracle.fragment_id(frag)
    return frag


def build_placement(name, side, sizes, tensors):
    participants = []
    for dp, pp, ep, tp in itertools.product(*(range(sizes[k]) for k in KINDS)):
        rank = {"dp": dp, "pp": pp, "ep": ep, "tp": tp}
        participants.append({"participant_id": "p-d%d-p%d-e%d-t%d" % (dp, pp, ep, tp), "rank": rank})
    participants.sort(key=lambda p: p["participant_id"])
    topology = {"tp_size": sizes["tp"], "pp_size": sizes["pp"], "ep_size": sizes["ep"],
                "dp_size": sizes["dp"], "participants": participants}
    topology["topology_id"] = oracle.topology_id(topology)
    parts = []
    for p in participants:
        frags = [f for f in (fragment_for(t, sizes, p["rank"]) for t in tensors) if f]
        frags.sort(key=lambda f: f["placement_fragment_id"])
        parts.append({"participant_id": p["participant_id"], "rank": p["rank"], "fragments": frags})
    placement = {
        "resource_kind": "model_weight",
        "resource_id": "demo-model",
        "revision": "step-1",
        "weight_generation": 1,
        "placement_set_id": "%s-%s" % (name, side),
        "topology": topology,
        "tensors": sorted((descriptor(t) for t in tensors), key=lambda d: d["tensor_id"]),
        "parts": parts,
    }
    placement["placement_id"] = oracle.placement_id(placement)
    oracle.validate(placement)
    return placement


# ---------------------------------------------------------------------------
# Scenarios (digest section 7.2, items 1-10)
# ---------------------------------------------------------------------------

SCENARIOS = []


def scenario(name, src_sizes, src_tensors, dst_sizes, dst_tensors, note, expect_error=None):
    SCENARIOS.append({"name": name, "src": (src_sizes, src_tensors), "dst": (dst_sizes, dst_tensors),
                      "note": note, "expect_error": expect_error})


def layers(fn, count=4):
    return [fn(layer) for layer in range(count)]


# 1. TP split / merge.
def tp_pair(tp):
    return [T("layers.0.proj.weight", [64, 16], "bfloat16", {"tp": 0}),
            T("layers.0.bias.bytes", [8], "uint8", {"tp": 0})]


scenario("tp_split_4_to_8", S(tp=4), tp_pair(4), S(tp=8), tp_pair(8),
         "[64,16] bf16 + [8] uint8, TP4 -> TP8 on dim0")
scenario("tp_merge_8_to_4", S(tp=8), tp_pair(8), S(tp=4), tp_pair(4),
         "[64,16] bf16 + [8] uint8, TP8 -> TP4 on dim0")


def cube(dim):
    return [T("layers.0.cube", [2048, 2048, 2048], "uint8", {"tp": dim})]


scenario("tp_cube_dim0_4_to_8", S(tp=4), cube(0), S(tp=8), cube(0),
         "[2048,2048,2048] uint8 TP4 -> TP8 dim0: 8 regions, 8 segments, 8 GiB")
scenario("tp_cube_dim0_8_to_4", S(tp=8), cube(0), S(tp=4), cube(0),
         "[2048,2048,2048] uint8 TP8 -> TP4 dim0: 8 regions, 8 segments")
scenario("tp_cube_dim0_to_dim1", S(tp=4), cube(0), S(tp=4), cube(1),
         "[2048,2048,2048] uint8 TP4 dim0 -> TP4 dim1: 16 regions, 8,192 segments")
scenario("tp_cube_dim0_to_dim2_stress", S(tp=4), cube(0), S(tp=4), cube(2),
         "stress: 16 regions x 1,048,576 segments; exceeds default max_segments_per_region")


# 2. EP regroup.
def ep_pair():
    return [T("layers.0.experts.w", [8, 4, 2], "bfloat16", {"ep": 0}),
            T("layers.0.experts.bytes", [8, 4], "uint8", {"ep": 0})]


scenario("ep_regroup_8_to_2", S(ep=8), ep_pair(), S(ep=2), ep_pair(),
         "[8,4,2] bf16 + [8,4] uint8 EP8 -> EP2 on dim0")
scenario("ep_regroup_2_to_8", S(ep=2), ep_pair(), S(ep=8), ep_pair(),
         "[8,4,2] bf16 + [8,4] uint8 EP2 -> EP8 on dim0")


def owned_experts(ep_size):
    return [T("layers.0.experts.%d.weight" % e, [4, 2], "bfloat16", {"ep": "ownership"},
              owner={"ep": e // (8 // ep_size)}, expert_id=e) for e in range(8)]


scenario("ep_ownership_8_to_2", S(ep=8), owned_experts(8), S(ep=2), owned_experts(2),
         "8 individually allocated experts (expert_id, EP ownership) EP8 -> EP2")


# 3. PP routing (ownership comes from fragment ranks only).
def pp_layers(owner_of):
    return layers(lambda l: T("layers.%d.weight" % l, [8], "bfloat16", {"pp": "ownership"},
                              owner={"pp": owner_of(l)}, layer_id=l))


scenario("pp_routing_2_to_4", S(pp=2), pp_layers(lambda l: l // 2), S(pp=4), pp_layers(lambda l: l),
         "owner layer//2 -> layer: routes (0,0),(0,1),(1,2),(1,3)")
scenario("pp_routing_4_to_2", S(pp=4), pp_layers(lambda l: l), S(pp=2), pp_layers(lambda l: l // 2),
         "owner layer -> layer//2: routes (0,0),(1,0),(2,1),(3,1)")
scenario("pp_routing_mod_2_to_4", S(pp=2), pp_layers(lambda l: l % 2), S(pp=4),
         pp_layers(lambda l: l % 4), "owner layer%2 -> layer%4")
scenario("pp_routing_mod_4_to_2", S(pp=4), pp_layers(lambda l: l % 4), S(pp=2),
         pp_layers(lambda l: l % 2), "owner layer%4 -> layer%2")


# 4. Cross-dimension.
def cd(shape, dtype, kind, dims):
    return [T("layers.0.experts.%s" % n, shape, dtype, {kind: d}) for n, d in zip("cd", dims)]


scenario("cross_dim_ep2_to_tp2", S(ep=2), cd([4, 6, 8], "bfloat16", "ep", (0, 0)),
         S(tp=2), cd([4, 6, 8], "bfloat16", "tp", (1, 2)),
         "[4,6,8] bf16 EP2 dim0 -> TP2 dim1 (vector C, tensor c) and dim2 (vector D, tensor d)")
scenario("cross_dim_ep4_to_tp4_uint8", S(ep=4), cd([4, 8, 8], "uint8", "ep", (0, 0)),
         S(tp=4), cd([4, 8, 8], "uint8", "tp", (1, 2)),
         "[4,8,8] uint8 EP4 dim0 -> TP4 dim1 (c) and dim2 (d)")
scenario("cross_dim_ep8_to_tp8_dim2",
         S(ep=8), [T("layers.0.experts.w", [8, 8192, 8192], "bfloat16", {"ep": 0})],
         S(tp=8), [T("layers.0.experts.w", [8, 8192, 8192], "bfloat16", {"tp": 2})],
         "[8,8192,8192] bf16 EP8 dim0 -> TP8 dim2: 64 regions x 8,192 segments")
scenario("cross_dim_tp4_dim0_to_dim2",
         S(tp=4), [T("layers.0.physical", [128, 4096, 16384], "uint8", {"tp": 0})],
         S(tp=4), [T("layers.0.physical", [128, 4096, 16384], "uint8", {"tp": 2})],
         "[128,4096,16384] uint8 TP4 dim0 -> TP4 dim2: 16 regions, 2,097,152 segments")


# 5. Four axes: DP replicated, PP owned, EP split dim0, TP split dim1.
def four_axis(shape, dtype, pp_owner):
    axes = {"dp": "replicated", "pp": "ownership", "ep": 0, "tp": 1}
    return layers(lambda l: T("layers.%d.experts.w" % l, shape, dtype, axes,
                              owner={"pp": pp_owner(l)}, layer_id=l))


scenario("four_axis", S(dp=2, pp=2, ep=8, tp=4), four_axis([8, 8, 2], "bfloat16", lambda l: l // 2),
         S(dp=4, pp=4, ep=2, tp=8), four_axis([8, 8, 2], "bfloat16", lambda l: l),
         "4 layers x [8,8,2] bf16: DP2/PP2/EP8/TP4 -> DP4/PP4/EP2/TP8, 4,096 bytes")
scenario("four_axis_uint8", S(dp=2, pp=2, ep=8, tp=4), four_axis([8, 8], "uint8", lambda l: l // 2),
         S(dp=4, pp=4, ep=2, tp=8), four_axis([8, 8], "uint8", lambda l: l),
         "4 layers x [8,8] uint8: (1,2) boxes -> (4,1) boxes")


# 6. DP replicas.
def dp_small(dp_axes):
    return [T("layers.0.bytes", [8], "uint8", dict(dp_axes, tp=0)),
            T("layers.0.proj.weight", [16, 8], "bfloat16", dict(dp_axes, tp=1))]


scenario("dp_replicas_dp2tp2_to_dp3tp4", S(dp=2, tp=2), dp_small({"dp": "replicated"}),
         S(dp=3, tp=4), dp_small({"dp": "replicated"}),
         "DP2 TP2 -> DP3 TP4: target dp 0,1,2 read source replicas 0,1,0")
scenario("dp_replicas_dp2tp4_to_dp1tp8",
         S(dp=2, tp=4), [T("layers.0.big", [2048, 2048, 1024], "uint8", {"dp": "replicated", "tp": 0})],
         S(tp=8), [T("layers.0.big", [2048, 2048, 1024], "uint8", {"tp": 0})],
         "DP2/TP4 -> DP1/TP8 [2048,2048,1024] uint8: replica 0 only, 8 regions")


# 7. DP ownership.
def dp_owned(owners):
    return [T("layers.0.owned_%d" % i, [8, 4], "bfloat16", {"dp": "ownership", "tp": 0},
              owner={"dp": o}) for i, o in enumerate(owners)]


def dp_replicated_target():
    return [T("layers.0.owned_%d" % i, [8, 4], "bfloat16", {"dp": "replicated"}) for i in range(2)]


scenario("dp_ownership", S(dp=2, tp=2), dp_owned([0, 1]), S(dp=2), dp_replicated_target(),
         "tensor owned_0 owned by dp0, owned_1 by dp1; both route through their owner")
scenario("dp_ownership_ambiguous", S(dp=2, tp=2), dp_owned([(0, 1), 1]), S(dp=2),
         dp_replicated_target(), "owned_0 has two complete DP owners: planning must fail",
         expect_error="ambiguous declared owners")


# 8. Virtual PP stages.
def staged(stages):
    return [T("layers.%d.weight" % i, [8], "bfloat16", {"tp": 0}, layer_id=i, stage=s)
            for i, s in enumerate(stages)]


scenario("virtual_pp_stages", S(tp=2), staged([0, 1]), S(tp=2), staged([2, 3]),
         "stages 0/1 on pp0 -> stages 2/3 on pp0: routes (0,0,0,2), (0,1,0,3)")


# 9. Aliases (tied embeddings).
TIED = ("lm_head.weight", "model.embed_tokens.weight")


def tied_pp(pp_owned):
    out = []
    for i, tid in enumerate(("model.embed_tokens.weight", "lm_head.weight")):
        axes, owner = ({"pp": "ownership"}, {"pp": i}) if pp_owned else ({}, None)
        out.append(T(tid, [32], "bfloat16", axes, owner=owner, aliases=TIED))
    return out


def tied_tp(dim):
    return [T(tid, [2, 2], "bfloat16", {"tp": dim}, aliases=TIED) for tid in TIED]


scenario("aliases_tied_embeddings", S(pp=2), tied_pp(True), S(), tied_pp(False),
         "embed_tokens on pp0, lm_head on pp1 -> one participant: 2 ops, 128 bytes")
scenario("aliases_cross_dim", S(tp=2), tied_tp(0), S(tp=2), tied_tp(1),
         "tied [2,2] bf16 TP2 dim0 -> TP2 dim1: 8 ops")


# 10. FP8 weights with scales.
def fp8_dense():
    return [T("layers.0.mlp.down_proj.weight", [1024, 128], "float8_e4m3fn", {"tp": 0},
              fingerprint="fp8-e4m3fn:block-128x128:v1"),
            T("layers.0.mlp.down_proj.weight_scale_inv", [8, 1], "float32", {"tp": 0},
              fingerprint="fp8-scale:block-128x128:v1")]


scenario("fp8_weight_scale_tp4_to_tp8", S(tp=4), fp8_dense(), S(tp=8), fp8_dense(),
         "weight [1024,128] float8_e4m3fn + scale [8,1] float32, TP4 -> TP8 dim0")


def fused_moe(axes, owner=None):
    out = []
    for proj in ("gate_proj", "up_proj"):
        base = "layers.0.mlp.experts.%s." % proj
        out.append(T(base + "weight", [4, 256, 128], "float8_e4m3fn", axes, owner=owner,
                     fingerprint="fp8-e4m3fn:block-128x128:v1"))
        out.append(T(base + "weight_scale_inv", [4, 2, 1], "float32", axes, owner=owner,
                     fingerprint="fp8-scale:block-128x128:v1"))
    return out


scenario("fp8_fused_moe", S(ep=2, tp=2), fused_moe({"ep": 0, "tp": 1}),
         S(pp=2, ep=4), fused_moe({"pp": "ownership", "ep": 0}, owner={"pp": 1}),
         "fused MoE FP8 gate/up weight [4,256,128] + scale [4,2,1]: EP2xTP2 pp0 -> EP4 pp1: "
         "32 ops, 32 segments, route (0,1); target pp0 parts are empty")


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

def generate():
    files, expected = {}, {"placements": {}, "plans": {}}
    for sc in SCENARIOS:
        name = sc["name"]
        sides = {}
        for side, (sizes, tensors) in (("source", sc["src"]), ("target", sc["dst"])):
            placement = build_placement(name, side, sizes, tensors)
            fname = "%s_%s.json" % (name, side)
            text = oracle.canonical(placement)
            files[fname] = text.encode("ascii")
            summary = oracle.summarize(fname, placement)
            expected["placements"][fname] = {
                "placement_id": summary["placement_id"], "digest": summary["digest"],
                "topology_id": summary["topology_id"], "fragments": summary["fragments"],
                "tensors": summary["tensors"], "participants": summary["participants"],
                "sizes": sizes}
            sides[side] = placement
        result = oracle.plan_or_error(sides["source"], sides["target"])
        if sc["expect_error"]:
            assert sc["expect_error"] in result.get("error", ""), (name, result)
        else:
            assert "error" not in result, (name, result)
        result.update({"source": name + "_source.json", "target": name + "_target.json",
                       "note": sc["note"]})
        expected["plans"][name] = result
    files["expected.json"] = (json.dumps(expected, indent=1, sort_keys=True) + "\n").encode("ascii")
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description="generate conformance scenario placements")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    files = generate()
    stale = 0
    for fname, data in sorted(files.items()):
        path = os.path.join(args.out, fname)
        if args.check:
            try:
                with open(path, "rb") as handle:
                    same = handle.read() == data
            except OSError:
                same = False
            if not same:
                print("stale: " + fname)
                stale += 1
        else:
            os.makedirs(args.out, exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
    if not args.check:
        print("wrote %d files to %s" % (len(files), os.path.normpath(args.out)))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
