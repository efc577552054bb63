"""``onlooker hook claude-code``: one Claude Code hook payload in, a decision and audit events out.

Runs once per hook event of the agent, in a fresh interpreter, so it imports
only the standard library and onlooker's standard-library modules: no typer,
rich, pydantic, anyio or typing.

Two rules shape it, in this order:

1. Governance is fail-closed and comes first. With ``--deny-commands FILE``,
   a ``PreToolUse`` is judged by the rules before anything is recorded, and
   independently of it: a matching rule answers with Claude Code's JSON that
   denies (or asks about) the call; rules that cannot be read, and a payload
   that cannot be judged (not JSON, no tool input), deny.
2. Recording is fail-safe. Whatever goes wrong (an unknown hook event, a
   missing ``session_id``, an unwritable trail) the hook exits 0, prints
   nothing but the decision on stdout and appends the problem to
   ``<audit dir>/audit.err``.
"""

from __future__ import annotations

import os
import sys
import time

from onlooker._shared import (
    audit_disabled,
    iso_time,
    json_dumps,
    json_loads,
    json_loads_finite,
    lock_file,
    lock_file_within,
)

from ._claude_session import HOOK_EVENTS, RECORDED_EVENTS, Session
from ._claude_values import safe_id

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds here
if TYPE_CHECKING:
    from typing import Any, Final

    from onlooker.plugins.audit._redact import Redactor

    from ._claude_session import Verdict

__all__ = ["HOOK_EVENTS", "MAX_RECORD_CHARS", "main_replay", "run"]

MAX_RECORD_CHARS: Final = 65536
"""The most characters of JSON one event of the hook takes in the trail; larger ones are cut."""
MAX_VALUE_CHARS: Final = 2000
"""Strings longer than this are cut (the audit plugin's default)."""
_STATE: Final = ".claude-hook-state.json"
_PENDING: Final = ".claude-hook-pending.json"
"""A batch on its way to the trail, with the state it leads to: what a process that died
between the two left for the next one to finish (see :func:`_record`)."""
_LOCK: Final = ".claude-hook.lock"
_OPTIONS: Final = ("--audit-dir", "--deny-commands", "--history-db")
_FLAGS: Final = ("--history", "--shorten-paths")
_OPTION_NAMES: Final = frozenset(_OPTIONS + _FLAGS)
_REPLAY_ON: Final = frozenset({"Stop", "StopFailure", "SubagentStop", "SessionEnd"})
LOCK_WAIT_SECONDS: Final = 5.0
"""The longest a hook process waits for its session's lock; then that event is not recorded."""


class _HookError(Exception):
    """A problem recording one payload (goes to audit.err, never to the agent)."""


def run(args: list[str]) -> int:
    """Handle one hook invocation; ``args`` follow ``hook claude-code``. Always returns 0."""
    problems: list[Exception] = []
    options = _parse_args(args, problems)
    audit_dir = options.get("--audit-dir") or _default_audit_dir()
    raw, unreadable = _read_input()
    payload, malformed = _parse(raw) if unreadable is None else (None, unreadable)
    verdict = None
    rules = options.get("--deny-commands")
    if rules is not None:  # first, and whatever happens to the record
        verdict = _govern(payload, malformed, rules)
        if verdict is not None:
            _answer(verdict)
    try:
        if payload is None:
            raise malformed or _HookError("no hook input")
        event = _check(payload)
        if not audit_disabled():
            session = _record(
                audit_dir,
                payload,
                verdict,
                shorten_paths="--shorten-paths" in options,
                problems=problems,
            )
            if "--history" in options and event in _REPLAY_ON:
                _replay_later(audit_dir, session, options.get("--history-db"))
    except Exception as exc:  # fail-safe: the agent never pays for a recording problem
        problems.append(exc)
    for problem in problems:
        _report(audit_dir, problem)
    return 0


def _default_audit_dir() -> str:
    project = os.environ.get("CLAUDE_PROJECT_DIR")
    return os.path.join(project or ".", ".onlooker", "audit")


