"""Locating the default PJRT plugin (the XLA CPU plugin from the ``xla-cpu-pjrt`` wheel)."""

from __future__ import annotations

import importlib.util
import os


def default_plugin_path() -> str:
    """Path of the XLA CPU plugin, or "" when the wheel is not installed.

    ``TORCHTPU_PJRT_PLUGIN`` overrides it at device initialization (in C++).
    """
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = os.path.join(list(spec.submodule_search_locations)[0], "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else ""
