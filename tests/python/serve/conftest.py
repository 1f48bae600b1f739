import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import tiny_models  # noqa: E402

# Small shapes keep warm-up to a handful of compiles: S in {1,2,4}, Q in {16,32,64}, C=256.
# n-gram speculative decoding as the tests configure it: any earlier match counts.
SPEC = {"num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
ENGINE_ARGS = dict(page_size=16, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                   progress=False)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return tiny_models.build_model_dir(str(tmp_path_factory.mktemp("tiny-llama")), "llama")


@pytest.fixture(scope="session")
def hf_reference():
    """Greedy generate() of a model folder on the CPU, the reference the engine must match."""
    from transformers import AutoModelForCausalLM

    @functools.cache
    def model(path):
        return AutoModelForCausalLM.from_pretrained(path).eval()

    def greedy(path, prompt_ids, max_new_tokens):
        import torch

        m = model(path)
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens,
                             do_sample=False, attention_mask=torch.ones(1, len(prompt_ids),
                                                                        dtype=torch.long))
        return out[0, len(prompt_ids):].tolist()

    return greedy


class RunningServer:
    """An OpenAIServer on a free local port, served by uvicorn on a thread."""

    def __init__(self, engine, **server_args) -> None:
        import threading
        import time

        import httpx
        import uvicorn

        from torchtpu._ports import free_port
        from torchtpu.serve.server import OpenAIServer

        self.app = OpenAIServer(engine, **server_args)
        port = free_port()
        self.uvicorn = uvicorn.Server(uvicorn.Config(self.app.app, host="127.0.0.1", port=port,
                                                     log_level="error"))
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)
        self.app.shutdown()


@pytest.fixture(scope="session")
def served(tiny_llama_dir):
    """One server on the tiny random Llama, shared by the server test modules."""
    from torchtpu.serve import LLMEngine

    srv = RunningServer(LLMEngine(tiny_llama_dir, served_model_name="tiny", **ENGINE_ARGS))
    yield srv
    srv.stop()