def _parse_args(args: list[str], problems: list[Exception]) -> dict[str, str]:
    """The options; anything unknown is reported and ignored.

    A ``--deny-commands`` without a value is kept as ``""``: an unreadable
    rule file, which denies (fail-closed). An option's value is never another
    option's name: ``--audit-dir $DIR --deny-commands FILE`` with ``$DIR``
    empty keeps its rules.
    """
    options: dict[str, str] = {}
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        name, eq, value = arg.partition("=")
        if name in _FLAGS and not eq:
            options[name] = ""
            continue
        if name not in _OPTIONS:
            problems.append(_HookError(f"ignored unknown option {arg}"))
            continue
        if not eq and at < len(args) and args[at].partition("=")[0] not in _OPTION_NAMES:
            value = args[at]
            at += 1
        if not value and name != "--deny-commands":
            problems.append(_HookError(f"option {name} needs a value"))
            continue
        options[name] = value
        if name == "--history-db":
            options["--history"] = ""
    return options


def _read_input() -> tuple[bytes, Exception | None]:
    """Stdin's bytes, or why there are none: an input that cannot be read is a bad input."""
    if sys.stdin is None:  # started with stdin closed (<&-)
        return b"", _HookError("cannot read the hook input: stdin is closed")
    try:
        return sys.stdin.buffer.read(), None
    except (OSError, ValueError) as exc:
        return b"", _HookError(f"cannot read the hook input: {exc}")


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, Exception | None]:
    try:
        payload = json_loads_finite(raw)  # NaN and infinities become null, as in events
    except (ValueError, RecursionError) as exc:  # nested too deeply: not JSON we can judge
        # Never the input itself: a malformed payload still carries the agent's secrets.
        return None, _HookError(f"hook input ({len(raw)} bytes) is not JSON: {exc}")
    if not isinstance(payload, dict):
        kind = type(payload).__name__
        return None, _HookError(f"hook input is not a JSON object but {kind}")
    return payload, None


def _check(payload: dict[str, Any]) -> str:
    """The payload's hook event, if the hook records it and the payload names its session."""
    event = payload.get("hook_event_name")
    if event is None:
        raise _HookError("hook input has no hook_event_name")
    if event not in RECORDED_EVENTS:
        shown = event if isinstance(event, str) else type(event).__name__
        recorded = ", ".join(RECORDED_EVENTS)
        raise _HookError(f"unknown hook event {shown[:80]} (recorded: {recorded})")
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        raise _HookError(f"{event} payload has no session_id")
    return str(event)


# -- governance ---------------------------------------------------------------------------


