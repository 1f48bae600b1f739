"""The serving engine core through ``torchtpu._serve``, end to end with a fake model.

The "model" samples ``next_token(history)``, a fixed function of the tokens so far, so every
request's output is known in advance however the scheduler chunks, batches or preempts it.
"""

from __future__ import annotations

import random

import pytest

from torchtpu import _serve

STOP = 0


def next_token(history: list[int]) -> int:
    return (history[-1] * 31 + len(history) * 7) % 50


def expected_output(prompt: list[int], max_new_tokens: int, stop: bool) -> list[int]:
    history, out = list(prompt), []
    while len(out) < max_new_tokens:
        token = next_token(history)
        history.append(token)
        out.append(token)
        if stop and token == STOP:
            break
    return out


def run_step(
    s: _serve.Scheduler, prompts: dict[str, list[int]]
) -> tuple[_serve.SchedulerOutput, list[tuple[str, str]]]:
    """One engine step; the fake model samples from each request's prompt + outputs."""
    out = s.schedule()
    sampled = {}
    for item in out.items:
        assert item.token_ids, "every item computes at least one token"
        outputs = s.request_output_ids(item.request_id)
        assert item.num_output_tokens == len(outputs)
        if item.sample:
            history = prompts[item.request_id] + outputs
            assert item.start_pos + len(item.token_ids) == len(history)
            sampled[item.request_id] = next_token(history)
    return out, s.update(sampled)


def make(**overrides: int | bool) -> _serve.Scheduler:
    args = {
        "num_pages": 32,
        "page_size": 4,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 32,
        "max_model_len": 96,
        "enable_prefix_cache": True,
    }
    args.update(overrides)
    return _serve.Scheduler(_serve.SchedulerConfig(**args))


def test_config_and_exact_api() -> None:
    cfg = _serve.SchedulerConfig(
        num_pages=256,
        page_size=16,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        max_model_len=2048,
        enable_prefix_cache=True,
    )
    s = _serve.Scheduler(cfg)
    assert s.config.page_size == 16
    assert s.num_total_pages == s.num_free_pages == 256
    assert (s.num_running, s.num_waiting, s.num_preemptions) == (0, 0, 0)
    assert s.kv_cache_usage == 0.0
    s.add_request(
        "x", prompt_token_ids=[5, 6, 7], max_new_tokens=2, stop_token_ids=[2], ignore_eos=False
    )
    out = s.schedule()
    assert out.num_scheduled_tokens == 3 and out.preempted == []
    (item,) = out.items
    assert item.request_id == "x" and item.token_ids == [5, 6, 7] and item.start_pos == 0
    assert len(item.page_ids) == 1 and item.sample and item.num_output_tokens == 0
    assert s.update({"x": 9}) == []
    out = s.schedule()
    assert out.items[0].token_ids == [9] and out.items[0].start_pos == 3
    assert s.update({"x": 4}) == [("x", "length")]
    assert s.request_output_ids("x") == [9, 4]
    assert s.request_status("x") == "finished_length"
    assert not s.has_unfinished()


def test_bad_input_raises_clear_errors() -> None:
    with pytest.raises(ValueError, match="page_size must be positive"):
        _serve.SchedulerConfig(page_size=0)
    s = make(num_pages=4)  # 16 token slots
    with pytest.raises(ValueError, match="needs 5 KV pages but the whole pool has 4"):
        s.add_request("big", prompt_token_ids=list(range(1, 11)), max_new_tokens=10)
    with pytest.raises(ValueError, match="exceeds max_model_len"):
        s.add_request("long", prompt_token_ids=[1] * 90, max_new_tokens=10)
    with pytest.raises(ValueError, match="empty prompt"):
        s.add_request("empty", prompt_token_ids=[], max_new_tokens=1)
    with pytest.raises(KeyError, match="no request with id 'nobody'"):
        s.request_output_ids("nobody")
    with pytest.raises(ValueError, match="expected one of: stop, length, abort"):
        s.finish("x", "bored")
    s.add_request("a", prompt_token_ids=[1, 2, 3], max_new_tokens=3)
    s.schedule()
    with pytest.raises(RuntimeError, match="call update"):
        s.schedule()
    with pytest.raises(ValueError, match="no sampled token for request 'a'"):
        s.update({})
    with pytest.raises(ValueError, match="did not mark sample=True"):
        s.update({"a": 1, "ghost": 2})
    assert s.update({"a": 1}) == []


