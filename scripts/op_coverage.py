"""Regenerates docs/op_coverage.md: every OpInfo checked on tpu against the CPU.

    python scripts/op_coverage.py            (what `make op-coverage` runs)
    python scripts/op_coverage.py --ops add,sort --out /dev/stdout

Columns: eager at the op's primary dtype (float32, or its integer dtype when it has no
float32, complex64 for complex-only ops), eager bfloat16, eager complex64, autograd
float32, compiled float32 (see
torchtpu.testing.opinfo for what each checks). OpInfos run in worker subprocesses, one op
at a time with a per-op timeout: a hang or a crash costs that op (reported as such), not
the run. Results are also written as JSON (--json) for tooling.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

# The CPU reference on every machine: oneDNN's AVX2 kernels (tests/python/conftest.py says
# why). Workers inherit it.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [("eager", "primary"), ("eager", "bfloat16"), ("eager", "complex64"),
           ("autograd", "float32"), ("compiled", "float32")]
_TAG = "@op_coverage "  # marks the worker's protocol lines on its stdout
FAMILIES = ["core", "linalg", "fft", "special", "sparse", "foreach"]
# Families tests/python/opinfo runs (eager, primary dtype) with the skip list.
TESTED_FAMILIES = ("core", "foreach")


# ---- worker ------------------------------------------------------------------------------

def worker(keys: list[str]) -> None:
    """Checks the listed OpInfos; one JSON line per op, after a 'start' line."""
    import torch

    import torchtpu  # noqa: F401
    from torchtpu.testing import opinfo as h

    by_key = {h.op_key(op): op for op in h.op_database()}
    for key in keys:
        print(_TAG + json.dumps({"start": key}), flush=True)
        op = by_key[key]
        row: dict = {"key": key, "family": h.family_of(op), "cells": {}}
        primary = h.primary_dtype(op)
        for mode, dtype_name in COLUMNS:
            dtype = primary if dtype_name == "primary" else getattr(torch, dtype_name)
            t0 = time.time()
            if dtype is None:
                out = h.Outcome("n/a", "no float, integer or complex dtype")
            else:
                out = h.check(op, mode, dtype)
            row["cells"][f"{mode}:{dtype_name}"] = {
                "status": out.status, "reason": out.reason,
                "dtype": str(dtype).replace("torch.", ""),
                "roundtrips": list(out.roundtrips), "seconds": round(time.time() - t0, 2)}
        print(_TAG + json.dumps(row), flush=True)


# ---- parent ------------------------------------------------------------------------------

def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def run_chunk(keys: list[str], families: dict, timeout: float, results: dict,
              lock: threading.Lock) -> None:
    """Runs `keys` in workers; restarts after the op that hung or crashed."""
    pending = list(keys)
    while pending:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", ",".join(pending)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                cwd=ROOT)
        q: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, q), daemon=True).start()
        current = None
        while True:
            try:
                line = q.get(timeout=timeout)
            except queue.Empty:
                proc.kill()
                failure = f"harness: timed out after {timeout:.0f}s"
                break
            if line is None:
                proc.wait()
                failure = f"harness: worker exited with code {proc.returncode}"
                break
            if not line.startswith(_TAG):
                continue  # something the op itself printed
            msg = json.loads(line[len(_TAG):])
            if "start" in msg:
                current = msg["start"]
                continue
            with lock:
                results[msg["key"]] = msg
            pending.remove(msg["key"])
            current = None
        proc.wait()
        if current is None:
            if pending:  # died between ops: nothing to blame, retry the rest once
                current = pending[0]
            else:
                break
        with lock:
            results[current] = {"key": current, "family": families[current], "cells": {
                f"{m}:{d}": {"status": "fail", "reason": failure, "dtype": d, "roundtrips": []}
                for m, d in COLUMNS}}
        pending.remove(current)


# ---- report ------------------------------------------------------------------------------

def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100.0 * n / d:.1f}%)" if d else "0/0"


def summarize(results: dict) -> list[str]:
    lines = ["| mode / dtype | " + " | ".join(FAMILIES) + " |",
             "|---" * (len(FAMILIES) + 1) + "|"]
    for mode, dtype_name in COLUMNS:
        col = f"{mode}:{dtype_name}"
        cells = []
        for fam in FAMILIES:
            rows = [r["cells"][col] for r in results.values() if r["family"] == fam]
            applicable = [c for c in rows if c["status"] != "n/a"]
            passed = sum(c["status"] == "pass" for c in applicable)
            host = sum(c["status"] == "host" for c in applicable)
            text = _pct(passed, len(applicable))
            if host:
                text += f"; +{host} via host = {_pct(passed + host, len(applicable))}"
            cells.append(text)
        label = "eager float32 (int dtype where no float32)" if dtype_name == "primary" \
            else f"{mode} {dtype_name}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _group(reason: str) -> str:
    """A failure reason without its sample-specific details, for counting."""
    if reason.startswith("mismatch"):
        return "mismatch" + (" (shape/dtype)" if " CPU gives " in reason else " (values)")
    return reason[:90]


_MARK = {"pass": "ok", "host": "host", "fail": "FAIL", "n/a": "n/a"}


def render(results: dict, elapsed: float, argv: list[str]) -> str:
    keys = sorted(results)
    core_eager = [results[k]["cells"]["eager:primary"] for k in keys
                  if results[k]["family"] == "core"]
    applicable = [c for c in core_eager if c["status"] != "n/a"]
    passed = sum(c["status"] == "pass" for c in applicable)
    out = [
        "# Op coverage: PyTorch OpInfos on tpu",
        "",
        "Generated by `make op-coverage` (`python scripts/op_coverage.py`); do not edit by hand.",
        f"{len(keys)} OpInfos from `torch.testing._internal.common_methods_invocations` "
        f"(`op_db`, and the `foreach_*_op_db` lists as the foreach family), "
        f"checked in {elapsed / 60:.1f} min.",
        "",
        "Each cell runs the OpInfo's sample inputs (at most "
        "eager 4, autograd 3, compiled 2 per op, drawn with a per-op seed) on the CPU and on "
        "tpu and compares them (float32: rtol=atol=1e-3, PyTorch's device-vs-CPU tolerance; "
        "bfloat16: rtol=1.6e-2, atol=1e-2; integers and bools exact). Eager also runs one "
        "edge-value sample (NaN, +Inf, -Inf in the input) and the op's error inputs, which "
        "must raise the CPU's exception type. A CPU fallback is a failure; for the linalg, "
        "fft and special families it is shown as `host` (a counted host round-trip). "
        "Data-dependent ops (nonzero, unique, masked_select) go through the host by design "
        "and pass (marked `ok*`). Random ops are compared by device, dtype and shape "
        "(under compile the op is called without OpInfo's fixed-seed wrapper, which Dynamo "
        "cannot trace).",
        "",
        f"**Core (non-linalg/fft/special/sparse) eager float32: {_pct(passed, len(applicable))} "
        "pass on tpu with no fallback.**",
        "",
        "## Summary (passed / applicable OpInfos per family)",
        "",
        *summarize(results),
        "",
        "## Most common failure reasons (eager, primary dtype)",
        "",
    ]
    reasons = Counter(_group(results[k]["cells"]["eager:primary"]["reason"])
                      for k in keys if results[k]["cells"]["eager:primary"]["status"] == "fail")
    out += ["| count | reason |", "|---|---|"]
    out += [f"| {n} | `{r}` |" for r, n in reasons.most_common(25)]
    out += ["", "## Matrix", "",
            "| OpInfo | family | eager (dtype) | eager bf16 | eager c64 | autograd f32 | "
            "compiled f32 |",
            "|---|---|---|---|---|---|---|"]
    for k in keys:
        r = results[k]
        marks = []
        for mode, dtype_name in COLUMNS:
            c = r["cells"][f"{mode}:{dtype_name}"]
            m = _MARK[c["status"]]
            if c["status"] == "pass" and c.get("roundtrips"):
                m += "*"
            if dtype_name == "primary" and c.get("dtype") not in ("float32", None):
                m += f" ({c['dtype']})"
            marks.append(m)
        out.append(f"| `{k}` | {r['family']} | " + " | ".join(marks) + " |")
    out += ["", "## Failures and host round-trips, with reasons", ""]
    for k in keys:
        r = results[k]
        for mode, dtype_name in COLUMNS:
            c = r["cells"][f"{mode}:{dtype_name}"]
            if c["status"] in ("fail", "host"):
                reason = c["reason"].replace("|", "\\|").replace("`", "'")
                out.append(f"- `{k}` {mode} {c['dtype']}: {c['status']}: {reason}")
    out.append("")
    return "\n".join(out)


def render_skips(results: dict) -> str:
    lines = [
        '"""Core and list-op (_foreach_*) OpInfos whose eager check fails today, with the reason',
        "(OpInfo key -> reason).",
        "",
        "Written by `python scripts/op_coverage.py --skips-out "
        "tests/python/opinfo/opinfo_skips.py`",
        "from the same checks test_opinfo_eager runs; an entry that starts passing fails that",
        'test until it is removed here."""',
        "",
        "SKIPS: dict[str, str] = {",
    ]
    for k in sorted(results):
        r = results[k]
        c = r["cells"]["eager:primary"]
        if r["family"] in TESTED_FAMILIES and c["status"] == "fail":
            lines.append(f"    {k!r}: {c['reason']!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--ops", help="comma-separated OpInfo keys (default: all)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=180, help="seconds per OpInfo (default 180)")
    p.add_argument("--out", default=str(ROOT / "docs" / "op_coverage.md"))
    p.add_argument("--skips-out", help="also write the pytest skip list (tests/python/opinfo/"
                   "opinfo_skips.py) from the core and foreach eager failures")
    p.add_argument("--json", default=str(ROOT / "build" / "op_coverage.json"))
    args = p.parse_args()
    if args.worker:
        worker(args.worker.split(","))
        return
    # Listing keys needs the op database, not the device: a short subprocess keeps the
    # parent free of torch.
    families = json.loads(subprocess.check_output([sys.executable, "-c", (
        "import json; from torchtpu.testing import opinfo as h; "
        "print(json.dumps({h.op_key(o): h.family_of(o) for o in h.op_database()}))")],
        cwd=ROOT, stderr=subprocess.DEVNULL))
    keys = args.ops.split(",") if args.ops else list(families)
    unknown = [k for k in keys if k not in families]
    if unknown:
        sys.exit(f"op_coverage: unknown OpInfo keys {unknown}")
    start = time.time()
    results: dict = {}
    lock = threading.Lock()
    chunks = [keys[i::args.jobs] for i in range(args.jobs)]
    threads = [threading.Thread(target=run_chunk, args=(c, families, args.timeout, results, lock))
               for c in chunks if c]
    for t in threads:
        t.start()
    last = 0
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        if len(results) - last >= 50:
            last = len(results)
            print(f"op_coverage: {len(results)}/{len(keys)} OpInfos, "
                  f"{time.time() - start:.0f}s", flush=True)
    elapsed = time.time() - start
    for k in keys:  # a worker thread that died leaves its ops without a result
        results.setdefault(k, {"key": k, "family": families[k], "cells": {
            f"{m}:{d}": {"status": "fail", "reason": "harness: no result", "dtype": d,
                         "roundtrips": []} for m, d in COLUMNS}})
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    Path(args.out).write_text(render(results, elapsed, sys.argv))
    if args.skips_out:
        Path(args.skips_out).write_text(render_skips(results))
    print(f"op_coverage: wrote {args.out} ({len(results)} OpInfos, {elapsed:.0f}s)")


if __name__ == "__main__":
    main()
