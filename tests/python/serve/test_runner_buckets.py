"""The runner's shape buckets: every context length fits one, with bounded padding."""

from torchtpu.serve.runner import _bucket, _powers_of_two_and_halves


def test_context_buckets_step_by_halves_up_to_the_limit():
    assert _powers_of_two_and_halves(256, 1280) == [256, 384, 512, 768, 1024, 1280]
    assert _powers_of_two_and_halves(256, 2048) == [256, 384, 512, 768, 1024, 1536, 2048]
    assert _powers_of_two_and_halves(256, 256) == [256]


def test_a_padded_context_is_at_most_a_third_padding_past_the_smallest_bucket():
    sizes = _powers_of_two_and_halves(256, 4096)
    for n in range(257, 4097):
        b = _bucket(n, sizes)
        assert n <= b and (b - n) * 3 < b, (n, b)
