"""``webapp.runs.metric_text``: a column of floats written as ``repr`` writes each one (the
downloads' numbers), over random bit patterns and every magnitude, integral floats, zeros,
the notation boundaries, inf and nan; integers as ``str``; nulls kept; and the concatenated
bytes of a string column, also of a slice of it."""

from __future__ import annotations

import math
import random
import struct

import pyarrow as pa

from webapp.runs.metric_text import concat, float_texts, int_texts, joined_bytes


def _floats() -> list[float]:
    rng = random.Random(23)
    bits = (struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(60_000))
    floats = [x for x in bits if math.isfinite(x)]
    for low, high in [(-10, 10), (1.7e9, 1.8e9), (-1e-3, 1e-3), (1e14, 1e17), (1e9, 1e11)]:
        floats += [rng.uniform(low, high) for _ in range(10_000)]
    floats += [float(rng.randint(-(10**17), 10**17)) for _ in range(5_000)]  # integral
    floats += [float(rng.randint(-1000, 1000)) for _ in range(2_000)]
    floats += [step * 0.001 for step in range(5_000)]
    for edge in (1e-4, 1e16, 1e10, 1e-7):  # where repr's or Arrow's notation turns
        x = edge
        for _ in range(50):
            floats += [x, -x]
            x = math.nextafter(x, 0.0)
        x = edge
        for _ in range(50):
            x = math.nextafter(x, math.inf)
            floats += [x, -x]
    return floats + [0.0, -0.0, 5e-324, 1.7976931348623157e308, math.inf, -math.inf, math.nan]


def test_every_float_is_written_as_repr_writes_it():
    floats = _floats()
    texts = float_texts(pa.array(floats, pa.float64())).to_pylist()
    wrong = [(x, text) for x, text in zip(floats, texts, strict=True) if text != repr(x)]
    assert wrong == [], f"{len(wrong)} of {len(floats)} differ, e.g. {wrong[:5]}"


def test_nulls_stay_null_among_floats_that_need_repr():
    values = pa.array([1e-7, None, 3.0, None, 0.5, 1e16], pa.float64())
    assert float_texts(values).to_pylist() == ["1e-07", None, "3.0", None, "0.5", "1e+16"]


def test_integers_as_str_with_nulls_kept():
    values = pa.array([0, -7, None, 2**62], pa.int64())
    assert int_texts(values).to_pylist() == ["0", "-7", None, str(2**62)]


def test_joined_bytes_of_a_column_and_of_a_slice():
    texts = concat(pa.array(["a", "bé", "", "cd"]), "|")
    assert joined_bytes(texts) == "a|bé||cd|".encode()
    assert joined_bytes(texts.slice(1, 2)) == "bé||".encode()
    assert joined_bytes(texts.slice(4, 0)) == b""
