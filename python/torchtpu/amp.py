"""``torch.tpu.amp``: ``torch.cuda.amp``'s names for the tpu device.

``torch.autocast("tpu")`` and ``torch.amp.GradScaler("tpu")`` are the current API; these
classes let code written against ``torch.cuda.amp`` run with ``cuda`` changed to ``tpu``.
Autocast's default dtype is the device's (``torch.get_autocast_dtype("tpu")``).
"""

from __future__ import annotations

import functools

import torch


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801  (torch.cuda.amp's name)
    def __init__(self, enabled: bool = True, dtype: torch.dtype | None = None,
                 cache_enabled: bool = True) -> None:
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="tpu")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="tpu")

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]
