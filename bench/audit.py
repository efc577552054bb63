"""Audit trail throughput and its cost per tool call, measured in one run.

(1) records/s through ``TrailWriter.write`` (redact, serialize, chain,
    append) for each fsync mode, in batches as the plugin's thread makes them;
(2) records/s through the plugin thread's own path (pydantic events in,
    records out) with ``fsync="never"``;
(3) that path per tool call (a started and a finished event) with a 1 KB and
    a 100 KB string argument: plain text (``"x" * n``, as ``bench/record.py``
    measures all plugins) and source code (as a file a tool writes, where the
    rules find ``=`` and run on all that is kept, 2,000 characters of the
    100 KB against 1,000): the audit's share of the payload-size cost;
(4) per tool call through the engine, audit off vs on: wall time, and the CPU
    time of the execution's own thread, plus the drain at close. Against an
    observer that does nothing (events are built only when someone
    observes), the difference is audit's ``handle``: a deque append; the
    writer thread's work is excluded.

With ``--baseline REV`` (a git revision, e.g. the commit before a change)
the audit package as it was at ``REV`` is loaded beside the current one and
(1)-(4) are measured for both, interleaved, in the same process: the figures
are comparable even on a busy machine, the absolute ones less so.

Targets (issue 13): ``TrailWriter`` >= 200,000 records/s with ``never`` and
>= 50,000/s with ``batch``; 100 KB vs 1 KB argument <= 2x.

Run: ``.venv/bin/python bench/audit.py [--records N] [--calls N] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

import onlooker
from onlooker.plugins import audit

REPEATS = 5
BATCH = 256
ROOT = Path(__file__).resolve().parents[1]


@onlooker.tool
async def read_file(path: str, limit: int = 100) -> str:
    """The tool under measurement: as cheap as a tool can be."""
    return "x"


@onlooker.tool
async def write_file(path: str, content: str) -> int:
    """A tool taking a large argument."""
    return len(content)


def load_baseline(revision: str) -> ModuleType:
    """The audit package as it was at ``revision``, imported beside the current one.

    As ``onlooker.plugins._audit_baseline``: its relative imports of the rest
    of onlooker (``from ..._shared import ...``) resolve as they do in place.
    """
    package = "src/onlooker/plugins/audit"
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{revision}:{package}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="onlooker-audit-baseline-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # imported lazily until then
    for name in names:
        source = subprocess.run(
            ["git", "show", f"{revision}:{package}/{name}"],
            cwd=ROOT, check=True, capture_output=True,
        ).stdout  # fmt: skip
        (folder / name).write_bytes(source)
    spec = importlib.util.spec_from_file_location(
        "onlooker.plugins._audit_baseline",
        folder / "__init__.py",
        submodule_search_locations=[str(folder)],
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sample_events(count: int) -> list[dict[str, Any]]:
    """Alternating started/finished tool-call events, in their JSON form."""
    events: list[dict[str, Any]] = []
    attribution = {
        "task_id": None,
        "phase": None,
        "parent_execution_id": None,
        "parent_tool_call_id": None,
        "depth": 0,
        "intent_id": None,
    }
    for i in range(count):
        base = {
            "execution_id": "3f2a9c1b7d00-0",
            "attribution": attribution,
            "schema_version": 1,
            "event_id": f"3f2a9c1b7d00-{i + 1}",
            "seq": i + 1,
            "at": f"2025-01-01T12:00:{i % 60:02d}.{i * 7919 % 1_000_000:06d}Z",
            "tool_call_id": f"3f2a9c1b7d00-c{i // 2}",
            "tool": "read_file",
        }
        if i % 2 == 0:
            events.append({**base, "kind": "ToolCallStarted", "args": {"path": f"src/m{i}.py"}})
        else:
            events.append(
                {
                    **base,
                    "kind": "ToolCallFinished",
                    "status": "completed",
                    "result": "x",
                    "error": None,
                    "duration_ms": 0.012,
                    "metadata": {},
                }
            )
    return events


def writer_rate(package: ModuleType, fsync: str, events: list[dict[str, Any]]) -> float:
    with tempfile.TemporaryDirectory() as directory:
        writer = package.TrailWriter(directory, "bench", fsync=fsync, max_bytes=1 << 30)
        began = time.perf_counter()
        for start in range(0, len(events), BATCH):
            writer.write(events[start : start + BATCH])
        elapsed = time.perf_counter() - began
        writer.close()
    return len(events) / elapsed


def thread_path(package: ModuleType, directory: str) -> Callable[[Sequence[Any]], None]:
    """The plugin thread's work on one batch (serialize, redact, chain, append), either version."""
    trail = package.AuditTrail(
        Path(directory), "bench", max_bytes=1 << 30, keep=1, fsync="never",
        redactor=None, max_value_chars=2000,
    )  # fmt: skip
    writer = trail._writer
    if hasattr(trail, "_encoder"):

        def failed(event: onlooker.ExecutionEvent, exc: Exception) -> None:
            raise exc

        return lambda batch: writer.write_encoded(trail._encoder.encode(batch, failed))
    return lambda batch: writer.write_serialized([trail._event_json(e) for e in batch])


