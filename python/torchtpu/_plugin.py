"""Where the PJRT plugins torchtpu knows are looked for (the runtime's plugin registry).

The registry itself (which plugins exist, which file each ships, the selection rule) is in
C++ (``csrc/runtime/plugin_registry.h``); Python only passes it the import path, whose
directories are where pip installs the plugin packages.
"""

from __future__ import annotations

import os
import sys


def search_path() -> list[str]:
    """The directories installed plugin packages are looked for in (``sys.path`` order)."""
    return [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
