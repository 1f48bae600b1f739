"""int8 weight-only quantization: the int8 engine computes exactly the model whose weights
are the dequantized int8 values (a tiny random Llama against Hugging Face on the CPU), and on
SmolLM2-135M its perplexity on the shipped corpus stays within 2% of f32 with at most 0.3x
the weight memory (greedy agreement over 32 tokens is printed)."""

import os

import pytest
import torch
from conftest import ENGINE_ARGS

from torchtpu import ops
from torchtpu.serve import LLM, SamplingParams
from torchtpu.serve.evaluate import perplexity
from torchtpu.serve.model import embed, linear, quantize_int8, quantize_int8_packed

CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "data",
                      "tinyshakespeare.txt")


@pytest.mark.parametrize("rows", [1, 3, 65])
def test_int8_linear_paths_agree_with_the_cpu(rows):
    """The host kernel (where registered) and the in-program conversion (other platforms)
    both equal x @ (q * scale) on the CPU, from the same packed weights."""
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 80, generator=g)  # [out, in]
    q, scale = quantize_int8(w)
    assert q.shape == (80, 96) and q.dtype == torch.int8 and scale.shape == (96,)
    assert (q.float() * scale - w.t()).abs().max() <= scale.max() / 2 + 1e-6
    x = torch.randn(rows, 80, generator=g)
    bias = torch.randn(96, generator=g)
    want = x.double() @ (q.double() * scale.double()) + bias.double()
    fn = torch.compile(linear, backend="tpu", dynamic=False, fullgraph=True)
    dev = [t.to("tpu") for t in (x, ops.pack_int8(q), scale, bias)]
    kernel = ops.has_host_kernel("torchtpu_int8_matmul")
    for use_kernel in {False, kernel}:
        got = fn(dev[0], dev[1], dev[2], dev[3], int8_kernel=use_kernel).cpu()
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


