"""Sampling parameters, the per-request sampler and the incremental detokenizer."""

import json

import pytest
import torch

from torchtpu.serve.detokenizer import IncrementalDetokenizer
from torchtpu.serve.sampling import RequestSampler, SamplingParams, generator_seed


@pytest.mark.parametrize("field,value", [
    ("temperature", -0.5), ("temperature", float("inf")), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -2),
    ("max_tokens", 0), ("presence_penalty", 2.5), ("frequency_penalty", -3.0),
    ("logprobs", 21), ("stop", [""]), ("stop_token_ids", [-1]),
    ("temperature", float("nan")), ("top_p", float("inf")), ("min_p", 1.5),
    ("repetition_penalty", 0.0), ("repetition_penalty", float("inf")), ("seed", 2**64), ("seed", -(2**63) - 1),
    ("stop_token_ids", [2**70]), ("allowed_token_ids", []), ("logit_bias", {5: float("inf")}),
    ("logit_bias", {-1: 1.0}), ("n", 0), ("n", 129), ("best_of", 0), ("min_tokens", 17),
    ("max_tokens", True), ("top_k", 2**64),
])
def test_invalid_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_vllm_ranges_are_taken():
    """vLLM bounds temperature and repetition_penalty below only, leaves max_tokens None to
    the context, and takes any finite logit_bias (clamped to +-100 when applied)."""
    SamplingParams(temperature=3.0, repetition_penalty=3.0, max_tokens=None, min_tokens=5)
    logits = torch.tensor([0.0, 5.0, 1.0, 2.0])
    forced = RequestSampler(SamplingParams(temperature=1.0, seed=0, logit_bias={2: 1e300}))
    assert {forced.sample(logits).token for _ in range(20)} == {2}
    banned = RequestSampler(SamplingParams(temperature=0, logit_bias={1: -1e300}))
    assert banned.sample(logits).token == 3
    hot = RequestSampler(SamplingParams(temperature=1e30, seed=0))
    assert len({hot.sample(logits).token for _ in range(200)}) == 4  # near uniform, finite
    # Past f32's largest, with tokens masked to -inf (-inf / inf would be NaN).
    s = RequestSampler(SamplingParams(temperature=1e39, seed=0, allowed_token_ids=[1, 2]))
    assert {s.sample(logits).token for _ in range(50)} == {1, 2}
    s = RequestSampler(SamplingParams(temperature=1e39, seed=0, min_tokens=2), [0],
                       stop_token_ids=[3])
    assert s.sample(logits).token != 3 and s.sample(logits).token != 3
    # A 0 logit of a seen token under a penalty past f32's largest stays 0 (not banned).
    pen = RequestSampler(SamplingParams(temperature=0, repetition_penalty=1e39), [2])
    assert pen.sample(torch.tensor([-1.0, -2.0, 0.0, -3.0])).token == 2


def test_seeds_differing_above_32_bits_draw_differently():
    """The CPU generator keeps 32 bits of a seed: seeds in [0, 2**32) are kept as they are
    (earlier outputs unchanged), others mixed into 32 bits, so none collide by truncation."""
    assert [generator_seed(s) for s in (0, 5, 2**32 - 1)] == [0, 5, 2**32 - 1]
    pairs = [(5, 5 + 2**32), (7, 7 + 2**40), (-1, 2**63 - 1), (0, 2**32), (-(2**63), 0)]
    for a, b in pairs:
        assert generator_seed(a) != generator_seed(b), (a, b)
    assert all(0 <= generator_seed(s) < 2**32 for p in pairs for s in p)
    logits = torch.zeros(1000)
    def draws(seed):
        s = RequestSampler(SamplingParams(temperature=1.0, seed=seed))
        return [s.sample(logits).token for _ in range(8)]
    assert draws(5) != draws(5 + 2**32)
    gen = torch.Generator().manual_seed(5)  # a seed below 2**32 draws as it did
    assert draws(5)[0] == torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).item()


def test_token_ids_are_checked_against_the_vocabulary():
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=[100]).validate(vocab_size=100)
    SamplingParams(stop_token_ids=[99]).validate(vocab_size=100)


@pytest.mark.parametrize("temperature", [0.0, 5e-324, 1e-40, 1e-6])
def test_tiny_temperatures_are_greedy_even_with_huge_logits(temperature):
    logits = torch.randn(100, generator=torch.Generator().manual_seed(1)) * 3e37
    s = RequestSampler(SamplingParams(temperature=temperature, seed=0))
    assert s.sample(logits).token == int(logits.argmax())
    # Just above the greedy threshold, huge logits still give a valid draw, not inf/nan.
    s = RequestSampler(SamplingParams(temperature=2e-5, seed=0))
    assert s.sample(logits).token == int(logits.argmax())


