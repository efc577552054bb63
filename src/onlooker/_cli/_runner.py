"""What ``onlooker run`` does once its arguments are checked: the engine, the plugins, the output."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout, suppress
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import typer
from rich.console import Console
from rich.text import Text

import onlooker
from onlooker import Elicitation, ErrorInfo, ExecutionEvent, InteractionResponse
from onlooker._events import snapshot
from onlooker._results import error_info
from onlooker._shared import truncate
from onlooker.plugins.audit import Redactor
from onlooker.plugins.audit._events import json_form
from onlooker.plugins.history._db import mask_url
from onlooker.plugins.summary import ExecutionSummary

from ._common import escape, printable, stderr, stdout
from ._program import LoadedProgram
from ._prompt import GaveUp, StdinLines, ask
from ._render import event_line, execution_tree, summary_table
from ._stopping import Stop, Stopped

__all__ = ["run_program"]

_SHOWN: Final = 2000  # characters of a result the tree shows (as the audit trail keeps)

T = TypeVar("T")


async def run_program(
    program: LoadedProgram,
    url: str | None,
    audit_dir: Path | None,
    session: str | None,
    content: dict[str, Any] | None,
    interactive: bool,
    quiet: bool,
    as_json: bool = False,
    stop: Stop | None = None,
) -> str:
    """Run ``function`` with every built-in plugin, print its tree and summary; its status."""
    from onlooker.plugins import audit, history, metrics, summary

    summaries = summary.plugin()
    plugins: list[onlooker.Plugin[Any]] = [history.plugin(url), metrics.plugin(), summaries]
    # What the terminal shows goes through the stores' redaction policy: a log of it keeps
    # no more secrets than history and the trail do.
    redactor = Redactor()
    trail = None
    if audit_dir is not None:
        trail = audit.plugin(directory=audit_dir, session_id=session)
        plugins.append(trail)
    if not quiet:
        plugins.append(
            onlooker.define_plugin(
                id="cli-progress", observer=lambda _: _Progress(stderr, redactor)
            )
        )

    lines = StdinLines() if interactive else None  # one reader: it may read ahead

    async def answer(question: Elicitation) -> InteractionResponse:
        if content is not None:
            return InteractionResponse.accept(content)
        if lines is not None:
            return await _in_daemon_thread(lambda: _ask_or_decline(question, lines))
        return InteractionResponse.decline()

    trigger = onlooker.Trigger(kind="cli", metadata={"program": program.name})
    owner = os.environ.get("USER") or os.environ.get("USERNAME")
    # With --json, stdout holds the one JSON object: what the program prints goes to stderr.
    printed = _stdout_to_stderr() if as_json else nullcontext()
    async with onlooker.ExecutionEngine(tools=program.tools, plugins=plugins) as engine:
        started: list[str] = []  # the run's execution id, from its first event
        engine.bus.subscribe(
            lambda event: None if started else started.append(event.execution_id), name="cli-root"
        )
        with anyio.CancelScope() as signalled, printed:
            if stop is not None:  # the run ends on Ctrl-C, even if the program catches it
                loop = asyncio.get_running_loop()
                stop.arm(lambda: loop.call_soon_threadsafe(signalled.cancel))
            try:
                result = await _executed(engine, program, answer, trigger, owner, started)
            finally:
                if stop is not None:
                    stop.arm(None)
        if signalled.cancelled_caught:
            assert stop is not None
            raise Stopped(stop.signum)
        report = engine.extension(summaries).get(result.execution_id)
        if report is not None:
            report = _redacted(report, redactor)
        trail_path = None
        if trail is not None and engine.extension(trail).enabled:
            trail_path = engine.extension(trail).session_dir
    value = redactor.redact(snapshot(result.value))  # as the event holds it: any value prints
    if as_json:
        _print_json(result, value, redactor, report, url, trail_path)
        return result.status
    if not quiet:
        stderr.print()  # the progress lines end; stdout holds the tree from its first line
    await _print_tree(result, value, report, url, trail_path)
    return result.status


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """``sys.stdout`` and file descriptor 1 (what a subprocess inherits) go to stderr."""
    sys.stdout.flush()
    saved: int | None = None
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # a standard stream closed: Python's own redirection only
        if saved is not None:
            os.close(saved)
            saved = None
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _redacted(report: ExecutionSummary, redactor: Redactor) -> ExecutionSummary:
    """The summary with its texts (errors, paths) redacted; its counts and names as they are."""
    text = redactor.redact_text
    return report.model_copy(
        update={
            "error": _redacted_error(report.error, redactor),
            "errors": [e.model_copy(update={"message": text(e.message)}) for e in report.errors],
            "children": [_redacted(child, redactor) for child in report.children],
        }
        | {
            field: [text(path) for path in getattr(report, field)]
            for field in ("files_read", "files_written", "files_edited", "files_modified")
        }
    )


def _redacted_error(error: ErrorInfo | None, redactor: Redactor) -> ErrorInfo | None:
    return (
        None
        if error is None
        else error.model_copy(update={"message": redactor.redact_text(error.message)})
    )


async def _executed(
    engine: onlooker.ExecutionEngine,
    program: LoadedProgram,
    answer: Callable[[Elicitation], Awaitable[InteractionResponse]],
    trigger: onlooker.Trigger,
    owner: str | None,
    started: list[str],
) -> onlooker.ExecutionResult[Any]:
    """The program's result; for one that raised a ``BaseException`` of its own (``sys.exit``),
    which the engine records (``cancelled``) and passes on, the result its events say."""
    began = time.perf_counter()
    try:
        return await engine.execute(
            program.function, on_elicitation=answer, trigger=trigger, owner=owner
        )
    except BaseException as exc:
        if not started or isinstance(exc, KeyboardInterrupt | anyio.get_cancelled_exc_class()):
            raise  # Ctrl-C, or the engine's own failure: as before
        duration = (time.perf_counter() - began) * 1000
        return onlooker.ExecutionResult(started[0], "cancelled", None, error_info(exc), duration)


async def _print_tree(
    result: onlooker.ExecutionResult[Any],
    value: Any,
    report: ExecutionSummary | None,
    url: str | None,
    trail_path: Path | None,
) -> None:
    """The tree (read back from history), the summary, the result, and where to look next."""
    from onlooker.plugins import history

    try:
        async with history.open(url) as store:
            tree = await store.get_execution(result.execution_id)
    except onlooker.OnlookerError as exc:  # lost during the run: what history kept is spilled
        tree = None
        stderr.print(
            f"[red]error[/]: the tree cannot be read back: {escape(str(exc))}; "
            "what history could not write waits in its spill file (see above)"
        )
    if tree is not None:
        stdout.print(execution_tree(tree))
    if report is not None:
        stdout.print()
        stdout.print(summary_table(report))
    # The result and the paths are the program's and the user's text, never markup.
    if result.status == "completed":
        # Cut as the trail cuts a value.
        shown = json.dumps(value, ensure_ascii=False)
        line = printable(truncate(shown, _SHOWN))
        stdout.print(Text.assemble("\n", ("result", "green"), ": ", line))
    stdout.print(
        f"\nhistory: onlooker history show {result.execution_id}"
        + (f" --db {shlex.quote(mask_url(url))}" if url else ""),  # no password on screen
        markup=False,
        soft_wrap=True,  # a command to copy: never broken across lines
    )
    if trail_path is not None and _trail_written(trail_path):
        stdout.print(
            f"audit:   onlooker audit verify {shlex.quote(str(trail_path))}",
            markup=False,
            soft_wrap=True,
        )
    elif trail_path is not None:  # the errors above said why
        stdout.print("audit:   no trail was written")


def _trail_written(session_dir: Path) -> bool:
    return any(file.is_file() for file in session_dir.glob("events*.jsonl"))


def _ask_or_decline(question: Elicitation, lines: StdinLines) -> InteractionResponse:
    """Ask in the terminal; stdin at its end (a pipe, a closed terminal) declines."""
    try:
        return ask(question, stderr, lines)
    except EOFError:
        stderr.print("[yellow]no answer (end of input): declined[/]")
        return InteractionResponse.decline()
    except GaveUp:  # the program stopped waiting for this one: nobody reads this answer
        return InteractionResponse.decline()


async def _in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a daemon thread of its own: a person who never answers does not hold
    the process at exit (Ctrl-C at a prompt cancels the wait and the run, and the
    interpreter does not wait for the thread, as it would for a worker thread)."""
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[Callable[[], T]] = []

    def work() -> None:
        try:
            value = fn()
            outcome.append(lambda: value)
        except BaseException as exc:
            error = exc
            outcome.append(lambda: _raise(error))
        with suppress(RuntimeError):  # the run is over: nobody waits any more
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name="onlooker run: prompt", daemon=True).start()
    await done.wait()
    return outcome[0]()


