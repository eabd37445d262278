"""The plan report from Python: ``plan.to_html()`` and ``plan.to_svg()``
are byte for byte what ``reshard plan --html`` / ``--svg`` write for the
same options; bad options raise InvalidArgumentError with the core's
message; the default bandwidth is measured on the spot."""

import pathlib

import pytest

import reshard

PAIRS = ["four_axis", "pp_routing_2_to_4", "cross_dim_ep2_to_tp2"]


def _pair(data_dir, name):
    load = lambda side: reshard.Placement.from_json(  # noqa: E731
        (data_dir / "scenarios" / f"{name}_{side}.json").read_text("utf-8"))
    return load("source"), load("target")


def _paths(data_dir, name):
    return [data_dir / "scenarios" / f"{name}_{side}.json"
            for side in ("source", "target")]


@pytest.mark.parametrize("name", PAIRS)
def test_html_and_svg_equal_the_cli(name, data_dir, cli, tmp_path):
    src, dst = _pair(data_dir, name)
    plan = reshard.plan(src, dst)
    html = tmp_path / "r.html"
    svg = tmp_path / "r.svg"
    cli("plan", *_paths(data_dir, name), "--html", html, "--svg", svg,
        "--gbps", "12.5")
    assert plan.to_html(gbps=12.5) == html.read_text("utf-8")
    assert plan.to_svg() == svg.read_text("utf-8")
    assert plan.to_html(gbps=12.5).count('<rect class="cell"') == \
        len(plan.traffic)


def test_options_reach_the_report(data_dir):
    plan = reshard.plan(*_pair(data_dir, "four_axis"))
    html = plan.to_html(gbps=2, title="<trainer> -> rollout",
                        max_heatmap_axis=4, max_explorer_items=1)
    assert "<title>reshard plan: &lt;trainer&gt; -&gt; rollout</title>" in html
    assert "(rows: dp,pp, columns: dp)" in html
    assert "\"omitted\":4" in html
    assert "busiest participant at 2 GB/s (given)" in html
    svg = plan.to_svg(max_heatmap_axis=2)
    assert svg.count('<rect class="cell"') == 4


def test_default_bandwidth_is_this_hosts_memcpy(data_dir):
    plan = reshard.plan(*_pair(data_dir, "four_axis"))
    assert "GB/s (memcpy measured on this host)" in plan.to_html()
    gbps = reshard.measure_memcpy_gbps(10)
    assert 0.05 < gbps < 10000


@pytest.mark.parametrize("kwargs,message", [
    ({"gbps": 0}, "plan report: gbps must be a positive finite number, got 0"),
    ({"gbps": -3.5},
     "plan report: gbps must be a positive finite number, got -3.5"),
    ({"gbps": float("nan")},
     "plan report: gbps must be a positive finite number, got nan"),
    ({"gbps": float("inf")},
     "plan report: gbps must be a positive finite number, got inf"),
    ({"gbps": "fast"}, "gbps must be a number of GB/s"),
    ({"gbps": True}, "gbps must be a number of GB/s"),
    ({"gbps": 1, "max_heatmap_axis": 0},
     "plan report: max_heatmap_axis must be 1..4096, got 0"),
    ({"gbps": 1, "max_explorer_items": 0},
     "plan report: max_explorer_items must be at least 1"),
])
def test_bad_options_are_refused(kwargs, message, data_dir):
    plan = reshard.plan(*_pair(data_dir, "four_axis"))
    with pytest.raises(reshard.InvalidArgumentError) as err:
        plan.to_html(**kwargs)
    assert str(err.value) == message


def test_written_report_is_the_document(data_dir, tmp_path):
    plan = reshard.plan(*_pair(data_dir, "pp_routing_2_to_4"))
    out = pathlib.Path(tmp_path / "plan.html")
    out.write_text(plan.to_html(gbps=10), encoding="utf-8")
    text = out.read_text("utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert text.endswith("</html>\n")
