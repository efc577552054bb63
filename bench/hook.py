"""Start-up of ``onlooker hook claude-code`` against a bare interpreter, on a realistic session.

Claude Code starts the hook as a new process for every hook event, so its
cost is a process start. This replays a realistic cycle of hook payloads (a
prompt, then Bash and Read calls with their results — output and Python
source that the redactor must scan — then Stop) through the installed
console script, recording into a temporary audit directory, and runs
``python -c pass`` with the same interpreter interleaved with it. It prints
the medians and their ratio, wall time and the processes' own CPU time (less
sensitive to a busy machine), with the bytecode cache on (a normal install)
and off, then the cost of ``--deny-commands`` on ``PreToolUse``.

Target: median <= 35 ms and <= 2x the bare interpreter start (wall time,
bytecode cache on).

    .venv/bin/python bench/hook.py [--runs 60]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SESSION = "bench-session"
SOURCE = '''"""Settings for the demo service."""
import os
from dataclasses import dataclass, field

TIMEOUT = 30
RETRIES = int(os.environ.get("RETRIES", "3"))


@dataclass
class Settings:
    host: str = "localhost"
    port: int = 8080
    debug: bool = False
    tags: list[str] = field(default_factory=list)

    def url(self) -> str:
        return f"http://{self.host}:{self.port}/api/v1?debug={self.debug}"


def load(path: str = "config.toml") -> Settings:
    with open(path, encoding="utf-8") as handle:
        data = parse(handle.read())
    return Settings(**{k: v for k, v in data.items() if k in Settings.__annotations__})
'''


def cycle(index: int) -> list[dict[str, Any]]:
    """One turn of a session: a prompt, two tool calls and their results, Stop."""
    base = {"session_id": SESSION, "cwd": "/home/dev/demo", "permission_mode": "default",
            "transcript_path": "/home/dev/.claude/projects/demo/bench.jsonl"}  # fmt: skip
    bash = {"command": "git status --short && pytest -q tests/test_settings.py",
            "description": "Show changes and run the tests"}  # fmt: skip
    read = {"file_path": "/home/dev/demo/src/settings.py"}
    output = " M src/settings.py\n?? notes.md\n....                [100%]\n4 passed in 0.12s\n"
    return [
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": f"fix the settings ({index})"},
        {**base, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": bash,
         "tool_use_id": f"toolu_b{index}"},
        {**base, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": bash,
         "tool_use_id": f"toolu_b{index}", "duration_ms": 812,
         "tool_response": {"stdout": output, "stderr": "", "interrupted": False}},
        {**base, "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": read,
         "tool_use_id": f"toolu_r{index}"},
        {**base, "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": read,
         "tool_use_id": f"toolu_r{index}", "duration_ms": 3,
         "tool_response": {"type": "text", "file": {"filePath": read["file_path"],
                                                    "content": SOURCE, "numLines": 24}}},
        {**base, "hook_event_name": "Stop", "stop_hook_active": False,
         "last_assistant_message": "The settings now load from config.toml; 4 tests pass."},
    ]  # fmt: skip


def run_once(command: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(command, input=stdin, stdout=subprocess.DEVNULL, check=True, env=env)
    wall = (time.perf_counter() - began) * 1000.0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000.0
    return wall, cpu


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


class Measure:
    """Hook and bare-interpreter runs, interleaved; wall and CPU milliseconds of each."""

    def __init__(self) -> None:
        self.hook: list[tuple[float, float]] = []
        self.bare: list[tuple[float, float]] = []

    def line(self, label: str, runs: list[tuple[float, float]]) -> str:
        wall = [w for w, _ in runs]
        cpu = statistics.median(c for _, c in runs)
        p90 = statistics.quantiles(wall, n=10)[-1]
        return f"  {label:27} median {statistics.median(wall):6.1f} ms  (p90 {p90:5.1f}; cpu {cpu:5.1f})"

    def report(self, label: str) -> bool:
        hook = statistics.median(w for w, _ in self.hook)
        bare = statistics.median(w for w, _ in self.bare)
        cpu_ratio = statistics.median(c for _, c in self.hook) / statistics.median(
            c for _, c in self.bare
        )
        ok = hook <= 35.0 and hook / bare <= 2.0
        print(f"\n{label}")
        print(self.line("python -c pass", self.bare))
        print(self.line("onlooker hook claude-code", self.hook))
        verdict = "met" if ok else "NOT met"
        print(f"  ratio {hook / bare:.2f}x wall, {cpu_ratio:.2f}x cpu; "
              f"target (<= 35 ms and <= 2x): {verdict}")  # fmt: skip
        return ok


def measure(
    onlooker: str, runs: int, env: dict[str, str], folder: str, extra: list[str]
) -> Measure:
    hook = [onlooker, "hook", "claude-code", "--audit-dir", folder, *extra]
    bare = [sys.executable, "-c", "pass"]
    payloads = [json.dumps(p).encode() for i in range(runs) for p in cycle(i)][:runs]
    for payload in payloads[:3]:  # warm the file cache (and the bytecode cache, when on)
        run_once(bare, env)
        run_once(hook, env, payload)
    result = Measure()
    for payload in payloads:
        result.bare.append(run_once(bare, env))
        result.hook.append(run_once(hook, env, payload))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="hook events replayed (>= 30)")
    options = parser.parse_args()
    onlooker = shutil.which("onlooker", path=str(Path(sys.executable).parent))
    if onlooker is None:
        sys.exit("the onlooker console script is not installed next to this interpreter")
    print(f"{options.runs} hook events of each setting (a cycle of UserPromptSubmit, Bash and")
    print(
        f"Read calls with their results, Stop), interleaved with python -c pass; {sys.executable}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for label, pycache in (
            ("bytecode cache on (a normal install)", os.path.join(folder, "pycache")),
            ("bytecode cache off (PYTHONDONTWRITEBYTECODE=1)", None),
        ):
            audit_dir = os.path.join(folder, "audit-" + ("on" if pycache else "off"))
            measure(onlooker, options.runs, environment(pycache), audit_dir, []).report(label)
            session = Path(audit_dir, SESSION)
            records = sum(1 for p in session.glob("*.jsonl") for _ in p.open())
            errors = Path(audit_dir, "audit.err")
            print(f"  records written: {records}; audit.err: "
                  + (errors.read_text().splitlines()[0] if errors.exists() else "none"))  # fmt: skip
        rules = Path(folder, "deny.txt")
        rules.write_text("git push .*--force\nglob:rm -rf /*\nwrite:.env\nread:~/.ssh\n@defaults\n")
        env = environment(os.path.join(folder, "pycache"))
        measure(
            onlooker, options.runs, env, os.path.join(folder, "audit-rules"),
            ["--deny-commands", str(rules)],
        ).report("with --deny-commands (4 rules and @defaults), bytecode cache on")  # fmt: skip
        path_python = shutil.which("python3")
        if path_python and Path(path_python).resolve() != Path(sys.executable).resolve():
            shim = statistics.median(
                run_once([path_python, "-c", "pass"], environment(None))[0] for _ in range(10)
            )
            print(f"\nfor reference, python3 on PATH ({path_python}) -c pass: median {shim:.1f} ms")
    print(f"\nload average while measuring: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