def test_nan_and_inf_logits():
    logits = torch.tensor([float("nan"), 1.0, 2.0, float("nan")])
    for t in (0.0, 1.0, 2.0):
        draws = {RequestSampler(SamplingParams(temperature=t, seed=i)).sample(logits).token
                 for i in range(50)}
        assert draws <= {1, 2}
    logits = torch.tensor([0.0, float("inf"), 1.0, float("-inf")])
    for t in (0.0, 1.0):
        out = RequestSampler(SamplingParams(temperature=t, seed=0, logprobs=1)).sample(logits)
        assert out.token == 1 and out.logprob == 0.0
    from torchtpu.serve.sampling import SamplingError

    with pytest.raises(SamplingError, match="NaN"):
        RequestSampler(SamplingParams()).sample(torch.full((4,), float("nan")))
    with pytest.raises(SamplingError, match="masked every token"):
        RequestSampler(SamplingParams(allowed_token_ids=[2])).sample(
            torch.tensor([0.0, 1.0, float("nan")]))


def test_logit_bias_allowed_ids_and_min_tokens():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert RequestSampler(SamplingParams(temperature=0, logit_bias={3: 100.0})).sample(
        logits).token == 3
    assert RequestSampler(SamplingParams(temperature=0, logit_bias={0: -100.0})).sample(
        logits).token == 1
    s = RequestSampler(SamplingParams(temperature=1.0, allowed_token_ids=[1, 2], seed=0))
    assert {s.sample(logits).token for _ in range(50)} <= {1, 2}
    s = RequestSampler(SamplingParams(temperature=0, min_tokens=2, max_tokens=4),
                       stop_token_ids={0})
    assert [s.sample(logits).token for _ in range(3)] == [1, 1, 0]


@pytest.mark.parametrize("top_p", [1e-300, 1e-45, 1e-9])
def test_tiny_top_p_keeps_the_top_token(top_p):
    # Found by schemathesis: 8.9e-91 became 0.0 in f32 and dropped every token.
    logits = torch.randn(50, generator=torch.Generator().manual_seed(2))
    s = RequestSampler(SamplingParams(top_p=top_p, seed=0))
    assert all(s.sample(logits).token == int(logits.argmax()) for _ in range(5))


def test_min_p_keeps_tokens_within_a_fraction_of_the_top():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    seen = {RequestSampler(SamplingParams(min_p=0.5, seed=i)).sample(logits).token
            for i in range(400)}
    assert seen == {0, 1}  # 0.3 >= 0.5 * 0.5 > 0.15


def test_min_p_filters_before_top_k_and_top_p_as_vllm():
    # vLLM's sampler: temperature, min_p, then top_k / top_p. min_p=0.5 keeps [0.5, 0.3]
    # (renormalized 0.625, 0.375), after which top_p=0.6 keeps the top token only; min_p
    # applied last kept both.
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    seen = {RequestSampler(SamplingParams(min_p=0.5, top_p=0.6, seed=i)).sample(logits).token
            for i in range(200)}
    assert seen == {0}
    seen = {RequestSampler(SamplingParams(min_p=0.5, top_k=2, seed=i)).sample(logits).token
            for i in range(200)}
    assert seen == {0, 1}


def test_repetition_penalty_covers_prompt_and_output():
    logits = torch.tensor([2.0, 1.9, -1.0, -1.5])
    s = RequestSampler(SamplingParams(temperature=0, repetition_penalty=1.5), [0])
    assert s.sample(logits).token == 1  # 2.0 / 1.5 < 1.9
    assert s.sample(logits).token == 0  # 1.9 / 1.5 < 2.0 / 1.5
    s = RequestSampler(SamplingParams(temperature=0, repetition_penalty=1.5), [0, 1])
    assert s.sample(torch.tensor([-1.0, -1.2, -1.4])).token == 2  # negatives * 1.5


def test_fork_and_best_of():
    from torchtpu.serve.sampling import best_of

    kids = SamplingParams(n=2, best_of=3, seed=2**63 - 2).fork()
    assert [k.seed for k in kids] == [2**63 - 2, 2**63 - 1, -(2**63)]
    assert all(k.n == 1 and k.best_of is None for k in kids)
    assert [k.seed for k in SamplingParams(n=2).fork()] == [None, None]
    assert best_of([-4.0, -1.0, -3.0], [4, 2, 1], 2) == [1, 0]  # per token: -1, -0.5, -3


def test_greedy_and_top_k_one_agree():
    logits = torch.randn(100, generator=torch.Generator().manual_seed(0))
    greedy = RequestSampler(SamplingParams(temperature=0.0)).sample(logits).token
    assert greedy == int(logits.argmax())
    for seed in range(5):
        s = RequestSampler(SamplingParams(temperature=1.0, top_k=1, seed=seed))
        assert s.sample(logits).token == greedy


