"""The public API: exactly the documented names, sorted, resolvable, documented, lazy."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import onlooker

# Every name DESIGN.md promises at the top level.
DESIGN_NAMES = {
    "Attribution",
    "EventBus",
    "EventValidationError",
    "ErrorInfo",
    "ExecutionContext",
    "ExecutionEngine",
    "ExecutionEvent",
    "ExecutionFinished",
    "ExecutionNotPausedError",
    "ExecutionResult",
    "ExecutionStarted",
    "HookAbortError",
    "HookAction",
    "HookMatcher",
    "InteractionResolved",
    "InteractionResponse",
    "InteractionStarted",
    "Observer",
    "OnlookerError",
    "PausedExecution",
    "Plugin",
    "PluginContext",
    "PluginError",
    "PostHookResult",
    "PreHookResult",
    "ToolBlockedError",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolError",
    "ToolInputError",
    "ToolUseContext",
    "TrackedExecution",
    "TrackedToolCall",
    "Trigger",
    "UnknownExecutionError",
    "UnknownToolError",
    "attribution",
    "current_context",
    "define_plugin",
    "emit_event",
    "observing",
    "parse_event",
    "tool",
}

# The documented public API: the DESIGN names and the supporting names the docs
# use (type aliases, statistics, the remaining errors, version constant).
PUBLIC = DESIGN_NAMES | {
    "SCHEMA_VERSION",
    "AuditError",
    "BusStatistics",
    "Elicitation",
    "ElicitationHandler",
    "ErrorCause",
    "ExecutionError",
    "ExecutionExpiredError",
    "ExecutionStatus",
    "HistoryError",
    "InteractionMode",
    "InteractionStatus",
    "ObserverLike",
    "Overflow",
    "PostHook",
    "PreHook",
    "Program",
    "SchemaVersionError",
    "Tool",
    "ToolCallStatus",
    "ToolDeclaration",
    "TrackingError",
    "ToolRegistry",
    "current_attribution",
}

ERRORS = {
    "AuditError",
    "EventValidationError",
    "ExecutionError",
    "ExecutionExpiredError",
    "ExecutionNotPausedError",
    "HistoryError",
    "HookAbortError",
    "PluginError",
    "SchemaVersionError",
    "ToolBlockedError",
    "ToolError",
    "ToolInputError",
    "TrackingError",
    "UnknownExecutionError",
    "UnknownToolError",
}


def test_all_is_sorted_without_duplicates() -> None:
    assert onlooker.__all__ == sorted(onlooker.__all__)
    assert len(set(onlooker.__all__)) == len(onlooker.__all__)


def test_all_is_exactly_the_documented_set() -> None:
    assert set(onlooker.__all__) == PUBLIC


def test_every_design_name_is_exported() -> None:
    assert set(onlooker.__all__) >= DESIGN_NAMES


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_name_resolves(name: str) -> None:
    value = getattr(onlooker, name)
    assert value is not None
    assert name in dir(onlooker)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert inspect.getdoc(value), f"{name} has no docstring"


def test_errors_share_one_base() -> None:
    for name in ERRORS:
        error = getattr(onlooker, name)
        assert issubclass(error, onlooker.OnlookerError), name
    assert issubclass(onlooker.OnlookerError, Exception)
    assert issubclass(onlooker.ToolInputError, onlooker.ToolError)
    assert issubclass(onlooker.UnknownToolError, onlooker.ToolError)
    assert issubclass(onlooker.UnknownExecutionError, onlooker.ExecutionError)
    assert issubclass(onlooker.ExecutionNotPausedError, onlooker.ExecutionError)


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = onlooker.no_such_name  # type: ignore[attr-defined]  # the point of the test


def test_testing_helpers_are_public() -> None:
    from onlooker import testing

    assert set(testing.__all__) == {"RecordingObserver", "check_invariants"}


def test_import_is_lazy() -> None:
    code = (
        "import sys, onlooker; "
        "heavy = [m for m in ('onlooker._engine', 'pydantic', 'reactivex', 'anyio') "
        "if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"`import onlooker` imported {out.stdout.strip()}"


def test_each_plugin_loads_as_an_attribute_on_first_use() -> None:
    code = (
        "import sys, onlooker; "
        "before = [m for m in sys.modules if m.startswith('onlooker.plugins.')]; "
        "store = onlooker.plugins.history.plugin; summary = onlooker.plugins.summary.plugin; "
        "print(before, onlooker.plugins.history.__name__, 'onlooker.plugins.metrics' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["[]", "onlooker.plugins.history", "False"]
    with pytest.raises(AttributeError, match="no_such_plugin"):
        _ = onlooker.plugins.no_such_plugin  # type: ignore[attr-defined]  # the point


def test_the_three_views_of_the_public_api_agree() -> None:
    """Each lazily loading package lists its public names once, in its ``_LAZY`` table; the
    TYPE_CHECKING imports (mypy's view) and ``__all__`` are generated from it. A name added
    by hand to one view, or a table edited without ``make exports``, fails here."""
    import ast

    from tools import public_api

    for path in public_api.PACKAGES:
        source = path.read_text()
        assert source == public_api.regenerate(source), f"{path}: run `make exports`"
        table = public_api.read_table(source)
        static: dict[str, str] = {}
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue
            module = node.module or ""
            if module.startswith("_") and module != "_shared":
                static.update((alias.name, module) for alias in node.names)
        assert static == table, path


@pytest.mark.parametrize("package", ["onlooker", "onlooker.plugins.audit"])
def test_every_table_name_loads_from_its_module(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    table: dict[str, str] = module._LAZY
    assert list(module.__all__) == sorted(table)
    for name, home in table.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{home}"), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = module.nope


def test_the_generated_imports_are_sorted_as_ruff_sorts_them(tmp_path: Path) -> None:
    """``make exports`` and ``make lint`` never disagree, whatever names come."""
    from tools import public_api

    names = ["T", "Tool10", "Tool2", "HTTPStatus", "MAX_2", "MAX_10", "helper", "Helper", "a_b"]
    module = tmp_path / "sample.py"
    lines = public_api.import_lines(dict.fromkeys(names, "_things"), indent="")
    module.write_text("\n".join(["from __future__ import annotations", "", *lines, ""]))
    ruff = Path(sys.executable).with_name("ruff")
    checked = subprocess.run(
        [str(ruff), "check", "--isolated", "--select", "I", "--line-length", "100", str(module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout
