"""The summary plugin: what each execution did, in one small model.

>>> summaries = summary.plugin()
>>> async with onlooker.ExecutionEngine(tools=[...], plugins=[summaries]) as engine:
...     result = await engine.execute(program)
...     report = engine.extension(summaries).get(result.execution_id)
>>> report.files_modified, report.success_rate, report.to_xml()

A synchronous observer folds each event into a small per-execution record;
``SummaryStore.get`` builds the frozen :class:`ExecutionSummary` on demand,
so it is partial while the execution runs and final once it has finished.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, Final, Literal, assert_never

from pydantic import (
    BaseModel,
    Field,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

import onlooker
from onlooker import (
    ErrorInfo,
    ExecutionEvent,
    ExecutionFinished,
    ExecutionStarted,
    InteractionResolved,
    InteractionStarted,
    PluginContext,
    ToolCallFinished,
    ToolCallStarted,
)
from onlooker._shared import truncate, without_surrogates

__all__ = [
    "DEFAULT_KEEP",
    "MAX_MESSAGE_CHARS",
    "ExecutionSummary",
    "SummaryStore",
    "ToolCallError",
    "plugin",
]

DEFAULT_KEEP: Final = 10_000
"""How many finished root executions (with their children) a store keeps by default."""
MAX_MESSAGE_CHARS: Final = 2_000
"""An error message longer than this is kept cut, with ``…[truncated N chars]``: a summary
is read whole (often by a model), and the store keeps thousands."""

SummaryStatus = Literal["running", "completed", "failed", "cancelled", "expired"]

_NOT_XML: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot carry (control characters, lone surrogates)."""
_ROLES: Final = ("reads", "writes", "edits")


def _without_surrogates(value: Any) -> Any:
    """``value`` (JSON-shaped) with every lone surrogate in its strings as U+FFFD."""
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    return value


class ToolCallError(BaseModel, frozen=True, extra="forbid"):
    """One tool call that did not succeed: which tool, how it ended, and why."""

    tool: str
    status: Literal["failed", "blocked", "cancelled"]
    type: str
    """The error's class name (``ToolBlockedError``, ``ValueError``, ...)."""
    message: str


class ExecutionSummary(BaseModel, frozen=True, extra="forbid"):
    """What one execution did: files, tools, errors, and its children's summaries.

    ``status`` is ``"running"`` until the execution finishes; ``duration_ms``
    is then the time so far. Files come from the tools' ``reads`` /
    ``writes`` / ``edits`` declarations, counted for calls that completed,
    sorted and de-duplicated. ``tool_calls`` and ``tool_usage`` count
    finished calls; ``success_rate`` is the share that ended ``completed``
    or ``skipped`` (1.0 with no calls); the others are in ``errors``.
    """

    execution_id: str
    program: str
    status: SummaryStatus
    duration_ms: float
    error: ErrorInfo | None = None
    """Why the execution failed, when it did."""
    files_read: list[str] = Field(default_factory=list)
    files_written: list[str] = Field(default_factory=list)
    files_edited: list[str] = Field(default_factory=list)
    files_modified: list[str] = Field(default_factory=list)
    """The union of ``files_written`` and ``files_edited``."""
    tool_usage: dict[str, int] = {}
    """Tool name -> number of finished calls, sorted by name."""
    tool_calls: int = 0
    success_rate: float = 1.0
    errors: list[ToolCallError] = Field(default_factory=list)
    children: list[ExecutionSummary] = Field(default_factory=list)
    """The summaries of the executions this one spawned, in the order they started."""

    @model_serializer(mode="wrap")
    def _json_safe(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """In JSON, a lone surrogate (an undecodable file name) becomes U+FFFD, as in XML:
        JSON text must be valid Unicode, and pydantic refuses to write one."""
        data = handler(self)
        return _without_surrogates(data) if info.mode_is_json() else data

    def to_xml(self, *, indent: bool = False) -> str:
        """This summary as well-formed XML (a string without an XML declaration).

        ``indent=True`` puts each element on its own line (values are unaffected:
        they all live in attributes).

        Every value sits in an attribute, escaped, so ``<``, ``&``, quotes,
        newlines and non-ASCII file names read back unchanged through any XML
        parser. Characters XML 1.0 cannot carry at all (NUL and the other
        control characters, lone surrogates) become U+FFFD.
        """
        root = self._element()
        if indent:
            ET.indent(root)
        return ET.tostring(root, encoding="unicode")

    def _element(self) -> ET.Element:
        root = ET.Element(
            "execution",
            {
                "id": _xml(self.execution_id),
                "program": _xml(self.program),
                "status": self.status,
                "duration_ms": f"{self.duration_ms:.3f}",
                "tool_calls": str(self.tool_calls),
                "success_rate": f"{self.success_rate:.4f}",
            },
        )
        if self.error is not None:
            ET.SubElement(
                root, "error", type=_xml(self.error.type), message=_xml(self.error.message)
            )
        for tag in ("files_read", "files_written", "files_edited", "files_modified"):
            group = ET.SubElement(root, tag)
            for path in getattr(self, tag):
                ET.SubElement(group, "file", path=_xml(path))
        usage = ET.SubElement(root, "tool_usage")
        for name, count in self.tool_usage.items():
            ET.SubElement(usage, "tool", name=_xml(name), count=str(count))
        errors = ET.SubElement(root, "tool_errors")
        for item in self.errors:
            ET.SubElement(
                errors,
                "tool_error",
                tool=_xml(item.tool),
                status=item.status,
                type=_xml(item.type),
                message=_xml(item.message),
            )
        children = ET.SubElement(root, "children")
        children.extend(child._element() for child in self.children)
        return root


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


class _Record:
    """What the observer keeps per execution (mutable, cheap to update)."""

    __slots__ = (
        "at",
        "children",
        "duration_ms",
        "error",
        "errors",
        "execution_id",
        "files",
        "in_flight",
        "parent",
        "program",
        "status",
        "tool_calls",
        "usage",
    )

    def __init__(self, event: ExecutionStarted) -> None:
        self.execution_id = event.execution_id
        self.program = event.program
        self.at = event.at
        self.parent = event.attribution.parent_execution_id
        self.status: SummaryStatus = "running"
        self.duration_ms: float | None = None
        self.error: ErrorInfo | None = None
        self.children: list[str] = []
        self.usage: dict[str, int] = {}
        self.tool_calls = 0
        self.errors: list[ToolCallError] = []
        self.files: dict[str, set[str]] = {role: set() for role in _ROLES}
        self.in_flight: dict[str, list[tuple[str, str]]] = {}
        """tool call id -> (role, path) it will count if it completes."""


class SummaryStore:
    """The summary plugin's extension: ``get(execution_id)`` for any execution it saw.

    It keeps the last ``keep`` finished root executions (each with its
    children) and every running one.
    """

    def __init__(self, context: PluginContext, *, keep: int = DEFAULT_KEEP) -> None:
        _check_keep(keep)
        self._keep = keep
        self._records: dict[str, _Record] = {}
        self._finished_roots: OrderedDict[str, None] = OrderedDict()
        self._tools = context.tools
        self._file_args: dict[str, tuple[tuple[str, str], ...]] = {}

    def get(self, execution_id: str) -> ExecutionSummary | None:
        """The summary of ``execution_id`` (partial while it runs), or ``None`` if unknown."""
        record = self._records.get(execution_id)
        return None if record is None else self._summary(record)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._records

    def __len__(self) -> int:
        return len(self._records)

    def handle(self, event: ExecutionEvent) -> None:
        """Fold one event into its execution's record (the plugin's sync observer)."""
        match event:
            case ToolCallFinished():
                self._finished_call(event)
            case ToolCallStarted():
                self._started_call(event)
            case ExecutionStarted():
                if event.execution_id in self._records:  # an id used again: a new execution
                    self._finished_roots.pop(event.execution_id, None)
                    self._forget(event.execution_id)  # and the old one's children
                record = _Record(event)
                self._records[event.execution_id] = record
                parent = self._records.get(record.parent) if record.parent else None
                if parent is not None:
                    parent.children.append(event.execution_id)
            case ExecutionFinished():
                self._finished_execution(event)
            case InteractionStarted() | InteractionResolved():
                pass  # a summary counts what was done, not what was asked
            case _:
                assert_never(event)

    def _started_call(self, event: ToolCallStarted) -> None:
        roles = self._file_roles(event.tool)
        if roles:
            record = self._records.get(event.execution_id)
            if record is not None:
                record.in_flight[event.tool_call_id] = [
                    (role, path) for role, arg in roles for path in _paths(event.args.get(arg))
                ]

    def _finished_execution(self, event: ExecutionFinished) -> None:
        record = self._records.get(event.execution_id)
        if record is None:
            return
        record.status = event.status
        record.duration_ms = event.duration_ms
        error = event.error
        if error is not None and len(error.message) > MAX_MESSAGE_CHARS:
            error = error.model_copy(update={"message": truncate(error.message, MAX_MESSAGE_CHARS)})
        record.error = error
        record.in_flight.clear()
        if record.parent is None or record.parent not in self._records:
            self._finished_roots[record.execution_id] = None
            while len(self._finished_roots) > self._keep:
                oldest, _ = self._finished_roots.popitem(last=False)
                self._forget(oldest)

    def _file_roles(self, tool: str) -> tuple[tuple[str, str], ...]:
        """(role, argument) pairs of a tool's file arguments; foreign tools may be declared late."""
        roles = self._file_args.get(tool)
        if roles is None:
            declared = self._tools.declaration(tool)
            if declared is None:
                return ()  # not cached: a declaration may still come
            roles = tuple(
                (role, arg) for role in _ROLES if (arg := getattr(declared, role)) is not None
            )
            self._file_args[tool] = roles
        return roles

    def _finished_call(self, event: ToolCallFinished) -> None:
        record = self._records.get(event.execution_id)
        if record is None:
            return
        record.tool_calls += 1
        record.usage[event.tool] = record.usage.get(event.tool, 0) + 1
        files = record.in_flight.pop(event.tool_call_id, None)
        status = event.status
        if status == "completed":
            if files:
                for role, path in files:
                    record.files[role].add(path)
        elif status != "skipped":
            error = event.error
            record.errors.append(
                ToolCallError(
                    tool=event.tool,
                    status=status,
                    type=error.type if error is not None else "unknown",
                    message=truncate(error.message, MAX_MESSAGE_CHARS) if error is not None else "",
                )
            )

    def _forget(self, execution_id: str) -> None:
        record = self._records.pop(execution_id, None)
        if record is not None:
            for child in record.children:
                self._forget(child)

    def _summary(self, record: _Record) -> ExecutionSummary:
        written = record.files["writes"]
        edited = record.files["edits"]
        calls = record.tool_calls
        if record.duration_ms is None:
            duration = (datetime.now(UTC) - record.at).total_seconds() * 1000.0
        else:
            duration = record.duration_ms
        return ExecutionSummary(
            execution_id=record.execution_id,
            program=record.program,
            status=record.status,
            duration_ms=max(duration, 0.0),
            error=record.error,
            files_read=sorted(record.files["reads"]),
            files_written=sorted(written),
            files_edited=sorted(edited),
            files_modified=sorted(written | edited),
            tool_usage=dict(sorted(record.usage.items())),
            tool_calls=calls,
            success_rate=1.0 if calls == 0 else (calls - len(record.errors)) / calls,
            errors=list(record.errors),
            children=[
                self._summary(self._records[child])
                for child in record.children
                if child in self._records
            ],
        )


def _paths(value: JsonValue) -> list[str]:
    """The paths a declared argument names: a string, or the strings of a list.

    Anything else is no path (a foreign tool's ``True``, ``5`` or object,
    which ``str()`` would have turned into a file named ``True``).
    """
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str) and item]


def plugin(*, keep: int = DEFAULT_KEEP) -> onlooker.Plugin[SummaryStore]:
    """The summary plugin (id ``"summary"``); its extension is a :class:`SummaryStore`.

    ``keep`` bounds memory: the number of finished root executions whose
    summaries (children included) stay available: a positive int, else a
    ``ValueError`` here, not when the engine starts.
    """
    _check_keep(keep)
    return onlooker.define_plugin(
        id="summary",
        extension=lambda context: SummaryStore(context, keep=keep),
        observer=lambda store: store,
    )


def _check_keep(keep: int) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be a positive int, not {keep!r}")
