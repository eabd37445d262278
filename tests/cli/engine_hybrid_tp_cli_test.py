#!/usr/bin/env python3
"""CLI contract of `reshard engine load --engine vllm` for Qwen3-Next and
Qwen3.5 at a TP above the DeltaNet's key heads: vLLM 0.33 splits the key
dimension, not the key heads, so at TP 4 with 2 key heads each rank holds
half a key head (a contiguous quarter of Qwen3-Next's interleaved
in_proj_qkvz, a quarter of each conv1d section, one value head's A_log).
Every participant's file byte for byte, in order, against the numpy
statement of vLLM's ranks in engine_hybrid_cli_test.py; and the refusal of
a TP that does not divide the key dimension (one error line, exit 1,
nothing written).

Usage: engine_hybrid_tp_cli_test.py RESHARD_BINARY TESTS_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engine_hybrid_cli_test as hybrid  # noqa: E402
import hf_checkpoints as hfc  # noqa: E402
from harness import Suite, check, expect_error, run_cli  # noqa: E402

RESHARD = sys.argv[1]
SUITE = Suite()


@SUITE.test
def qwen3_next_tp4_holds_half_a_key_head_per_rank():
    # 2 key heads of 8, 4 value heads of 8: per rank 24 rows of
    # in_proj_qkvz, 4 + 4 + 8 rows of conv1d, A_log [1].
    hybrid.load_and_check("next", "next-tp4", 4)
    hybrid.load_and_check("next", "next-tp4-pp2", 4, pp=2)


@SUITE.test
def qwen35_tp4_splits_each_section():
    hybrid.load_and_check("qwen35", "qwen35-tp4", 4, convert=True)
    hybrid.load_and_check("qwen35_moe", "qwen35-moe-tp4", 4, convert=True)


@SUITE.test
def tp_not_dividing_the_key_dimension_is_refused():
    d = hybrid.path("ckpt-next-k6")
    hfc.write_checkpoint(d, dict(hybrid.NEXT, linear_key_head_dim=3))
    out = hybrid.path("next-k6-tp4")
    expect_error(
        run_cli(RESHARD, "engine", "load", d, "--engine", "vllm", "--tp", 4,
                "-o", out),
        "%s: vllm refuses TP 4: linear_num_key_heads * linear_key_head_dim "
        "= 6 is not divisible by 4" % d)
    check(not os.path.exists(out), "output written on a refusal")


if __name__ == "__main__":
    sys.exit(SUITE.run("reshard-engine-hybrid-tp-",
                       lambda tmp: hybrid.TMP.update(dir=tmp)))
