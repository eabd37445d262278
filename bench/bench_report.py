#!/usr/bin/env python3
"""The scale figures of one `make bench` run, as ratios to same-run baselines.

Reads the JSON lines that scripts/bench.sh collected in RESULTS_DIR:

  contract.json   reshard_bench_contract --json (pipeline vs bare parse)
  plan.jsonl      reshard_bench_plan --json (validate, plan, bare parse)
  store.jsonl     reshard_bench_store --json (every load run, cold / warm)
  plan_ab.jsonl   bench/plan_ab.py --json (only with a baseline build)
  engine.jsonl    bench/engine_bench.py --json (engine reshard vs hf reshard)
  convert.jsonl   bench/convert_bench.py --json (hf reshard --convert BF16
                  -> FP8 vs the same reshard without conversion; conversion
                  kernels vs memcpy)
  cli.jsonl       bench/cli_bench.py --json (whole `reshard plan` and
                  `reshard validate` processes vs a bare simdjson read and
                  parse process: wall time and peak RSS, min/median/max)

and prints one Markdown table: each figure, its baseline measured in the
same run, the ratio and the target it is held to. With --readme FILE the
table also replaces the text between the markers

  <!-- bench-summary:begin -->
  <!-- bench-summary:end -->

in FILE (the README's table is regenerated, never edited by hand). A
missing results file leaves its rows out; a marker missing from FILE is
an error (exit 1), as is an unreadable results line.

Usage: bench_report.py RESULTS_DIR [--readme FILE] [--date YYYY-MM-DD]
"""

import argparse
import datetime
import json
import os
import statistics
import sys

BEGIN = "<!-- bench-summary:begin -->"
END = "<!-- bench-summary:end -->"

# The planner figures the 1.5x target is measured against when no baseline
# build ran in the same session: the README's figures of 2026-12-01 (plan
# CPU seconds, one core).
DOCUMENTED_PLAN_SECONDS = {"synthetic-moe-64k": 0.105, "deepseek-v3": 0.771}


def read_lines(path):
    """The JSON objects of `path`, one per non-empty line; None if absent."""
    if not os.path.exists(path):
        return None
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not a JSON object: {e}")
    return out


def verdict(ok):
    return "met" if ok else "**not met**"


def shown(x):
    """`x` as the table prints it (two decimals): a figure is judged by the
    value a reader sees, not by a float's last bit."""
    return round(x, 2)


def spread(r, key, fmt="{:.3f}"):
    """" (min-max over N rounds)" when the results carry a spread."""
    if f"{key}_min" not in r:
        return ""
    return (f" ({fmt.format(r[key + '_min'])}-{fmt.format(r[key + '_max'])}"
            f" over {r.get('rounds', '?')})")


def contract_rows(results):
    rows = []
    for r in results or []:
        mb = r["bytes"] / 1e6
        rows.append([
            f"contract: decode + validate + identify, {r['fragments']:,} "
            f"fragments ({mb:.0f} MB of JSON); peak RSS growth "
            f"{r['pipeline_peak_rss_mib']:,.0f} MiB"
            + (f"; freeing the manifest afterwards {r['free_seconds']:.3f} s,"
               " not counted" if "free_seconds" in r else "")
            + (f"; the first (cold) decode {r['cold_seconds']:.3f} s, not "
               "counted: the rounds reuse freed memory, as a long-running "
               "process does" if "cold_seconds" in r else ""),
            f"{r['pipeline_seconds']:.3f} s",
            f"bare simdjson DOM parse {r['parse_seconds']:.3f} s",
            f"{r['ratio']:.2f}x" + spread(r, "ratio", "{:.2f}"), "<= 3x",
            verdict(shown(r["ratio"]) <= 3.0)])
    return rows


def plan_rows(results):
    by_case = {r["case"]: r for r in results or []}
    k = by_case.get("kimi-k2")
    if k is None:
        return []
    parse = k["parse_seconds"]
    rows = []
    for label, key in (("one thread", "validate_seconds"),
                       ("two threads", "validate_two_threads_seconds")):
        rows.append([
            f"Kimi-K2 TP8/PP8/EP16/DP2 -> TP8/EP64: validate both sides "
            f"from the wire, {label}", f"{k[key]:.3f} s" + spread(k, key),
            f"bare parse of both wires {parse:.3f} s",
            f"{k[key] / parse:.2f}x", "< 1 s", verdict(k[key] < 1.0)])
    plan = k["plan_cpu_seconds"]
    rows.append([
        f"Kimi-K2 plan, one core ({k['regions']:,} regions, digest "
        f"{k['plan_digest']})",
        f"{plan:.3f} s" + spread(k, "plan_cpu_seconds"),
        f"bare parse of both wires {parse:.3f} s",
        f"{plan / parse:.2f}x", "< 1 s", verdict(plan < 1.0)])
    return rows


