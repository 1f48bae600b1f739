"""The upstream conformance runner (scripts/upstream_tests.py): crash survival and the CPU
baseline, on a small device-generic file written here; then a bounded run of one of
PyTorch's own files when UPSTREAM_TESTS names a folder of them (skipped otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNNER = ROOT / "scripts" / "upstream_tests.py"
UPSTREAM = os.environ.get("UPSTREAM_TESTS", "")

DEVICE_GENERIC = '''
import os
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestProbe(TestCase):
    def test_add(self, device):
        x = torch.arange(4.0, device=device)
        self.assertEqual((x + x).cpu(), torch.arange(4.0) * 2)

    def test_dies_on_tpu(self, device):
        if device.startswith("tpu"):
            os.abort()

    def test_after_the_crash(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)

    def test_fails_everywhere(self, device):
        self.assertEqual(1, 2)

    def test_fails_on_tpu_only(self, device):
        self.assertEqual(device, "cpu")


instantiate_device_type_tests(TestProbe, globals(), only_for=("cpu", "privateuse1"))

if __name__ == "__main__":
    run_tests()
'''


def _run(*args: str, timeout: float = 900, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(RUNNER), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def test_runner_survives_a_crash_and_uses_the_cpu_baseline(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(DEVICE_GENERIC))
    out, js = tmp_path / "summary.md", tmp_path / "results.json"
    # --dir relative to where the runner starts (each file runs from a temporary folder).
    r = _run("--dir", tmp_path.name, "--out", str(out), "--json", str(js), timeout=300,
             cwd=tmp_path.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads(js.read_text())["test_probe.py"]
    outcome = {k.split("::", 1)[1]: v["outcome"] for k, v in results.items()}
    assert outcome["TestProbeCPU::test_dies_on_tpu_cpu"] == "passed"
    assert outcome["TestProbePRIVATEUSE1::test_dies_on_tpu_tpu"] == "crashed"
    # The process that died was restarted for the tests after the crash.
    assert outcome["TestProbePRIVATEUSE1::test_after_the_crash_tpu"] == "passed"
    assert outcome["TestProbePRIVATEUSE1::test_add_tpu"] == "passed"
    assert outcome["TestProbePRIVATEUSE1::test_fails_on_tpu_only_tpu"] == "failed"
    summary = out.read_text()
    # Failing on the CPU too is suite drift: listed, not counted.
    assert "| test_probe.py | 2 | 1 | 1 | 0 | 0 | 1 | 50.0% |" in summary
    assert "TestProbePRIVATEUSE1::test_dies_on_tpu_tpu` (crashed)" in summary
    assert "2 passed, 1 failed, 1 crashed, 0 timed out, 0 skipped, 1 CPU-baseline" in r.stdout


def test_runner_without_a_test_folder_says_so(tmp_path: Path) -> None:
    r = _run("--dir", str(tmp_path / "absent"), timeout=60)
    assert r.returncode == 0
    assert "no test folder" in r.stdout and "UPSTREAM_TESTS" in r.stdout


@pytest.mark.skipif(not UPSTREAM or not (Path(UPSTREAM) / "test_shape_ops.py").is_file(),
                    reason="UPSTREAM_TESTS does not name a folder with PyTorch's "
                           "test_shape_ops.py (no package ships PyTorch's test files)")
def test_pytorch_shape_ops_on_tpu(tmp_path: Path) -> None:
    """A bounded slice of `make test-upstream`: one file, no crash, no regression."""
    out = tmp_path / "summary.md"
    r = _run("--dir", UPSTREAM, "--files", "test_shape_ops.py", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    row = next(line for line in out.read_text().splitlines() if line.startswith("| **all**"))
    passed, failed, crashed, timed_out = (int(c) for c in row.split("|")[2:6])
    assert crashed == 0, out.read_text()
    assert passed / (passed + failed + crashed + timed_out) >= 0.80, out.read_text()
