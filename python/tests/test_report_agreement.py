"""One writer per record: the CLI's --json and Python's dicts are written
from the same field list (VisitFields, reshard/fields.h), so they hold the
same keys and values. Checked here on real records of real runs, including
a revision whose manifest is corrupt.

Every record with a VisitFields in the tree (include/, src/, tools/) is
named in COVERAGE with the test that checks it: a record added without an
entry fails test_every_record_with_a_visitor_is_covered. A record written
by both the CLI and Python is compared between the two; one written by a
single side (a CLI command's report, a Python-only call) is compared with
the names its visitor lists."""
import json
import multiprocessing as mp
import os
import pathlib
import re
import shutil
import subprocess
import sys

import torch

import reshard
import reshard.engines
import reshard.hf

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
ROOT = DATA.parent.parent
SCENARIO = os.path.join(str(DATA), "scenarios", "cross_dim_ep2_to_tp2_{}.json")
sys.path.insert(0, str(DATA.parent / "cli"))
import hf_checkpoints as hfc  # noqa: E402

# Record -> the test below that compares its writers.
COVERAGE = {
    "WeightPlacementManifest":
        "test_validate_result_is_the_same_in_the_cli_and_in_python",
    "StoredWeightManifest":
        "test_upload_receipt_is_the_same_in_the_cli_and_in_python",
    "RevisionInfo": "test_revision_info_is_the_same_in_the_cli_and_in_python",
    "PlanSummary": "test_plan_summary_is_the_same_in_the_cli_and_in_python",
    "GcReport": "test_gc_is_the_same_in_the_cli_and_in_python",
    "StoreProblem": "test_gc_is_the_same_in_the_cli_and_in_python",
    "VerifyReport": "test_verify_is_the_same_in_the_cli_and_in_python",
    "VerifyOutcome": "test_verify_is_the_same_in_the_cli_and_in_python",
    "CorruptRevision": "test_verify_is_the_same_in_the_cli_and_in_python",
    "ReshardReport": "test_reshard_report_agrees_with_the_cli",
    "SelfTestReport": "test_reshard_report_agrees_with_the_cli",
    "LoadReport": "test_hf_reshard_is_python_load_and_write",
    "CheckpointWriteReport": "test_hf_reshard_is_python_load_and_write",
    "HfReshardReport": "test_hf_reshard_is_python_load_and_write",
    "HfImportReport": "test_hf_import_and_export_reports",
    "HfExportReport": "test_hf_import_and_export_reports",
    "EngineLoadReport": "test_engine_reports",
    "EngineReshardReport": "test_engine_reports",
    "LiveUpdateReport": "test_live_update_report_is_its_visitor",
    "LiveReport": "test_live_update_report_is_its_visitor",
}

_VISITOR = re.compile(
    r"void VisitFields\(const (?:\w+::)*(\w+)&\s*\w+,\s*\w+&&\s*(\w+)\)"
    r"\s*\{(.*?)\n\}\n", re.S)


def _visitors():
    """{record: the names its VisitFields visits, nested visitors of a
    base (static_cast) included}, from every source file outside tests."""
    bodies = {}
    for folder in ("include", "src", "tools"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".h", ".cc") or path.stem.endswith("_test"):
                continue
            text = path.read_text()
            found = _VISITOR.findall(text)
            # Every definition is parsed: none escapes by its spelling.
            assert len(found) == len(re.findall(
                r"^void VisitFields\(", text, re.M)), path
            for record, visit, body in found:
                assert record not in bodies, f"two visitors of {record}"
                bodies[record] = (visit, body)

    def names(record):
        visit, body = bodies[record]
        out = set(re.findall(visit + r'\("(\w+)"', body))
        for base in re.findall(r"VisitFields\(static_cast<const (\w+)&>",
                               body):
            out |= names(base)
        return out
    return {record: names(record) for record in bodies}


VISITORS = _visitors()


def _cli(*args, rc=0):
    run = subprocess.run([os.environ["RESHARD_CLI"], *map(str, args)],
                         capture_output=True, text=True)
    assert run.returncode == rc, run.stderr
    return json.loads(run.stdout)


def test_every_record_with_a_visitor_is_covered():
    # Found by the parser, not listed by hand: the records of the tree.
    assert {"GcReport", "SelfTestReport", "EngineReshardReport",
            "HfReshardReport", "LiveReport"} <= set(VISITORS)
    assert set(COVERAGE) == set(VISITORS)
    for test in set(COVERAGE.values()):
        assert callable(globals().get(test)), test
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


