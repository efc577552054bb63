"""What an adapter adds per tool call, against the framework's own cost, in one run.

For PydanticAI (``bench/_integrations_pydantic_ai.py``) and LangGraph
(``bench/_integrations_langgraph.py``): a scripted agent on the framework's
own test model makes tool calls without and with the onlooker adapter
(an engine with no plugins), in A B B A order, in one process. Times are
the process's CPU time (``time.process_time``): both frameworks run
everything on the event loop's thread, and CPU time does not count what
other processes on a shared machine take. Printed: µs per tool call
without and with, the added µs, and the added share of the framework's
own per-call cost (goal: ≤ 10 %).

Run: ``.venv/bin/python bench/integrations.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import asyncio

# Beside this file: Python puts a script's own directory first on sys.path.
import _integrations_langgraph
import _integrations_pydantic_ai


def report(name: str, without: float, with_adapter: float) -> None:
    added = with_adapter - without
    print(
        f"{name:<11} {without:10.1f} µs/call  {with_adapter:10.1f} µs/call  "
        f"added {added:8.1f} µs  = {added / without:6.1%} of the framework's own  target <= 10%"
    )


async def main(calls: int) -> None:
    print(f"tool calls per measurement: {calls}")
    print(f"{'framework':<11} {'without':>17}  {'with adapter':>17}")
    report("PydanticAI", *await _integrations_pydantic_ai.measure(calls))
    report("LangGraph", *await _integrations_langgraph.measure(calls))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
