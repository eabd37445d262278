"""`make conformance`: reshard against vLLM's own loader and transformers.

Runs inside the venv `make conformance` builds (vLLM and transformers from
PyPI). Drives only the CLI (`--reshard`, a copy of build/reshard taken at
the start so a rebuild during the run cannot change it).

Writes RESULTS/summary.md (the tables) and RESULTS/cases.json (every case,
every rank pair), prints the summary, and exits 1 when any case is not a
match or accepted (2 on a harness error).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_part  # noqa: E402
import tiny_models  # noqa: E402

DENSE_GRID = [
    (1, 1, 1, 0),
    (2, 1, 1, 0),
    (4, 1, 1, 0),
    (8, 1, 1, 0),
    (2, 2, 1, 0),
    (2, 1, 2, 0),
]
MOE_GRID = DENSE_GRID + [
    (2, 1, 1, 1),
    (4, 1, 1, 1),
    (8, 1, 1, 1),
    (1, 1, 2, 1),
    (2, 1, 2, 1),
    (2, 2, 1, 1),
]
FP8_GRID = [(1, 1, 1, 0), (2, 1, 1, 0), (4, 1, 1, 0), (8, 1, 1, 0),
            (2, 1, 1, 1), (4, 1, 1, 1), (2, 1, 2, 1)]
FP8_BLOCK = (8, 8)
# Cases whose declared parameter maps are checked against vLLM's ranks and
# then against a map of the older release (`--old-engine`).
FINGERPRINT_CASES = ("qwen3-moe-tp2-pp1-dp1-ep2", "deepseek-v3-tp2-pp1-dp1-ep2",
                     "mixtral-tp2-pp1-dp1-ep1")


def vllm_cases():
    """[(case, checkpoint name)] of the vLLM part."""
    out = []

    def add(arch, grid, ckpt=None):
        for tp, pp, dp, ep in grid:
            cid = f"{ckpt or arch}-tp{tp}-pp{pp}-dp{dp}-ep{tp * dp if ep else 1}"
            out.append((dict(id=cid, arch=arch, tp=tp, pp=pp, dp=dp, ep=ep),
                        ckpt or arch))

    for arch in ("llama", "qwen2", "qwen3"):
        add(arch, DENSE_GRID)
    add("llama", [(1, 1, 1, 0), (2, 2, 1, 0), (4, 1, 1, 0)], "llama-tied")
    add("mistral", [(2, 1, 1, 0)])
    add("llama-v100", [(2, 1, 1, 0), (4, 1, 1, 0), (8, 1, 1, 0)])
    for arch in ("qwen3-moe", "mixtral", "deepseek-v2", "deepseek-v3"):
        add(arch, MOE_GRID)
    add("deepseek-v3", [(1, 1, 1, 0), (2, 1, 1, 1)], "deepseek-v3-bf16bias")
    add("deepseek-v3", [(2, 1, 1, 0), (2, 2, 1, 1)], "deepseek-v3-mtp")
    add("deepseek-v3", [(1, 1, 1, 0)], "deepseek-v3-asis")
    add("glm4-moe", [(2, 1, 1, 0), (2, 1, 1, 1)])
    add("gpt-oss", [(2, 1, 1, 0), (2, 1, 1, 1)])
    add("deepseek-v3", FP8_GRID, "deepseek-v3-fp8")
    add("qwen3", [(1, 1, 1, 0), (2, 1, 1, 0)], "qwen3-fp8")
    add("qwen3-moe", [(2, 1, 1, 0), (2, 1, 1, 1)], "qwen3-moe-fp8")
    add("qwen3-moe-wide", [(2, 1, 1, 0), (4, 1, 1, 0), (4, 1, 1, 1)],
        "qwen3-moe-wide-fp8")
    add("qwen3.5", [(1, 1, 1, 0), (2, 1, 1, 0), (4, 1, 1, 0), (2, 2, 1, 0)])
    for arch in ("qwen3-next", "qwen3.5-moe"):
        add(arch, [(1, 1, 1, 0), (2, 1, 1, 0), (4, 1, 1, 0), (2, 2, 1, 0),
                   (2, 1, 1, 1), (1, 1, 2, 1), (2, 1, 2, 1)])
    return out


def write_checkpoints(root, reshard):
    """The vLLM part's checkpoints; {name: dir or error}."""
    made = {}
    # name -> (architecture, tied, keep float32 tensors float32, add MTP)
    plan = {n: (n, False, True, False) for n in (
        "llama", "qwen2", "qwen3", "mistral", "llama-v100", "qwen3-moe", "qwen3-moe-wide",
        "mixtral", "deepseek-v2", "deepseek-v3", "glm4-moe", "gpt-oss",
        "qwen3-next", "qwen3.5", "qwen3.5-moe")}
    plan["llama-tied"] = ("llama", True, True, False)
    plan["deepseek-v3-bf16bias"] = ("deepseek-v3", False, False, False)
    plan["deepseek-v3-mtp"] = ("deepseek-v3", False, True, True)
    # As transformers writes it: no topk_method.
    plan["deepseek-v3-asis"] = ("deepseek-v3", False, True, False)
    for name, (arch, tied, keep, mtp) in plan.items():
        d = os.path.join(root, name)
        shutil.rmtree(d, ignore_errors=True)
        try:
            tiny_models.save(tiny_models.build(arch, tied=tied, keep_fp32=keep), d)
            if mtp:
                tiny_models.add_mtp(d)
            made[name] = d
            if arch == "deepseek-v3" and not name.endswith("-asis"):
                # transformers writes no topk_method; DeepSeek-V3's releases
                # say noaux_tc, without which vLLM holds no correction bias
                # (and refuses the checkpoint's).
                cp = os.path.join(d, "config.json")
                with open(cp) as f:
                    cfg = json.load(f)
                cfg.update(topk_method="noaux_tc", scoring_func="sigmoid")
                with open(cp, "w") as f:
                    json.dump(cfg, f, indent=2)
        except Exception as e:  # noqa: BLE001
            made[name] = f"transformers: {type(e).__name__}: {e}"[:400]
    for name in ("deepseek-v3", "qwen3", "qwen3-moe"):
        made[name + "-fp8"] = _write_fp8(made.get(name, ""), root, name, reshard,
                                         FP8_BLOCK)
    made["qwen3-moe-wide-fp8"] = _write_fp8(made.get("qwen3-moe-wide", ""), root,
                                            "qwen3-moe-wide", reshard, (64, 64))
    return made


