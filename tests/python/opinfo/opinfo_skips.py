"""Core and list-op (_foreach_*) OpInfos whose eager check fails today, with the reason
(OpInfo key -> reason).

Written by `python scripts/op_coverage.py --skips-out tests/python/opinfo/opinfo_skips.py`
from the same checks test_opinfo_eager runs; an entry that starts passing fails that
test until it is removed here."""

SKIPS: dict[str, str] = {
    '_segment_reduce.lengths': 'fallback: aten::segment_reduce',
    '_segment_reduce.offsets': 'fallback: aten::segment_reduce',
    'chalf': 'harness: NotImplementedError: "nan_to_num" not implemented for \'ComplexHalf\'',
}