def test_packed_layout_is_blocks_of_64_channels_with_zero_padding():
    """pack_int8's layout, element by element: w[b, k, i] = q[k, 64 b + i], zero past N;
    unpack_int8 inverts it."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-127, 128, (7, 130), generator=g, dtype=torch.int8)  # K 7, N 130
    packed = ops.pack_int8(q)
    assert packed.shape == (3, 7, 64) and packed.dtype == torch.int8
    for b in range(3):
        for i in range(64):
            c = 64 * b + i
            want = q[:, c] if c < 130 else torch.zeros(7, dtype=torch.int8)
            assert torch.equal(packed[b, :, i], want), (b, i)
    assert torch.equal(ops.unpack_int8(packed, 130), q)
    with pytest.raises(ValueError, match="expected int8 weights"):
        ops.pack_int8(q.float())


@pytest.mark.parametrize("shape", [(130, 7), (64, 5), (3, 9), (128, 1)])
def test_quantize_into_the_packed_layout_equals_quantize_then_pack(shape):
    """The one-copy quantize_int8_packed (what the engine loads with) gives exactly
    pack_int8 of quantize_int8, in full and partial blocks, with a row of zeros."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(shape, generator=g) * 3
    w[shape[0] // 2] = 0
    q, scale = quantize_int8(w)
    packed, packed_scale = quantize_int8_packed(w)
    assert packed.dtype == torch.int8 and torch.equal(packed, ops.pack_int8(q))
    assert torch.equal(packed_scale, scale)


@pytest.mark.parametrize("rows", [1, 3, 17])
def test_int8_linear_on_packed_weights_against_f32(rows):
    """Odd K, N not a multiple of 64: both paths equal the f32 matmul of the dequantized
    weights (the kernel's partial last block, its 4-row tiles and a row left over)."""
    g = torch.Generator().manual_seed(100 + rows)
    k, n = 77, 101
    w = torch.randn(n, k, generator=g)  # [out, in]
    q, scale = quantize_int8(w)
    x = torch.randn(rows, k, generator=g)
    want = x @ (q.float() * scale)
    # its own function: Dynamo's recompile limit counts the shapes compiled per function
    fn = torch.compile(lambda *a, **kw: linear(*a, **kw), backend="tpu", dynamic=False,
                       fullgraph=True)
    dev = [t.to("tpu") for t in (x, ops.pack_int8(q), scale)]
    for use_kernel in {False, ops.has_host_kernel("torchtpu_int8_matmul")}:
        got = fn(*dev, int8_kernel=use_kernel).cpu()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_int8_embedding_gathers_columns_of_the_packed_table():
    g = torch.Generator().manual_seed(3)
    table = torch.randn(150, 24, generator=g)  # [vocab, hidden]; vocab not whole blocks
    q, scale = quantize_int8(table)
    tokens = torch.tensor([0, 63, 64, 149, 5, 64, 128])
    want = q.t().float()[tokens] * scale[tokens].unsqueeze(1)
    fn = torch.compile(embed, backend="tpu", dynamic=False, fullgraph=True)
    got = fn(tokens.to("tpu"), ops.pack_int8(q).to("tpu"), scale.to("tpu")).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("kernel", [True, False], ids=["host-kernel", "in-program"])
def test_int8_engine_computes_the_dequantized_model(tiny_llama_dir, kernel, monkeypatch):
    """Both int8 paths through the whole engine: the host kernel (where the plugin has it),
    and the conversion in the program that platforms without it run (chosen here by
    reporting the kernel absent), on the same packed weights."""
    from transformers import AutoModelForCausalLM

    from torchtpu.serve import runner

    if kernel and not ops.has_host_kernel("torchtpu_int8_matmul"):
        pytest.skip("the plugin registered no int8 kernel (not the CPU plugin)")
    if not kernel:
        monkeypatch.setattr(runner, "int8_kernel_available", lambda device: False)
    llm = LLM(tiny_llama_dir, quantization="int8", **ENGINE_ARGS)
    assert llm.engine.runner.int8_kernel == kernel
    f32_bytes = LLM(tiny_llama_dir, warmup=False, **ENGINE_ARGS).engine.weight_bytes
    assert llm.engine.stats()["quantization"] == "int8"
    assert llm.engine.weight_bytes < 0.3 * f32_bytes
    ref = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    with torch.no_grad():  # every linear layer (and the tied embedding) as int8 * scale
        for module in ref.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                q, scale = quantize_int8(module.weight)
                module.weight.copy_((q.float() * scale).t())
    lines = __import__("tiny_models").corpus()
    prompts = [llm.tokenizer.encode(" ".join(lines[i:i + 4]))[:n]
               for i, n in ((0, 5), (10, 40), (20, 90))]
    results = llm.generate(prompts, SamplingParams(max_tokens=24, temperature=0.0,
                                                   ignore_eos=True))
    for ids, res in zip(prompts, results):
        with torch.no_grad():
            out = ref.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                               attention_mask=torch.ones(1, len(ids), dtype=torch.long))
        assert res.outputs[0].token_ids == out[0, len(ids):].tolist()
    assert llm.engine.stats()["num_recompiles_after_warmup"] == 0


def test_smollm2_int8_perplexity_and_memory():
    from torchtpu.models import smollm2_path

    path = str(smollm2_path())
    args = dict(ENGINE_ARGS, max_model_len=512, warmup=False, layers_per_call=3)
    with open(CORPUS) as f:
        text = f.read()[:6000]
    prompts = ["The quick brown fox", "Once upon a time", "def fibonacci(n):",
               "The capital of France is"]
    runs = {}
    for q in (None, "int8"):
        llm = LLM(path, quantization=q, **args)
        ids = llm.tokenizer.encode(text)[:512]
        ppl = perplexity(llm.engine, ids)
        outs = llm.generate([llm.tokenizer.encode(p) for p in prompts],
                            SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))
        runs[q] = (ppl, [o.outputs[0].token_ids for o in outs], llm.engine.weight_bytes)
        del llm
    (ppl32, toks32, bytes32), (ppl8, toks8, bytes8) = runs[None], runs["int8"]
    agree = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x))
             for x, y in zip(toks32, toks8)]
    print(f"\nSmolLM2 int8: perplexity {ppl8:.3f} against f32 {ppl32:.3f} "
          f"({ppl8 / ppl32:.4f}x); weights {bytes8 / 2**20:.1f} MiB against "
          f"{bytes32 / 2**20:.1f} MiB ({bytes8 / bytes32:.3f}x); greedy tokens equal to f32 "
          f"before the first difference: {agree} of 32")
    assert abs(ppl8 / ppl32 - 1) <= 0.02
    assert bytes8 <= 0.3 * bytes32
    assert 10 < ppl32 < 100  # the corpus is English: a sane model, not a broken one
