"""Metric numbers as text a column at a time, written exactly as Python writes them.

The metrics downloads (``downloads.py``) write a float or two per point, 100,000s of points a
file. ``repr`` costs ~0.3 µs a float and the per-row loop around it as much again; Arrow's
float-to-string cast (pyarrow compute, C++) writes the same shortest round-trip digits
(double-conversion) at ~0.06 µs a float, a whole column per call. Its notation is not
``repr``'s everywhere: an integral float has no ``.0`` ("3" for 3.0), it turns to an exponent at
other magnitudes (5.2e+12 for 5234708055733.116), and writes "1e-9" for "1e-09". So a float in
``repr``'s positional range (1e-4 <= |x| < 1e16, or zero) whose Arrow text has no exponent takes
Arrow's digits, with ".0" added where they have no point; every other float (an exponent either
way, inf, nan) is written by ``repr`` itself. The result is ``repr``'s text for every float
(``tests/webapp/runs/test_metric_text.py`` compares them over random bit patterns and every range).

pyarrow is here already (``datasets`` brings it; ``rft_core.data`` reads tasksets with it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POSITIONAL = (1e-4, 1e16)  # repr writes |x| in [low, high) (and 0) without an exponent


def float_texts(values: pa.Array) -> pa.Array:
    """``repr(x)`` of every float of ``values`` (a float64 array); a null stays null."""
    texts = pc.cast(values, pa.string())
    floats = values.to_numpy(zero_copy_only=False)  # a null reads as nan
    magnitude = np.abs(floats)
    with np.errstate(invalid="ignore"):
        positional = ((magnitude >= POSITIONAL[0]) & (magnitude < POSITIONAL[1])) | (magnitude == 0)
    exponent = pc.match_substring(texts, "e").fill_null(False).to_numpy(zero_copy_only=False)
    by_arrow = positional & ~exponent
    integral = by_arrow & (np.floor(floats) == floats)  # Arrow writes "3" for 3.0
    if integral.any():
        mask = pa.array(integral)
        texts = pc.replace_with_mask(texts, mask, concat(texts.filter(mask), ".0"))
    by_repr = ~by_arrow
    if values.null_count:
        by_repr &= values.is_valid().to_numpy(zero_copy_only=False)
    if by_repr.any():
        reprs = map(repr, floats[by_repr].tolist())
        texts = pc.replace_with_mask(texts, pa.array(by_repr), pa.array(reprs, pa.string()))
    return texts


def int_texts(values: pa.Array) -> pa.Array:
    """``str(n)`` of every integer of ``values``; a null stays null."""
    return pc.cast(values, pa.string())


# unix seconds an ISO 8601 text is written for: 1970 up to the end of year 9999
ISO_RANGE = (0.0, 253_402_300_800.0)
ISO_FORMAT = 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'  # PostgreSQL's to_char, the same text


def iso_texts(seconds: pa.Array) -> pa.Array:
    """Unix seconds as ISO 8601 UTC, to the millisecond (``2024-12-02T14:33:20.125Z``; the
    milliseconds truncated, as ``iso_sql`` does); null outside ``ISO_RANGE``."""
    floats = seconds.to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        inside = (floats >= ISO_RANGE[0]) & (floats < ISO_RANGE[1])
    millis = np.floor(np.where(inside, floats, 0.0) * 1000).astype(np.int64)
    stamps = pa.array(millis, pa.int64(), mask=~inside).cast(pa.timestamp("ms", tz="UTC"))
    return concat(pc.strftime(stamps, format="%Y-%m-%dT%H:%M:%S"), "Z")


def iso_sql(column: str) -> str:
    """The SQL (PostgreSQL) of ``iso_texts`` over the unix seconds in ``column``."""
    low, high = ISO_RANGE
    return (
        f"CASE WHEN {column} >= {low} AND {column} < {high} THEN to_char("
        f"to_timestamp(floor({column} * 1000) / 1000) AT TIME ZONE 'UTC', '{ISO_FORMAT}') END"
    )


def concat(*columns: pa.Array | str, separator: str = "") -> pa.Array:
    """Element-wise concatenation of string columns (a ``str`` stands for every row)."""
    return pc.binary_join_element_wise(*columns, separator)


def joined_bytes(texts: pa.Array) -> bytes:
    """Every text of ``texts`` (a string array without nulls) one after another, as UTF-8:
    the span of Arrow's value buffer the array covers, copied once."""
    if len(texts) == 0:
        return b""
    _validity, offsets, data = texts.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int32)
    start, end = int(bounds[texts.offset]), int(bounds[texts.offset + len(texts)])
    return data.slice(start, end - start).to_pybytes()
