"""Hugging Face Transformers models on ``tpu``: tiny random-weight configs vs the CPU.

For each decoder architecture: ``model.to("tpu")`` logits match the CPU, greedy generate()
of 32 new tokens (KV cache on, the default) gives the CPU's tokens, and
``from_pretrained(dir, device_map="tpu")`` loads onto the device and gives the same logits,
and under ``torch.compile(backend="tpu")`` prompts of naturally varying length cost one
executable per shape bucket (the default policy) with the CPU's logits. BERT: hidden states and pooler output with a padding mask. Every check also asserts that
nothing ran through the CPU fallback.

Tolerance (float32): rtol 1e-5, atol 1e-5 on logits and hidden states; measured differences
are about 3e-7 (the order of summation in matmuls and softmax differs from ATen's).
"""

from __future__ import annotations

import pytest
import torch
import transformers
from _compare import assert_close
from _tiny import DECODER_CONFIGS, VOCAB, bert, decoder, prompt

import torchtpu

F32_TOLS = {torch.float32: (1e-5, 1e-5)}
NEW_TOKENS = 32


@pytest.fixture
def no_fallbacks():
    """Fails the test if any op ran on the CPU through the fallback while it ran."""
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    yield
    after = torchtpu.debug.metrics()["fallback_ops"]
    new = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
    assert not new, f"ops ran on the CPU through the fallback: {new}"


@pytest.mark.parametrize("arch", sorted(DECODER_CONFIGS))
def test_decoder_logits_and_greedy_generate_match_cpu(arch: str, no_fallbacks) -> None:
    model = decoder(arch)
    ids = prompt(batch=2, length=8)
    with torch.no_grad():
        expected_logits = model(ids).logits
        expected_tokens = model.generate(ids[:1], max_new_tokens=NEW_TOKENS,
                                         min_new_tokens=NEW_TOKENS, do_sample=False)
    model.to("tpu")
    assert next(model.parameters()).device.type == "tpu"
    with torch.no_grad():
        logits = model(ids.to("tpu")).logits
        tokens = model.generate(ids[:1].to("tpu"), max_new_tokens=NEW_TOKENS,
                                min_new_tokens=NEW_TOKENS, do_sample=False)
    assert_close(logits, expected_logits, dtype_tols=F32_TOLS, what=f"{arch} logits")
    assert tokens.device.type == "tpu"
    assert tokens.shape == (1, 8 + NEW_TOKENS)
    assert torch.equal(tokens.cpu(), expected_tokens), (
        f"{arch}: greedy tokens differ\n tpu: {tokens.cpu().tolist()}\n"
        f" cpu: {expected_tokens.tolist()}")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_from_pretrained_device_map_tpu(arch: str, tmp_path, no_fallbacks) -> None:
    model = decoder(arch)
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu")
    devices = {t.device.type for t in [*loaded.parameters(), *loaded.buffers()]}
    assert devices == {"tpu"}, f"parameters/buffers on {devices}"
    ids = prompt(batch=1, length=6)
    with torch.no_grad():
        assert_close(loaded(ids.to("tpu")).logits, model(ids).logits, dtype_tols=F32_TOLS,
                     what=f"{arch} logits after from_pretrained(device_map='tpu')")


def test_bert_hidden_states_match_cpu(tmp_path, no_fallbacks) -> None:
    model = bert()
    ids = prompt(batch=2, length=10)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padding: exercises the attention mask path of SDPA
    token_types = torch.zeros_like(ids)
    token_types[:, 5:] = 1
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, token_type_ids=token_types)
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModel.from_pretrained(tmp_path, device_map="tpu")
    for m in (model.to("tpu"), loaded):
        with torch.no_grad():
            out = m(input_ids=ids.to("tpu"), attention_mask=mask.to("tpu"),
                    token_type_ids=token_types.to("tpu"))
        assert_close(out.last_hidden_state, expected.last_hidden_state, dtype_tols=F32_TOLS,
                     what="bert last_hidden_state")
        assert_close(out.pooler_output, expected.pooler_output, dtype_tols=F32_TOLS,
                     what="bert pooler_output")


