#!/usr/bin/env python3
"""CLI contract of `reshard gen` and `reshard plan`.

Usage: plan_gen_test.py RESHARD_BINARY TESTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

RESHARD, TESTS = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.abspath(TESTS))
MODELS = os.path.join(ROOT, "examples", "models")
FIXTURES = os.path.join(TESTS, "data", "fixtures", "plans")
SCENARIOS = os.path.join(TESTS, "data", "scenarios")
passed = failed = 0


def run(*args):
    return subprocess.run([RESHARD, *args], capture_output=True, text=True)


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok  ", name)
    else:
        failed += 1
        print("FAIL", name, detail)


def plan_json(src, dst, *extra):
    r = run("plan", "--json", src, dst, *extra)
    if r.returncode != 0:
        return None, r
    return json.loads(r.stdout), r


REQUIRED = ["regions", "segments", "operations", "bytes", "max_source_bytes",
            "mean_source_bytes", "max_target_bytes"]

# Golden plan counts of the fixtures.
with open(os.path.join(FIXTURES, "expected.json")) as f:
    expected = json.load(f)
for name, exp in sorted(expected.items()):
    got, r = plan_json(os.path.join(FIXTURES, exp["source"]),
                       os.path.join(FIXTURES, exp["target"]))
    check(f"plan {name} runs", got is not None, r.stderr)
    if got is None:
        continue
    check(f"plan {name} keys", all(k in got for k in REQUIRED), list(got))
    for key in ("regions", "segments", "bytes"):
        check(f"plan {name} {key}", got[key] == exp[key],
              f"{got[key]} != {exp[key]}")
    check(f"plan {name} operations <= regions",
          got["operations"] <= got["regions"])
    check(f"plan {name} participant bytes",
          sum(p["bytes"] for p in got["source_participants"]) == got["bytes"]
          and sum(p["bytes"] for p in got["target_participants"]) == got["bytes"]
          and sum(t["bytes"] for t in got["traffic"]) == got["bytes"])

# The prototype's 2,097,152-segment case plans as 16 operations.
got, r = plan_json(os.path.join(SCENARIOS, "cross_dim_tp4_dim0_to_dim2_source.json"),
                   os.path.join(SCENARIOS, "cross_dim_tp4_dim0_to_dim2_target.json"))
check("dim0->dim2 operations", got is not None and got["operations"] == 16
      and got["segments"] == 2097152, r.stderr if got is None else got["operations"])

# Balance: DP2/TP4 -> DP1/TP8 uses both replicas evenly.
got, r = plan_json(os.path.join(SCENARIOS, "dp_replicas_dp2tp4_to_dp1tp8_source.json"),
                   os.path.join(SCENARIOS, "dp_replicas_dp2tp4_to_dp1tp8_target.json"))
check("dp2->dp1 balanced", got is not None and
      got["max_source_bytes"] <= 1.01 * got["mean_source_bytes"] and
      all(p["bytes"] > 0 for p in got["source_participants"]),
      r.stderr if got is None else got["source_participants"])

with tempfile.TemporaryDirectory() as tmp:
    def gen(out, *args):
        return run("gen", "--model", os.path.join(MODELS, "tiny-moe.json"),
                   *args, "-o", os.path.join(tmp, out))

    r = gen("train.json", "--tp", "4", "--pp", "2", "--ep", "8", "--dp", "2")
    check("gen train", r.returncode == 0, r.stderr)
    r = gen("rollout.json", "--tp", "8", "--pp", "4", "--ep", "2", "--dp", "4")
    check("gen rollout", r.returncode == 0, r.stderr)
    v = run("validate", "--json", os.path.join(tmp, "train.json"))
    check("gen output validates", v.returncode == 0, v.stderr)
    if v.returncode == 0:
        j = json.loads(v.stdout)
        check("gen participants", j["participants"] == 128, j)
    got, r = plan_json(os.path.join(tmp, "train.json"),
                       os.path.join(tmp, "rollout.json"))
    check("plan train->rollout", got is not None, r.stderr)
    if got is not None:
        check("plan writes every target byte once",
              got["bytes"] == sum(p["bytes"] for p in got["target_participants"]))
    # Local target: one participant's share.
    local, r = plan_json(os.path.join(tmp, "train.json"),
                         os.path.join(tmp, "rollout.json"),
                         "--target-participant", "p-d1-p2-e1-t3")
    check("plan local target", local is not None and
          len(local["target_participants"]) == 1 and
          local["target_participants"][0]["participant_id"] == "p-d1-p2-e1-t3",
          r.stderr if local is None else local["target_participants"])
    r = run("plan", os.path.join(tmp, "train.json"),
            os.path.join(tmp, "rollout.json"), "--target-participant", "nobody")
    check("plan unknown participant", r.returncode != 0 and
          r.stderr.strip() == "reshard: error: unknown target participant: nobody",
          r.stderr)
    # Separate experts carry expert ids and EP ownership.
    r = gen("sep.json", "--tp", "2", "--ep", "4", "--experts", "separate")
    check("gen separate experts", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        with open(os.path.join(tmp, "sep.json")) as f:
            sep = json.load(f)
        experts = [t for t in sep["tensors"] if t["expert_id"] is not None]
        check("separate experts have ownership",
              len(experts) == 3 * 8 * 3 and all(
                  {"semantics": "ownership", "kind": "ep"} in t["parallel_axes"]
                  for t in experts), len(experts))
    # Invalid combinations name the problem.
    r = gen("bad.json", "--tp", "3")
    check("gen tp not dividing", r.returncode != 0 and r.stderr.strip() ==
          "reshard: error: TP 3 does not divide dimension 0 (256) of "
          "model.embed_tokens.weight", r.stderr)
    r = gen("bad.json", "--ep", "3")
    check("gen ep not dividing", r.returncode != 0 and r.stderr.strip() ==
          "reshard: error: EP 3 does not divide the expert count 8 of tiny-moe",
          r.stderr)
    r = gen("bad.json", "--pp", "5")
    check("gen pp exceeding layers", r.returncode != 0 and r.stderr.strip() ==
          "reshard: error: PP 5 exceeds the layer count 4 of tiny-moe", r.stderr)
    r = run("gen", "--model", os.path.join(MODELS, "qwen3-8b.json"), "--ep",
            "2", "-o", os.path.join(tmp, "x.json"))
    check("gen ep on a dense model", r.returncode != 0 and r.stderr.strip() ==
          "reshard: error: EP 2 needs an MoE model; Qwen3-8B has no experts",
          r.stderr)
    # Every shipped model spec generates a valid placement.
    for spec in sorted(os.listdir(MODELS)):
        r = run("gen", "--model", os.path.join(MODELS, spec), "--tp", "2",
                "-o", os.path.join(tmp, "m.json"))
        ok = r.returncode == 0 and run("validate", os.path.join(tmp, "m.json")).returncode == 0
        check(f"gen {spec}", ok, r.stderr)
    # Mismatched layouts fail closed.
    with open(os.path.join(tmp, "train.json")) as f:
        doc = json.load(f)
    r = gen("other.json", "--tp", "2", "--revision", "step-9")
    got, r = plan_json(os.path.join(tmp, "train.json"), os.path.join(tmp, "other.json"))
    check("plan revision mismatch", got is None and
          "source and target revision differ: step-0 vs step-9" in r.stderr, r.stderr)

# The self-test moves real bytes and checks every one.
with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(MODELS, "tiny-moe.json")
    run("gen", "--model", model, "--tp", "4", "--pp", "2", "--ep", "8",
        "--dp", "2", "-o", os.path.join(tmp, "s.json"))
    run("gen", "--model", model, "--tp", "8", "--pp", "4", "--ep", "2",
        "--dp", "4", "-o", os.path.join(tmp, "t.json"))
    r = run("selftest", "--json", "--threads", "2", os.path.join(tmp, "s.json"),
            os.path.join(tmp, "t.json"))
    check("selftest runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        j = json.loads(r.stdout)
        check("selftest keys", all(k in j for k in
                                   ("verified", "bytes", "seconds", "operations")), j)
        check("selftest verified", j["verified"] is True and j["mismatch"] == "", j)
        plan, _ = plan_json(os.path.join(tmp, "s.json"), os.path.join(tmp, "t.json"))
        check("selftest bytes == plan bytes", plan is not None and
              j["bytes"] == plan["bytes"] and j["operations"] == plan["operations"],
              (j, plan and plan["bytes"]))
    r = run("selftest", "--transport", "nixl", os.path.join(tmp, "s.json"),
            os.path.join(tmp, "t.json"))
    check("selftest unknown transport", r.returncode != 0, r.stderr)
    for name in ("four_axis", "cross_dim_ep4_to_tp4_uint8", "fp8_fused_moe",
                 "dp_replicas_dp2tp2_to_dp3tp4", "aliases_tied_embeddings"):
        r = run("selftest", "--json", os.path.join(SCENARIOS, name + "_source.json"),
                os.path.join(SCENARIOS, name + "_target.json"))
        check(f"selftest {name}", r.returncode == 0 and
              json.loads(r.stdout)["verified"] is True, r.stderr)

# Legacy inventories (one per participant) import back to the same placement.
def inventories(placement):
    tensors = {t["tensor_id"]: t for t in placement["tensors"]}
    out = []
    for part in placement["parts"]:
        if not part["fragments"]:
            continue
        entries, offset = [], 0
        total = sum(f["nbytes"] for f in part["fragments"])
        for f in part["fragments"]:
            t = tensors[f["tensor_id"]]
            strides, stride = [], t["itemsize"]
            for extent in reversed(f["local_shape"]):
                strides.insert(0, stride)
                stride *= extent
            entries.append({
                "address": 0x100000 + offset, "aliases": f["aliases"],
                "device": "cpu", "dtype": t["dtype"],
                "endpoint": "ep-" + part["participant_id"],
                "expert_id": t["expert_id"],
                "fragment_id": "rt-" + f["placement_fragment_id"][7:31],
                "global_offset": f["global_offset"],
                "global_shape": t["global_shape"], "is_contiguous": True,
                "itemsize": t["itemsize"], "layer_id": t["layer_id"],
                "layout_fingerprint": t["layout_fingerprint"],
                "local_shape": f["local_shape"], "nbytes": f["nbytes"],
                "parallel_axes": [{"kind": a["kind"],
                                   "split_dim": a.get("dim")}
                                  for a in t["parallel_axes"]],
                "partition_dim": None,
                "rank": dict(f["rank"], moe_dp=0),
                "shard_dims": t["shard_dims"],
                "storage_address": 0x100000, "storage_nbytes": total,
                "storage_offset_bytes": offset, "strides_bytes": strides,
                "tensor_id": f["tensor_id"],
                "worker_id": "w-" + part["participant_id"]})
            offset += f["nbytes"]
        out.append({"generation": placement["weight_generation"],
                    "instance_id": "inst-" + part["participant_id"],
                    "lease_id": "lease", "model_id": placement["resource_id"],
                    "revision": placement["revision"], "tensors": entries})
    return out


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "p.json")
    run("gen", "--model", os.path.join(MODELS, "tiny-moe.json"), "--tp", "2",
        "--pp", "2", "--ep", "2", "--experts", "separate", "-o", src)
    with open(src) as f:
        original = json.load(f)
    files = []
    for i, inv in enumerate(inventories(original)):
        path = os.path.join(tmp, f"inv{i}.json")
        with open(path, "w") as f:
            json.dump(inv, f)
        files.append(path)
    out = os.path.join(tmp, "imported.json")
    bdir = os.path.join(tmp, "bindings")
    r = run("import-legacy", *files, "--tp", "2", "--pp", "2", "--ep", "2",
            "--placement-set-id", original["placement_set_id"], "-o", out,
            "--bindings-dir", bdir)
    check("import-legacy runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        with open(out) as f:
            imported = json.load(f)
        check("import-legacy rebuilds the placement",
              imported["placement_id"] == original["placement_id"],
              (imported["placement_id"], original["placement_id"]))
        bindings = sorted(os.listdir(bdir))
        check("import-legacy writes one binding per participant",
              len(bindings) == len(files), bindings)
        args = []
        for b in bindings:
            args += ["--binding", os.path.join(bdir, b)]
        v = run("validate", "--json", out, *args)
        check("imported bindings validate", v.returncode == 0 and
              json.loads(v.stdout)["bindings"] == len(files), v.stderr)
    r = run("import-legacy", *files[:-1], "--tp", "2", "--pp", "2", "--ep",
            "2", "-o", out)
    check("import-legacy incomplete set fails", r.returncode != 0 and
          "not fully covered" in r.stderr, r.stderr)

# `plan --html` / `--svg`: the files, their refusals, and that a failed
# write leaves what was there (the report's contents: plan_report_browser).
with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(SCENARIOS, "pp_routing_2_to_4_source.json")
    dst = os.path.join(SCENARIOS, "pp_routing_2_to_4_target.json")
    html = os.path.join(tmp, "plan.html")
    svg = os.path.join(tmp, "plan.svg")
    r = run("plan", src, dst, "--html", html, "--svg", svg, "--gbps", "10")
    check("plan --html --svg writes both", r.returncode == 0 and
          os.path.getsize(html) > 0 and os.path.getsize(svg) > 0 and
          "  report: " + html in r.stdout and "  heatmap: " + svg in r.stdout,
          r.stderr)
    first = open(html, "rb").read()
    r = run("plan", src, dst, "--html", html, "--gbps", "10", "--json")
    check("plan --html twice: same bytes, --json stays JSON",
          r.returncode == 0 and open(html, "rb").read() == first and
          json.loads(r.stdout)["regions"] == 4, r.stderr)
    check("plan --html leaves no temporary file",
          sorted(os.listdir(tmp)) == ["plan.html", "plan.svg"],
          os.listdir(tmp))
    for bad in ("0", "-1", "nan", "inf"):
        r = run("plan", src, dst, "--html", html, "--gbps", bad)
        check("plan --gbps %s refused" % bad, r.returncode == 1 and
              r.stderr == "reshard: error: --gbps must be a positive finite "
              "number of GB/s, not '%s'\n" % bad and
              open(html, "rb").read() == first,
              r.stderr)
    r = run("plan", src, dst, "--svg", svg, "--heatmap-max-axis", "0")
    check("plan --heatmap-max-axis 0 refused", r.returncode == 1 and
          r.stderr == "reshard: error: --svg: plan report: max_heatmap_axis "
          "must be 1..4096, got 0\n", r.stderr)
    r = run("plan", src, dst, "--html", tmp, "--gbps", "1")
    check("plan --html onto a directory refused", r.returncode == 1 and
          r.stderr == "reshard: error: --html " + tmp +
          ": is a directory; an output must be a regular file, a character "
          "device or a FIFO\n" and
          sorted(os.listdir(tmp)) == ["plan.html", "plan.svg"], r.stderr)
    missing = os.path.join(tmp, "no", "such", "dir", "p.html")
    r = run("plan", src, dst, "--html", missing, "--gbps", "1")
    check("plan --html into a missing directory refused",
          r.returncode == 1 and r.stderr == "reshard: error: --html " +
          missing + ": cannot write: No such file or directory\n", r.stderr)
    odd = os.path.join(tmp, "odd\x01name.html")
    r = run("plan", src, dst, "--html", odd, "--gbps", "1")
    check("plan --html names a control character escaped",
          r.returncode == 0 and os.path.exists(odd) and
          "odd\\x01name.html" in r.stdout, r.stdout)
    other = os.path.join(SCENARIOS, "four_axis_target.json")
    r = run("plan", src, other, "--html", html, "--gbps", "1")
    check("failed plan leaves the report", r.returncode == 1 and
          open(html, "rb").read() == first, r.stderr)

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
