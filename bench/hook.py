"""Wall time of one ``onlooker hook claude-code`` invocation against a bare interpreter.

Claude Code starts the hook as a new process on every tool call, so its cost
is a process start. This runs the hook (a ``PreToolUse`` payload on stdin,
recorded into a temporary audit directory) and ``python -c pass`` with the
same interpreter, interleaved, and prints the medians and their ratio.
``python3 -c pass`` as found on PATH is shown too when it is another program
(a pyenv shim, say), for reference only.

Target: median <= 35 ms and <= 2x the bare interpreter start.

    .venv/bin/python bench/hook.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall_ms(command: list[str], stdin: bytes = b"") -> float:
    began = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - began) * 1000.0


def payload(index: int) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "bench-session",
            "tool_name": "Bash",
            "tool_input": {"command": f"echo {index}"},
            "tool_use_id": f"toolu_{index}",
            "cwd": "/tmp",
        }
    ).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="invocations of each (>= 30)")
    options = parser.parse_args()
    onlooker = shutil.which("onlooker", path=str(Path(sys.executable).parent))
    if onlooker is None:
        sys.exit("the onlooker console script is not installed next to this interpreter")
    path_python = shutil.which("python3")
    with tempfile.TemporaryDirectory() as folder:
        hook = [onlooker, "hook", "claude-code", "--audit-dir", folder]
        bare = [sys.executable, "-c", "pass"]
        for _ in range(3):  # warm the file cache and the bytecode caches
            wall_ms(bare)
            wall_ms(hook, payload(-1))
        hook_ms: list[float] = []
        bare_ms: list[float] = []
        path_ms: list[float] = []
        for index in range(options.runs):
            bare_ms.append(wall_ms(bare))
            hook_ms.append(wall_ms(hook, payload(index)))
            if path_python is not None:
                path_ms.append(wall_ms([path_python, "-c", "pass"]))
        errors = Path(folder, "audit.err")
        recorded = (
            sum(1 for p in Path(folder, "bench-session").glob("*.jsonl") for _ in p.open())
            if Path(folder, "bench-session").is_dir()
            else 0
        )
        problems = errors.read_text() if errors.exists() else ""

    hook_median = statistics.median(hook_ms)
    bare_median = statistics.median(bare_ms)
    ratio = hook_median / bare_median
    print(f"runs: {options.runs} each, interleaved ({sys.executable})")
    print(f"python -c pass            median {bare_median:6.1f} ms")
    print(
        f"onlooker hook claude-code median {hook_median:6.1f} ms  "
        f"(p90 {statistics.quantiles(hook_ms, n=10)[-1]:.1f} ms, min {min(hook_ms):.1f} ms)"
    )
    if path_ms and Path(path_python or "").resolve() != Path(sys.executable).resolve():
        print(
            f"python3 on PATH -c pass   median {statistics.median(path_ms):6.1f} ms  ({path_python})"
        )
    print(f"ratio hook / bare python: {ratio:.2f}x")
    print(
        f"lines recorded: {recorded} (expected {options.runs + 3 + 1}: the calls and the session start)"
    )
    if problems:
        print(f"audit.err:\n{problems}")
    ok = hook_median <= 35.0 and ratio <= 2.0
    print(f"target (median <= 35 ms and <= 2x): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