def _govern(
    payload: dict[str, Any] | None, malformed: Exception | None, rules: str
) -> Verdict | None:
    """The deny rules' verdict on this payload; fail-closed: any doubt denies a tool call."""
    try:
        if payload is None:
            return "deny", "malformed-input", f"onlooker denied this call: {malformed}"
        event = payload.get("hook_event_name")
        if not isinstance(event, str):
            return "deny", "malformed-input", "onlooker denied this call: no hook_event_name"
        if event != "PreToolUse":
            return None
        tool, tool_input = payload.get("tool_name"), payload.get("tool_input")
        if not isinstance(tool, str) or not isinstance(tool_input, dict):
            return (
                "deny",
                "malformed-input",
                ("onlooker denied this call: the PreToolUse input has no tool_name or tool_input"),
            )
        from ._rules import RuleError, load_rules

        try:
            verdict = load_rules(rules).decide(tool, tool_input, _str(payload.get("cwd")))
        except RuleError as exc:
            return (
                "deny",
                "unreadable-rules",
                (
                    f"onlooker denied this call: {exc}. Every tool call is denied until the rule "
                    "file is fixed."
                ),
            )
        if verdict is None:
            return None
        return verdict.decision, verdict.label, verdict.reason
    except Exception as exc:  # a bug in the rules must not open the gate
        return "deny", "error", f"onlooker denied this call: its deny rules failed ({exc})"


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _answer(verdict: Verdict) -> None:
    decision, _, reason = verdict
    answer = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }
    if sys.stdout is None:  # started with stdout closed (>&-): nobody to tell
        return
    try:
        sys.stdout.write(json_dumps(answer) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # nobody to tell: Claude Code closed the pipe


# -- recording ----------------------------------------------------------------------------


def _redactor(shorten_paths: bool = False) -> Redactor:
    from onlooker.plugins.audit._redact import Redactor

    return Redactor(shorten_paths=shorten_paths)


_INPUT_NOT_RECORDED: Final = frozenset({"PostToolUse", "PostToolUseFailure"})


def _record(
    audit_dir: str,
    payload: dict[str, Any],
    verdict: Verdict | None,
    *,
    shorten_paths: bool,
    problems: list[Exception],
) -> str:
    """Record ``payload``'s events; returns the session's id as recorded (its directory).

    A problem that costs this event nothing (a pending batch that cannot be read) is
    added to ``problems``; one that does is raised."""
    redactor = _redactor(shorten_paths)
    if payload["hook_event_name"] in _INPUT_NOT_RECORDED:
        # The call's input rides the payload, not the event recorded: read it once (as much
        # of each string as a whole record holds), so a value under a secret key (password),
        # or one a rule redacts (DB_PASSWORD=...), is scrubbed from the result that echoes it.
        redactor.redact(payload.get("tool_input"), max_chars=MAX_RECORD_CHARS)
    session = safe_id(payload["session_id"], redactor.redact_text)  # never a secret on disk
    if session is None:
        raise _HookError("session_id has no usable characters")
    session_dir = os.path.join(audit_dir, session)
    try:
        os.makedirs(session_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise _HookError(f"cannot create the session directory {session_dir}: {exc}") from None
    state_path = os.path.join(session_dir, _STATE)
    # One exclusive lock per session: concurrent hook processes take turns, so
    # seq has no gaps or duplicates and the hash chain stays linear. A holder
    # that never lets go (a hung or stopped process) costs this event, never the agent.
    lock_path = os.path.join(session_dir, _LOCK)
    with os.fdopen(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600), "r+b") as lock:
        if not lock_file_within(lock.fileno(), LOCK_WAIT_SECONDS):
            raise _HookError(
                f"{payload['hook_event_name']} of session {session} not recorded: its lock "
                f"{lock_path} stayed taken for {LOCK_WAIT_SECONDS:g} s (a hook process hung?)"
            )
        # The trail and the state move together: the batch and the state it leads to are
        # saved first, then the batch appended, then the state. A process that died on the
        # way (killed, a full disk) left the pending batch, which is finished here, its
        # records appended once: the next event never writes them again.
        pending_path = os.path.join(session_dir, _PENDING)
        _finish_pending(audit_dir, session, pending_path, state_path, redactor, problems)
        session_state = Session(
            session,
            _load_json(state_path),
            time.time(),
            safe_id=lambda raw: safe_id(raw, redactor.redact_text),
            keep=lambda value: redactor.redact(value, max_chars=MAX_VALUE_CHARS),
        )
        events = session_state.handle(payload, verdict)
        texts = _serialized(events, redactor)
        if texts:
            _save_json(pending_path, {"state": session_state.state, "texts": texts})
            _append(audit_dir, session, texts, redactor)
        _save_json(state_path, session_state.state)
        if texts:
            os.unlink(pending_path)
    return session


def _finish_pending(
    audit_dir: str,
    session: str,
    pending_path: str,
    state_path: str,
    redactor: Redactor,
    problems: list[Exception],
) -> None:
    """Finish the batch a process left pending: append what of it the trail lacks, save its
    state, drop it. A batch this process cannot finish raises, as an unwritable trail does;
    one it cannot read is set aside (in ``problems``), and the session goes on."""
    try:
        pending = _load_json(pending_path)
        if pending is None:
            return
        state, texts = pending.get("state"), pending.get("texts")
        if not isinstance(state, dict) or not isinstance(texts, list):
            raise _HookError(f"hook state {pending_path} is malformed")
        ids = [json_loads(text)["event_id"] if type(text) is str else None for text in texts]
        if None in ids:
            raise _HookError(f"hook state {pending_path} holds a record without an event id")
    except (_HookError, ValueError, TypeError, KeyError) as exc:
        # A crash of the machine can leave it cut short (it is not synced): what it held may
        # or may not be in the trail. The session goes on from the state before it.
        aside = f"{pending_path}.unreadable-{time.time_ns()}"
        os.replace(pending_path, aside)
        problems.append(
            _HookError(
                f"a pending batch of records could not be read ({exc}); kept as {aside}; "
                "the session goes on from the state before it"
            )
        )
        return
    written = _event_ids_in_trail(os.path.join(audit_dir, session))
    missing = [text for text, id_ in zip(texts, ids, strict=True) if id_ not in written]
    _append(audit_dir, session, missing, redactor)
    _save_json(state_path, state)
    os.unlink(pending_path)


def _event_ids_in_trail(session_dir: str) -> set[object]:
    """The event ids a session's trail holds (read only after a process died mid-record)."""
    from onlooker._errors import AuditError
    from onlooker.plugins.audit._verify import iter_records

    try:
        return {record["event"].get("event_id") for _, _, record in iter_records(session_dir)}
    except AuditError as exc:
        if not any(name.startswith("events") for name in os.listdir(session_dir)):
            return set()  # the process died before the session's first record
        raise _HookError(f"cannot read the trail to finish a pending batch: {exc}") from None


def _load_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            state = json_loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise _HookError(f"hook state {path} is unreadable: {exc}") from None
    if not isinstance(state, dict):
        raise _HookError(f"hook state {path} is malformed")
    return state


def _save_json(path: str, value: dict[str, Any]) -> None:
    """Write ``value`` whole or not at all (readable by this user alone, as the trail is)."""
    tmp = path + ".tmp"
    # A lone surrogate (a \ud800 escape in the payload) is written as its escape, as the
    # trail writes it: it reads back as the same string.
    body = json_dumps(value).encode("utf-8", "backslashreplace")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(body)
    os.replace(tmp, path)


def _serialized(events: list[dict[str, Any]], redactor: Redactor) -> list[str]:
    """``events`` redacted, capped and serialized: each record at most :data:`MAX_RECORD_CHARS`."""
    from onlooker.plugins.audit._cap import cap_depth
    from onlooker.plugins.audit._redact import cap_record
    from onlooker.plugins.audit._writer import compact_json

    texts = []
    for event in events:
        # Each value as deep as an event can hold, as the engine's snapshots keep them.
        shallow = {key: cap_depth(value) for key, value in event.items()}
        redacted = redactor.redact_event(shallow, max_chars=MAX_VALUE_CHARS)
        text = compact_json(redacted)
        if len(text) > MAX_RECORD_CHARS:
            text = compact_json(cap_record(redacted, MAX_RECORD_CHARS))
        texts.append(text)
    return texts


def _append(audit_dir: str, session: str, texts: list[str], redactor: Redactor) -> None:
    """Append ``texts`` to the session's trail; raises if any of them did not reach it."""
    if not texts:
        return
    from onlooker.plugins.audit._writer import TrailWriter

    writer = TrailWriter(
        audit_dir,
        session,
        redactor=redactor,
        max_value_chars=MAX_VALUE_CHARS,
        lock_timeout=LOCK_WAIT_SECONDS,
    )
    try:
        writer.write_serialized(texts)
    finally:
        writer.close()


# -- history ------------------------------------------------------------------------------


def _replay_later(audit_dir: str, session: str, url: str | None) -> None:
    """Keep history current: replay this session's trail in a process of its own.

    ``session`` is the session's id as recorded (its directory: safe, never a
    secret, so it can go on a command line). The agent never waits for the
    replay (it imports the database layer); replays are idempotent, and take
    turns on a lock.
    """
    import subprocess

    if url is None:
        url = os.path.join(os.path.dirname(os.path.abspath(audit_dir)), "history.db")
    code = "from onlooker._cli._claude_hook import main_replay; main_replay()"
    subprocess.Popen(  # our own interpreter and module, no shell
        [sys.executable, "-c", code, os.path.abspath(audit_dir), session, url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def main_replay() -> None:
    """The background replay ``--history`` starts: ``AUDIT_DIR SESSION URL`` in ``sys.argv``."""
    audit_dir, session, url = sys.argv[1:4]
    try:
        import anyio

        from onlooker.plugins import audit, history

        from ._common import db_url

        async def replay() -> None:
            async with history.open(db_url(url)) as store:
                await audit.replay(os.path.join(audit_dir, session), store)

        with open(os.path.join(audit_dir, ".history-replay.lock"), "a+b") as lock:
            lock_file(lock.fileno())
            anyio.run(replay)
    except Exception as exc:
        _report(audit_dir, _HookError(f"history replay of {session} into {url} failed: {exc}"))


# -- problems -----------------------------------------------------------------------------


def _report(audit_dir: str, exc: Exception) -> None:
    """One JSON line in ``<audit dir>/audit.err`` (redacted: it never holds a secret either)."""
    message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, _HookError) else str(exc)
    try:
        message = _redactor().redact_text(message)
    except Exception:  # reporting must never fail the hook
        message = "a problem whose message could not be redacted"
    line = json_dumps({"at": iso_time(), "source": "onlooker hook claude-code", "message": message})
    try:
        os.makedirs(audit_dir, mode=0o700, exist_ok=True)
        with open(os.path.join(audit_dir, "audit.err"), "a", encoding="utf-8") as err:
            err.write(line + "\n")
    except OSError:
        # Nowhere to keep it: stderr is all that is left (never stdout, which the agent reads).
        if sys.stderr is None:  # started with stderr closed too
            return
        try:  # noqa: SIM105  # contextlib.suppress would cost an import
            sys.stderr.write(line + "\n")
        except OSError:
            pass
