"""The engine's KV events, read the way vLLM's own subscriber and llm-d's indexer read them:
a ZMQ SUB socket, three frames per message (topic, 8-byte big-endian sequence, msgpack
payload), the payload a positional ``[ts, events, data_parallel_rank]`` whose events are maps
tagged by ``"type"``; decoded here with the ``msgpack`` package alone. Also the replay socket
and the cache metrics llm-d scrapes."""

import time

import msgpack
import pytest
import zmq
from conftest import ENGINE_ARGS

from torchtpu._ports import free_port
from torchtpu.serve import LLMEngine, SamplingParams
from torchtpu.serve.kv_events import KvEventsConfig

STORED_KEYS = {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size",
               "lora_id", "medium", "lora_name"}
MASK = (1 << 64) - 1


def reference_block_hashes(tokens: list[int], page_size: int) -> list[int]:
    """csrc/serve/block_hash.h written again in Python: FNV-1a over the parent hash (8 bytes
    little-endian) and the page's token ids (4 bytes little-endian each), then splitmix64's
    finalizer; the first page's parent is 0x6b765f726f6f7421."""
    def mix(x: int) -> int:
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & MASK
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & MASK
        return x ^ (x >> 31)

    out, parent = [], 0x6B765F726F6F7421
    for start in range(0, len(tokens) - page_size + 1, page_size):
        h = 1469598103934665603
        data = parent.to_bytes(8, "little") + b"".join(
            (t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens[start:start + page_size])
        for byte in data:
            h = ((h ^ byte) * 1099511628211) & MASK
        parent = mix(h)
        out.append(parent)
    return out


@pytest.fixture(scope="module")
def engine_with_events(tiny_llama_dir, tmp_path_factory):
    # ipc:// endpoints are bound by the publisher (as tcp://*:N would be) and stay local.
    d = tmp_path_factory.mktemp("kv")
    config = KvEventsConfig(endpoint=f"ipc://{d}/pub", replay_endpoint=f"tcp://127.0.0.1:{free_port()}",
                            topic="kv@127.0.0.1:8000@tiny")
    engine = LLMEngine(tiny_llama_dir, served_model_name="tiny", kv_events=config, **ENGINE_ARGS)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.connect(config.endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    time.sleep(0.3)  # the subscription reaches the publisher before the first batch
    yield engine, sub, config
    engine.close()
    sub.close()


def _generate(engine, prompt_ids, max_tokens=3):
    engine.add_request(f"r{time.monotonic_ns()}", prompt_ids,
                       SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()


def _receive(sub, want_batches):
    batches = []
    deadline = time.monotonic() + 10
    while len(batches) < want_batches and time.monotonic() < deadline:
        if sub.poll(200):
            batches.append(sub.recv_multipart())
    return batches


def test_events_decode_with_vllms_layout(engine_with_events):
    engine, sub, config = engine_with_events
    page = engine.page_size
    prompt = list(range(5, 5 + 3 * page + 3))  # 3 full pages and a partial one
    _generate(engine, prompt)
    frames = _receive(sub, 1)
    assert frames, "no KV event batch arrived"
    topic, seq, payload = frames[0]
    assert topic == b"kv@127.0.0.1:8000@tiny"
    assert len(seq) == 8 and int.from_bytes(seq, "big") == 0  # each publisher counts from 0
    batch = msgpack.unpackb(payload)
    assert isinstance(batch, list) and len(batch) == 3
    ts, events, rank = batch
    assert isinstance(ts, float) and abs(ts - time.time()) < 60
    assert rank == 0
    assert events[0] == {"type": "AllBlocksCleared"}  # a fresh replica drops any stale view
    stored = [e for e in events if e["type"] == "BlockStored"]
    assert stored and set(stored[0]) == STORED_KEYS
    first = stored[0]
    assert first["parent_block_hash"] is None
    assert first["block_size"] == page and first["medium"] == "GPU"
    assert first["lora_id"] is None and first["lora_name"] is None
    assert first["token_ids"] == prompt[:3 * page]
    assert first["block_hashes"] == reference_block_hashes(prompt, page)
    assert all(0 <= h <= MASK for h in first["block_hashes"])

    # A second prompt sharing two pages: only its new pages are stored, under its parent.
    other = prompt[:2 * page] + [1] * (page + 1)
    _generate(engine, other)
    frames = _receive(sub, 1)
    assert int.from_bytes(frames[0][1], "big") >= 1
    events = msgpack.unpackb(frames[0][2])[1]
    stored = [e for e in events if e["type"] == "BlockStored"]
    expected = reference_block_hashes(other, page)
    assert stored[0]["block_hashes"] == expected[2:3]
    assert stored[0]["parent_block_hash"] == expected[1]
    assert stored[0]["token_ids"] == other[2 * page:3 * page]

    # Evictions are BlockRemoved maps.
    engine.scheduler.reset_prefix_cache()
    engine._publish_kv_events()
    frames = _receive(sub, 1)
    removed = msgpack.unpackb(frames[0][2])[1]
    assert all(set(e) == {"type", "block_hashes", "medium"} for e in removed)
    gone = {h for e in removed for h in e["block_hashes"]}
    assert gone == set(reference_block_hashes(prompt, page)) | {expected[2]}


def test_replay_returns_buffered_batches_then_the_end_marker(engine_with_events):
    engine, sub, config = engine_with_events
    _generate(engine, list(range(200, 200 + 2 * engine.page_size + 1)))
    _receive(sub, 1)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(config.replay_endpoint)
    try:
        dealer.send_multipart((b"", (1).to_bytes(8, "big")))
        replayed = []
        while dealer.poll(5000):
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == (-1).to_bytes(8, "big", signed=True):
                assert payload == b""
                break
            replayed.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload)))
        else:
            pytest.fail("the replay never ended")
        seqs = [s for s, _ in replayed]
        assert seqs and seqs[0] == 1 and seqs == list(range(1, seqs[-1] + 1))
        assert all(len(b) == 3 and isinstance(b[1], list) for _, b in replayed)
    finally:
        dealer.close()


def test_cache_config_metric_for_llm_d(engine_with_events):
    engine, _, _ = engine_with_events
    text = engine.metrics.render().decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{"))
    assert f'block_size="{engine.page_size}"' in line
    assert f'num_gpu_blocks="{engine.num_pages}"' in line
    assert line.endswith(" 1.0")
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running",
                 "vllm:kv_cache_usage_perc"):
        assert any(ln.startswith(name + "{") for ln in text.splitlines()), name


def test_kv_events_config_json_follows_vllm():
    c = KvEventsConfig.from_json('{"enable_kv_cache_events": true, "publisher": "zmq", '
                                 '"endpoint": "tcp://*:6001", "topic": "kv@x@m"}')
    assert c.endpoint == "tcp://*:6001" and c.topic == "kv@x@m"
    assert KvEventsConfig.from_json('{"enable_kv_cache_events": false}') is None
    with pytest.raises(ValueError, match="unknown fields"):
        KvEventsConfig.from_json('{"enable_kv_cache_events": true, "endpiont": "x"}')
    with pytest.raises(ValueError, match="not JSON"):
        KvEventsConfig.from_json("{")
