"""Run PyTorch's own device-generic test files against ``tpu`` and summarize the results.

    python scripts/upstream_tests.py [--dir DIR] [--files a.py b.py] [--out docs/upstream_tests.md]

Each file runs in its own pytest process (PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu,privateuse1:
the CPU classes are the baseline, the tpu classes what is measured), with the
upstream_plugin logging every test as it starts and ends. A process that dies (a crash, or
a test past the per-test timeout, which pytest-timeout ends by killing the process) is
restarted without the tests already finished and without the one that died, which is
recorded as crashed; so one bad test never hides the rest of its file.

A tpu test counts only against a CPU baseline that passes: when the same test fails on
the CPU class too (the files predate torch 2.13, so some helpers drifted), it is listed
apart and left out of the pass rate. Writes a Markdown summary (passed / failed / skipped /
crashed per file, failure groups, crashes, baseline failures) and prints one summary line.

The files are not part of this project (they are PyTorch's, BSD-3-Clause, and no package
ships them): DIR is --dir or $UPSTREAM_TESTS, a folder of them such as a pytorch checkout's
test/. Without one the runner says so and exits 0 without running anything.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    outcome: str  # passed failed skipped xfailed crashed timeout
    message: str = ""
    seconds: float = 0.0


@dataclass
class FileRun:
    name: str
    results: dict[str, Result] = field(default_factory=dict)
    restarts: int = 0
    seconds: float = 0.0
    error: str = ""  # the file could not be collected at all


def is_tpu(nodeid: str) -> bool:
    cls = nodeid.split("::")[1] if "::" in nodeid else ""
    return cls.endswith("PRIVATEUSE1") or cls.endswith("TPU")


def cpu_counterpart(nodeid: str) -> str:
    parts = nodeid.split("::")
    if len(parts) < 3:
        return nodeid
    cls = re.sub(r"(PRIVATEUSE1|TPU)$", "CPU", parts[1])
    test = re.sub(r"_(privateuse1|tpu)(?=_|$)", "_cpu", parts[2], count=1)
    return "::".join([parts[0], cls, test, *parts[3:]])


def read_log(path: Path) -> tuple[dict[str, Result], list[str]]:
    """Finished results, and the tests started but never finished (in order)."""
    ended: dict[str, Result] = {}
    started: list[str] = []
    if not path.exists():
        return ended, started
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the crash
        if r["event"] == "start":
            started.append(r["id"])
        else:
            ended[r["id"]] = Result(r["outcome"], r.get("message", ""), r.get("seconds", 0.0))
    return ended, [s for s in started if s not in ended]


def run_file(path: Path, python: str, test_timeout: int, file_timeout: int,
             only: str, max_restarts: int) -> FileRun:
    run = FileRun(path.name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="upstream-") as tmp:
        log, skip = Path(tmp) / "log.jsonl", Path(tmp) / "skip.txt"
        env = dict(os.environ)
        env.update({
            "PYTORCH_TESTING_DEVICE_ONLY_FOR": only,
            "UPSTREAM_LOG": str(log),
            "UPSTREAM_SKIP": str(skip),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "scripts"),
                                                        env.get("PYTHONPATH", "")])),
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        cmd = [python, "-m", "pytest", str(path), "-q", "-p", "upstream_plugin",
               "-p", "no:cacheprovider", "--rootdir", tmp, "-o", "addopts=",
               f"--timeout={test_timeout}", "--timeout_method=thread"]
        while True:
            left = file_timeout - (time.monotonic() - start)
            if left <= 0:
                break
            try:
                proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True,
                                      timeout=left)
                rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
            except subprocess.TimeoutExpired:
                rc, tail = -1, "file timeout"
            ended, unfinished = read_log(log)
            run.results.update(ended)
            unfinished = [t for t in unfinished if t not in run.results]  # earlier crashes
            if not unfinished:
                if rc not in (0, 1, 5) and not ended and not run.results:
                    run.error = tail.strip().splitlines()[-1] if tail.strip() else f"rc {rc}"
                break
            dead = unfinished[-1]
            if rc == -1 or "Timeout" in tail:  # the file's limit, or pytest-timeout's
                run.results[dead] = Result("timeout", f"still running after {test_timeout} s")
            else:
                run.results[dead] = Result("crashed", f"process died (rc {rc})")
            run.restarts += 1
            if run.restarts > max_restarts:
                break
            skip.write_text("\n".join(run.results) + "\n")
    run.seconds = time.monotonic() - start
    return run


def normalize(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    first = re.sub(r"0x[0-9a-f]+", "0x…", first)
    first = re.sub(r"(?<![A-Za-z_\d])\d+(\.\d+)?", "N", first)  # keep dtype names (uint16)
    return first[:140]


def summarize(runs: list[FileRun]) -> tuple[str, dict]:
    totals = collections.Counter()
    rows, groups, crashes, baseline = [], collections.defaultdict(list), [], []
    for run in runs:
        c = collections.Counter()
        for nodeid, r in sorted(run.results.items()):
            if not is_tpu(nodeid):
                continue
            cpu = run.results.get(cpu_counterpart(nodeid))
            bad = ("failed", "crashed", "timeout")
            if r.outcome in bad and cpu is not None and cpu.outcome in bad:
                c["baseline"] += 1
                baseline.append((nodeid, normalize(cpu.message)))
                continue
            c[r.outcome] += 1
            if r.outcome == "failed":
                groups[normalize(r.message)].append(nodeid)
            elif r.outcome in ("crashed", "timeout"):
                crashes.append((nodeid, r.outcome, r.message))
        totals.update(c)
        counted = c["passed"] + c["failed"] + c["crashed"] + c["timeout"]
        rate = f"{100.0 * c['passed'] / counted:.1f}%" if counted else "n/a"
        rows.append(f"| {run.name} | {c['passed']} | {c['failed']} | {c['crashed']} | "
                    f"{c['timeout']} | "
                    f"{c['skipped'] + c['xfailed']} | {c['baseline']} | {rate} | "
                    f"{run.seconds:.0f} s |" + (f" {run.error}" if run.error else ""))
    counted = totals["passed"] + totals["failed"] + totals["crashed"] + totals["timeout"]
    rate = 100.0 * totals["passed"] / counted if counted else 0.0
    lines = [
        "# PyTorch's own tests on `tpu`",
        "",
        "Generated by `make test-upstream` (scripts/upstream_tests.py): PyTorch's device-generic",
        "test files, each in its own process, the CPU classes as the baseline. A tpu test whose",
        "CPU counterpart fails too is a drift of the (older) test file, not a tpu failure: it is",
        "listed below and left out of the pass rate. Skips include expected failures. A test",
        "still running after the per-test timeout is ended with its process and counted apart",
        "from crashes (timed out); both count against the pass rate.",
        "",
        "| file | passed | failed | crashed | timed out | skipped | CPU-baseline failures "
        "| pass rate | time |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        f"| **all** | {totals['passed']} | {totals['failed']} | {totals['crashed']} | "
        f"{totals['timeout']} | {totals['skipped'] + totals['xfailed']} | "
        f"{totals['baseline']} | {rate:.1f}% | |",
        "",
        "## Crashes and timeouts",
        "",
        *([f"- `{n}` ({o}): {m}" for n, o, m in crashes] or ["None."]),
        "",
        "## Failure groups (tpu fails, CPU passes)",
        "",
    ]
    for message, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        example = ids[0].split("::", 1)[1]
        lines.append(f"- {len(ids)} x `{message}` (e.g. `{example}`)")
    if not groups:
        lines.append("None.")
    lines += ["", "## CPU-baseline failures (excluded)", ""]
    lines += [f"- `{n.split('::', 1)[1]}`: {m}" for n, m in baseline] or ["None."]
    stats = {"passed": totals["passed"], "failed": totals["failed"],
             "crashed": totals["crashed"], "timeout": totals["timeout"],
             "skipped": totals["skipped"] + totals["xfailed"],
             "baseline": totals["baseline"], "rate": rate}
    return "\n".join(lines) + "\n", stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=os.environ.get("UPSTREAM_TESTS") or None,
                    help="folder of PyTorch device-generic test files (default $UPSTREAM_TESTS)")
    ap.add_argument("--files", nargs="*", help="file names inside --dir (default: all test_*.py)")
    ap.add_argument("--out", type=Path, help="Markdown summary (e.g. docs/upstream_tests.md)")
    ap.add_argument("--json", type=Path, help="per-test results as JSON")
    ap.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("--file-timeout", type=int, default=1800, help="seconds per file")
    ap.add_argument("--max-restarts", type=int, default=50)
    ap.add_argument("--tpu-only", action="store_true",
                    help="skip the CPU baseline classes (faster; no baseline exclusion)")
    args = ap.parse_args()
    if args.dir is None or not Path(args.dir).is_dir():
        where = "given" if args.dir is None else f"at {args.dir}"
        print(f"upstream tests: no test folder {where}; set UPSTREAM_TESTS=<folder of "
              "PyTorch device-generic test files> (e.g. a pytorch checkout's test/) to run them")
        return 0
    args.dir = Path(args.dir).resolve()  # each file runs from a temporary folder
    names = args.files or sorted(p.name for p in args.dir.glob("test_*.py"))
    only = "privateuse1" if args.tpu_only else "cpu,privateuse1"
    runs = []
    for name in names:
        path = args.dir / name
        if not path.is_file():
            print(f"upstream tests: {path} not found", file=sys.stderr)
            return 2
        run = run_file(path, sys.executable, args.test_timeout, args.file_timeout, only,
                       args.max_restarts)
        runs.append(run)
        n = collections.Counter(r.outcome for k, r in run.results.items() if is_tpu(k))
        print(f"upstream tests: {name}: {dict(n)} in {run.seconds:.0f} s"
              + (f" ({run.restarts} restarts)" if run.restarts else "")
              + (f"; the file did not run: {run.error}" if run.error else ""), flush=True)
    text, stats = summarize(runs)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(
            {r.name: {k: vars(v) for k, v in r.results.items()} for r in runs}, indent=1))
    print(f"upstream tests: {stats['passed']} passed, {stats['failed']} failed, "
          f"{stats['crashed']} crashed, {stats['timeout']} timed out, {stats['skipped']} "
          f"skipped, {stats['baseline']} CPU-baseline failures excluded; "
          f"pass rate {stats['rate']:.1f}%")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
