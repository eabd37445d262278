#!/usr/bin/env python3
"""An independent numpy statement of the conversions of a reshard
(docs/conversion.md, the arithmetic of the shared FP8 reference): float
casts among float32 / bfloat16 / float16, the float32 -> float8_e4m3fn
rounding, and block quantization and dequantization, on raw little-endian
bytes. Written from the documents only, not from the C++ kernels, so the
CLI tests can compare the converted checkpoints byte for byte.

  cast(raw, shape, src, dst) -> bytes
  e4m3(f32_array) -> uint8 codes;  e4m3_value(codes) -> float32 array
  quantize(raw, [N, K], src, (bn, bk)) -> (fp8 bytes, float32 scale bytes)
  dequantize(fp8, scale, [N, K], (bn, bk), dst) -> bytes

Choices where the documents say nothing (documented here, used by the
tests only where they matter): widening a NaN to float32 keeps its bits
(bfloat16: the 16 bits on top; float16: sign, all-ones exponent, the 10
payload bits on top of the 23); a dequantized NaN code (0x7F / 0xFF)
gives the quiet NaN of the target dtype with the code's sign (float32:
0x7FC00000 | sign).

`python3 conversion_reference.py` runs the self-check (a few seconds).
Standard library and numpy only.
"""

import sys

import numpy as np

DTYPES = ("float32", "bfloat16", "float16")
# safetensors spellings accepted too.
ALIASES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16",
           "F8_E4M3": "float8_e4m3fn"}
F32_NAN_QUIET = 0x7FC00000
BF16_NAN = 0x7FC0
F16_NAN = 0x7E00
E4M3_MAX = 448.0
AMAX_FLOOR = np.float32(1e-4)


def _dt(name):
    name = ALIASES.get(name, name)
    assert name in DTYPES or name == "float8_e4m3fn", name
    return name


# ------------------------------------------------------------ float casts

def to_f32(raw, src):
    """float32 array of raw bytes of dtype src (exact widening)."""
    src = _dt(src)
    if src == "float32":
        return np.frombuffer(raw, dtype="<u4").copy().view(np.float32)
    if src == "bfloat16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        return (u << np.uint32(16)).view(np.float32)
    if src == "float16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        sign = (u & np.uint32(0x8000)) << np.uint32(16)
        exp = (u >> np.uint32(10)) & np.uint32(0x1F)
        man = u & np.uint32(0x3FF)
        # Normal, zero and subnormal values: numpy's float16 -> float32 is
        # exact for every non-NaN value.
        out = np.frombuffer(raw, dtype="<f2").astype(np.float32).view(
            np.uint32).copy()
        nan = (exp == 0x1F) & (man != 0)
        out[nan] = (sign | np.uint32(0x7F800000)
                    | (man << np.uint32(13)))[nan]
        return out.view(np.float32)
    raise ValueError("no float32 widening of " + src)


