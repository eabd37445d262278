#!/usr/bin/env python3
"""`reshard plan --html` in a real browser (headless Chromium over the
DevTools protocol, tests/cli/chromium_cdp.py).

For a golden scenario (four_axis), a generated MoE layout (small-moe,
TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4, once per participant and once with the
heatmap grouped by rank) and a placement whose tensor ids hold markup and
control characters, the report is rendered and checked from the DOM
against `reshard plan --json` and the placement files themselves:

* the page loads with no console message, exception or error log entry
  and requests nothing but itself;
* the header's numbers equal the JSON (bytes, regions, max/mean bytes per
  source participant, max per target) and the layouts' grid sizes;
* every heatmap cell's bytes equal the JSON traffic summed over its rows'
  and columns' participants, no traffic is missing, regions add up;
* one load bar per participant, each with the JSON's bytes;
* the tensor explorer draws, for each tensor, exactly the placement files'
  fragments (participant and box) and regions whose bytes add up to the
  tensor's target bytes; all tensors' regions add up to the JSON's;
* pipeline routes equal the JSON's;
* hostile tensor ids are shown escaped, run no script, fetch nothing.

A full-page screenshot of each report lands in OUT_DIR (default: a
temporary directory). Exits 77 (skipped) with the reason when Chromium or
python3-websocket is missing or Chromium cannot start.

Usage: plan_report_browser_test.py RESHARD_CLI TESTS_DIR [OUT_DIR]
"""

import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "oracle"))
import chromium_cdp  # noqa: E402
from harness import Failure, check  # noqa: E402

SKIP = 77
READY = "window.reshardReport && window.reshardReport.ready"

CLI = TESTS = OUT = None
browser = None


def run(*args):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise Failure("reshard %s failed: %s" % (" ".join(map(str, args)),
                                                 p.stderr))
    return p.stdout


def render(name, source, target, *extra):
    html = os.path.join(OUT, name + ".html")
    run("plan", source, target, "--html", html, "--gbps", "25", *extra)
    plan = json.loads(run("plan", source, target, "--json"))
    url = pathlib.Path(html).resolve().as_uri()
    seconds = browser.load(url, READY)
    return plan, seconds


def evaluate(expr):
    return browser.evaluate(expr)


def box_text(offset, shape):
    return "[" + ", ".join("%d:%d" % (o, o + n)
                           for o, n in zip(offset, shape)) + "]"


def fragments_by_tensor(path):
    """tensor id -> Counter of (participant id, box) from a placement."""
    placement = json.loads(pathlib.Path(path).read_text("utf-8"))
    out = collections.defaultdict(collections.Counter)
    nbytes = collections.Counter()
    for part in placement["parts"]:
        for f in part["fragments"]:
            out[f["tensor_id"]][(part["participant_id"],
                                 box_text(f["global_offset"],
                                          f["local_shape"]))] += 1
            nbytes[f["tensor_id"]] += f["nbytes"]
    sizes = placement["topology"]
    return placement, out, nbytes, sizes


def check_clean():
    problems = browser.problems()
    check(not problems, "page reported problems: %s" % problems[:5])
    requests = browser.requests()
    check(not requests, "page made network requests: %s" % requests[:5])


def check_header(plan, source, target):
    cards = evaluate("""Object.fromEntries([...document.querySelectorAll(
        '.card')].map(c => [c.dataset.key, c.dataset.value]))""")
    for key in ("bytes", "regions", "max_source_bytes", "mean_source_bytes",
                "max_target_bytes"):
        check(cards.get(key) == str(plan[key]),
              "card %s: %r, JSON %r" % (key, cards.get(key), plan[key]))
    expected = max(plan["max_source_bytes"], plan["max_target_bytes"]) / 25e9
    check(abs(float(cards["estimate_seconds"]) - expected) <= 1e-9 * expected
          + 1e-15, "estimate %s, expected %s" % (cards["estimate_seconds"],
                                                 expected))
    rows = evaluate("""[...document.querySelectorAll('table.layouts tr[data-side]')]
        .map(r => [...r.cells].map(c => c.textContent))""")
    for row, (placement, _, _, topo) in zip(rows, (source, target)):
        got = [int(v) for v in row[2:6]]
        want = [topo["tp_size"], topo["pp_size"], topo["ep_size"],
                topo["dp_size"]]
        check(got == want, "%s grid %s, placement %s" % (row[0], got, want))
        check(int(row[6].replace(",", "")) == len(topo["participants"]),
              "%s participants %s" % (row[0], row[6]))
        check(int(row[8].replace(",", "")) == len(placement["tensors"]),
              "%s tensors %s" % (row[0], row[8]))


