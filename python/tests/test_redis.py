"""The Python package against a real Redis (a private redis-server this
module starts on a free loopback port with its own data directory and
always stops): a weight store upload and load between layouts, maintenance,
a live session whose two processes meet only through the Redis URI, and the
refusals (an unreachable server named without its password)."""
import ctypes
import signal
import socket
import subprocess
import time

import pytest

import reshard
from test_live_session import _run
from test_store import SCENARIOS, _pair
from patterns import Buffers


def _die_with_parent():
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    root = tmp_path_factory.mktemp("redis")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sock = str(root / "redis.sock")
    proc = subprocess.Popen(
        ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--unixsocket", sock, "--dir", str(root), "--save", "",
         "--appendonly", "yes", "--appendfsync", "always",
         "--logfile", str(root / "log")], preexec_fn=_die_with_parent)
    try:
        deadline = time.time() + 10
        while subprocess.run(["redis-cli", "-s", sock, "PING"],
                             capture_output=True).stdout.strip() != b"PONG":
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("name", ["tp_split_4_to_8", "cross_dim_ep2_to_tp2",
                                  "dp_replicas_dp2tp2_to_dp3tp4"])
def test_upload_then_load_through_redis(redis, name):
    src, dst = _pair(name)
    store = reshard.WeightStore(f"{redis}?prefix=py-{name}")
    manifest = store.upload(src, Buffers(src, "torch", fill=True)
                            .by_participant())
    targets = Buffers(dst, "torch")
    targets.poison(0x00)
    report = store.load(manifest.manifest_key, dst, targets.by_fragment())
    assert report.bytes == SCENARIOS[name]["bytes"]
    assert targets.mismatch() == ""
    assert [r.manifest_key for r in store.ls()] == [manifest.manifest_key]
    assert store.verify(manifest.manifest_key).objects == len(
        manifest.fragments)
    store.rm(manifest.manifest_key)
    assert store.ls() == []


def test_live_session_meets_through_redis(redis):
    uri = f"{redis}?prefix=py-live"
    out = _run(uri, bad_step=None)
    for rank in (0, 1):
        assert out[rank] == [(1, "ok", 1), (2, "ok", 2), (3, "ok", 3)]
    # Closed sessions leave no records behind.
    assert reshard.Rendezvous(uri).list("steps/") == []


def test_unreachable_redis_is_named_without_the_password():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(reshard.Error) as e:
        reshard.WeightStore(f"redis://u:hunter2@127.0.0.1:{port}")
    assert f"cannot connect to redis://u:***@127.0.0.1:{port}" in str(e.value)
    assert "hunter2" not in str(e.value)



def test_passwords_never_leak(redis, monkeypatch):
    """Issue 38 finding 4: an unencoded '/', '?' or '@' in the password is
    refused without showing it; repr and .uri hide it; the password can
    come from RESHARD_REDIS_PASSWORD instead of the URI (argv)."""
    for bad in ["admin:Sup3r/S3cret", "admin:Sup3r?S3cret",
                "admin:Sup@3cret"]:
        with pytest.raises(reshard.InvalidArgumentError) as e:
            reshard.WeightStore(f"redis://{bad}@127.0.0.1:1")
        assert str(e.value) == (
            "invalid Redis URI \"redis://***@127.0.0.1:1\": the user or "
            "password holds an unencoded '/', '?', '#' or '@'; "
            "percent-encode it (%2F, %3F, %23, %40)")
        assert "3cret" not in repr(e.value)
    # A user of this module's server whose password holds a '/'.
    host = redis[len("redis://"):]
    port = host.split(":")[1]
    subprocess.run(["redis-cli", "-p", port, "ACL", "SETUSER", "pyuser",
                    "on", ">Sup3r/S3cret", "~*", "+@all"], check=True,
                   capture_output=True)
    uri = f"redis://pyuser:Sup3r%2FS3cret@{host}?prefix=pw"
    store = reshard.WeightStore(uri)
    assert store.uri == f"redis://pyuser:***@{host}?prefix=pw"
    assert repr(store) == f"WeightStore('redis://pyuser:***@{host}?prefix=pw')"
    assert "S3cret" not in repr(store) + store.uri
    assert store.ls() == []
    with pytest.raises(reshard.Error) as e:
        reshard.WeightStore(f"redis://pyuser:wr0ng@{host}?prefix=pw")
    assert "wr0ng" not in str(e.value)
    assert f"redis://pyuser:***@{host}" in str(e.value)
    # From the environment: the URI names the user only.
    monkeypatch.setenv("RESHARD_REDIS_PASSWORD", "Sup3r/S3cret")
    store = reshard.WeightStore(f"redis://pyuser:@{host}?prefix=pw")
    assert store.uri == f"redis://pyuser:***@{host}?prefix=pw"
    assert store.ls() == []
