"""One name per thing across C++, Python and the CLI (docs/names.md): the
library's names and the old names kept as aliases.
"""

import json
import os
import pathlib
import subprocess

import reshard
from patterns import Buffers

DATA = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", "tests/data"))
ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENARIOS = DATA / "scenarios"


def _scenario(name):
    return reshard.Placement.from_json(
        (SCENARIOS / f"{name}.json").read_text("utf-8"))


def _cli(*args):
    run = subprocess.run([os.environ["RESHARD_CLI"], *map(str, args)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _stored(tmp_path):
    """A store holding one revision of the tp_split_4_to_8 source."""
    source = _scenario("tp_split_4_to_8_source")
    store = reshard.WeightStore(f"fs://{tmp_path}")
    manifest = store.upload(source,
                            Buffers(source, "numpy", fill=True)
                            .by_participant())
    return store, manifest.manifest_key


def test_store_list_and_remove_are_the_library_names(tmp_path):
    assert reshard.WeightStore.ls is reshard.WeightStore.list
    assert reshard.WeightStore.rm is reshard.WeightStore.remove
    store, key = _stored(tmp_path)
    listed = store.list()
    assert [r.manifest_key for r in listed] == [key]
    assert store.ls() == listed
    store.remove(key)
    assert store.list() == []


def test_cli_store_list_and_remove_are_aliases(tmp_path):
    _, key = _stored(tmp_path)
    uri = f"fs://{tmp_path}"
    listed = json.loads(_cli("store", "list", uri, "--json"))
    assert listed == json.loads(_cli("store", "ls", uri, "--json"))
    assert [r["manifest_key"] for r in listed] == [key]
    _cli("store", "remove", uri, key)
    assert json.loads(_cli("store", "ls", uri, "--json")) == []


def test_cli_flag_aliases(tmp_path):
    model = ROOT / "examples" / "models" / "tiny-moe.json"
    for flag, out in (("--generation", "a.json"),
                      ("--weight-generation", "b.json")):
        _cli("gen", "--model", model, "--tp", "2", flag, "7", "-o",
             tmp_path / out)
    a = reshard.Placement.from_json((tmp_path / "a.json").read_text())
    b = reshard.Placement.from_json((tmp_path / "b.json").read_text())
    assert a.weight_generation == b.weight_generation == 7
    assert a.placement_id == b.placement_id
    source = SCENARIOS / "tp_split_4_to_8_source.json"
    target = SCENARIOS / "tp_split_4_to_8_target.json"
    participant = _scenario("tp_split_4_to_8_target").parts[3].participant_id
    old = json.loads(_cli("plan", source, target, "--target-participant",
                          participant, "--json"))
    new = json.loads(_cli("plan", source, target, "--target-participant-id",
                          participant, "--json"))
    assert old == new
    assert [p["participant_id"] for p in new["target_participants"]] == [
        participant]


def test_live_session_key_is_session_and_name_its_alias(tmp_path):
    source = _scenario("tp_split_4_to_8_source")
    target = _scenario("tp_split_4_to_8_target")
    common = dict(rank=0, ranks=1, source=source, target=target)
    by_keyword = reshard.LiveSession(str(tmp_path), session="steps", **common)
    assert (by_keyword.session, by_keyword.name) == ("steps", "steps")
    by_position = reshard.LiveSession(str(tmp_path), "steps", **common)
    assert (by_position.session, by_position.name) == ("steps", "steps")
    by_old_keyword = reshard.LiveSession(str(tmp_path), name="old", **common)
    assert by_old_keyword.session == "old"
    message = ("LiveSession: give the session's key as session= (or name=, "
               "its older name), once")
    for kwargs in ({}, {"name": "a", "session": "b"}):
        try:
            reshard.LiveSession(str(tmp_path), **kwargs, **common)
        except reshard.InvalidArgumentError as e:
            assert str(e) == message
        else:
            raise AssertionError(f"accepted {kwargs}")