def check_heatmap(plan):
    page = evaluate("""({cells: [...document.querySelectorAll(
        '#heatmap-svg rect.cell')].map(c => [+c.dataset.s, +c.dataset.t,
        c.dataset.b, +c.dataset.r]), bins: reshardReport.data.bins,
        ids: {source: reshardReport.data.participants.source.ids,
              target: reshardReport.data.participants.target.ids}})""")
    check(page["cells"], "no heatmap cells")
    bin_of = {}
    for side in ("source", "target"):
        ids = page["ids"][side]
        want = sorted(p["participant_id"] for p in plan[side + "_participants"])
        check(sorted(ids) == want, "%s participants differ" % side)
        for b, (first, count, _) in enumerate(page["bins"][side]):
            for pos in range(first, first + count):
                bin_of[(side, ids[pos])] = b
    expected = collections.Counter()
    for e in plan["traffic"]:
        expected[(bin_of[("source", e["source"])],
                  bin_of[("target", e["target"])])] += e["bytes"]
    got = {(s, t): int(b) for s, t, b, _ in page["cells"]}
    check(len(got) == len(page["cells"]), "duplicate heatmap cells")
    check(got == dict(expected),
          "heatmap cells differ from the JSON traffic: %d cells vs %d" %
          (len(got), len(expected)))
    regions = sum(r for _, _, _, r in page["cells"])
    check(regions == plan["regions"], "cell regions %d, JSON %d" %
          (regions, plan["regions"]))
    return len(page["cells"])


def check_load_bars(plan):
    for side in ("source", "target"):
        bars = evaluate("""[...document.querySelectorAll('#load-%s rect.bar')]
            .map(b => [b.dataset.id, b.dataset.b])""" % side)
        want = {p["participant_id"]: p["bytes"]
                for p in plan[side + "_participants"]}
        got = {i: int(b) for i, b in bars}
        check(len(bars) == len(want) and got == want,
              "%s load bars differ from the JSON" % side)


def printable(text):
    """The report's escaping of names in attributes (report.js printable,
    charts.cc): control, C1 and bidi characters as visible escapes."""
    out = []
    for c in text:
        code = ord(c)
        special = {10: "\\n", 13: "\\r", 9: "\\t", 27: "\\e"}
        if code in special:
            out.append(special[code])
        elif code < 0x20 or code == 0x7f:
            out.append("\\x%02x" % code)
        elif (0x80 <= code <= 0x9f or code in (0x200e, 0x200f)
              or 0x202a <= code <= 0x202e or 0x2066 <= code <= 0x2069):
            out.append("\\u{%04x}" % code)
        else:
            out.append(c)
    return "".join(out)


def check_explorer(plan, source, target, tensors=None):
    _, src_frags, _, _ = source
    _, dst_frags, dst_bytes, _ = target
    names = tensors if tensors is not None else sorted(dst_frags)
    regions = 0
    for name in names:
        check(evaluate("reshardReport.selectTensor(%s)" % json.dumps(name)),
              "explorer does not know tensor %r" % name)
        page = evaluate("""({info: document.getElementById('tx-info')
                .getAttribute('data-tensor'),
            source: [...document.querySelectorAll('#tx-source rect.frag')]
                .map(r => [r.dataset.p, r.dataset.box]),
            target: [...document.querySelectorAll('#tx-target rect.frag')]
                .map(r => [r.dataset.p, r.dataset.box]),
            regions: [...document.querySelectorAll('#tx-regions rect.region')]
                .map(r => +r.dataset.b),
            rows: document.querySelectorAll('#tx-table tr').length - 1})""")
        check(page["info"] == printable(name), "explorer shows %r, not %r" %
              (page["info"], printable(name)))
        for side, truth in (("source", src_frags), ("target", dst_frags)):
            got = collections.Counter(tuple(x) for x in page[side])
            want = collections.Counter({(printable(p), box): n for (p, box), n
                                        in truth[name].items()})
            check(got == want, "%s: %s fragments differ from the "
                  "placement: %s vs %s" % (name, side, sorted(got)[:3],
                                           sorted(truth[name])[:3]))
        check(sum(page["regions"]) == dst_bytes[name],
              "%s: region bytes %d, target bytes %d" %
              (name, sum(page["regions"]), dst_bytes[name]))
        check(page["rows"] == min(len(page["regions"]), 300),
              "%s: %d table rows for %d regions" % (name, page["rows"],
                                                    len(page["regions"])))
        regions += len(page["regions"])
    if tensors is None:
        check(regions == plan["regions"], "explorer regions %d, JSON %d" %
              (regions, plan["regions"]))


def check_routes(plan):
    page = evaluate("""({paths: document.querySelectorAll('#routes-svg path.route')
        .length, rows: [...document.querySelectorAll('#routes-table tr[data-b]')]
        .map(r => r.dataset.b)})""")
    want = sorted(r["bytes"] for r in plan["pipeline_routes"])
    check(page["paths"] == len(plan["pipeline_routes"]),
          "%d route paths, JSON %d" % (page["paths"],
                                       len(plan["pipeline_routes"])))
    check(sorted(int(b) for b in page["rows"]) == want, "route bytes differ")


def screenshot(name):
    size = browser.screenshot(os.path.join(OUT, name + ".png"))
    check(size > 20000, "screenshot of %s is only %d bytes" % (name, size))


