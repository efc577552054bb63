"""Per-call cost of tool hooks: one matching no-op pre-hook and post-hook vs none.

Both variants run in the same process, interleaved, through ``ctx.call`` on
the same cheap tool; the figure is the difference of the medians, in µs per
call (target: at most +3 µs). A third variant adds ten non-matching matchers
to show that matchers which do not apply cost nothing per call (plans are
cached per tool and phase).

Run: ``.venv/bin/python bench/hooks.py [--calls N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio

import onlooker
from onlooker import ExecutionContext, HookMatcher, ToolUseContext

TARGET_US = 3.0


@onlooker.tool
async def add(a: int, b: int) -> int:
    """The tool under measurement: as cheap as a tool can be."""
    return a + b


def noop_pre(use: ToolUseContext) -> None:
    """A matching pre-hook that lets every call through."""


def noop_post(use: ToolUseContext, output: Any) -> None:
    """A matching post-hook that leaves every output alone."""


async def per_call_us(calls: int, hooks: list[HookMatcher]) -> float:
    """µs per ``ctx.call`` over ``calls`` calls in one execution."""
    timing: list[float] = []

    async def program(ctx: ExecutionContext) -> None:
        began = time.perf_counter()
        for i in range(calls):
            await ctx.call("add", a=i, b=1)
        timing.append((time.perf_counter() - began) / calls * 1e6)

    async with onlooker.ExecutionEngine(tools=[add], hooks=hooks) as engine:
        result = await engine.execute(program)
    assert result.status == "completed", result.error
    return timing[0]


async def main(calls: int, repeats: int) -> None:
    variants: dict[str, list[HookMatcher]] = {
        "no hooks": [],
        "no-op pre + post": [HookMatcher(pattern="add", pre=[noop_pre], post=[noop_post])],
        "10 non-matching": [HookMatcher(pattern=f"other{i}", pre=[noop_pre]) for i in range(10)],
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    await per_call_us(calls // 10, [])  # warm up
    for _ in range(repeats):  # interleaved, so drift hits every variant alike
        for name, hooks in variants.items():
            samples[name].append(await per_call_us(calls, hooks))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["no hooks"]
    print(f"{calls} calls x {repeats} repeats, median µs per ctx.call")
    for name, value in medians.items():
        print(f"  {name:<18} {value:7.2f} µs   {value - base:+6.2f} µs   x{value / base:.2f}")
    overhead = medians["no-op pre + post"] - base
    verdict = "within" if overhead <= TARGET_US else "OVER"
    print(f"hook overhead: {overhead:+.2f} µs per call ({verdict} the +{TARGET_US:.0f} µs target)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    anyio.run(main, args.calls, args.repeats)
