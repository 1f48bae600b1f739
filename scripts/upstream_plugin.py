"""pytest plugin for scripts/upstream_tests.py: runs PyTorch's own device-generic test files
against ``tpu`` and logs every test as it starts and ends, so a process that dies mid-test
still tells the runner which test killed it.

Loaded with ``-p upstream_plugin`` (the runner puts scripts/ on PYTHONPATH). Environment:
  UPSTREAM_LOG   JSON lines written here: {"id", "event": "start"} then
                 {"id", "event": "end", "outcome", "message", "seconds"}
  UPSTREAM_SKIP  a file of node ids (one per line) not to run: tests already finished or
                 found crashing in an earlier process
"""

from __future__ import annotations

import json
import os
import time

import pytest

_log = None
_started: dict[str, float] = {}
_reported: set[str] = set()


def pytest_configure(config: pytest.Config) -> None:
    global _log
    # Before the test modules import common_device_type: the PrivateUse1 classes are
    # instantiated only for a registered, available backend.
    import torchtpu  # noqa: F401

    path = os.environ.get("UPSTREAM_LOG")
    if path:
        _log = open(path, "a", buffering=1)


def _write(record: dict) -> None:
    if _log is not None:
        _log.write(json.dumps(record) + "\n")
        _log.flush()
        os.fsync(_log.fileno())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("UPSTREAM_SKIP")
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        skip = {line.strip() for line in f if line.strip()}
    keep = [i for i in items if i.nodeid not in skip]
    dropped = [i for i in items if i.nodeid in skip]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _started[nodeid] = time.monotonic()
    _write({"id": nodeid, "event": "start"})


def _message(report: pytest.TestReport) -> str:
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:300]
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:300]
    return str(report.longrepr or "")[:300]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid in _reported:
        return
    # One record per test: the first phase that fails or skips, else the call's pass.
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if outcome == "passed" and hasattr(report, "wasxfail"):
            outcome = "failed"  # an unexpected success is a failure, as unittest counts it
        elif outcome == "skipped" and hasattr(report, "wasxfail"):
            outcome = "xfailed"
        _reported.add(report.nodeid)
        _write({
            "id": report.nodeid,
            "event": "end",
            "outcome": outcome,
            "message": "" if outcome == "passed" else _message(report),
            "seconds": round(time.monotonic() - _started.get(report.nodeid, time.monotonic()), 3),
        })