def _store_with_a_loser_and_a_corrupt_revision(root):
    """A store whose gc has work: a second upload of one revision lost
    (its transaction records are left) and a corrupt revision (skipped)."""
    with open(SCENARIO.format("source")) as f:
        placement = reshard.Placement.from_json(f.read())
    store = reshard.WeightStore(f"fs://{root}")
    store.upload(placement, _tensors(placement))
    try:
        store.upload(placement, _tensors(placement))
    except reshard.AlreadyExistsError:
        pass
    other = placement.for_revision(revision="r2")
    bad = store.upload(other, _tensors(other))
    (root / bad.manifest_key).write_text("{not json")
    return bad.manifest_key


def test_gc_is_the_same_in_the_cli_and_in_python(tmp_path):
    _store_with_a_loser_and_a_corrupt_revision(tmp_path / "cli")
    shutil.copytree(tmp_path / "cli", tmp_path / "py")
    cli = _cli("store", "gc", f"fs://{tmp_path / 'cli'}", "--json")
    python = reshard.WeightStore(f"fs://{tmp_path / 'py'}").gc()
    assert cli == python
    assert set(cli) == VISITORS["GcReport"]
    # transactions_completed: once missing from the CLI's output.
    assert cli["transactions_completed"] == []
    assert len(cli["transactions_removed"]) == 1 and cli["keys_removed"] > 0
    [skipped] = cli["skipped"]
    assert set(skipped) == VISITORS["StoreProblem"]
    assert skipped["error"].startswith(
        f"corrupt manifest {skipped['key']}: invalid JSON")


def test_verify_is_the_same_in_the_cli_and_in_python(tmp_path):
    root = tmp_path / "store"
    bad = _store_with_a_loser_and_a_corrupt_revision(root)
    uri = f"fs://{root}"
    store = reshard.WeightStore(uri)
    [good] = [r.manifest_key for r in store.ls() if r.state == "READY"]
    python = store.verify(good)
    assert set(python) == VISITORS["VerifyReport"]
    cli = _cli("store", "verify", uri, good, "--json")
    assert cli == dict(python, corrupt=[], revisions=1, verified=True)
    # The outcome's totals are a VerifyReport (VisitFields(v.total, ...)).
    assert set(cli) == VISITORS["VerifyOutcome"] | VISITORS["VerifyReport"]
    # Every revision: the good one's totals and the corrupt one named.
    every = _cli("store", "verify", uri, "--json", rc=1)
    [corrupt] = every.pop("corrupt")
    assert set(corrupt) == VISITORS["CorruptRevision"]
    assert corrupt["manifest_key"] == bad
    assert corrupt["error"].startswith(f"corrupt manifest {bad}: invalid JSON")
    assert every == dict(python, revisions=2, verified=False)


def test_reshard_report_agrees_with_the_cli():
    source, target = (SCENARIO.format(side) for side in ("source", "target"))
    src, dst = (reshard.Placement.from_json(open(p).read())
                for p in (source, target))
    report = reshard.reshard(src, _tensors(src), dst, _empty(dst))
    assert set(report) == VISITORS["ReshardReport"]
    plan = _cli("plan", source, target, "--json")
    assert {k: report[k] for k in ("bytes", "operations", "regions",
                                   "segments")} == \
        {k: plan[k] for k in ("bytes", "operations", "regions", "segments")}
    # The self-test reshards the same pair: the same counts, and the keys
    # its visitor gives a local run.
    selftest = _cli("selftest", source, target, "--json")
    assert {k: selftest[k] for k in ("bytes", "operations", "segments")} == \
        {k: report[k] for k in ("bytes", "operations", "segments")}
    assert sorted(selftest) == [
        "bytes", "gbps", "memcpy_gbps", "mismatch", "operations",
        "plan_seconds", "seconds", "segments", "transport", "verified"]
    assert selftest["transport"] == "local" and selftest["verified"] is True
    assert set(selftest) < VISITORS["SelfTestReport"]


def _empty(placement):
    return {part.participant_id: {
        f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
        for f in part.fragments} for part in placement.parts}


def _llama(tmp_path):
    hfc.write_checkpoint(tmp_path / "ckpt", hfc.CONFIGS["llama"])
    ckpt = reshard.hf.Checkpoint(tmp_path / "ckpt")
    placement = reshard.hf.layout(ckpt, tp=2)
    (tmp_path / "tp2.json").write_text(placement.to_json())
    return ckpt, placement


def _hf_tensors(placement):
    return {part.participant_id: {
        f.placement_fragment_id: torch.zeros(tuple(f.local_shape),
                                             dtype=torch.bfloat16)
        for f in part.fragments} for part in placement.parts if part.fragments}