def _write_fp8(src, root, name, reshard, block_shape):
    """Block-FP8 form of checkpoint src: reshard quantizes it
    (docs/conversion.md), then config.json gains the quantization_config a
    block-FP8 release carries. Returns the directory or an error."""
    d = os.path.join(root, name + "-fp8")
    shutil.rmtree(d, ignore_errors=True)
    if not os.path.isdir(src):
        return "no BF16 checkpoint"
    bn, bk = block_shape
    block = f"{bn}x{bk}"
    target = d + ".placement.json"
    p = subprocess.run(
        [reshard, "hf", "layout", os.path.join(src, "config.json"),
         "--checkpoint", src, "--quantize", "fp8", "--block", block,
         "-o", target], capture_output=True, text=True)
    if p.returncode == 0:
        p = subprocess.run(
            [reshard, "hf", "reshard", src, target, d, "--convert",
             "--block", block], capture_output=True, text=True)
    if p.returncode != 0:
        return "reshard: " + p.stderr.strip()[-400:]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    # The linear layers reshard left unquantized (routers, lm_head) are
    # listed as the block-FP8 releases list them, so vLLM does not make
    # FP8 parameters of them.
    import hf_part

    held = hf_part.read_checkpoint(d)
    keep = sorted(
        n[: -len(".weight")] for n, (dt, shape, _) in held.items()
        if n.endswith(".weight") and len(shape) == 2 and not dt.startswith("F8")
        and n + "_scale_inv" not in held and "embed_tokens" not in n)
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [bn, bk],
        "modules_to_not_convert": keep,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copy(os.path.join(src, "generation_config.json"), d)
    return d


def _renamed(res):
    ren = next((p["renamed"] for p in res.get("pairs", []) if p.get("renamed")), {})
    k = next(iter(ren), "")
    return f"{len(ren)} names differ, e.g. vLLM {k} = reshard {ren.get(k, '')}" if k else ""