def thread_path_rate(package: ModuleType, models: list[onlooker.ExecutionEvent]) -> float:
    with tempfile.TemporaryDirectory() as directory:
        run = thread_path(package, directory)
        began = time.perf_counter()
        for start in range(0, len(models), BATCH):
            run(models[start : start + BATCH])
        elapsed = time.perf_counter() - began
    return len(models) / elapsed


def source_text(size: int) -> str:
    """``size`` characters of this repository's source: what a tool writing a file is given."""
    text = "".join(path.read_text() for path in sorted((ROOT / "src/onlooker").glob("*.py")))
    return (text * (size // len(text) + 1))[:size]


def payload_events(content: str, calls: int) -> list[onlooker.ExecutionEvent]:
    """``calls`` tool calls (started + finished) with ``content`` as a string argument."""
    size = len(content)
    envelope: dict[str, Any] = {"execution_id": "e1", "attribution": {}}
    events: list[onlooker.ExecutionEvent] = []
    for i in range(calls):
        common = {**envelope, "tool_call_id": f"c{i}", "tool": "write_file", "at": time.time()}
        events.append(
            onlooker.ToolCallStarted(
                **common,
                event_id=f"e1-{2 * i}",
                seq=2 * i,
                args={"path": f"src/m{i}.py", "content": content},
            )
        )
        events.append(
            onlooker.ToolCallFinished(
                **common,
                event_id=f"e1-{2 * i + 1}",
                seq=2 * i + 1,
                status="completed",
                result=size,
                duration_ms=0.1,
            )
        )
    return events


def per_payload_call(package: ModuleType, events: list[onlooker.ExecutionEvent]) -> float:
    """µs per tool call (two events) on the plugin thread's path."""
    with tempfile.TemporaryDirectory() as directory:
        run = thread_path(package, directory)
        began = time.perf_counter()
        for start in range(0, len(events), 64):
            run(events[start : start + 64])
        elapsed = time.perf_counter() - began
    return elapsed / (len(events) / 2) * 1e6


class NullObserver:
    """An observer that does nothing: events are built for it, nothing more."""

    def handle(self, event: onlooker.ExecutionEvent) -> None:
        pass


NULL_PLUGIN = onlooker.define_plugin(
    id="null", extension=lambda _ctx: NullObserver(), observer=lambda null: null
)


async def per_call(
    package: ModuleType | str, calls: int, directory: str
) -> tuple[float, float, float]:
    """µs per tool call: wall, the execution thread's CPU, and wall including the drain.

    ``package`` is an audit package, or ``"off"`` (no plugin) or ``"null"``
    (an observer that does nothing: the cost of building the events).
    """
    plugins: list[onlooker.Plugin[Any]] = []
    if package == "null":
        plugins.append(NULL_PLUGIN)
    elif isinstance(package, ModuleType):
        plugins.append(package.plugin(directory=directory, fsync="batch"))
    timing: list[tuple[float, float]] = []

    async def program(ctx: onlooker.ExecutionContext) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            await ctx.call("read_file", path="src/a.py")
        timing.append((time.perf_counter() - began, time.thread_time() - cpu))

    began = time.perf_counter()
    async with onlooker.ExecutionEngine(tools=[read_file], plugins=plugins) as engine:
        await engine.execute(program)
    total = time.perf_counter() - began
    wall, cpu = timing[0]
    return wall / calls * 1e6, cpu / calls * 1e6, total / calls * 1e6


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def interleaved(
    versions: dict[str, ModuleType], measure: Callable[[ModuleType], float]
) -> dict[str, float]:
    """The median of :data:`REPEATS` measurements per version, the versions taking turns."""
    runs: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(REPEATS):
        for name, package in versions.items():
            runs[name].append(measure(package))
    return {name: statistics.median(values) for name, values in runs.items()}


def show(label: str, figures: dict[str, float], unit: str) -> None:
    cells = "   ".join(f"{name} {value:>10,.1f}" for name, value in figures.items())
    ratio = ""
    if "before" in figures:
        ratio = f"   after/before {figures['after'] / figures['before']:.2f}x"
    print(f"{label:<38} {cells} {unit}{ratio}")


def throughput(versions: dict[str, ModuleType], records: int) -> None:
    print(f"records per measurement: {records}, batches of {BATCH}, median of {REPEATS}")
    events = sample_events(records)
    rates: dict[str, dict[str, float]] = {}
    for mode in ("never", "batch", "always"):
        chosen = events if mode != "always" else events[: max(records // 25, 500)]
        rates[mode] = interleaved(versions, partial(writer_rate, fsync=mode, events=chosen))
        show(f"TrailWriter.write, fsync={mode}", rates[mode], "records/s")
    models = [onlooker.parse_event(e) for e in events]
    show(
        "plugin thread path, fsync=never",
        interleaved(versions, lambda p: thread_path_rate(p, models)),
        "records/s",
    )
    print(f"target never >= 200,000/s: {met(rates['never']['after'] >= 200_000)}")
    print(f"target batch >=  50,000/s: {met(rates['batch']['after'] >= 50_000)}")


def payload(versions: dict[str, ModuleType], calls: int) -> None:
    print(f"\naudit thread path per tool call, string argument, {calls} calls, median of {REPEATS}")
    kinds = {
        "plain": lambda size: "x" * size,  # as bench/record.py: nothing for a rule to look at
        "source": source_text,  # code: "=" and "key" in it, so the rules run on what is kept
    }
    for kind, make in kinds.items():
        small, large = payload_events(make(1_000), calls), payload_events(make(100_000), calls)
        per: dict[str, dict[str, float]] = {}
        for label, events in (("1 KB", small), ("100 KB", large)):
            per[label] = interleaved(versions, partial(per_payload_call, events=events))
            show(f"{kind} text, {label} argument", per[label], "µs/call")
        for name in versions:
            ratio = per["100 KB"][name] / per["1 KB"][name]
            target = f"   target <= 2x: {met(ratio <= 2)}" if name == "after" else ""
            print(f"{name}: {kind} text, 100 KB vs 1 KB  {ratio:.2f}x{target}")


async def handle_cost(package: ModuleType, models: list[onlooker.ExecutionEvent]) -> float:
    """The calling thread's CPU per ``handle(event)``, the writer thread draining meanwhile (µs)."""
    with tempfile.TemporaryDirectory() as directory:
        trail = package.AuditTrail(
            Path(directory), "bench", max_bytes=1 << 30, keep=1, fsync="batch",
            redactor=None, max_value_chars=2000,
        )  # fmt: skip
        async with trail:
            began = time.thread_time()
            for event in models:
                trail.handle(event)
            cpu = time.thread_time() - began
            await trail.flush()
    return cpu / len(models) * 1e6


async def engine_cost(versions: dict[str, ModuleType], calls: int) -> None:
    print(f"\ntool calls per measurement: {calls}, median of {REPEATS}, interleaved")
    runs: dict[str, list[tuple[float, float, float]]] = {"off": [], "null": []}
    runs.update({name: [] for name in versions})
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(REPEATS):
            for name in ("off", "null"):
                runs[name].append(await per_call(name, calls, directory))
            for name, package in versions.items():
                runs[name].append(await per_call(package, calls, directory))
    med = {
        name: [statistics.median(r[i] for r in rs) for i in range(3)] for name, rs in runs.items()
    }
    print(f"{'µs per call':<32} " + "".join(f"{name:>12}" for name in med))
    labels = ("wall, in the loop", "CPU of the execution thread", "wall, with the drain at close")
    for i, label in enumerate(labels):
        print(f"{label:<32} " + "".join(f"{figures[i]:12.2f}" for figures in med.values()))
    print("(off: no plugin, no event built; null: an observer that does nothing)")
    models = [onlooker.parse_event(e) for e in sample_events(calls)]
    for name, package in versions.items():
        cpu = statistics.median([await handle_cost(package, models) for _ in range(REPEATS)])
        print(f"{name}: handle() alone, {calls} events: {cpu:.2f} µs of the caller's CPU per event")
    for name in versions:
        added = med[name][1] - med["null"][1]
        print(
            f"{name}: audit's handle() adds {added:.2f} µs of the execution thread's CPU per call"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--payload-calls", type=int, default=500)
    parser.add_argument("--baseline", metavar="REV", help="also measure the package at REV")
    options = parser.parse_args()
    versions: dict[str, ModuleType] = {}
    if options.baseline:
        versions["before"] = load_baseline(options.baseline)
    versions["after"] = audit
    throughput(versions, options.records)
    payload(versions, options.payload_calls)
    await engine_cost(versions, options.calls)


if __name__ == "__main__":
    anyio.run(main)
