"""An asynchronous observer that dies of ``KeyboardInterrupt`` or ``SystemExit``.

asyncio lets those two out of its event loop from whichever task raises them,
so the test runs each case in a subprocess (an escaped one would end pytest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import anyio, onlooker

    EXC = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[sys.argv[2]]

    @onlooker.tool
    async def step(n: int) -> int:
        await anyio.sleep(0.001)
        return n

    async def program(ctx: onlooker.ExecutionContext) -> None:
        for n in range(5):
            await ctx.call("step", n=n)

    async def dies(event: onlooker.ExecutionEvent) -> None:
        if event.kind == "ToolCallStarted":  # before the other workers took a step
            raise EXC

    healthy: list[str] = []

    async def keeper(event: onlooker.ExecutionEvent) -> None:
        healthy.append(event.kind)

    async def main() -> dict[str, object]:
        plugins = [
            onlooker.define_plugin(id="exporter", observer=lambda _: dies),
            onlooker.define_plugin(id="keeper", observer=lambda _: keeper),
        ]
        came_out = None
        try:
            async with onlooker.ExecutionEngine(
                tools=[step], plugins=plugins, shutdown_timeout=5.0
            ) as engine:
                await engine.execute(program)
        except BaseException as exc:
            came_out = type(exc).__name__
        stats = engine.bus.statistics()
        return {
            "came_out": came_out,
            "emitted": stats.emitted,
            "healthy": healthy,
            "dropped_by_observer": stats.dropped_by_observer,
        }

    result: dict[str, object] = {}
    async def run() -> None:
        result.update(await main())
    try:
        anyio.run(run, backend=sys.argv[1])
    except BaseException as exc:
        result["run_raised"] = type(exc).__name__
    print(json.dumps(result))
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit"])
def test_the_other_async_observers_keep_their_events(backend: str, exc: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, backend, exc],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["came_out"] == exc, "it comes out of `async with engine:`, unwrapped"
    assert result["healthy"] == [
        "ExecutionStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "ExecutionFinished",
    ], "a healthy observer loses nothing"
    assert result["emitted"] == 4
    assert "keeper" not in result["dropped_by_observer"], "nor waits out the shutdown timeout"


LATE_SCRIPT = textwrap.dedent(
    """
    import sys
    import anyio, onlooker

    @onlooker.tool
    async def step(n: int) -> int:
        return n

    async def program(ctx: onlooker.ExecutionContext) -> None:
        await ctx.call("step", n=1)

    async def exporter(event: onlooker.ExecutionEvent) -> None:
        if event.kind == "ExecutionFinished":
            with anyio.CancelScope(shield=True):  # a write the close gives up waiting for
                await anyio.sleep(0.5)
                raise KeyboardInterrupt  # where Ctrl-C's handler raises it

    async def main() -> None:
        plugins = [onlooker.define_plugin(id="exporter", observer=lambda _: exporter)]
        async with onlooker.ExecutionEngine(
            tools=[step], plugins=plugins, shutdown_timeout=0.1
        ) as engine:
            await engine.execute(program)
        await anyio.sleep(1.0)
        print("went on")

    try:
        anyio.run(main, backend=sys.argv[1])
    except KeyboardInterrupt:
        print("interrupted")
    """
)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_one_that_dies_after_the_close_gave_up_on_it_is_not_swallowed(backend: str) -> None:
    """No close is left to raise it: the worker does, as before."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", LATE_SCRIPT, backend],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.stdout.strip().splitlines()[-1] == "interrupted", done.stdout + done.stderr