def _first(res):
    fd = res.get("first_difference") or {}
    s = fd.get("participant", "")
    s += (" " if s else "") + fd.get("parameter", "")
    return f"{s}: {fd.get('why', '')}".strip(": ")


def summarize(meta, vres, hres):
    lines = [f"# Conformance: reshard against vLLM {meta['vllm']} and "
             f"transformers {meta['transformers']}", ""]
    lines.append(f"reshard: {meta['reshard']} (engine preset `{meta['engine']}`)")
    lines.append(f"run: {meta['started']}, {meta['seconds']} s")
    lines.append("")
    if vres:
        kinds = {}
        for r in vres:
            kinds[r["result"]] = kinds.get(r["result"], 0) + 1
        pairs = [p for r in vres for p in r.get("pairs", [])]
        pk = {}
        for p in pairs:
            pk[p["result"]] = pk.get(p["result"], 0) + 1
        order = sum(1 for p in pairs if not p.get("order_matches", True))
        lines.append(f"## vLLM: {len(vres)} cases, {len(pairs)} rank pairs compared")
        lines.append("")
        lines.append("cases: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
        lines.append(f"rank pairs: {pk.get('strict', 0)} strict, {pk.get('names', 0)} "
                     f"after name-only differences, {pk.get('mismatch', 0)} mismatched; "
                     f"{order} with another parameter order")
        lines.append("")
        worst = [r for r in vres if r["result"] not in ("strict match", "refused by vLLM")]
        if worst:
            lines.append("Not matching (first differing parameter, or reshard's refusal):")
            lines.append("")
            for r in worst:
                why = (_first(r) if r["result"].startswith("mismatch") else
                       _renamed(r) if r["result"].startswith("match after names") else
                       r.get("message", ""))
                lines.append(f"- {r['id']}: {r['result']}: {why}")
            lines.append("")
        fps = [r for r in vres if r.get("fingerprint")]
        if fps:
            lines.append("Parameter-map declarations (`engine layout --declare`) against vLLM, "
                         "and an older release's map against them:")
            lines.append("")
            for r in fps:
                fp = r["fingerprint"]
                lines.append(f"- {r['id']}: {fp['engine']} declaration {fp['declaration']}; "
                             f"{fp['old_engine']} against it: {fp.get('old_map', '-')}")
            lines.append("")
        lines.append("| case | result | ranks | detail |")
        lines.append("|---|---|---|---|")
        for r in vres:
            detail = ""
            if r["result"].startswith("mismatch"):
                detail = _first(r)
            elif r["result"].startswith("refused"):
                detail = r.get("message", "")
                if r["result"] == "refused by vLLM":
                    detail += f" (reshard: {r.get('reshard', '?')})"
            elif r["result"].startswith("match after names"):
                detail = _renamed(r)
            if r.get("pairs") and not r.get("order_matches", True):
                of = next((p["order_first"] for p in r["pairs"] if "order_first" in p), None)
                if of:
                    detail += (f"; order differs at #{of['index']}: vLLM {of['vllm']}, "
                               f"reshard {of['reshard']}")
            if r.get("reshard_note"):
                detail += ("; without --convert: "
                           + r["reshard_note"].split(": error: ")[-1])
                detail = detail.lstrip("; ")
            detail = detail.replace("|", "/").replace("\n", " ")
            lines.append(f"| {r['id']} | {r['result']} | {len(r.get('pairs', []))} | {detail} |")
        lines.append("")
    if hres:
        kinds = {}
        for r in hres:
            kinds[r["result"]] = kinds.get(r["result"], 0) + 1
        lines.append(f"## transformers checkpoints: {len(hres)} cases")
        lines.append("")
        lines.append("cases: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
        lines.append("")
        lines.append("| case | architecture | result | detail |")
        lines.append("|---|---|---|---|")
        for r in hres:
            detail = (r.get("message", "") or "").replace("|", "/")
            lines.append(f"| {r['id']} | {r.get('architecture', '')} | {r['result']} | {detail} |")
        lines.append("")
        steps = sorted({k for r in hres for k in r.get("steps", {})})
        lines.append("Steps not ok:")
        lines.append("")
        for r in hres:
            for k in steps:
                v = r.get("steps", {}).get(k)
                if v is not None and v != "ok":
                    lines.append(f"- {r['id']} / {k}: {v}")
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reshard", required=True, help="the reshard CLI to test")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--results", required=True, help="results directory")
    ap.add_argument("--engine", default="vllm", help="engine preset name")
    ap.add_argument("--old-engine", default="vllm@<0.33",
                    help="an older release's spec, refused against the declaration")
    ap.add_argument("--only", choices=["vllm", "hf"], help="run one part")
    ap.add_argument("--filter", default="", help="only case ids containing this")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.results, exist_ok=True)
    shutil.rmtree(os.path.join(args.results, "declared"), ignore_errors=True)
    # A copy of the CLI, so a rebuild during the run cannot swap it.
    reshard = os.path.join(args.work, "reshard")
    for attempt in range(30):
        shutil.copy2(args.reshard, reshard)
        if subprocess.run([reshard, "--help"], capture_output=True).returncode == 0:
            break
        time.sleep(10)  # a rebuild is writing it: take it once it runs
    else:
        print(f"conformance: {args.reshard} does not run", file=sys.stderr)
        return 2
    rev = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(args.reshard)),
                          "describe", "--always", "--dirty"],
                         capture_output=True, text=True).stdout.strip()
    import transformers

    meta = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "reshard": f"{args.reshard} (tree {rev}, built "
                   f"{time.strftime('%H:%M:%S', time.localtime(os.path.getmtime(args.reshard)))})",
        "engine": args.engine,
        "transformers": transformers.__version__,
    }
    vres, hres = [], []
    if args.only in (None, "vllm"):
        import vllm_part

        meta["vllm"] = vllm_part.preload()
        made = write_checkpoints(os.path.join(args.work, "checkpoints"), reshard)
        for case, ck in vllm_cases():
            if args.filter not in case["id"]:
                continue
            path = made.get(ck, "")
            if not os.path.isdir(path):
                r = dict(case, result="not written", message=path)
            else:
                r = vllm_part.run_case(case, path, os.path.join(args.work, "vllm"),
                                       reshard, args.engine)
            if case["id"] in FINGERPRINT_CASES and r.get("pairs"):
                r["fingerprint"] = vllm_part.check_fingerprint(
                    case, path, os.path.join(args.work, "vllm"), reshard,
                    args.engine, args.old_engine)
            vres.append(r)
            print(f"[{time.time() - t0:6.0f}s] {r['id']}: {r['result']}"
                  f"{' - ' + (_first(r) or _renamed(r) or r.get('message', '')) if r['result'] != 'strict match' else ''}",
                  flush=True)
            # The declared lists beside the results, for map fingerprints.
            vdir = os.path.join(args.work, "vllm", case["id"], "vllm")
            dst = os.path.join(args.results, "declared", case["id"])
            if os.path.isdir(vdir):
                os.makedirs(dst, exist_ok=True)
                for n in os.listdir(vdir):
                    if n.endswith(".params.json"):
                        shutil.copy(os.path.join(vdir, n), dst)
    else:
        meta["vllm"] = "-"
    if args.only in (None, "hf"):
        for cid, arch, tied, fmt, mtp in hf_part.cases():
            if args.filter not in cid:
                continue
            r = hf_part.run_case(cid, arch, tied, fmt, mtp, os.path.join(args.work, "hf"),
                                 reshard)
            hres.append(r)
            print(f"[{time.time() - t0:6.0f}s] {cid}: {r['result']}"
                  f"{' - ' + r.get('message', '') if r['result'] != 'accepted' else ''}",
                  flush=True)
    meta["seconds"] = round(time.time() - t0)
    with open(os.path.join(args.results, "cases.json"), "w") as f:
        json.dump({"meta": meta, "vllm": vres, "hf": hres}, f, indent=1)
    text = summarize(meta, vres, hres)
    with open(os.path.join(args.results, "summary.md"), "w") as f:
        f.write(text)
    print()
    print(text)
    # vLLM refusing a grid is information, not a failure of reshard;
    # everything else that is not a strict match (or accepted) is.
    bad = [r for r in vres if r["result"] not in ("strict match", "refused by vLLM")]
    bad += [r for r in vres if r.get("fingerprint") and (
        not r["fingerprint"]["declaration"].startswith("agrees")
        or not r["fingerprint"].get("old_map", "").startswith("refused"))]
    bad += [r for r in hres if r["result"] != "accepted"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
