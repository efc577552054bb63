"""A tamper-evident audit trail: every event, redacted, hash-chained, in JSONL files.

>>> trail_plugin = audit.plugin(directory=".onlooker/audit")
>>> async with onlooker.ExecutionEngine(tools=..., plugins=[trail_plugin]) as engine:
...     await engine.execute(program)
...     trail = engine.extension(trail_plugin)
>>> audit.verify(trail.session_dir).ok
True

Names load on first use (PEP 562): ``onlooker.plugins.audit._writer`` and
``._redact`` import only the standard library, so the coding-agent hook can
append to a trail without paying for pydantic or anyio. See docs/audit.md.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `import onlooker.plugins.audit` must stay cheap for the hook
if TYPE_CHECKING:
    from typing import Any

    # --- generated from _LAZY by tools/public_api.py (make exports); do not edit ---
    from ._plugin import DISABLE_VARIABLE, AuditStatistics, AuditTrail, plugin
    from ._read import EventSink, replay, tail
    from ._redact import DEFAULT_RULES, DEFAULT_SECRET_KEYS, Redactor, Rule
    from ._types import FsyncMode
    from ._verify import BadLine, Reason, VerifyReport, verify
    from ._writer import GENESIS, RECORD_VERSION, AuditWriteError, TrailWriter, WriterStatistics
    # --- end of generated code ---

_LAZY: dict[str, str] = {
    "AuditStatistics": "_plugin",
    "AuditTrail": "_plugin",
    "AuditWriteError": "_writer",
    "BadLine": "_verify",
    "DEFAULT_RULES": "_redact",
    "DEFAULT_SECRET_KEYS": "_redact",
    "DISABLE_VARIABLE": "_plugin",
    "EventSink": "_read",
    "FsyncMode": "_types",
    "GENESIS": "_writer",
    "RECORD_VERSION": "_writer",
    "Reason": "_verify",
    "Redactor": "_redact",
    "Rule": "_redact",
    "TrailWriter": "_writer",
    "VerifyReport": "_verify",
    "WriterStatistics": "_writer",
    "plugin": "_plugin",
    "replay": "_read",
    "tail": "_read",
    "verify": "_verify",
}


if not TYPE_CHECKING:  # hidden from mypy, so a misspelt name is an error, not Any

    def __getattr__(name: str) -> Any:
        from ..._shared import lazy_attribute

        return lazy_attribute(__name__, _LAZY, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# --- generated from _LAZY by tools/public_api.py (make exports); do not edit ---
__all__ = [  # noqa: RUF022  # plainly sorted, one name per line
    "AuditStatistics",
    "AuditTrail",
    "AuditWriteError",
    "BadLine",
    "DEFAULT_RULES",
    "DEFAULT_SECRET_KEYS",
    "DISABLE_VARIABLE",
    "EventSink",
    "FsyncMode",
    "GENESIS",
    "RECORD_VERSION",
    "Reason",
    "Redactor",
    "Rule",
    "TrailWriter",
    "VerifyReport",
    "WriterStatistics",
    "plugin",
    "replay",
    "tail",
    "verify",
]
# --- end of generated code ---
