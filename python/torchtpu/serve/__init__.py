"""Serving on ``tpu``: an engine (C++ scheduler, paged KV, radix prefix cache), the offline
``LLM`` API, and an OpenAI-compatible server (``torchtpu serve``)."""

from torchtpu.serve.engine import LLMEngine, RequestOutput
from torchtpu.serve.llm import LLM, CompletionOutput, RequestResult
from torchtpu.serve.sampling import SamplingParams

__all__ = ["LLM", "LLMEngine", "SamplingParams", "RequestOutput", "RequestResult",
           "CompletionOutput"]