def test_seed_reproducible_and_distribution():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    a = RequestSampler(SamplingParams(seed=7))
    b = RequestSampler(SamplingParams(seed=7))
    seq_a = [a.sample(logits).token for _ in range(50)]
    assert seq_a == [b.sample(logits).token for _ in range(50)]
    draws = [RequestSampler(SamplingParams(seed=i)).sample(logits).token for i in range(3000)]
    freq = torch.bincount(torch.tensor(draws), minlength=3).float() / 3000
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.3, 0.2]), atol=0.04, rtol=0)


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([0.6, 0.25, 0.1, 0.05]))
    seen = {RequestSampler(SamplingParams(top_p=0.8, seed=i)).sample(logits).token
            for i in range(400)}
    assert seen == {0, 1}  # 0.6 < 0.8 <= 0.85: tokens 0 and 1 only


def test_penalties_move_away_from_repeats():
    logits = torch.tensor([2.0, 1.9, 0.0])
    s = RequestSampler(SamplingParams(temperature=0.0, frequency_penalty=0.5))
    assert [s.sample(logits).token for _ in range(3)] == [0, 1, 0]
    logits = torch.tensor([2.0, 1.9, 0.5])
    s = RequestSampler(SamplingParams(temperature=0.0, presence_penalty=2.0))
    assert [s.sample(logits).token for _ in range(3)] == [0, 1, 2]


def test_logprobs_are_raw_log_softmax():
    logits = torch.tensor([1.0, 2.0, 3.0, 0.5])
    out = RequestSampler(SamplingParams(temperature=0.0, logprobs=2)).sample(logits)
    ref = torch.log_softmax(logits, -1)
    assert out.token == 2 and out.logprob == pytest.approx(float(ref[2]))
    assert [t for t, _ in out.top_logprobs] == [2, 1]


class _CharTokenizer:
    """Token i is chr(i); 0xFF.. pairs form one two-token character (as with BPE bytes)."""

    def decode(self, ids, skip_special_tokens=True):
        out, i = "", 0
        while i < len(ids):
            if ids[i] == 1:  # first half of a two-token character
                out += "é" if i + 1 < len(ids) and ids[i + 1] == 2 else "\ufffd"
                i += 2 if i + 1 < len(ids) and ids[i + 1] == 2 else 1
                continue
            out += chr(ids[i])
            i += 1
        return out


def test_detokenizer_holds_back_stop_prefixes_and_cuts_at_stop():
    d = IncrementalDetokenizer(_CharTokenizer(), stop=["END"], include_stop=False)
    ids, pieces = [], []
    for ch in "abcENxEND tail":
        ids.append(ord(ch))
        pieces.append(d.update(ids, finished=False))
        if d.stopped:
            break
    assert "".join(pieces) == "abcENx"
    assert d.stopped


def _detokenize(text: str, finish_at: int | None = None, **kw) -> tuple[str, bool]:
    d = IncrementalDetokenizer(_CharTokenizer(), **kw)
    ids, pieces = [], []
    for k, ch in enumerate(text):
        ids.append(ord(ch))
        pieces.append(d.update(ids, finished=k + 1 == len(text)))
        if d.stopped:
            break
    return "".join(pieces), d.stopped


@pytest.mark.parametrize("stop,include,min_tokens,want", [
    # One token per character. The first " named" ends at token 11, within min_tokens: vLLM
    # never matches it later (it was found again in the held-back text and the output cut
    # short, or mid-word); the second one, ending at token 22, stops the text.
    ([" named"], False, 12, (" girl named Emma", True)),
    (["l named"], False, 12, (" girl named Emma named", False)),
    ([" named", "zzzzzzzzzzzz"], False, 12, (" girl named Emma", True)),
    ([" named"], False, 16, (" girl named Emma", True)),
    # Ending at the min_tokens-th token is within them too (a stop token there would not
    # count either).
    ([" named"], False, 11, (" girl named Emma", True)),
    # A stop string that ends after the first min_tokens tokens counts, even if it began
    # within them.
    ([" named"], False, 10, (" girl", True)),
    ([" Emma"], False, 12, (" girl named", True)),
    ([" Emma"], True, 12, (" girl named Emma", True)),
])
def test_stop_strings_count_only_where_they_end_after_min_tokens(stop, include, min_tokens,
                                                                  want):
    assert _detokenize(" girl named Emma named", stop=stop, include_stop=include,
                       min_tokens=min_tokens) == want


def test_detokenizer_waits_for_whole_characters():
    d = IncrementalDetokenizer(_CharTokenizer(), stop=[], include_stop=False)
    assert d.update([ord("a"), 1], finished=False) == "a"
    assert d.update([ord("a"), 1, 2], finished=False) == "é"
    assert d.update([ord("a"), 1, 2, ord("b")], finished=True) == "b"