def _compiled_under_buckets(arch: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(CPU model, the same model on tpu, it compiled, graphs compiled so far), under the
    default bucket policy and a fresh Dynamo."""
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    cpu = decoder(arch)
    model = decoder(arch).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    return cpu, model, compiled, torchtpu.debug.metrics().get("num_graphs_compiled", 0)


@pytest.mark.parametrize("arch", sorted(DECODER_CONFIGS))
def test_compiled_decoder_buckets_varying_lengths_by_default(
        arch: str, monkeypatch: pytest.MonkeyPatch, no_fallbacks) -> None:
    # Every op of these models on the length dim has a rule for padded dims
    # (dynamo/buckets/rules.py): one static graph for the first length, then one per bucket.
    cpu, model, compiled, before = _compiled_under_buckets(arch, monkeypatch)
    with torch.no_grad():
        for n in (3, 11, 17, 30, 33):
            ids = torch.randint(3, VOCAB, (2, n))
            got = compiled(ids.to("tpu"), use_cache=False).logits
            assert_close(got, cpu(ids, use_cache=False).logits, dtype_tols=F32_TOLS)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 4  # static, 16, 32, 64


# (Mistral's graphs are Llama's.) GPT-2's forward breaks its Dynamo graph before the
# loss: two frames, so twice the graphs. The break is transformers' own: with no
# `loss_type` in GPT-2's config, the `loss_function` property calls
# `logger.warning_once`, which Dynamo does not trace (`model.loss_type = "ForCausalLM"`
# removes it).
@pytest.mark.parametrize("arch,graphs", [("gpt2", 12), ("llama", 6), ("qwen2", 6),
                                         ("qwen3", 6)])
def test_compiled_training_step_buckets_varying_lengths_by_default(
        arch: str, graphs: int, monkeypatch: pytest.MonkeyPatch, no_fallbacks) -> None:
    # The loss (labels padded by one, then nll_loss over the merged batch*length rows) and
    # the backward graph run padded too: a forward and a backward graph per bucket and
    # frame (the first length static, then buckets 16 and 32).
    cpu, model, compiled, before = _compiled_under_buckets(arch, monkeypatch)
    for n in (3, 11, 17, 30):
        ids = torch.randint(3, VOCAB, (2, n))
        for m in (cpu, model):
            m.zero_grad()
        loss = compiled(ids.to("tpu"), labels=ids.to("tpu"), use_cache=False).loss
        loss.backward()
        expected = cpu(ids, labels=ids, use_cache=False).loss
        expected.backward()
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5), f"n={n}"
        for (name, p_cpu), p in zip(cpu.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, name=name: f"{name} (n={n}): {m}")
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == graphs


def test_tied_weights_stay_tied_on_tpu(no_fallbacks) -> None:
    # GPT-2's LM head is its token embedding. Module.to() keeps a shared Parameter shared
    # only if it can move it in place (param.data = ...), which PyTorch allows across
    # devices only for backends that say so; before the tpu backend did, .to("tpu") made
    # two Parameters, and training updated and differentiated them apart.
    cpu = decoder("gpt2")
    model = decoder("gpt2").to("tpu")
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.weight.device.type == "tpu"
    ids = torch.randint(3, VOCAB, (2, 7))
    model(ids.to("tpu"), labels=ids.to("tpu")).loss.backward()
    cpu(ids, labels=ids).loss.backward()
    torch.testing.assert_close(model.transformer.wte.weight.grad.cpu(),
                               cpu.transformer.wte.weight.grad, rtol=1e-4, atol=1e-5)
    assert model.to("cpu").lm_head.weight is model.transformer.wte.weight



@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_moe_decoder_default_experts_match_cpu(arch: str, no_fallbacks) -> None:
    # transformers' default experts path (grouped_mm) counts tokens per expert with an
    # integer histc on every device but the CPU: CUDA's histc takes integers, and so does
    # tpu's (it failed there: the CPU's kernel, which the op fell back to, refuses them).
    from _tiny import _DECODER

    torch.manual_seed(0)
    moe = dict(_DECODER, num_experts_per_tok=2)
    cfg = (transformers.MixtralConfig(num_local_experts=4, **moe) if arch == "mixtral" else
           transformers.Qwen2MoeConfig(num_experts=4, moe_intermediate_size=32,
                                       shared_expert_intermediate_size=32, **moe))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = prompt(batch=2, length=8)
    with torch.no_grad():
        expected = model(ids).logits
        model.to("tpu")
        assert_close(model(ids.to("tpu")).logits, expected, dtype_tols=F32_TOLS)


def test_moe_decoder_default_experts_compile_in_float32() -> None:
    # Dynamo's fake tensors took PyTorch's CUDA rule for aten::_grouped_mm (bfloat16 only),
    # so a float32 MoE model failed to compile on tpu though eager ran it.
    from _tiny import _DECODER

    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(num_local_experts=4, **dict(_DECODER, num_experts_per_tok=2))
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    ids = prompt(batch=2, length=8)
    with torch.no_grad():
        expected = model(ids).logits
        compiled = torch.compile(model.to("tpu"), backend="tpu")
        assert_close(compiled(ids.to("tpu")).logits, expected, dtype_tols=F32_TOLS)
    a, b = torch.randn(6, 4, device="tpu"), torch.randn(2, 4, 3, device="tpu")
    offs = torch.tensor([2, 6], dtype=torch.int32, device="tpu")
    with pytest.raises(Exception, match="mat_a is torch.float32 but mat_b is torch.float16"):
        torch.compile(torch.nn.functional.grouped_mm, backend="tpu")(a, b.half(), offs=offs)
    with pytest.raises(Exception, match=r"contraction dims differ \(4 and "):
        torch.compile(torch.nn.functional.grouped_mm, backend="tpu")(
            a, torch.randn(2, 5, 3, device="tpu"), offs=offs)


def test_integer_histc_bins_as_cuda() -> None:
    # (x - min) * bins / (max - min) in integers, the ends truncated, the data's range when
    # min == max; worked out by hand from CUDA's kernel.
    x = torch.tensor([0, 1, 1, 3, 3, 3, 7, -2], dtype=torch.int32, device="tpu")
    for kwargs, counts in [({"bins": 4, "min": 0, "max": 3}, [1, 2, 0, 3]),
                           ({"bins": 3}, [2, 5, 1]),
                           ({"bins": 5, "min": 0.7, "max": 3.9}, [1, 2, 0, 0, 3])]:
        out = torch.histc(x, **kwargs)
        assert out.dtype == torch.int32 and out.cpu().tolist() == counts
