#!/usr/bin/env python3
"""The weight store on Redis against raw Redis throughput, in one run.

A private redis-server (loopback, a free port, AOF with fsync always, as a
durable store needs) serves both sides:

* baseline: redis-benchmark SET and GET of values of the store's chunk
  size (4 MiB), 256 of them over 256 random keys (a 1 GiB working set, as
  the store's), 2 clients, pipeline 4;
* reshard: `WeightStore.upload` of a 1 GiB layout (one uint8 tensor,
  TP4 rows; XXH3 checksums and the commit included), then `load` into a
  TP8 column split (every chunk verified), timed from Python around the
  native calls (the GIL is released inside them);
* RSS growth of the loading process during the load (targets allocated and
  touched before), against the load's staging limit.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/redis_bench.py [--runs N]
"""

import argparse
import ctypes
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time

import torch

import reshard

GIB = 1 << 30
VALUE = 4 << 20


def start_redis(root):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    libc = ctypes.CDLL(None)
    proc = subprocess.Popen(
        ["/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--dir", root, "--save", "", "--appendonly", "yes",
         "--appendfsync", "always", "--logfile", os.path.join(root, "log")],
        preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))
    deadline = time.time() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "PING"],
                         capture_output=True).stdout.strip() != b"PONG":
        if time.time() > deadline:
            proc.kill()
            raise SystemExit("redis-server did not start")
        time.sleep(0.02)
    return proc, port


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s in /proc/self/status" % field)


def raw_gbps(port, test):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", test, "-d", str(VALUE),
         "-n", str(GIB // VALUE), "-r", str(GIB // VALUE), "-c", "2", "-P",
         "4", "-q"],
        capture_output=True, text=True, timeout=600).stdout
    m = re.search(r"([\d.]+) requests per second", out.replace("\r", "\n"))
    if not m:
        raise SystemExit("redis-benchmark printed no rate: %r" % out[-300:])
    return float(m.group(1)) * VALUE / 1e9


def layout(name, tp, dim):
    """A [16384, 65536] uint8 tensor (1 GiB) split over tp ranks on dim."""
    shape = (16384, 65536)
    parts, frags = [], []
    for r in range(tp):
        rank = reshard.ParallelRank(tp=r)
        parts.append(reshard.TopologyParticipant(f"{name}-{r}", rank))
        local = list(shape)
        local[dim] //= tp
        offset = [0, 0]
        offset[dim] = r * local[dim]
        frags.append(reshard.PlacementFragment("w", offset, local,
                                               local[0] * local[1], rank))
    topo = reshard.ParallelTopology(tp_size=tp, participants=parts)
    tensor = reshard.TensorDescriptor("w", shape, "uint8", 1,
                                      shard_dims=(dim,),
                                      parallel_axes=(reshard._reshard.SplitAxis("tp", dim),))
    return reshard.Placement.from_fragments("bench", "r", 1, name, topo,
                                            [tensor], frags)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    src, dst = layout("src", 4, 0), layout("dst", 8, 1)
    full = torch.arange(GIB, dtype=torch.int64).remainder_(251).to(torch.uint8)
    full = full.reshape(16384, 65536)
    sources = {}
    for part in src.parts:
        f = part.fragments[0]
        rows = slice(f.global_offset[0], f.global_offset[0] + f.local_shape[0])
        sources[part.participant_id] = {"w": full[rows].clone()}
    targets = {part.participant_id: {"w": torch.ones(part.fragments[0].local_shape,
                                                     dtype=torch.uint8)}
               for part in dst.parts}
    rows = []
    with tempfile.TemporaryDirectory(prefix="reshard-redis-bench-") as root:
        proc, port = start_redis(root)
        try:
            for run in range(a.runs):
                base_set, base_get = raw_gbps(port, "set"), raw_gbps(port, "get")
                subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"],
                               capture_output=True)
                store = reshard.WeightStore(
                    f"redis://127.0.0.1:{port}?prefix=bench{run}")
                t0 = time.perf_counter()
                manifest = store.upload(src, sources)
                up = time.perf_counter() - t0
                before = rss_kib("VmRSS")
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM, the peak
                t0 = time.perf_counter()
                store.load(manifest.manifest_key, dst, targets)
                load = time.perf_counter() - t0
                growth = (rss_kib("VmHWM") - before) / 1024
                for part in dst.parts:
                    f = part.fragments[0]
                    box = tuple(slice(o, o + n) for o, n in
                                zip(f.global_offset, f.local_shape))
                    if not torch.equal(targets[part.participant_id]["w"],
                                       full[box]):
                        raise SystemExit("loaded bytes differ")
                store.rm(manifest.manifest_key)
                rows.append((GIB / up / 1e9, base_set, GIB / load / 1e9,
                             base_get, growth))
        finally:
            proc.kill()
            proc.wait()
    print("1 GiB, TP4 rows -> TP8 columns, private redis-server (AOF, fsync "
          "always); baseline redis-benchmark, %d MiB values, same server, "
          "same run" % (VALUE >> 20))
    print()
    print("| run | upload GB/s | raw SET GB/s | ratio | load GB/s | "
          "raw GET GB/s | ratio | RSS growth in load MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for i, (u, s, l, g, r) in enumerate(rows):
        print(f"| {i + 1} | {u:.2f} | {s:.2f} | {u / s:.2f}x | {l:.2f} | "
              f"{g:.2f} | {l / g:.2f}x | {r:.0f} |")
    med = lambda k: statistics.median(x[k] / x[k + 1] for x in rows)  # noqa
    print()
    print(f"median ratio: upload {med(0):.2f}x, load {med(2):.2f}x "
          "(goal >= 0.7x)")


if __name__ == "__main__":
    main()