class _CountingTokenizer:
    """A real tokenizer that records how many ids each decode is given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def decode(self, ids, skip_special_tokens=True):
        self.lengths.append(len(ids))
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _metaspace_tokenizer():
    """A SentencePiece-style tokenizer (leading-space marker, byte fallback), as Llama's."""
    from tiny_models import corpus
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    def tokenizer(model):
        tok = Tokenizer(model)
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581",
                                                     prepend_scheme="first")
        tok.decoder = decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
            decoders.Strip(" ", 1, 0)])
        return tok

    trained = tokenizer(models.BPE(unk_token="<unk>"))
    trained.train_from_iterator(corpus()[:2000], trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"]))
    # The byte pieces byte fallback spells other characters with, as in Llama's vocabulary.
    vocab = json.loads(trained.to_str())["model"]
    pieces = dict(vocab["vocab"])
    for b in range(256):
        pieces.setdefault(f"<0x{b:02X}>", len(pieces))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in vocab["merges"]]
    tok = tokenizer(models.BPE(pieces, merges, unk_token="<unk>", byte_fallback=True))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module", params=["byte-level", "metaspace"])
def real_tokenizer(request):
    if request.param == "byte-level":
        from tiny_models import build_tokenizer
        return build_tokenizer()
    return _metaspace_tokenizer()


def _stream(tokenizer, ids, **kw):
    d = IncrementalDetokenizer(tokenizer, stop=[], include_stop=False, **kw)
    pieces = [d.update(ids[:n], finished=n == len(ids)) for n in range(1, len(ids) + 1)]
    return "".join(pieces)


def test_detokenized_stream_equals_one_shot_decode(real_tokenizer):
    text = ("To be, or not to be: that is the question. Ünïcödé — 漢字かな 🙂🚀 naïve café\n"
            "  two  spaces, a tab\tand   more.")
    ids = real_tokenizer.encode(text, add_special_tokens=False)
    assert _stream(real_tokenizer, ids) == real_tokenizer.decode(ids)
    # Random ids: special tokens among them, and (byte-level) bytes that leave UTF-8
    # incomplete or invalid. Byte-fallback pieces are left out of the random ids: a run of
    # them that is not UTF-8 becomes one U+FFFD per byte, a run cut by a window boundary
    # keeps its valid bytes (as with vLLM's detokenizer), so garbage can differ there.
    g = torch.Generator().manual_seed(0)
    vocab = real_tokenizer.get_vocab()
    byte_pieces = {i for t, i in vocab.items() if t.startswith("<0x") and len(t) == 6}
    for _ in range(20):
        ids = [i for i in torch.randint(0, len(real_tokenizer), (64,), generator=g).tolist()
               if i not in byte_pieces]
        for skip in (True, False):
            assert _stream(real_tokenizer, ids, skip_special_tokens=skip) == \
                real_tokenizer.decode(ids, skip_special_tokens=skip)


def test_detokenizer_decodes_a_bounded_window_each_step(real_tokenizer):
    """Each step decodes the newest ids only, so a long output costs linear time."""
    ids = real_tokenizer.encode(" ".join(__import__("tiny_models").corpus()[:300]),
                                add_special_tokens=False)[:2000]
    counting = _CountingTokenizer(real_tokenizer)
    assert _stream(counting, ids) == real_tokenizer.decode(ids)
    assert max(counting.lengths) <= 8, max(counting.lengths)


def test_the_first_output_token_keeps_its_leading_space_after_the_prompt(real_tokenizer):
    """Decoded with the prompt's last ids as context, the output is the part of
    decode(prompt + output) after the prompt's text (a SentencePiece decode alone drops
    the first token's leading space)."""
    prompt = real_tokenizer.encode("Let us kill", add_special_tokens=False)
    output = real_tokenizer.encode("Let us kill him, him", add_special_tokens=False)[
        len(prompt):]
    d = IncrementalDetokenizer(real_tokenizer, stop=[], include_stop=False, prompt_ids=prompt)
    text = "".join(d.update(output[:n], finished=n == len(output))
                   for n in range(1, len(output) + 1))
    assert text == " him, him"
    assert real_tokenizer.decode(prompt) + text == real_tokenizer.decode(prompt + output)


def test_token_id_errors_name_no_bound_the_model_does_not_have():
    """Checked before the model is known, a token id list's error names no made-up bound
    (it said [0, 2147483648)); with the vocabulary, its size."""
    with pytest.raises(ValueError, match="allowed_token_ids") as e:
        SamplingParams(allowed_token_ids=[])
    assert "2147483648" not in str(e.value) and "vocabulary" in str(e.value)
    with pytest.raises(ValueError, match=r"\[0, 512\)"):
        SamplingParams(allowed_token_ids=[99999]).validate(vocab_size=512)
