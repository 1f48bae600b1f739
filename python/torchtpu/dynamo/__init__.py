"""torch.compile support for the ``tpu`` device (backend name ``"tpu"``)."""

from torchtpu.dynamo.backend import compile_stats, tpu_backend

__all__ = ["compile_stats", "tpu_backend"]
