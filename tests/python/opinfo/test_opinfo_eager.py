"""Every core OpInfo (outside linalg, fft, special and sparse) and every list-op OpInfo
(_foreach_*, from PyTorch's foreach databases), eager, at its primary dtype
(float32, or its integer dtype when it has no float32, or complex64 for complex-only
OpInfos): tpu must match the CPU with no
fallback, on the same samples `make op-coverage` checks (torchtpu.testing.opinfo).

Known failures are listed in ``opinfo_skips.SKIPS`` with their reasons. Such an entry
still runs: it must still fail (else the test fails, asking to remove the entry), so the
list cannot go stale.
"""

from __future__ import annotations

import pytest
from opinfo_skips import SKIPS

from torchtpu.testing import opinfo as h

CORE_OPS = [op for op in h.op_database() if h.family_of(op) in ("core", "foreach")]


@pytest.mark.parametrize("op", CORE_OPS, ids=h.op_key)
def test_eager_matches_cpu(op) -> None:
    key = h.op_key(op)
    dtype = h.primary_dtype(op)
    if dtype is None:
        pytest.skip("the OpInfo has no float, integer or complex64 dtype on the CPU")
    out = h.check(op, "eager", dtype)
    if key in SKIPS:
        if out.status in ("pass", "n/a"):
            pytest.fail(f"{key} now passes ({out.status}): remove it from opinfo_skips.SKIPS")
        pytest.xfail(f"known: {SKIPS[key]}; now: {out.reason}")
    assert out.status in ("pass", "n/a"), f"{key} ({dtype}): {out.reason}"


def test_skip_list_names_real_opinfos_with_reasons() -> None:
    keys = {h.op_key(op) for op in CORE_OPS}
    unknown = sorted(k for k in SKIPS if k not in keys)
    assert not unknown, f"SKIPS names OpInfos that are not core or foreach OpInfos: {unknown}"
    blank = sorted(k for k, reason in SKIPS.items() if not reason.strip())
    assert not blank, f"SKIPS entries without a reason: {blank}"
