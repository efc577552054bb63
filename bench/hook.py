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
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall_ms(command: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    began = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
    return (time.perf_counter() - began) * 1000.0


def environment(pycache: str | None) -> dict[str, str]:
    """This process's environment, with bytecode caching on (into ``pycache``) or off."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = pycache  # keeps the caches out of the source tree
    return env


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


def measure(
    onlooker: str, runs: int, env: dict[str, str], folder: str
) -> tuple[float, float, float]:
    """Medians of the hook and of ``python -c pass``, and the hook's p90, interleaved."""
    hook = [onlooker, "hook", "claude-code", "--audit-dir", folder]
    bare = [sys.executable, "-c", "pass"]
    for _ in range(3):  # warm the file cache (and the bytecode cache, when it is on)
        wall_ms(bare, env)
        wall_ms(hook, env, payload(-1))
    hook_ms: list[float] = []
    bare_ms: list[float] = []
    for index in range(runs):
        bare_ms.append(wall_ms(bare, env))
        hook_ms.append(wall_ms(hook, env, payload(index)))
    p90 = statistics.quantiles(hook_ms, n=10)[-1]
    return statistics.median(hook_ms), statistics.median(bare_ms), p90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="invocations of each (>= 30)")
    options = parser.parse_args()
    onlooker = shutil.which("onlooker", path=str(Path(sys.executable).parent))
    if onlooker is None:
        sys.exit("the onlooker console script is not installed next to this interpreter")
    print(f"{options.runs} runs of each, interleaved; {sys.executable}")
    met = False
    with tempfile.TemporaryDirectory() as folder:
        for label, pycache in (
            ("bytecode cache on (a normal install)", os.path.join(folder, "pycache")),
            ("bytecode cache off (PYTHONDONTWRITEBYTECODE=1)", None),
        ):
            audit_dir = os.path.join(folder, "audit-" + ("on" if pycache else "off"))
            hook, bare, p90 = measure(onlooker, options.runs, environment(pycache), audit_dir)
            ratio = hook / bare
            ok = hook <= 35.0 and ratio <= 2.0
            met = met or (ok and pycache is not None)
            print(f"\n{label}")
            print(f"  python -c pass             median {bare:6.1f} ms")
            print(f"  onlooker hook claude-code  median {hook:6.1f} ms  (p90 {p90:.1f} ms)")
            print(
                f"  ratio {ratio:.2f}x; target (<= 35 ms and <= 2x): {'met' if ok else 'NOT met'}"
            )
            session = Path(audit_dir, "bench-session")
            records = sum(1 for p in session.glob("*.jsonl") for _ in p.open())
            print(f"  records written: {records} (expected {options.runs + 3 + 1})")
            errors = Path(audit_dir, "audit.err")
            if errors.exists():
                print("  audit.err: " + errors.read_text().splitlines()[0])
        path_python = shutil.which("python3")
        if path_python and Path(path_python).resolve() != Path(sys.executable).resolve():
            env = environment(None)
            shim = statistics.median(wall_ms([path_python, "-c", "pass"], env) for _ in range(10))
            print(f"\nfor reference, python3 on PATH ({path_python}) -c pass: median {shim:.1f} ms")


if __name__ == "__main__":
    main()
