#!/usr/bin/env python3
"""The plan report at real-model scale: Kimi-K2 TP8/PP8/EP16/DP2 ->
TP8/EP64 (and DeepSeek-V3 TP8/PP4/EP16/DP2 -> TP8/EP32 with --all).

For each case: the time to write the report (`reshard plan --html`, which
plans too) next to `reshard plan --json` of the same pair (the baseline,
same run), the file's size, and the time headless Chromium takes from
navigation until the report's script has drawn everything
(window.reshardReport.ready), next to loading a page of the same bytes
that runs no script (the baseline: the same file with its scripts cut).
Best of --repeat loads. Numbers are reported, not asserted.

Usage: plan_report_bench.py --cli build/reshard [--models examples/models]
         [--out DIR] [--repeat 3] [--all] [--screenshot PNG]
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "cli"))
import chromium_cdp  # noqa: E402

CASES = [
    ("Kimi-K2", "kimi-k2.json", (8, 8, 16, 2), (8, 1, 64, 1)),
    ("DeepSeek-V3", "deepseek-v3.json", (8, 4, 16, 2), (8, 1, 32, 1)),
]
READY = "window.reshardReport && window.reshardReport.ready"


def run(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def gen(cli, model, sizes, out):
    tp, pp, ep, dp = sizes
    if not os.path.exists(out):
        run([cli, "gen", "--model", model, "--tp", str(tp), "--pp", str(pp),
             "--ep", str(ep), "--dp", str(dp), "-o", out])


def best_load(browser, url, ready, repeat):
    best = None
    for _ in range(repeat):
        seconds = browser.load(url, ready)
        best = seconds if best is None else min(best, seconds)
    return best


def case(args, browser, name, model, src_sizes, dst_sizes):
    src = os.path.join(args.out, name + "-src.json")
    dst = os.path.join(args.out, name + "-dst.json")
    gen(args.cli, os.path.join(args.models, model), src_sizes, src)
    gen(args.cli, os.path.join(args.models, model), dst_sizes, dst)
    html = os.path.join(args.out, name + ".html")
    json_s = run([args.cli, "plan", src, dst, "--json"])
    html_s = run([args.cli, "plan", src, dst, "--html", html])
    text = pathlib.Path(html).read_text("utf-8")
    static = os.path.join(args.out, name + "-static.html")
    pathlib.Path(static).write_text(
        re.sub(r"<script>.*?</script>", "", text, flags=re.S), "utf-8")
    url = pathlib.Path(html).resolve().as_uri()
    load_s = best_load(browser, url, READY, args.repeat)
    problems = browser.problems() + browser.requests()
    script_ms = browser.evaluate("window.reshardReport.readyMs")
    cells = browser.evaluate(
        "document.querySelectorAll('#heatmap-svg rect.cell').length")
    bins = browser.evaluate("[reshardReport.data.bins.source.length, "
                            "reshardReport.data.bins.target.length]")
    records = browser.evaluate("reshardReport.data.explorer.records.length")
    tensors = browser.evaluate("reshardReport.data.explorer.tensors.length")
    if args.screenshot and name == "Kimi-K2":
        browser.screenshot(args.screenshot, max_height=2900)
    static_s = best_load(browser, pathlib.Path(static).resolve().as_uri(),
                         "document.readyState === 'complete'", args.repeat)
    grid = lambda s: "TP%d/PP%d/EP%d/DP%d" % s  # noqa: E731
    print("%s %s -> %s" % (name, grid(src_sizes), grid(dst_sizes)))
    print("  report file       %.2f MB (%d heatmap cells, %d x %d bins, "
          "%d explorer records for %d tensors)" %
          (os.path.getsize(html) / 1e6, cells, bins[0], bins[1], records,
           tensors))
    print("  reshard plan      --json %.2f s, --html %.2f s (%.2fx)" %
          (json_s, html_s, html_s / json_s))
    print("  chromium load     %.2f s to ready (script done at %.0f ms), "
          "no-script page of the same bytes %.2f s (%.2fx)" %
          (load_s, script_ms, static_s, load_s / static_s))
    print("  problems          %s" % (problems or "none"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--models", default="examples/models")
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--screenshot")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reshard-report-bench-") as tmp:
        args.out = args.out or tmp
        os.makedirs(args.out, exist_ok=True)
        try:
            browser = chromium_cdp.Chromium.start()
        except chromium_cdp.Unavailable as exc:
            print("skipped: %s" % exc)
            return 0
        with browser:
            for c in CASES if args.all else CASES[:1]:
                case(args, browser, *c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