def speedup_rows(plan, ab):
    """The 1.5x targets: against a same-run baseline build when one ran,
    else against the documented figures (said so in the row)."""
    rows = []
    ab_by_case = {r["case"]: r for r in ab or []}
    plan_by_case = {r["case"]: r for r in plan or []}
    for case, documented in DOCUMENTED_PLAN_SECONDS.items():
        if case in ab_by_case:
            r = ab_by_case[case]
            rows.append([
                f"{case} plan, one core (median of {r['rounds']} "
                f"interleaved rounds; plan digests {r['plan_digests']})",
                f"{r['plan_cpu_seconds']:.3f} s",
                f"baseline build {r['plan_cpu_seconds_baseline']:.3f} s",
                f"{r['plan_speedup']:.2f}x faster", ">= 1.5x faster",
                verdict(shown(r["plan_speedup"]) >= 1.5 and
                        r["plan_digests"] != "DIFFER")])
        elif case in plan_by_case:
            s = plan_by_case[case]["plan_cpu_seconds"]
            rows.append([
                f"{case} plan, one core (no baseline build in this run)",
                f"{s:.3f} s", f"documented {documented:.3f} s (2026-12-01)",
                f"{documented / s:.2f}x faster", ">= 1.5x faster",
                verdict(shown(documented / s) >= 1.5)])
    return rows


def store_rows(results):
    runs = {}
    for r in results or []:
        if r.get("step") == "load":
            runs.setdefault((r["case"], r["cache"]), []).append(r)
    rows = []
    for (case, cache), rs in runs.items():
        ratios = sorted(r["ratio"] for r in rs)
        med = statistics.median(ratios)
        target = 0.8 if cache == "cold" else 0.9
        base = statistics.median(r["baseline_gbps"] for r in rs)
        gbps = statistics.median(r["gbps"] for r in rs)
        rss = max(r["rss_growth_mib"] for r in rs)
        gib = rs[0]["bytes"] / 2**30
        rows.append([
            f"store load {gib:.0f} GiB, {case}, {cache} ({len(rs)} runs; "
            f"RSS growth up to {rss:.0f} MiB)",
            f"median {gbps:.2f} GB/s",
            f"sequential read of the payload files (mean of one read "
            f"right before and one right after each load), median "
            f"{base:.2f} GB/s",
            f"{ratios[0]:.2f}x / {med:.2f}x / {ratios[-1]:.2f}x "
            "(min / median / max)", f">= {target}x (median)",
            verdict(shown(med) >= target)])
    return rows


def engine_rows(results):
    """`engine reshard` Megatron -> vLLM against `hf reshard` of the same
    checkpoint: end to end (held to its target), and the move alone
    (informational: no target)."""
    rows = []
    for r in results or []:
        ratios = sorted(r["ratios"])
        end_to_end = r["target"] is not None
        if end_to_end:
            what = ("end to end (process wall clock, files read and "
                    "written; output identical to `engine load --engine "
                    "vllm --tp 4`)")
            base = "`hf reshard` of the same checkpoint into its TP4 layout"
        else:
            what = "the move alone (its `seconds`, memory to memory)"
            base = "`hf reshard`'s load (`load_seconds`, file reads included)"
        rows.append([
            f"engine reshard, {r['case']} ({r['rounds']} interleaved "
            f"rounds): {what}",
            f"median {r['measured']:.2f} GB/s",
            f"{base}, median {r['baseline']:.2f} GB/s",
            f"{ratios[0]:.2f}x / {r['ratio']:.2f}x / {ratios[-1]:.2f}x "
            "(min / median / max)",
            f">= {r['target']}x (median)" if end_to_end else "informational",
            verdict(shown(r["ratio"]) >= r["target"]) if end_to_end
            else "-"])
    return rows


