"""examples/jax_kernel.py, the example docs/kernels.md walks through, runs and checks
itself against PyTorch (forward and gradients, eager and compiled)."""

from __future__ import annotations

import os

from _subprocess import run_python

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "jax_kernel.py")


def test_docs_example_runs() -> None:
    r = run_python(f"import runpy; runpy.run_path({os.path.abspath(EXAMPLE)!r}, "
                   "run_name='__main__')", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "eager: output and gradients match PyTorch" in r.stdout
    assert "compiled: output and gradients match PyTorch" in r.stdout
    assert "graph breaks: 0" in r.stdout
