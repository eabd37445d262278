"""The Python examples run as programs: each exits 0 only after checking
every byte it moved and prints one summary line last."""

import os
import pathlib
import re
import subprocess
import sys

import reshard

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def example(name, *args, timeout=120):
    """The finished process of examples/python/<name> *args."""
    env = dict(os.environ)
    package = os.path.dirname(os.path.dirname(os.path.abspath(
        reshard.__file__)))  # where this reshard was imported from
    env["PYTHONPATH"] = os.pathsep.join(
        [package] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                     if p])
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=env)


def run_example(name, *args, timeout=120):
    """The stdout lines of an example that exited 0."""
    proc = example(name, *args, timeout=timeout)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, (name, proc.returncode, proc.stdout,
                                  proc.stderr)
    assert lines, (name, proc.stderr)
    return lines


def test_plan_placements_default_pair():
    lines = run_example("plan_placements.py")
    assert lines[-1] == ("plan_placements: tp_split_4_to_8_source.json -> "
                         "tp_split_4_to_8_target.json: 16 regions, 2056 bytes")
    assert lines[2] == ("tensors 2  regions 16  operations 16  segments 16  "
                        "bytes 2056")


def test_plan_placements_given_files_and_json(data_dir, cli):
    pair = [str(data_dir / "scenarios" / f"pp_routing_4_to_2_{s}.json")
            for s in ("source", "target")]
    lines = run_example("plan_placements.py", *pair, "--json")
    assert lines[0] == cli("plan", "--json", *pair).stdout.rstrip("\n")
    assert lines[-1].startswith("plan_placements: pp_routing_4_to_2_source."
                                "json -> pp_routing_4_to_2_target.json: ")


def test_plan_placements_refuses_incompatible_placements(data_dir):
    pair = [str(data_dir / "scenarios" / name) for name in
            ("pp_routing_4_to_2_source.json", "tp_split_4_to_8_target.json")]
    proc = example("plan_placements.py", *pair)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == (
        "plan_placements: FAILED (target manifests are missing tensors: "
        "layers.0.weight)")


def test_store_roundtrip():
    lines = run_example("store_roundtrip.py")
    assert lines[-1].startswith(
        "store_roundtrip: 23 tensors uploaded from trainer TP2xPP2xEP2 (8 "
        "ranks) as weights/default/example-moe/step-7/")
    assert re.search(r"\(22848 bytes verified\), loaded into engine TP4xEP4 "
                     r"\(4 ranks\) in \d+ reads, 23808 bytes checked$",
                     lines[-1]), lines[-1]


def test_rl_loop_ten_updates():
    lines = run_example("rl_loop.py", timeout=300)
    assert lines[-1].startswith(
        "rl_loop: 10 updates from trainer TP2/EP2 to rollout DP2xTP1, 249600 "
        "bytes checked byte for byte on 2 rollout ranks, placements sha256:")


def test_frameworks_doc_code_runs(capsys):
    """The python blocks of docs/python-frameworks.md, in order, in one
    namespace; the fragment table printed for rank (tp=1, pp=1, ep=0)
    matches the page's table."""
    doc = (EXAMPLES.parents[1] / "docs" / "python-frameworks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(blocks) == 7
    namespace = {"__name__": "python_frameworks_doc"}
    for block in blocks:
        exec(compile(block, "docs/python-frameworks.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "p-d0-p1-e0-t1"
    rows = re.findall(r"^\| `(model\.[^`]+|lm_head\.weight)` \| (\([^|]*\)) "
                      r"\| (\([^|]*\)) \| (\([^|]*\)) \|", doc, re.M)
    assert len(rows) == 5
    for tensor_id, shape, offset, local in rows:
        assert f"{tensor_id} {shape} {offset} {local} " in "\n".join(
            line + " " for line in printed), tensor_id
    assert namespace["plan"].summary["bytes"] == sum(
        f.nbytes for f in namespace["engine"].fragments)


def test_engine_sync_megatron_trainer_updates_vllm_engine():
    lines = run_example("engine_sync.py", "--steps", "4", timeout=300)
    assert lines[-1] == (
        "engine_sync: 4 steps, megatron tp2 pp2 (4 participants) -> vllm tp4 "
        "(4 participants), 22656 bytes checked per step")
