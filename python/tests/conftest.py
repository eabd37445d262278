"""Shared fixtures of the Python test suite.

ctest runs every test_*.py file with Debian's interpreter and sets
RESHARD_CLI (the reshard executable of the same build) and
RESHARD_TEST_DATA (tests/data); PYTHONPATH points at build/python.
"""

import json
import os
import pathlib
import subprocess

import pytest


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("RESHARD_CLI")
    assert path and os.access(path, os.X_OK), "RESHARD_CLI must name the CLI"

    def run(*args, check=True):
        proc = subprocess.run([path, *map(str, args)], capture_output=True,
                              text=True, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"reshard {' '.join(map(str, args))} failed "
                                 f"({proc.returncode}): {proc.stderr}")
        return proc
    run.path = path
    return run


@pytest.fixture(scope="session")
def data_dir():
    path = pathlib.Path(os.environ.get("RESHARD_TEST_DATA", ""))
    assert (path / "fixtures").is_dir(), "RESHARD_TEST_DATA must name tests/data"
    return path


@pytest.fixture(scope="session")
def fixtures(data_dir):
    """(placements dir, expected ids), (plans dir, expected counts)."""
    placements = data_dir / "fixtures" / "placements"
    plans = data_dir / "fixtures" / "plans"
    return {
        "placements": placements,
        "placement_expected": json.loads((placements / "expected.json").read_text()),
        "plans": plans,
        "plan_expected": json.loads((plans / "expected.json").read_text()),
    }


@pytest.fixture(scope="module")
def tp_split_pair():
    """tp_split_4_to_8: a bf16 [64, 16] weight and a uint8 [8] bias."""
    from patterns import load_scenario

    return (load_scenario("tp_split_4_to_8_source.json"),
            load_scenario("tp_split_4_to_8_target.json"))
