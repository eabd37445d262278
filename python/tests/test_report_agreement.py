"""One writer per record: the CLI's --json and Python's dicts are written
from the same field list (VisitFields), so they hold the same keys and
values. Checked here on real records of a real store, including a
revision whose manifest is corrupt."""
import json
import os
import subprocess

import torch

import reshard

SCENARIO = os.path.join(os.environ.get("RESHARD_TEST_DATA", ""), "scenarios",
                        "cross_dim_ep2_to_tp2_{}.json")


def _cli(*args):
    out = subprocess.run([os.environ["RESHARD_CLI"], *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def _tensors(placement):
    out = {}
    for part in placement.parts:
        out[part.participant_id] = {
            f.tensor_id: torch.full(f.local_shape, 3, dtype=torch.bfloat16)
            for f in part.fragments}
    return out


def test_revision_info_is_the_same_in_the_cli_and_in_python(tmp_path):
    with open(SCENARIO.format("source")) as f:
        placement = reshard.Placement.from_json(f.read())
    uri = f"fs://{tmp_path / 'store'}"
    store = reshard.WeightStore(uri)
    manifest = store.upload(placement, _tensors(placement))
    other = placement.for_revision(revision="r2")
    store.upload(other, _tensors(other))
    # A second revision's manifest damaged on disk: CORRUPT, with an error.
    path = tmp_path / "store" / reshard.WeightStore(uri).ls()[1][
        "manifest_key"]
    path.write_text("{not json")
    python = store.ls()
    cli = _cli("store", "ls", uri, "--json")
    assert cli == python
    assert [r["state"] for r in python] == ["READY", "CORRUPT"]
    assert python[0]["error"] == "" and python[1]["error"] != ""
    # ls sorts by key: "r2" before the damaged "step-1".
    assert python[1]["manifest_key"] == manifest.manifest_key


def test_plan_summary_is_the_same_in_the_cli_and_in_python():
    source, target = (SCENARIO.format(side) for side in ("source", "target"))
    plan = reshard.plan(*(reshard.Placement.from_json(open(p).read())
                          for p in (source, target)))
    cli = _cli("plan", source, target, "--json")
    assert json.loads(plan.to_json()) == cli
    summary = plan.summary
    assert summary == {k: cli[k] for k in summary}
    assert sorted(summary) == [
        "bytes", "max_source_bytes", "max_target_bytes", "mean_source_bytes",
        "operations", "regions", "segments", "source_fragments_used"]


def test_upload_receipt_is_the_same_in_the_cli_and_in_python(tmp_path):
    with open(SCENARIO.format("source")) as f:
        placement = reshard.Placement.from_json(f.read())
    uri = f"fs://{tmp_path / 'store'}"
    manifest = reshard.WeightStore(uri).upload(placement, _tensors(placement))
    cli = _cli("store", "show", uri, manifest.manifest_key, "--json")
    assert manifest.summary() == cli
    assert cli["manifest_key"] == manifest.manifest_key
    assert cli["bytes"] == sum(f.nbytes for f in placement.fragments)
    assert sorted(cli) == [
        "bytes", "created_at", "fragments", "manifest_digest", "manifest_key",
        "namespace", "resource_id", "revision", "tensors",
        "weight_generation"]


def test_validate_result_is_the_same_in_the_cli_and_in_python():
    path = SCENARIO.format("target")
    with open(path) as f:
        placement = reshard.Placement.from_json(f.read())
    cli = _cli("validate", path, "--json")
    assert cli.pop("valid") is True
    assert cli.pop("bindings") == 0
    assert placement.summary() == cli
    assert cli["placement_id"] == placement.placement_id
    assert cli["fragments"] == len(placement.fragments)
