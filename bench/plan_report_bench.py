#!/usr/bin/env python3
"""The plan report at real-model scale: Kimi-K2 TP8/PP8/EP16/DP2 ->
TP8/EP64 (and DeepSeek-V3 TP8/PP4/EP16/DP2 -> TP8/EP32 with --all).

For each case: the time to write the report (`reshard plan --html`, which
plans too) next to `reshard plan --json` of the same pair (the baseline,
same run), the file's size, and the time headless Chromium takes from
navigation until the report's script has drawn everything
(window.reshardReport.ready), next to loading a page of the same bytes
that runs no script (the baseline: the same file with its scripts cut).
--repeat (at least 3) interleaved rounds of each pair (--json then --html,
the report's load then the no-script page's, the order alternating);
min / median / max of each ratio. Numbers are reported, not asserted.

Usage: plan_report_bench.py --cli build/reshard [--models examples/models]
         [--out DIR] [--repeat 3] [--all] [--screenshot PNG]
"""

import argparse
import os
import pathlib
import re
import statistics
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


def spread(values):
    """'min / median / max' of `values`."""
    return "%.2f / %.2f / %.2f" % (min(values), statistics.median(values),
                                   max(values))


def rounds(repeat, first, second):
    """Per-round (first, second) seconds, the order alternating."""
    out = []
    for r in range(max(3, repeat)):
        if r % 2 == 0:
            a = first()
            b = second()
        else:
            b = second()
            a = first()
        out.append((a, b))
    return out


def case(args, browser, name, model, src_sizes, dst_sizes):
    src = os.path.join(args.out, name + "-src.json")
    dst = os.path.join(args.out, name + "-dst.json")
    gen(args.cli, os.path.join(args.models, model), src_sizes, src)
    gen(args.cli, os.path.join(args.models, model), dst_sizes, dst)
    html = os.path.join(args.out, name + ".html")
    plans = rounds(args.repeat,
                   lambda: run([args.cli, "plan", src, dst, "--json"]),
                   lambda: run([args.cli, "plan", src, dst, "--html", html]))
    text = pathlib.Path(html).read_text("utf-8")
    static = os.path.join(args.out, name + "-static.html")
    pathlib.Path(static).write_text(
        re.sub(r"<script>.*?</script>", "", text, flags=re.S), "utf-8")
    url = pathlib.Path(html).resolve().as_uri()
    static_url = pathlib.Path(static).resolve().as_uri()
    loads = rounds(args.repeat, lambda: browser.load(url, READY),
                   lambda: browser.load(
                       static_url, "document.readyState === 'complete'"))
    browser.load(url, READY)  # the report, for the figures read below
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
    grid = lambda s: "TP%d/PP%d/EP%d/DP%d" % s  # noqa: E731
    print("%s %s -> %s (%d rounds; min / median / max)" % (
        name, grid(src_sizes), grid(dst_sizes), len(plans)))
    print("  report file       %.2f MB (%d heatmap cells, %d x %d bins, "
          "%d explorer records for %d tensors)" %
          (os.path.getsize(html) / 1e6, cells, bins[0], bins[1], records,
           tensors))
    print("  reshard plan      --json %s s, --html %s s, ratio %sx" %
          (spread([a for a, _ in plans]), spread([b for _, b in plans]),
           spread([b / a for a, b in plans])))
    print("  chromium load     %s s to ready (script done at %.0f ms), "
          "no-script page of the same bytes %s s, ratio %sx" %
          (spread([a for a, _ in loads]), script_ms,
           spread([b for _, b in loads]), spread([a / b for a, b in loads])))
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