def convert_rows(results):
    """`hf reshard --convert` BF16 -> FP8 against the same reshard without
    conversion (end to end, held to its target; the load alone,
    informational), and the conversion kernels against memcpy
    (informational)."""
    rows = []
    for r in results or []:
        ratios = sorted(r["ratios"])
        spread = "(min / median / max)"
        if r.get("unit") == "GB/s":
            rows.append([
                f"conversion kernel: {r['what']}, {r['case']} (median of "
                f"{r['rounds']} rounds)",
                f"median {r['measured']:.2f} GB/s",
                f"np.copyto of the same bytes, median {r['baseline']:.2f} "
                "GB/s",
                f"{ratios[0]:.3f}x / {r['ratio']:.3f}x / {ratios[-1]:.3f}x "
                f"{spread}", "informational", "-"])
            continue
        end_to_end = r["target"] is not None
        if end_to_end:
            what = ("end to end (process wall clock, files read and "
                    "written; FP8 output checked against "
                    "tests/cli/conversion_reference.py)")
            base = "the same reshard without conversion (BF16 -> BF16)"
        else:
            what = ("the load alone (`load_seconds`; the quantization runs "
                    "inside it)")
            base = "the load without conversion"
        rows.append([
            f"hf reshard --convert BF16 -> FP8 128x128, {r['case']} "
            f"({r['rounds']} interleaved rounds): {what}",
            f"median {r['measured']:.3f} s",
            f"{base}, median {r['baseline']:.3f} s",
            f"{ratios[0]:.2f}x / {r['ratio']:.2f}x / {ratios[-1]:.2f}x "
            f"{spread}",
            f"<= {r['target']}x (median, time)" if end_to_end
            else "informational",
            verdict(shown(r["ratio"]) <= r["target"]) if end_to_end
            else "-"])
    return rows


def cli_rows(results):
    """Whole commands vs a bare parse process: wall and peak RSS, each
    judged on the median of interleaved rounds; one row per command, met
    when both are."""
    rows = []
    what = {"plan": "`reshard plan A B --json`, Kimi-K2 pair",
            "validate": "`reshard validate B`, Kimi-K2 529,920 fragments"}
    for r in results or []:
        w, p = r["wall_seconds"], r["wall_ratio"]
        q, m = r["rss_to_input"], r["peak_rss_bytes"]
        mb = r["input_bytes"] / 1e6
        met = (shown(p["median"]) <= r["wall_goal"] and
               shown(q["median"]) <= r["rss_goal"])
        rows.append([
            f"{what.get(r['command'], r['command'])} ({mb:.0f} MB): wall "
            f"{w['min']:.2f} / {w['median']:.2f} / {w['max']:.2f} s "
            f"(min / median / max of {r['rounds']}) and peak RSS",
            f"{w['median']:.2f} s, {m['median'] / 2**20:,.0f} MiB",
            f"bare simdjson read + parse process "
            f"{r['parse_seconds']['median']:.2f} s, "
            f"{r['parse_peak_rss_bytes']['median'] / 2**20:,.0f} MiB",
            f"{p['median']:.2f}x time, {q['median']:.2f}x the input",
            f"<= {r['wall_goal']}x, <= {r['rss_goal']}x", verdict(met)])
    return rows


def render(results_dir, date, judged_only=False):
    """The table; `judged_only` leaves out the informational rows (the
    README's table; `make bench` prints them all)."""
    contract = read_lines(os.path.join(results_dir, "contract.json"))
    plan = read_lines(os.path.join(results_dir, "plan.jsonl"))
    store = read_lines(os.path.join(results_dir, "store.jsonl"))
    ab = read_lines(os.path.join(results_dir, "plan_ab.jsonl"))
    engine = read_lines(os.path.join(results_dir, "engine.jsonl"))
    convert = read_lines(os.path.join(results_dir, "convert.jsonl"))
    cli = read_lines(os.path.join(results_dir, "cli.jsonl"))
    rows = (contract_rows(contract) + plan_rows(plan) + cli_rows(cli) +
            speedup_rows(plan, ab) + store_rows(store) + engine_rows(engine)
            + convert_rows(convert))
    if judged_only:
        rows = [r for r in rows if r[-2] != "informational"]
    lines = [
        f"Generated by `make bench` on {date} ({os.cpu_count()} cores); "
        "every ratio is against a baseline measured in the same run; "
        "figures are medians of at least 3 interleaved rounds (min-max "
        "beside them) and verdicts are on the medians"
        + ("; informational rows: docs/benchmarks.md." if judged_only
           else "."), "",
        "| figure | measured | baseline | ratio | target | |",
        "| --- | --- | --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def splice(path, table):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: markers {BEGIN} ... {END} not found")
    text = text[:begin + len(BEGIN)] + "\n" + table + text[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("--readme")
    p.add_argument("--date", default=datetime.date.today().isoformat())
    a = p.parse_args()
    sys.stdout.write(render(a.results, a.date))
    if a.readme:
        splice(a.readme, render(a.results, a.date, judged_only=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
