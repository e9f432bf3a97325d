#!/usr/bin/env python3
"""Derives tests/golden/arithmetic_order.json: golden vectors that pin NOTE [arithmetic order]
(include/tide/core/arithmetic.hpp) independently of tide::arith.

Every fp32 operation of the NOTE is computed in float64, asserted exact there (so the only
rounding is the final one), and rounded once to binary32 with round-to-nearest-even; NaNs
become the canonical 0x7FFFFFFF (bf16: 0x7FFF). The vectors were written once with this
script (fixed seed); tests compare the reference executor (tests/program/golden_order_test.cpp)
and the CUDA kernels (tests/kernels/golden_order_test.cpp) with them bit for bit.

Run: python3 tests/golden/derive_arithmetic_order.py > tests/golden/arithmetic_order.json
"""
import json
import math
import random
import struct
from fractions import Fraction

CANONICAL_NAN = 0x7FFFFFFF
CANONICAL_NAN_BF16 = 0x7FFF


def f32_bits(x):
    if math.isnan(x):
        return CANONICAL_NAN
    return struct.unpack("<I", struct.pack("<f", x))[0]  # RNE from an exact float64


def from_bits(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bf16_to_f32(word):
    return from_bits(word << 16)


def f32_to_bf16(bits):
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return CANONICAL_NAN_BF16
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def exact(op, a, b):
    """a op b in float64, asserted exact (no rounding before the binary32 one)."""
    r = a + b if op == "+" else a * b
    if math.isfinite(a) and math.isfinite(b) and math.isfinite(r):
        want = Fraction(a) + Fraction(b) if op == "+" else Fraction(a) * Fraction(b)
        assert Fraction(r) == want, (op, a, b)
    return r


def fp32_op(op, a, b):
    """One binary32 operation of the NOTE: round(a op b), canonical NaN."""
    bits = f32_bits(exact(op, a, b))
    return from_bits(bits) if bits != CANONICAL_NAN else math.nan


def level1(staged, own, alpha):
    """acc = x[l0] + ... in increasing local-rank order, + own, then alpha * acc."""
    acc = own
    if staged:
        acc = staged[0]
        for x in staged[1:]:
            acc = fp32_op("+", acc, x)
        acc = fp32_op("+", acc, own)
    return fp32_op("*", alpha, acc)


def landing(partials, wave_width, accumulate, out):
    """Waves of at most W in contributor order, each summed left to right, folded into out."""
    for w, first in enumerate(range(0, len(partials), wave_width)):
        wave = partials[first:first + wave_width]
        acc = wave[0]
        for p in wave[1:]:
            acc = fp32_op("+", acc, p)
        out = acc if (w == 0 and not accumulate) else fp32_op("+", out, acc)
    return out


def bits_of(x):
    return f32_bits(x)


def random_bf16(rng, low=-4, high=20):
    """bf16 values over a wide exponent range (sums round), sometimes special."""
    u = rng.random()
    if u < 0.02:
        return rng.choice([0x7F80, 0xFF80, 0x7FC1, 0x8000])  # inf, -inf, NaN payload, -0
    exponent = rng.randint(low, high)
    mantissa = rng.randint(0, 127)
    sign = rng.choice([0, 1])
    return (sign << 15) | ((exponent + 127) << 7) | mantissa


def random_fp32(rng, low=-4, high=20):
    exponent = rng.randint(low, high)
    mantissa = rng.randint(0, (1 << 23) - 1)
    sign = rng.choice([0, 1])
    return (sign << 31) | ((exponent + 127) << 23) | mantissa


def level1_cases(rng):
    cases = []
    for staged_count in range(0, 8):
        for dtype in ("bf16", "fp32"):
            for _ in range(6):
                # Large and small magnitudes mixed, so that the order decides what rounds.
                def one():
                    big = rng.random() < 0.4
                    if dtype == "bf16":
                        return random_bf16(rng, 22, 26) if big else random_bf16(rng, -2, 3)
                    return random_fp32(rng, 18, 22) if big else random_fp32(rng, -4, 0)
                words = [one() for _ in range(staged_count + 1)]
                values = [bf16_to_f32(w) if dtype == "bf16" else from_bits(w) for w in words]
                alpha_bits = random_fp32(rng, -3, 1)
                part = level1(values[:-1], values[-1], from_bits(alpha_bits))
                cases.append({"dtype": dtype, "staged": words[:-1], "own": words[-1],
                              "alpha": alpha_bits, "part": bits_of(part)})
    return cases


def landing_cases(rng):
    cases = []
    for contributors in (1, 2, 3, 5, 8, 9, 16):
        for wave_width in sorted({1, 2, 4, 8, contributors}):
            if wave_width > 8:
                continue
            for accumulate in (False, True):
                partials = [random_fp32(rng) for _ in range(contributors)]
                out_init = random_fp32(rng)
                out = landing([from_bits(p) for p in partials], wave_width, accumulate,
                              from_bits(out_init))
                cases.append({"partials": partials, "wave_width": wave_width,
                              "accumulate": accumulate, "out_init": out_init, "out": bits_of(out)})
    return cases


def cast_cases(rng):
    values = [random_fp32(rng, -140, 127) for _ in range(48)]
    values += [0x7F800000, 0xFF800000, 0x7FC00001, 0xFFBADBAD, 0x00000001, 0x80000000,
               0x3F808000, 0x3F818000, 0x3F80C000, 0x7F7FFFFF]  # ties to even, overflow
    return [{"fp32": v, "bf16": f32_to_bf16(v)} for v in values]


def reduce_scatter_case(rng, m, l, wave_width, accumulate, rows_per_rank=2, cols=6):
    """One (N R, K) bf16 parameter on M x L, no padding: every rank's fp32 output shard."""
    n = m * l
    rows = n * rows_per_rank
    span = rows_per_rank * cols
    e_sub = -(-span // l)
    e_sub = -(-e_sub // 4) * 4  # rounded up to the vector width (16 bytes)
    grads = [[random_bf16(rng) if rng.random() < 0.995 else 0x3F80 for _ in range(rows * cols)]
             for _ in range(n)]
    alpha_bits = random_fp32(rng, -3, 0)
    alpha = from_bits(alpha_bits)
    out_init = [[random_fp32(rng, -2, 18) for _ in range(span)] for _ in range(n)]
    out = []
    for r in range(n):
        t, i = divmod(r, l)
        shard = []
        for e in range(span):
            s = e // e_sub
            element = (r * rows_per_rank + e // cols) * cols + e % cols
            partials = []
            for c in range(1, m + 1):  # contributor c: node (t - c) mod M, c = M the own node
                node = t if c == m else (t - c) % m
                shift = 0 if c == m else c % l
                owner = (s - shift) % l  # Eq. 7-8: the local GPU that owns sub-slice s
                x = [bf16_to_f32(grads[node * l + q][element]) for q in range(l)]
                staged = [x[q] for q in range(l) if q != owner]
                partials.append(level1(staged, x[owner], alpha))
            shard.append(bits_of(landing(partials, wave_width, accumulate,
                                         from_bits(out_init[r][e]))))
        out.append(shard)
    return {"nodes": m, "gpus_per_node": l, "wave_width": wave_width, "accumulate": accumulate,
            "rows": rows, "cols": cols, "grad_dtype": "bf16", "alpha": alpha_bits,
            "grads": grads, "out_init": out_init if accumulate else None, "out": out}


def main():
    rng = random.Random(20261201)
    golden = {
        "note": "NOTE [arithmetic order], derived by tests/golden/derive_arithmetic_order.py; "
                "values are IEEE binary32 bits (bf16: 16-bit words) as integers",
        "level1": level1_cases(rng),
        "landing": landing_cases(rng),
        "cast": cast_cases(rng),
        "reduce_scatter": [reduce_scatter_case(rng, 1, 4, 4, False),
                           reduce_scatter_case(rng, 3, 2, 1, True),
                           reduce_scatter_case(rng, 5, 4, 2, False),
                           reduce_scatter_case(rng, 4, 4, 4, True)],
    }
    print(json.dumps(golden, separators=(",", ":")))


if __name__ == "__main__":
    main()