def test_hf_reshard_is_python_load_and_write(tmp_path):
    ckpt, placement = _llama(tmp_path)
    cli = _cli("hf", "reshard", tmp_path / "ckpt", tmp_path / "tp2.json",
               tmp_path / "cli-out", "--json")
    assert set(cli) == VISITORS["HfReshardReport"]
    tensors = _hf_tensors(placement)
    load = reshard.hf.load(ckpt, placement, tensors)
    assert set(load) == VISITORS["LoadReport"]
    for key in ("bytes", "bytes_read", "read_requests", "regions"):
        assert cli[key] == load[key], key
    write = reshard.hf.write(placement, tensors, tmp_path / "py-out")
    # Python adds the file count the CLI reports beside the write.
    assert set(write) == VISITORS["CheckpointWriteReport"] | {"files"}
    assert (cli["bytes_written"], cli["writes"], cli["files"]) == \
        (write["bytes"], write["writes"], write["files"])
    assert cli["tensors"] == len(placement.tensors)


def test_hf_import_and_export_reports(tmp_path):
    _llama(tmp_path)
    uri = f"fs://{tmp_path / 'store'}"
    imported = _cli("hf", "import", tmp_path / "ckpt", uri, "--json")
    assert set(imported) == VISITORS["HfImportReport"] | {"seconds"}
    [info] = reshard.WeightStore(uri).ls()
    assert imported["manifest_key"] == info["manifest_key"]
    assert imported["fragments"] == info["fragments"]
    exported = _cli("hf", "export", uri, imported["manifest_key"],
                    tmp_path / "out", "--json")
    assert set(exported) == VISITORS["HfExportReport"] | {"seconds"}
    assert exported["bytes"] == info["bytes"]


def test_engine_reports(tmp_path):
    _llama(tmp_path)
    layout = reshard.engines.layout(hfc.CONFIGS["llama"], engine="vllm", tp=2)
    load = _cli("engine", "load", tmp_path / "ckpt", "--engine", "vllm",
                "--tp", 2, "-o", tmp_path / "tp2", "--json")
    assert set(load) == VISITORS["EngineLoadReport"]
    assert load["participants"] == len(layout.participants)
    assert load["parameters"] == sum(len(layout.parameters(p))
                                     for p in layout.participants)
    config = tmp_path / "ckpt" / "config.json"
    grids = ("--config", config, "--from", "vllm", "--from-tp", 2, "--to",
             "vllm", "--to-tp", 1, "--json")
    local = _cli("engine", "reshard", tmp_path / "tp2", tmp_path / "tp1",
                 *grids)
    # manifest_key only through a store.
    assert set(local) == VISITORS["EngineReshardReport"] - {"manifest_key"}
    assert local["via"] == "local" and local["files"] == 1
    uri = f"fs://{tmp_path / 'store'}"
    stored = _cli("engine", "reshard", tmp_path / "tp2", tmp_path / "tp1s",
                  *grids, "--via", uri)
    assert set(stored) == VISITORS["EngineReshardReport"]
    assert stored["via"] == uri
    assert [r["manifest_key"] for r in reshard.WeightStore(uri).ls()] == \
        [stored["manifest_key"]]
    for key in ("bytes", "files", "padding_bytes", "source_bytes"):
        assert stored[key] == local[key], key


def _live_rank(rank, rendezvous, results):
    with open(SCENARIO.format("source")) as f:
        src = reshard.Placement.from_json(f.read())
    with open(SCENARIO.format("target")) as f:
        dst = reshard.Placement.from_json(f.read())
    session = reshard.LiveSession(rendezvous, "agree", rank=rank, ranks=2,
                                  source=src, target=dst, timeout=20)
    spart, tpart = src.parts[rank], dst.parts[rank]
    report = session.update(
        {spart.participant_id: {
            f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
            for f in spart.fragments}},
        {tpart.participant_id: {
            f.tensor_id: torch.zeros(f.local_shape, dtype=torch.bfloat16)
            for f in tpart.fragments}})
    session.close()
    results.put((rank, sorted(report)))


def test_live_update_report_is_its_visitor(tmp_path):
    # A one-shot session's report is an update's plus the plan's fields.
    assert VISITORS["LiveReport"] == \
        VISITORS["LiveUpdateReport"] | {"plan_seconds", "regions"}
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_live_rank,
                         args=(r, str(tmp_path), results)) for r in range(2)]
    for p in procs:
        p.start()
    keys = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # LiveSession.update adds the step and the session's key.
    for rank in (0, 1):
        assert set(keys[rank]) == \
            VISITORS["LiveUpdateReport"] | {"session", "step"}