def f32_to_bf16_bits(x):
    """uint16 bfloat16 codes of float32 array x: round to nearest even on
    the upper 16 bits; NaN -> 0x7FC0 with its sign."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (u >> np.uint32(16)) & np.uint32(1)
    r = ((u.astype(np.uint64) + np.uint64(0x7FFF) + lsb.astype(np.uint64))
         >> np.uint64(16)).astype(np.uint32)
    nan = np.isnan(x)
    sign = (u >> np.uint32(16)) & np.uint32(0x8000)
    r = np.where(nan, sign | np.uint32(BF16_NAN), r)
    return r.astype(np.uint16)


def f32_to_f16_bits(x):
    """uint16 float16 codes of float32 array x: IEEE round to nearest even
    (numpy's conversion), overflow to infinity; NaN -> 0x7E00 with its
    sign."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16).copy()
    nan = np.isnan(x)
    sign = ((x.view(np.uint32) >> np.uint32(16))
            & np.uint32(0x8000)).astype(np.uint16)
    h[nan] = (sign | np.uint16(F16_NAN))[nan]
    return h


def from_f32(x, dst):
    dst = _dt(dst)
    if dst == "float32":
        return np.ascontiguousarray(x, dtype=np.float32).view("<u4").tobytes()
    if dst == "bfloat16":
        return f32_to_bf16_bits(x).astype("<u2").tobytes()
    if dst == "float16":
        return f32_to_f16_bits(x).astype("<u2").tobytes()
    raise ValueError("no float32 narrowing to " + dst)


def cast(raw, shape, src, dst):
    """raw bytes of `shape` in src -> bytes in dst (float32 / bfloat16 /
    float16), through float32."""
    src, dst = _dt(src), _dt(dst)
    n = int(np.prod(shape, dtype=np.int64))
    assert len(raw) == n * (4 if src == "float32" else 2), (len(raw), shape)
    if src == dst:
        return bytes(raw)
    return from_f32(to_f32(raw, src), dst)


# ------------------------------------------------------------------ e4m3

def _e4m3_table():
    """float64 value of each of the 256 codes (NaN for 0x7F / 0xFF)."""
    vals = np.empty(256, dtype=np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 7
        if e == 0xF and m == 7:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** -9
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        vals[c] = -v if s else v
    return vals


E4M3_TABLE = _e4m3_table()
# Positive finite codes 0x00..0x7E, increasing in value.
_POS = E4M3_TABLE[:0x7F]
assert np.all(np.diff(_POS) > 0) and _POS[-1] == E4M3_MAX


def e4m3(x):
    """uint8 float8_e4m3fn codes of float32 array x: the nearest of the
    finite codes, ties to the even code; >= 448 (and infinity) -> 448;
    NaN -> 0x7F; the sign bit always copied."""
    x = np.asarray(x, dtype=np.float32)
    sign = ((x.view(np.uint32) >> np.uint32(24))
            & np.uint32(0x80)).astype(np.uint8)
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
    nan = np.isnan(a)
    a = np.where(nan, 0.0, a)
    hi = np.searchsorted(_POS, a, side="left")   # _POS[hi] >= a
    hi = np.minimum(hi, 0x7E)
    lo = np.maximum(hi - 1, 0)
    d_hi = np.abs(_POS[hi] - a)
    d_lo = np.abs(a - _POS[lo])
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = np.where(pick_lo, lo, hi).astype(np.uint8)
    code = np.where(a >= E4M3_MAX, np.uint8(0x7E), code)
    code = np.where(nan, np.uint8(0x7F), code)
    return (code | sign).astype(np.uint8)


def e4m3_value(codes):
    """float32 values of uint8 codes (NaN codes give the quiet NaN with
    the code's sign)."""
    c = np.asarray(codes, dtype=np.uint8)
    v = E4M3_TABLE[c].astype(np.float32)
    u = v.view(np.uint32)
    nan = (c & 0x7F) == 0x7F
    u[nan] = (np.uint32(F32_NAN_QUIET)
              | ((c.astype(np.uint32) & np.uint32(0x80)) << np.uint32(24))
              )[nan]
    return u.view(np.float32)


# -------------------------------------------------- block quantization

def scale_shape(shape, block):
    (N, K), (bn, bk) = shape, block
    return [-(-N // bn), -(-K // bk)]


def _blocks(shape, block):
    (N, K), (bn, bk) = shape, block
    nb, kb = scale_shape(shape, block)
    return N, K, bn, bk, nb, kb


def _expand(per_block, shape, block):
    """[nb, kb] -> [N, K] (each element its block's value)."""
    N, K, bn, bk, nb, kb = _blocks(shape, block)
    return np.repeat(np.repeat(per_block, bn, axis=0), bk, axis=1)[:N, :K]


def block_amax(x, block):
    """float32 [nb, kb]: max |x| over the non-NaN elements of each block,
    then max(amax, 1e-4) in float32."""
    N, K, bn, bk, nb, kb = _blocks(x.shape, block)
    a = np.abs(x)
    a = np.where(np.isnan(a), np.float32(0), a).astype(np.float32)
    pad = np.zeros((nb * bn, kb * bk), dtype=np.float32)
    pad[:N, :K] = a
    amax = pad.reshape(nb, bn, kb, bk).max(axis=(1, 3)).astype(np.float32)
    return np.maximum(amax, AMAX_FLOOR).astype(np.float32)


def quantize(raw, shape, src, block=(128, 128)):
    """(float8_e4m3fn bytes [N, K], float32 weight_scale_inv bytes
    [ceil(N/bn), ceil(K/bk)]) of a float weight."""
    shape = [int(s) for s in shape]
    assert len(shape) == 2, shape
    x = to_f32(raw, src).reshape(shape)
    amax = block_amax(x, block)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        factor = (np.float32(E4M3_MAX) / amax).astype(np.float32)
        y = (x * _expand(factor, shape, block)).astype(np.float32)
        scale = (amax / np.float32(E4M3_MAX)).astype(np.float32)
    assert y.dtype == np.float32 and scale.dtype == np.float32
    return (e4m3(y).tobytes(), scale.astype("<f4").tobytes())


def dequantize(fp8, scale, shape, block, dst):
    """bytes in dst of float32(e4m3 value) * scale (one float32
    multiplication), rounded to dst."""
    shape = [int(s) for s in shape]
    q = np.frombuffer(fp8, dtype=np.uint8).reshape(shape)
    s = np.frombuffer(scale, dtype="<f4").astype(np.float32).reshape(
        scale_shape(shape, block))
    v = e4m3_value(q)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (v * _expand(s, shape, block)).astype(np.float32)
    # A NaN code's product: the quiet NaN with the code's sign (x86 would
    # give that too; stated so as not to depend on it).
    nan = (q & 0x7F) == 0x7F
    yu = y.view(np.uint32)
    yu[nan] = (np.uint32(F32_NAN_QUIET)
               | ((q.astype(np.uint32) & np.uint32(0x80)) << np.uint32(24))
               )[nan]
    return from_f32(yu.view(np.float32), dst)


# ------------------------------------------------------------ self-check

def _bits32(vals):
    return np.array(vals, dtype=np.uint32).view(np.float32)


def _f32(vals):
    return np.array(vals, dtype=np.float32)


def _check(cond, what):
    if not cond:
        raise AssertionError(what)


def _check_codes():
    v = E4M3_TABLE
    _check(v[0x7E] == 448 and v[0x08] == 2.0 ** -6 and v[0x01] == 2.0 ** -9
           and v[0x80] == 0 and np.signbit(v[0x80]) and np.isnan(v[0x7F])
           and np.isnan(v[0xFF]) and v[0xFE] == -448, "code table")
    n_nan = int(np.isnan(v).sum())
    _check(n_nan == 2, "two NaN codes")
    # Every finite code round-trips through e4m3.
    finite = np.array([c for c in range(256) if (c & 0x7F) != 0x7F],
                      dtype=np.uint8)
    _check(np.array_equal(e4m3(e4m3_value(finite)), finite), "round trip")
    cases = [
        (448.0, 0x7E), (449.0, 0x7E), (1e30, 0x7E), (np.inf, 0x7E),
        (-np.inf, 0xFE), (-448.0, 0xFE), (464.0, 0x7E), (500.0, 0x7E),
        (432.0, 0x7E),          # tie 416 (0x7D) / 448 (0x7E): even code
        (431.9, 0x7D), (2.0 ** -6, 0x08), (2.0 ** -9, 0x01),
        (2.0 ** -10, 0x00),     # tie 0 / 2^-9: even code 0
        (-2.0 ** -10, 0x80), (2.0 ** -10 * 1.0001, 0x01),
        (-1e-7, 0x80), (-0.0, 0x80), (0.0, 0x00), (1e-30, 0x00),
        (1.0, 0x38), (1.0625, 0x38),   # tie 1 (0x38) / 1.125 (0x39)
        (1.1875, 0x3A),                # tie 1.125 / 1.25: even 0x3A
        (3 * 2.0 ** -10, 0x02),        # tie 2^-9 (1) / 2^-8 (2): even 2
        (240.0, 0x77), (-3.5, 0xC6),
    ]
    x = _f32([c[0] for c in cases])
    got = e4m3(x)
    for (val, want), g in zip(cases, got):
        _check(int(g) == want, "e4m3(%r) = 0x%02X, expected 0x%02X" %
               (val, int(g), want))
    nans = _bits32([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF])
    _check(list(e4m3(nans)) == [0x7F, 0xFF, 0x7F, 0xFF], "NaN codes")
    # Exhaustive against a brute-force nearest on a sample of float32s.
    rng = np.random.default_rng(1)
    xs = np.concatenate([
        rng.uniform(-500, 500, 20000), rng.standard_normal(20000) * 0.01,
        (v[np.isfinite(v)][:, None]
         + rng.uniform(-0.02, 0.02, (254, 20)) * np.abs(
             v[np.isfinite(v)][:, None]) + 0).ravel()]).astype(np.float32)
    mids = np.concatenate([(_POS[1:] + _POS[:-1]) / 2]).astype(np.float32)
    xs = np.concatenate([xs, mids, -mids])
    got = e4m3(xs)
    fin = np.array([c for c in range(256) if (c & 0x7F) != 0x7F])
    a = xs.astype(np.float64)
    d = np.abs(a[:, None] - v[fin][None, :])
    best = d.min(axis=1)
    for i in np.flatnonzero(np.abs(a) < 448)[:]:
        cands = fin[d[i] == best[i]]
        # Same value codes (+0 / -0): the one with the input's sign.
        cands = [c for c in cands if (c >> 7) == int(np.signbit(xs[i]))] \
            or list(cands)
        want = min(cands, key=lambda c: (c & 1, c))
        if int(got[i]) != want and not (v[got[i]] == v[want] and
                                        (got[i] >> 7) == np.signbit(xs[i])):
            raise AssertionError("e4m3(%r): 0x%02X, brute force 0x%02X" %
                                 (float(xs[i]), int(got[i]), want))


def _check_casts():
    # bfloat16 by comparing both neighbours, on random and edge float32s.
    rng = np.random.default_rng(2)
    u = np.concatenate([
        rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32),
        np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF,
                  0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x80018000,
                  0x7F800000, 0xFF800000, 0, 0x80000000], dtype=np.uint32)])
    x = u.view(np.float32)
    b = f32_to_bf16_bits(x)
    fin = np.isfinite(x)
    # Candidates: truncation t and t + 1 (as float64 values).
    t = (u >> np.uint32(16)).astype(np.uint32)

    def val(h):
        return (h.astype(np.uint32) << np.uint32(16)).view(
            np.float32).astype(np.float64)

    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = val(t), val(t + np.uint32(1))
        # t + 1 past the largest finite is infinity: RNE's overflow limit
        # is the midpoint 0x7F7F8000 (ties to even give infinity).
        xd = x.astype(np.float64)
        dl, dh = np.abs(xd - lo), np.abs(hi - xd)
        want = np.where((dl < dh) | ((dl == dh) & (t % 2 == 0)), t, t + 1)
        ovf = fin & ((t & 0x7FFF) == 0x7F7F) & ((u & 0xFFFF) >= 0x8000)
        want = np.where(ovf, t + 1, want)
    ok = ~fin | (b.astype(np.uint32) == want)
    _check(ok.all(), "bf16 RNE: %s" % [hex(int(k)) for k in u[~ok][:5]])
    _check(np.array_equal(b[~np.isnan(x) & ~fin], t[~np.isnan(x) & ~fin]),
           "bf16 infinities")
    nan = np.isnan(x)
    _check(np.array_equal(b[nan], np.where(
        (u[nan] >> 31) == 1, 0xFFC0, 0x7FC0)), "bf16 NaN")
    _check(int(f32_to_bf16_bits(_bits32([0x7F7FFFFF]))[0]) == 0x7F80,
           "bf16 overflow")
    # float16: numpy's conversion against both neighbours.
    xs = x[np.abs(x) < 70000]
    xs = np.concatenate([xs, rng.uniform(-70000, 70000, 100000).astype(
        np.float32), rng.standard_normal(100000).astype(np.float32) * 1e-5])
    h = f32_to_f16_bits(xs)
    hv = h.view(np.float16).astype(np.float64)
    fin = np.isfinite(hv)
    with np.errstate(over="ignore"):
        nxt = np.nextafter(h.view(np.float16), np.float16(np.inf)).astype(
            np.float64)
        prv = np.nextafter(h.view(np.float16), np.float16(-np.inf)).astype(
            np.float64)
    xd = xs.astype(np.float64)
    d0 = np.abs(xd - hv)
    ok = (d0 <= np.abs(xd - nxt)) & (d0 <= np.abs(xd - prv))
    _check(ok[fin].all(), "f16 nearest")
    tie = fin & ((d0 == np.abs(xd - nxt)) | (d0 == np.abs(xd - prv))) & \
        (d0 > 0)
    _check(((h[tie] & 1) == 0).all(), "f16 ties to even")
    _check((np.abs(xd[~fin]) >= 65520).all(), "f16 overflow at 65520")
    _check(list(f32_to_f16_bits(_f32([65519.0, 65520.0, -70000.0,
                                      2.0 ** -25, -2.0 ** -25,
                                      2.0 ** -25 * 1.01]))) ==
           [0x7BFF, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001], "f16 edges")
    _check(list(f32_to_f16_bits(_bits32([0x7FC00000, 0xFF800001,
                                         0x7FFFFFFF]))) ==
           [0x7E00, 0xFE00, 0x7E00], "f16 NaN")
    # Casts between the 16-bit types through float32, and widening.
    raw = np.array([0x3C00, 0x7C00, 0xFC01, 0x7E55, 0x0001, 0x8400, 0x7BFF],
                   dtype="<u2").tobytes()
    got = np.frombuffer(cast(raw, [7], "float16", "bfloat16"), "<u2")
    _check(list(got) == [0x3F80, 0x7F80, 0xFFC0, 0x7FC0, 0x3380, 0xB880,
                         0x4780], "f16 -> bf16: %s" % [hex(int(g)) for g in
                                                      got])
    raw = np.array([0x3F80, 0x7F80, 0xFF81, 0x7FC1, 0x4780, 0x477F, 0x0001,
                    0x3380], dtype="<u2").tobytes()
    got = np.frombuffer(cast(raw, [8], "bfloat16", "float16"), "<u2")
    _check(list(got) == [0x3C00, 0x7C00, 0xFE00, 0x7E00, 0x7C00, 0x7BF8,
                         0x0000, 0x0001], "bf16 -> f16: %s" %
           [hex(int(g)) for g in got])
    got = np.frombuffer(cast(raw, [8], "bfloat16", "float32"), "<u4")
    _check(list(got) == [v << 16 for v in np.frombuffer(raw, "<u2")],
           "bf16 -> f32 exact")
    f16 = np.arange(0, 65536, dtype=np.uint32).astype("<u2")
    w = to_f32(f16.tobytes(), "float16")
    nn = ~np.isnan(w)
    _check(np.array_equal(w[nn], f16.view(np.float16)[nn].astype(
        np.float32)), "f16 -> f32")
    _check(np.array_equal(f32_to_f16_bits(w)[nn], f16[nn]),
           "f16 -> f32 -> f16 identity")


def _check_quantize():
    # A 2 x 2-block weight of shape [11, 13] with block (8, 8): edge blocks
    # 3 rows / 5 columns; block [0, 0] all zero; block [0, 1] holds values
    # reaching 448, a NaN and tiny negatives; block [1, 0] random.
    rng = np.random.default_rng(3)
    N, K, bn, bk = 11, 13, 8, 8
    x = np.zeros((N, K), dtype=np.float32)
    x[0:8, 8:13] = rng.uniform(-6, 6, (8, 5)).astype(np.float32)
    x[0, 8] = 7.0          # amax: 7 -> factor 64, x * factor = 448
    x[1, 8] = -7.0
    x[2, 8] = np.nan
    x[3, 8] = -1e-9        # tiny negative -> 0x80
    x[4, 8] = 6.9          # 441.6 -> 448 (nearest)
    x[8:11, 0:8] = rng.standard_normal((3, 8)).astype(np.float32) * 1e-3
    x[8:11, 8:13] = -rng.uniform(1e-6, 1e-5, (3, 5)).astype(np.float32)
    bf = f32_to_bf16_bits(x)
    raw = bf.astype("<u2").tobytes()
    q, s = quantize(raw, [N, K], "bfloat16", (bn, bk))
    q = np.frombuffer(q, np.uint8).reshape(N, K)
    s = np.frombuffer(s, "<f4").reshape(2, 2)
    xb = to_f32(raw, "bfloat16").reshape(N, K)
    _check(s[0, 0] == np.float32(np.float32(1e-4) / np.float32(448)),
           "all-zero block scale")
    _check((q[0:8, 0:8] == 0).all(), "all-zero block codes")
    _check(s[0, 1] == np.float32(7.0) / np.float32(448), "scale of amax 7")
    _check(q[0, 8] == 0x7E and q[1, 8] == 0xFE and q[4, 8] == 0x7E,
           "values at 448: %s" % q[:5, 8])
    _check(q[2, 8] == 0x7F, "NaN code")
    _check(q[3, 8] == 0x80, "tiny negative")
    # The bottom-right edge block: amax below 1e-4 -> floor 1e-4; the
    # values are a few percent of it.
    _check(s[1, 1] == np.float32(1e-4) / np.float32(448), "floored scale")
    _check(((q[8:, 8:] & 0x80) == 0x80).all(), "negative edge block")
    # Dequantize back: within half a step (relative 2^-4) of the input.
    d = to_f32(dequantize(q.tobytes(), s.tobytes(), [N, K], (bn, bk),
                          "float32"), "float32").reshape(N, K)
    _check(np.isnan(d[2, 8]), "NaN back")
    fin = ~np.isnan(xb)
    err = np.abs(d - xb)[fin]
    tol = np.maximum(np.abs(xb[fin]) * 2.0 ** -4,
                     _expand(s, [N, K], (bn, bk))[fin] * 2.0 ** -9 * 448)
    _check((err <= tol * 1.0001).all(), "round trip error")
    # Re-quantizing the dequantized weight gives back the same codes and
    # scales wherever the block's amax is above the floor (the largest
    # element dequantizes to exactly amax: 448 * (amax / 448) need not be
    # amax, so compare the codes only where the scales agree).
    dq = dequantize(q.tobytes(), s.tobytes(), [N, K], (bn, bk), "float32")
    q2, s2 = quantize(dq, [N, K], "float32", (bn, bk))
    q2 = np.frombuffer(q2, np.uint8).reshape(N, K)
    same = _expand(np.frombuffer(s2, "<f4").reshape(2, 2) == s, [N, K],
                   (bn, bk))
    _check(same[0, 0] and np.array_equal(q2[same], q[same]), "requantize")
    # Exactly one f32 multiply: compare against a float64 evaluation
    # rounded once to float32.
    amax = block_amax(xb, (bn, bk))
    factor = np.float32(448) / amax
    y64 = (xb.astype(np.float64) * _expand(factor, [N, K], (bn, bk))
           .astype(np.float64)).astype(np.float32)
    _check(np.array_equal(e4m3(y64)[fin], q[fin]), "single multiply")
    # Infinity: amax infinite, finite elements zero, scale infinite,
    # the infinite element inf * 0 = NaN.
    xi = np.array([[np.inf, 1.0], [-2.0, 0.5]], dtype=np.float32)
    qi, si = quantize(xi.tobytes(), [2, 2], "float32", (8, 8))
    # (The sign of inf * 0's NaN is the machine's: x86 gives 0xFF.)
    qi = list(np.frombuffer(qi, np.uint8))
    _check(qi[0] in (0x7F, 0xFF) and qi[1:] == [0x00, 0x80, 0x00]
           and np.isinf(np.frombuffer(si, "<f4")[0]), "infinite block")
    # An all-NaN block: amax floor, codes NaN.
    xn = np.full((2, 3), np.nan, dtype=np.float32)
    qn, sn = quantize(xn.tobytes(), [2, 3], "float32", (8, 8))
    _check(set(np.frombuffer(qn, np.uint8)) == {0x7F} and
           np.frombuffer(sn, "<f4")[0] == np.float32(1e-4) / np.float32(448),
           "all-NaN block")
    # Dequantize to bfloat16 / float16: NaN codes, signs.
    codes = np.array([[0x7E, 0xFE, 0x7F, 0xFF, 0x80, 0x01]], np.uint8)
    sc = np.array([[2.0]], "<f4")
    for dst, want in (("bfloat16", [0x4460, 0xC460, 0x7FC0, 0xFFC0, 0x8000,
                                    0x3B80]),
                      ("float16", [0x6300, 0xE300, 0x7E00, 0xFE00, 0x8000,
                                   0x1C00])):
        got = np.frombuffer(dequantize(codes.tobytes(), sc.tobytes(),
                                       [1, 6], (8, 8), dst), "<u2")
        _check(list(got) == want, "dequantize to %s: %s" %
               (dst, [hex(int(g)) for g in got]))


def main():
    import time
    t0 = time.time()
    _check_codes()
    _check_casts()
    _check_quantize()
    print("conversion_reference: self-check passed in %.1f s" %
          (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
