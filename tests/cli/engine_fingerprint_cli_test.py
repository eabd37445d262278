#!/usr/bin/env python3
"""Parameter-map fingerprints on the command line.

A vLLM 0.33 engine declares its parameter maps (`engine layout --declare`);
a map built for an older vLLM release (`vllm@<0.33`, whose MoE experts are
`mlp.experts.w13_weight` where 0.33 holds
`mlp.experts.routed_experts.w13_weight`) is refused against that
declaration naming the first differing parameter, by `engine load` and by
`engine reshard` on every --via (local, ucx, a store), before anything is
read or written. The matching release passes and moves every byte.

Usage: engine_fingerprint_cli_test.py RESHARD TESTS_DIR
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoints as hfc  # noqa: E402
from harness import (Suite, check, expect_error, expect_ok,  # noqa: E402
                     run_cli)

RESHARD = sys.argv[1]
SUITE = Suite()
TMP = {}
OLD = "vllm@<0.33"
NEW = "vllm@0.33"


def path(*parts):
    return os.path.join(TMP["dir"], *parts)


def cli(*args, timeout=180):
    return run_cli(RESHARD, *args, timeout=timeout)


def checkpoint():
    d = path("ckpt")
    if not os.path.isdir(d):
        hfc.write_checkpoint(d, hfc.CONFIGS["qwen3_moe"])
    return d


def layout(engine, tp, name):
    """(params JSON, declaration JSON) of `engine` at TP `tp`."""
    params, declare = path(name + ".params.json"), path(name + ".decl.json")
    if not os.path.exists(declare):
        expect_ok(cli("engine", "layout", os.path.join(checkpoint(),
                                                       "config.json"),
                      "--engine", engine, "--tp", tp, "-o",
                      path(name + ".placement.json"), "--params", params,
                      "--declare", declare), "engine layout " + engine)
    with open(params) as p, open(declare) as d:
        return json.load(p), json.load(d)


def mismatch(who):
    """The exact refusal of OLD's maps against NEW's declaration."""
    old_params, old_decl = layout(OLD, 2, "old")
    new_params, new_decl = layout(NEW, 2, "new")
    pid = "p-d0-p0-e0-t0"

    def of(doc):
        return next(p for p in doc["participants"]
                    if p["participant_id"] == pid)

    old, new = of(old_params)["parameters"], of(new_params)["parameters"]
    i = next(k for k in range(len(old)) if old[k]["name"] != new[k]["name"])

    def describe(q):
        return "%s [%s] %s" % (q["name"], ", ".join(map(str, q["shape"])),
                               q["dtype"])

    check(old[i]["name"].endswith(".mlp.experts.w13_weight") and
          new[i]["name"].endswith(".mlp.experts.routed_experts.w13_weight"),
          "the first difference is %s / %s" % (old[i]["name"],
                                               new[i]["name"]))
    return ("parameter map mismatch for participant %s: this side built %s "
            "(parameter map %s), %s declares %s (parameter map %s); first "
            "difference at parameter %d: this side's map has %s, the declared "
            "has %s" % (pid, OLD, of(old_decl)["parameter_map_id"], who, NEW,
                        of(new_decl)["parameter_map_id"], i, describe(old[i]),
                        describe(new[i])))


@SUITE.test
def a_declaration_names_engine_release_and_every_participant():
    _, decl = layout(NEW, 2, "new")
    check(decl["engine"] == NEW, decl["engine"])
    check([p["participant_id"] for p in decl["participants"]] ==
          ["p-d0-p0-e0-t0", "p-d0-p0-e0-t1"], str(decl["participants"]))
    for p in decl["participants"]:
        check(p["parameter_map_id"].startswith("sha256:"), str(p))
        for q in p["parameters"]:
            check(sorted(q) == ["dtype", "name", "pieces", "shape"], str(q))
    _, old = layout(OLD, 2, "old")
    check(old["engine"] == OLD, old["engine"])
    check(old["participants"][0]["parameter_map_id"] !=
          decl["participants"][0]["parameter_map_id"], "same ids")


@SUITE.test
def engine_load_refuses_an_older_release_against_a_newer_declaration():
    _, _ = layout(NEW, 2, "new")
    decl = path("new.decl.json")
    out = path("load-old")
    expect_error(cli("engine", "load", checkpoint(), "--engine", OLD, "--tp",
                     2, "-o", out, "--declared-maps", decl),
                 mismatch("--declared-maps " + decl))
    check(not os.path.exists(out), "engine load created its output")
    good = path("load-new")
    expect_ok(cli("engine", "load", checkpoint(), "--engine", NEW, "--tp", 2,
                  "-o", good, "--declared-maps", decl), "engine load " + NEW)
    check(sorted(os.listdir(good)) == ["p-d0-p0-e0-t0.safetensors",
                                       "p-d0-p0-e0-t1.safetensors"],
          str(os.listdir(good)))


def sources():
    """Megatron TP2 files of the checkpoint (the reshard's sources)."""
    d = path("megatron")
    if not os.path.isdir(d):
        expect_ok(cli("engine", "load", checkpoint(), "--engine", "megatron",
                      "--tp", 2, "--make-vocab-size-divisible-by", 8, "-o",
                      d), "engine load megatron")
    return d


@SUITE.test
def engine_reshard_refuses_it_on_every_via_before_anything_moves():
    layout(NEW, 2, "new")
    decl = path("new.decl.json")
    config = os.path.join(checkpoint(), "config.json")
    store = path("store")
    for via in ("local", "ucx", "fs://" + store):
        out = path("reshard-old-" + via.replace("/", "_").replace(":", ""))
        expect_error(cli("engine", "reshard", sources(), out, "--config",
                         config, "--from", "megatron", "--from-tp", 2,
                     "--from-make-vocab-size-divisible-by", 8, "--to",
                         OLD, "--to-tp", 2, "--via", via, "--declared-maps",
                         decl), mismatch("--declared-maps " + decl))
        check(not os.path.exists(out), "%s: output created" % via)
    check(not os.path.exists(store), "the store was created")
    # The release the engine declares passes, and every byte arrives: the
    # files equal those `engine load` writes from the checkpoint.
    out = path("reshard-new")
    expect_ok(cli("engine", "reshard", sources(), out, "--config", config,
                  "--from", "megatron", "--from-tp", 2,
                     "--from-make-vocab-size-divisible-by", 8, "--to", NEW,
                  "--to-tp", 2, "--declared-maps", decl, "--revision", "hf"),
              "engine reshard to " + NEW)
    loaded = path("load-new")
    if not os.path.isdir(loaded):
        expect_ok(cli("engine", "load", checkpoint(), "--engine", NEW,
                      "--tp", 2, "-o", loaded), "engine load " + NEW)
    for name in sorted(os.listdir(loaded)):
        a = hfc.read_file(os.path.join(loaded, name))
        b = hfc.read_file(os.path.join(out, name))
        check(list(a) == list(b), "%s: parameters %s vs %s" % (name, list(a),
                                                             list(b)))
        for k in a:
            check(a[k] == b[k], "%s: parameter %s differs" % (name, k))


@SUITE.test
def a_forged_or_foreign_declaration_is_refused():
    _, decl = layout(NEW, 2, "new")
    config = os.path.join(checkpoint(), "config.json")
    # A name edited by hand: its id no longer hashes its parameters.
    forged = json.loads(json.dumps(decl))
    forged["participants"][0]["parameters"][0]["name"] = "x.weight"
    f = path("forged.json")
    with open(f, "w") as out:
        json.dump(forged, out)
    r = cli("engine", "load", checkpoint(), "--engine", NEW, "--tp", 2, "-o",
            path("load-forged"), "--declared-maps", f)
    check(r.returncode == 1 and r.stderr.startswith("reshard: error: " + f +
                                                    ": participants[0]: the "
                                                    "declared parameter_map_id"
                                                    ),
          r.stderr)
    check("is not the hash of its parameters" in r.stderr, r.stderr)
    # The declaration of another grid (TP 4): rank 0's vocabulary rows
    # differ first.
    _, tp4 = layout(NEW, 4, "tp4")
    _, tp2 = layout(NEW, 2, "new")
    d4 = path("tp4.decl.json")
    expect_error(cli("engine", "reshard", sources(), path("tp4-out"),
                     "--config", config, "--from", "megatron", "--from-tp", 2,
                     "--from-make-vocab-size-divisible-by", 8, "--to", NEW,
                     "--to-tp", 2, "--declared-maps", d4),
                 "parameter map mismatch for participant p-d0-p0-e0-t0: this "
                 "side built %s (parameter map %s), --declared-maps %s "
                 "declares %s (parameter map %s); first difference at "
                 "parameter 0: this side's map has model.embed_tokens.weight "
                 "[32, 32] bfloat16, the declared has model.embed_tokens."
                 "weight [16, 32] bfloat16" %
                 (NEW, tp2["participants"][0]["parameter_map_id"], d4, NEW,
                  tp4["participants"][0]["parameter_map_id"]))
    # Not JSON; a missing file.
    g = path("garbage.json")
    with open(g, "w") as out:
        out.write("\x00\x01not json")
    r = cli("engine", "load", checkpoint(), "--engine", NEW, "--tp", 2, "-o",
            path("load-garbage"), "--declared-maps", g)
    check(r.returncode == 1 and r.stderr.startswith("reshard: error: " + g +
                                                    ": "), r.stderr)
    missing = path("missing.json")
    r = cli("engine", "load", checkpoint(), "--engine", NEW, "--tp", 2, "-o",
            path("load-missing"), "--declared-maps", missing)
    check(r.returncode == 1 and missing in r.stderr, r.stderr)
    for d in ("load-forged", "load-garbage", "load-missing", "tp4-out"):
        check(not os.path.exists(path(d)), d + " created")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-fingerprint-",
                       lambda d: TMP.__setitem__("dir", d)))
