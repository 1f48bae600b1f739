"""The PJRT plugin registry as users see it: torchtpu.debug.plugin()/plugins()/report(), and
TORCHTPU_PJRT_PLUGIN naming a plugin (fresh processes: the plugin is chosen once)."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from _subprocess import run_python

import torchtpu

KNOWN = {"xla-cpu-pjrt", "lammps-jax-pjrt-cpu", "jax-cuda12-pjrt", "jax-cuda13-pjrt", "libtpu"}


def test_plugins_lists_every_known_plugin_with_its_installed_path() -> None:
    listed = torchtpu.debug.plugins()
    assert {p["name"] for p in listed} == KNOWN
    assert listed[0]["default_candidate"] and listed[0]["platform"] == "cpu"
    for p in listed:
        assert p["provenance"], p
        assert p["path"] == "" or os.path.isfile(p["path"]), p


def test_running_plugin_reports_what_it_loaded_with() -> None:
    torch.ones(1, device="tpu")
    info = torchtpu.debug.plugin()
    assert os.path.isfile(info["path"])
    assert re.fullmatch(r"0\.\d+", info["api_version"]), info["api_version"]
    assert info["platform_version"]
    if info["name"]:
        known = next(p for p in torchtpu.debug.plugins() if p["name"] == info["name"])
        assert info["platform"] == known["platform"], (info, known)
    if info["platform"] == "cpu":
        assert info["ffi_extension"] is True  # every XLA CPU build has it: host kernels run
    assert re.fullmatch(r"\d+\.\d+\.\d+", info["attributes"]["stablehlo_current_version"])
    if not os.environ.get("TORCHTPU_PJRT_PLUGIN"):
        # Chosen by default: the first installed default candidate.
        first = next(p for p in torchtpu.debug.plugins() if p["default_candidate"] and p["path"])
        assert (info["name"], info["path"], info["chosen_by"]) == (
            first["name"], first["path"], "default")


def test_report_shows_the_plugin_and_its_versions() -> None:
    info = torchtpu.debug.plugin()
    text = torchtpu.debug.report()
    assert f"PJRT plugin: {info['name'] or '(unregistered)'} ({info['chosen_by']})" in text
    assert (f"PJRT C API {info['api_version']}, platform {info['platform']} "
            f"{info['platform_version']}") in text
    assert f"stablehlo_current_version: {info['attributes']['stablehlo_current_version']}" in text
    assert "installed plugins: " in text and info["name"] in text


def test_environment_selects_a_plugin_by_name_and_refuses_one_not_installed() -> None:
    installed = [p for p in torchtpu.debug.plugins() if p["path"] and p["platform"] == "cpu"]
    if not installed:
        pytest.skip("no CPU plugin is installed to select by name (this run uses another)")
    absent = [p["name"] for p in torchtpu.debug.plugins()
              if not p["path"] and not p["default_candidate"]]
    code = """
        import json, torch, torchtpu
        try:
            x = torch.ones(2, device="tpu") + 1
            info = torchtpu.debug.plugin()
            print(json.dumps({"name": info["name"], "how": info["chosen_by"],
                              "sum": float(x.sum().cpu())}))
        except RuntimeError as e:
            print(json.dumps({"error": str(e)}))
    """
    chosen = installed[-1]["name"]
    out = run_python(code, TORCHTPU_PJRT_PLUGIN=chosen)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"name": chosen, "how": f"TORCHTPU_PJRT_PLUGIN={chosen}", "sum": 4.0}
    if absent:
        out = run_python(code, TORCHTPU_PJRT_PLUGIN=absent[0])
        assert out.returncode == 0, out.stderr
        error = json.loads(out.stdout.strip().splitlines()[-1])["error"]
        assert f"pip install {absent[0]}" in error and "not installed" in error, error


@pytest.mark.parametrize("env", [{"TORCHTPU_GPU_PREALLOCATE": "maybe"},
                                 {"TORCHTPU_GPU_MEMORY_FRACTION": "1.5"}])
def test_an_invalid_gpu_allocator_setting_refuses_the_device_start(env) -> None:
    # Read on every plugin: a typo fails at once, not only on the GPU machine.
    r = run_python("""
        import torch, torchtpu
        try:
            torch.ones(1, device="tpu")
        except RuntimeError as e:
            print("refused:", e)
    """, **env)
    assert r.returncode == 0, r.stderr
    name, value = next(iter(env.items()))
    assert f"refused: tpu: {name}='{value}' is not" in r.stdout, r.stdout


def test_gpu_allocator_settings_leave_a_cpu_plugin_alone() -> None:
    ok = run_python("""
        import torch, torchtpu
        print(float((torch.ones(3, device="tpu") * 2).sum()))
    """, TORCHTPU_GPU_PREALLOCATE="0", TORCHTPU_GPU_MEMORY_FRACTION="0.5")
    assert ok.returncode == 0 and ok.stdout.strip() == "6.0", (ok.stdout, ok.stderr)
