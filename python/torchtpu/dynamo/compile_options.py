"""``torch.compile(..., mode=..., options=...)`` for the ``tpu`` backend.

PyTorch passes both to the backend. Its own backends accept every mode and every Inductor
option and use those that apply; none of them change how a tpu graph is lowered or compiled
(XLA picks its own kernels, and there are no CUDA graphs), so they are checked the way
Inductor checks them (an unknown name raises, listing the valid ones) and ignored with a
debug log on ``torchtpu.compile``.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("torchtpu.compile")


def check_compile_kwargs(mode: str | None, options: dict[str, Any] | None) -> None:
    """Raises ValueError/TypeError for what PyTorch's own backends would reject."""
    if mode is None and not options:
        return
    import torch._inductor

    if mode is not None:
        modes = sorted(torch._inductor.list_mode_options())
        if mode not in modes:
            raise ValueError(f"tpu: torch.compile mode {mode!r} is not one of PyTorch's modes "
                             f"(expected one of {', '.join(modes)})")
        if mode != "default":
            log.debug("torch.compile(mode=%r): the tpu backend has no tuning or CUDA graphs to "
                      "choose; XLA compiles the graph as in the default mode", mode)
    if options:
        if not isinstance(options, dict):
            raise TypeError(f"tpu: torch.compile options must be a dict, got "
                            f"{type(options).__name__}")
        known = set(torch._inductor.list_options())
        unknown = sorted(k for k in options if k not in known)
        if unknown:
            raise ValueError(f"tpu: unexpected torch.compile option(s) {', '.join(unknown)}: "
                             "not an option of PyTorch's backends (torch._inductor.list_options() "
                             "lists them)")
        log.debug("torch.compile(options=%s): Inductor options do not apply to the tpu "
                  "backend; ignored", sorted(options))