def _raise(error: BaseException) -> NoReturn:
    raise error


def _print_json(
    result: onlooker.ExecutionResult[Any],
    value: Any,
    redactor: Redactor,
    report: ExecutionSummary | None,
    url: str | None,
    trail_path: Path | None,
) -> None:
    if trail_path is not None and not _trail_written(trail_path):
        trail_path = None  # never written: nothing there to verify
    error = _redacted_error(result.error, redactor)
    outcome = {
        "execution_id": result.execution_id,
        "status": result.status,
        "result": value,  # as the event holds it: NaN and Infinity are null
        "error": None if error is None else error.model_dump(mode="json"),
        "summary": None if report is None else report.model_dump(mode="json"),
        "history": mask_url(url) if url else str(Path(".onlooker/history.db").resolve()),
        "audit": None if trail_path is None else str(trail_path),
    }
    typer.echo(json.dumps(outcome, default=repr))


class _Progress:
    """Prints one line per event while the program runs."""

    def __init__(self, console: Console, redactor: Redactor) -> None:
        self.console = console
        self.redactor = redactor

    def handle(self, event: ExecutionEvent) -> None:
        # (not model_dump(mode="json"): it refuses a lone surrogate in a key of the arguments)
        form = json_form(event)
        redacted = self.redactor.redact_event(form)
        # (redact_event gives its argument back when nothing needed redacting)
        shown = event if redacted is form else onlooker.parse_event(redacted)
        self.console.print(event_line(shown), soft_wrap=True)  # one line, however long