def full_check(name, src, dst, *extra, tensors=None):
    plan, seconds = render(name, src, dst, *extra)
    check_clean()
    source = fragments_by_tensor(src)
    target = fragments_by_tensor(dst)
    check_header(plan, source, target)
    cells = check_heatmap(plan)
    check_load_bars(plan)
    check_explorer(plan, source, target, tensors)
    check_routes(plan)
    screenshot(name)
    check_clean()
    return plan, cells, seconds


def test_golden_four_axis():
    s = os.path.join(TESTS, "data", "scenarios")
    plan, cells, _ = full_check("four_axis",
                                os.path.join(s, "four_axis_source.json"),
                                os.path.join(s, "four_axis_target.json"))
    check(cells == 1024, "four_axis: %d cells" % cells)


def generate_moe():
    model = os.path.join(TESTS, "..", "examples", "models", "small-moe.json")
    src = os.path.join(OUT, "moe_source.json")
    dst = os.path.join(OUT, "moe_target.json")
    run("gen", "--model", model, "--tp", 4, "--pp", 2, "--ep", 8, "--dp", 2,
        "-o", src)
    run("gen", "--model", model, "--tp", 8, "--pp", 4, "--ep", 2, "--dp", 4,
        "-o", dst)
    return src, dst


def biggest_tensors(path, count):
    _, _, nbytes, _ = fragments_by_tensor(path)
    ranked = sorted(nbytes, key=lambda t: (-nbytes[t], t))
    return ranked[:count] + sorted(nbytes)[:2]


def test_generated_moe():
    src, dst = generate_moe()
    full_check("moe", src, dst, tensors=biggest_tensors(dst, 6))


def test_generated_moe_grouped_heatmap():
    src, dst = generate_moe()
    plan, cells, _ = full_check("moe_grouped", src, dst, "--heatmap-max-axis",
                                16, tensors=biggest_tensors(dst, 2))
    bins = evaluate("""[reshardReport.data.bins.source.length,
        reshardReport.data.bins.target.length]""")
    check(bins[0] <= 16 and bins[1] <= 16 and bins[0] > 1,
          "grouped heatmap has %s bins" % bins)


HOSTILE = ["</script><script>window.__pwned=1</script>",
           "<img src=x onerror=\"window.__pwned=2\">\u0001bell\u007f",
           "rtl\u202eevil & 'quotes' \"too\""]


def hostile_pair():
    import make_scenarios as ms
    tensors = lambda: [ms.T(name, [8, 4], "bfloat16", {"tp": 0})  # noqa: E731
                       for name in HOSTILE]
    out = []
    for side, tp in (("source", 2), ("target", 4)):
        placement = ms.build_placement("hostile", side, ms.S(tp=tp), tensors())
        path = os.path.join(OUT, "hostile_%s.json" % side)
        pathlib.Path(path).write_text(ms.oracle.canonical(placement))
        out.append(path)
    return out


def test_hostile_tensor_ids():
    src, dst = hostile_pair()
    full_check("hostile", src, dst)
    check(evaluate("typeof window.__pwned") == "undefined",
          "markup in a tensor id ran as script")
    check(evaluate("document.querySelectorAll('img').length") == 0,
          "markup in a tensor id became an element")
    check(evaluate("document.scripts.length") == 2,
          "the page has other scripts than its data and its code")
    options = evaluate("""[...document.querySelectorAll('#tx-list option')]
        .map(o => o.textContent)""")
    text = "\n".join(options)
    check(HOSTILE[0] in text, "the <script> id is not shown as text")
    check("\\x01bell\\x7f" in text and "\u0001" not in text,
          "control characters are not shown escaped: %r" % text)
    check("rtl\\u{202e}evil" in text, "the bidi override is not escaped")
    reshardReport_select = evaluate("reshardReport.selectTensor(%s)" %
                                    json.dumps(HOSTILE[1]))
    check(reshardReport_select, "cannot select the hostile tensor")
    info = evaluate("document.getElementById('tx-info').textContent")
    check(info.startswith("<img src=x onerror=\"window.__pwned=2\">\\x01bell"),
          "tensor info shows %r" % info[:80])


def main(argv):
    global CLI, TESTS, OUT, browser
    if len(argv) < 3:
        print(__doc__)
        return 2
    CLI, TESTS = argv[1], argv[2]
    try:
        browser = chromium_cdp.Chromium.start()
    except chromium_cdp.Unavailable as exc:
        print("SKIP: the browser test cannot run here: %s" % exc)
        return SKIP
    tests = [test_golden_four_axis, test_generated_moe,
             test_generated_moe_grouped_heatmap, test_hostile_tensor_ids]
    failed = 0
    try:
        with tempfile.TemporaryDirectory(prefix="reshard-report-") as tmp:
            OUT = argv[3] if len(argv) > 3 else tmp
            os.makedirs(OUT, exist_ok=True)
            for fn in tests:
                try:
                    fn()
                    print("PASS", fn.__name__)
                except Failure as exc:
                    failed += 1
                    print("FAIL", fn.__name__, exc)
    finally:
        browser.close()
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