def test_many_requests_complete_with_preemption_prefix_hits_and_aborts() -> None:
    rng = random.Random(0)
    s = make()
    system = [rng.randrange(1, 50) for _ in range(12)]
    specs = {}
    for i in range(60):
        rid = f"r{i}"
        prompt = system + [rng.randrange(1, 50) for _ in range(rng.randrange(1, 30))]
        specs[rid] = (prompt, rng.randrange(1, 40), rng.random() < 0.5)
    pending = list(specs)
    aborted = set()
    prompts: dict[str, list[int]] = {}
    free_at_start = s.num_free_pages
    steps = 0
    while pending or s.has_unfinished():
        for _ in range(rng.randrange(0, 4)):
            if pending:
                rid = pending.pop(0)
                prompt, max_new, stop = specs[rid]
                prompts[rid] = prompt
                s.add_request(
                    rid,
                    prompt_token_ids=prompt,
                    max_new_tokens=max_new,
                    stop_token_ids=[STOP] if stop else [],
                )
        if steps % 40 == 7 and len(pending) < len(specs):
            victim = f"r{rng.randrange(0, 60 - len(pending))}"
            if s.abort(victim):
                aborted.add(victim)
        out, finished = run_step(s, prompts)
        assert out.num_scheduled_tokens <= 32
        assert 0.0 <= s.kv_cache_usage <= 1.0
        for rid, reason in finished:
            assert reason in ("stop", "length")
        steps += 1
        assert steps < 5000, "the scheduler stopped making progress"
    assert s.num_preemptions > 0
    assert 0 < s.prefix_cache_hits <= s.prefix_cache_queries
    for rid, (prompt, max_new, stop) in specs.items():
        if rid in aborted:
            assert s.request_status(rid) == "finished_aborted"
        else:
            assert s.request_output_ids(rid) == expected_output(prompt, max_new, stop), rid
    # Pages come back: free, or held by the prefix cache until it is reset.
    assert s.num_free_pages + s.num_cached_pages == free_at_start
    s.reset_prefix_cache()
    assert s.num_free_pages == free_at_start
    assert s.release_request("r0") and not s.release_request("r0")


def test_abort_and_finish_from_outside_free_pages() -> None:
    s = make(enable_prefix_cache=False)
    prompts = {"a": [1, 2, 3, 4, 5], "b": [7] * 9}
    for rid, prompt in prompts.items():
        s.add_request(rid, prompt_token_ids=prompt, max_new_tokens=20)
    run_step(s, prompts)
    assert s.num_free_pages < s.num_total_pages
    assert s.finish("a", "stop")
    assert s.request_status("a") == "finished_stopped"
    assert not s.finish("a", "stop")
    assert s.abort("b") and not s.abort("b") and not s.abort("unknown")
    assert s.num_free_pages == s.num_total_pages
    assert not s.has_unfinished()


def markov_next(history: list[int]) -> int:
    """A repetitive fake model: the next token is a function of the last two, so outputs
    fall into short cycles and n-gram drafts are often right."""
    prev = history[-2] if len(history) > 1 else 0
    return (history[-1] * 7 + prev * 3) % 13 + 1


def expected_markov(prompt: list[int], max_new_tokens: int, stop: int | None) -> list[int]:
    history, out = list(prompt), []
    while len(out) < max_new_tokens:
        out.append(markov_next(history))
        history.append(out[-1])
        if out[-1] == stop:
            break
    return out


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_speculative_decoding_gives_the_same_tokens_across_preemption(prefix_cache) -> None:
    """Greedy verification of the drafts by the fake model (accept while the model agrees,
    then its own token) must give exactly the tokens of plain decoding, however drafts,
    batching, preemption and the prefix cache combine; and every page comes back."""
    rng = random.Random(1)
    s = make(num_pages=24, enable_prefix_cache=prefix_cache, num_speculative_tokens=4,
             prompt_lookup_min=1, prompt_lookup_max=3)
    specs, prompts = {}, {}
    for i in range(40):
        prompt = [rng.randrange(1, 14) for _ in range(rng.randrange(2, 30))]
        specs[f"r{i}"] = (prompt, rng.randrange(1, 40), 5 if rng.random() < 0.3 else None)
    pending = list(specs)
    drafted = accepted = 0
    free_at_start = s.num_free_pages
    for steps in range(5000):
        if not (pending or s.has_unfinished()):
            break
        for _ in range(rng.randrange(0, 3)):
            if pending:
                rid = pending.pop(0)
                prompt, max_new, stop = specs[rid]
                prompts[rid] = prompt
                s.add_request(rid, prompt_token_ids=prompt, max_new_tokens=max_new,
                              stop_token_ids=[] if stop is None else [stop],
                              speculative=rid != "r3")
        out = s.schedule()
        verdicts = {}
        for item in out.items:
            if not item.sample:
                assert item.num_draft_tokens == 0
                continue
            history = prompts[item.request_id] + s.request_output_ids(item.request_id)
            nd = item.num_draft_tokens
            assert item.start_pos + len(item.token_ids) - nd == len(history)
            if item.request_id == "r3":
                assert nd == 0
            tokens = []
            for d in item.token_ids[len(item.token_ids) - nd:]:
                if markov_next(history + tokens) != d:
                    break
                tokens.append(d)
            drafted += nd
            accepted += len(tokens)
            verdicts[item.request_id] = tokens + [markov_next(history + tokens)]
        s.update(verdicts)
    assert not s.has_unfinished()
    assert s.num_preemptions > 0
    # Drafts are exercised and often right (about 30%: how many get drafted depends on the
    # budget and preemption order, which acceptance does not).
    assert accepted > 0.25 * drafted > 0
    for rid, (prompt, max_new, stop) in specs.items():
        assert s.request_output_ids(rid) == expected_markov(prompt, max_new, stop), rid
    assert s.num_free_pages + s.num_cached_pages == free_at_start
