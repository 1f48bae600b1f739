"""A free TCP port on the loopback interface, for launchers that start local servers."""

from __future__ import annotations

import socket
import threading

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now that this process has not handed out before: two calls made before
    either port is bound could otherwise get the same one from the kernel."""
    with _lock:
        for _ in range(100):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no free port that this process has not handed out before")
