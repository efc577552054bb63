"""Audit trail throughput and its cost on the hot path, measured in one run.

(1) records/s through ``TrailWriter.write`` (redact, serialize, chain,
    append) for each fsync mode, in batches as the plugin's thread makes them;
(2) records/s through the plugin's own path (pydantic events, redaction on the
    model, ``model_dump_json``) with ``fsync="never"``;
(3) per tool call through the engine, audit off vs on: wall time, and the CPU
    time of the execution's own thread (the hot path: the writer thread's work
    is excluded), plus the time to drain the trail at close.

Targets: >= 200,000 records/s with ``never``, >= 20,000/s with ``batch``,
audit adds <= 3 µs per tool call on the hot path.

Run: ``.venv/bin/python bench/audit.py [--records N] [--calls N]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import onlooker
from onlooker.plugins import audit
from onlooker.plugins.audit import TrailWriter

REPEATS = 5
BATCH = 256


@onlooker.tool
async def read_file(path: str, limit: int = 100) -> str:
    """The tool under measurement: as cheap as a tool can be."""
    return "x"


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
            "at": "2025-01-01T12:00:00.000000Z",
            "tool_call_id": f"3f2a9c1b7d00-c{i // 2}",
            "tool": "read_file",
        }
        if i % 2 == 0:
            events.append({**base, "kind": "ToolCallStarted", "args": {"path": "src/a.py"}})
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


def writer_rate(fsync: audit.FsyncMode, records: int) -> float:
    events = sample_events(records)
    with tempfile.TemporaryDirectory() as directory:
        writer = TrailWriter(directory, "bench", fsync=fsync, max_bytes=1 << 30)
        began = time.perf_counter()
        for start in range(0, records, BATCH):
            writer.write(events[start : start + BATCH])
        elapsed = time.perf_counter() - began
        writer.close()
    return records / elapsed


def plugin_path_rate(records: int) -> float:
    """The plugin thread's own work per event: model-level redaction, model_dump_json, chain."""
    models = [onlooker.parse_event(e) for e in sample_events(records)]
    with tempfile.TemporaryDirectory() as directory:
        trail = audit.AuditTrail(
            Path(directory),
            "bench",
            max_bytes=1 << 30,
            keep=1,
            fsync="never",
            redactor=None,
            max_value_chars=2000,
        )
        began = time.perf_counter()
        for start in range(0, records, BATCH):
            texts = [trail._event_json(e) for e in models[start : start + BATCH]]
            trail._writer.write_serialized(texts)
        elapsed = time.perf_counter() - began
        trail._writer.close()
    return records / elapsed


async def per_call(calls: int, with_audit: bool, directory: str) -> tuple[float, float, float]:
    """µs per tool call: wall, the execution thread's CPU, and wall including the drain."""
    plugins: list[onlooker.Plugin[Any]] = []
    if with_audit:
        plugins.append(audit.plugin(directory=directory, fsync="batch"))
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--calls", type=int, default=20_000)
    options = parser.parse_args()

    print(f"records per measurement: {options.records}, batches of {BATCH}, median of {REPEATS}")
    rates = {}
    for mode in ("never", "batch", "always"):
        count = options.records if mode != "always" else max(options.records // 25, 500)
        rates[mode] = statistics.median(writer_rate(mode, count) for _ in range(REPEATS))
        print(f"TrailWriter.write, fsync={mode:<6}  {rates[mode]:>10,.0f} records/s")
    plugin_rate = statistics.median(plugin_path_rate(options.records) for _ in range(REPEATS))
    print(f"plugin thread path, fsync=never  {plugin_rate:>10,.0f} records/s")
    print(f"target never >= 200,000/s: {'met' if rates['never'] >= 200_000 else 'NOT met'}")
    print(f"target batch >=  20,000/s: {'met' if rates['batch'] >= 20_000 else 'NOT met'}")

    print(f"\ntool calls per measurement: {options.calls}, median of {REPEATS}, interleaved")
    off: list[tuple[float, float, float]] = []
    on: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(REPEATS):
            off.append(await per_call(options.calls, False, directory))
            on.append(await per_call(options.calls, True, directory))
    med = [[statistics.median(run[i] for run in runs) for i in range(3)] for runs in (off, on)]
    print("                                  audit off   audit on   added")
    labels = ("wall, in the loop", "CPU of the execution thread", "wall, with the drain at close")
    for i, label in enumerate(labels):
        print(
            f"{label:<32} {med[0][i]:8.2f}   {med[1][i]:8.2f}   {med[1][i] - med[0][i]:6.2f} µs/call"
        )
    added = med[1][1] - med[0][1]
    print(f"target <= 3 µs per call on the hot path: {'met' if added <= 3 else 'NOT met'}")


if __name__ == "__main__":
    anyio.run(main)
