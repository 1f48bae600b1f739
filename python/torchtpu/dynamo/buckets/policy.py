"""Which graphs are padded to shape buckets, and the bucket of a size
(``TORCHTPU_SHAPE_BUCKETS``, ``TORCHTPU_MIN_BUCKET``)."""

from __future__ import annotations

import os


def bucket_policy() -> str:
    """``"pad"`` (the default, ``auto``, or a bucket list such as ``16,32,64``): graphs with
    symbolic sizes run padded to buckets unless an op without a rule (rules.py) or a
    hazard keeps them at exact sizes; ``"off"``: every graph compiles once per exact
    size. A malformed list raises ValueError."""
    value = os.environ.get("TORCHTPU_SHAPE_BUCKETS", "").strip()
    if value == "off":
        return "off"
    if value and value != "auto":
        listed_buckets(value)
    return "pad"


# A size past it (a bucket of 2**62 elements) would reach the compiler as a size no tensor
# can have; it failed there with an unreadable TypeError.
_MAX_SIZE = 2**31 - 1


def _int_setting(name: str, default: int, low: int, expected: str,
                 high: int = _MAX_SIZE) -> int:
    """Environment variable `name` as an int in [`low`, `high`] (`default` when unset);
    anything else raises ValueError with `expected`."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        raise ValueError(f"{name}={value!r}: {expected} (at most {high})")
    return number


def recompile_limit() -> int:
    """``TORCHTPU_RECOMPILE_LIMIT`` (default 8): past this many graphs of one compiled
    function, or programs of one graph at exact sizes, a warning says so."""
    return _int_setting("TORCHTPU_RECOMPILE_LIMIT", 8, 0,
                        "expected a whole number of graphs (default 8)")


def listed_buckets(value: str) -> list[int]:
    try:
        sizes = sorted(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1 or sizes[-1] > _MAX_SIZE:
        raise ValueError(f"TORCHTPU_SHAPE_BUCKETS={value!r}: expected 'auto', 'off' or a "
                         "comma-separated list of positive sizes such as '16,32,64' (at most "
                         f"{_MAX_SIZE})")
    return sizes


def bucket_size(n: int) -> int:
    """The padded size for a true size `n` of a dynamic dimension.

    ``TORCHTPU_SHAPE_BUCKETS="16,32,64,128"`` lists the buckets explicitly (sizes above
    the largest round up to a power of two); otherwise powers of two from
    ``TORCHTPU_MIN_BUCKET`` (default 16). Lengths 1..100 thus need 4 executables.
    """
    listed = os.environ.get("TORCHTPU_SHAPE_BUCKETS", "").strip()
    if listed and listed not in ("auto", "off"):
        for b in listed_buckets(listed):
            if n <= b:
                return b
    b = min_bucket()
    while b < n:
        b *= 2
    return b


def min_bucket() -> int:
    """``TORCHTPU_MIN_BUCKET``: the smallest power-of-two bucket (default 16)."""
    return _int_setting("TORCHTPU_MIN_BUCKET", 16, 1, "expected a positive integer such as "
                        "'16' (unset it for the default, 16)")
