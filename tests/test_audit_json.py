"""The audit trail's bytes without the ``json`` module: what the stdlib writes, byte for byte.

The writer serializes records with ``onlooker._shared.json_dumps`` (CPython's C
encoder, without importing ``json``) and checks session ids with
``_shared.is_session_id`` (without ``re``). The hash chain covers the exact
bytes of every record, so these must be what ``json`` and the documented
pattern give, or a trail written before would stop matching one written after.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onlooker
from onlooker import _shared
from onlooker.plugins import audit
from onlooker.plugins.audit import GENESIS, Redactor, TrailWriter, _writer
from test_cli_hook_support import bash, hook_process, post

STDLIB = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""What the writer used before it stopped importing ``json``."""

AT = "2025-01-02T03:04:05.678901Z"

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(),  # nan and infinities too: json writes NaN / Infinity
    st.text(),  # lone surrogates and every plane included
)
KEYS = st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=5),
    ),
    max_leaves=30,
)
JSON_VALUES = st.recursive(  # what an event's JSON form can hold
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(), inner, max_size=5)
    ),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (json reads ``NaN`` back as a new float)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class TestCompactJson:
    def test_the_writer_serializes_with_the_shared_encoder(self) -> None:
        assert _writer.compact_json is _shared.json_dumps

    @settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
    @given(VALUES)
    def test_the_same_text_as_the_stdlib_encoder(self, value: Any) -> None:
        expected = STDLIB(value)
        assert _shared.json_dumps(value) == expected
        assert same(_shared.json_loads(expected), json.loads(expected))

    @settings(max_examples=200)
    @given(JSON_VALUES)
    def test_the_same_utf8_bytes_as_the_stdlib_encoder(self, value: Any) -> None:
        # What the hash covers: the text encoded as the writer encodes it.
        expected = STDLIB(value).encode("utf-8", "backslashreplace")
        assert _shared.json_dumps(value).encode("utf-8", "backslashreplace") == expected

    @pytest.mark.parametrize(
        "value",
        [
            0.1,
            1e16,
            1e-7,
            -0.0,
            float("nan"),
            float("-inf"),
            2**64,
            True,
            'é\u2028\x00\x1f\x7f"\\/',
            "\ud83d\ude00 \U0001f600 \udcff",
            {"a": {"b": [1.5, {"c": []}]}, "d": {}},
            {7: "int key", 2.5: "float key", True: "bool key", None: "null key"},
            (1, "tuple"),
        ],
    )
    def test_edges(self, value: Any) -> None:
        assert _shared.json_dumps(value) == STDLIB(value)

    def test_the_same_errors_as_the_stdlib_encoder(self) -> None:
        for bad in ({"a": object()}, {"a": {1, 2}}, {(1, 2): "tuple key"}, b"bytes"):
            with pytest.raises(TypeError) as expected:
                STDLIB(bad)
            with pytest.raises(TypeError) as actual:
                _shared.json_dumps(bad)
            assert str(actual.value) == str(expected.value)
        loop: list[Any] = []
        loop.append(loop)
        with pytest.raises(ValueError, match="Circular reference"):
            _shared.json_dumps(loop)


class TestLongInts:
    """An int with more digits than ``int()`` takes (4,300): json refuses to read or write it."""

    def test_read_as_a_string_saying_so(self) -> None:
        text = '{"a": [1, -' + "9" * 5000 + ', 2.5], "b": NaN}'
        with pytest.raises(ValueError, match="4300"):
            json.loads(text)
        said = "<int of 5000 digits: too long for JSON readers>"
        assert _shared.json_loads(text)["a"] == [1, said, 2.5]
        assert _shared.json_loads_finite(text) == {"a": [1, said, 2.5], "b": None}
        assert _shared.json_loads(text.encode()) == _shared.json_loads(text)

    def test_written_as_a_string_saying_so(self) -> None:
        value = {"a": [10**5000, "x"], "b": 2**64}
        with pytest.raises(ValueError, match="4300"):
            STDLIB(value)
        said = "<int of 16610 bits: too long for JSON readers>"
        assert _shared.json_dumps(value) == STDLIB({"a": [said, "x"], "b": 2**64})
        assert _shared.json_dumps(10**4299) == STDLIB(10**4299)  # 4,300 digits: written

    def test_nesting_too_deep_beside_one_is_a_value_error(self) -> None:
        text = "[" + "9" * 5000 + "," + "[" * 5000 + "]" * 5000 + "]"
        for loads in (_shared.json_loads, _shared.json_loads_finite):
            with pytest.raises(ValueError, match="nested too deeply"):
                loads(text)

    def test_invalid_json_still_names_its_fault(self) -> None:
        for bad in ("[1,", "[1] x", "[" + "9" * 5000 + ",", "[" + "9" * 5000 + "] x"):
            with pytest.raises(ValueError, match=r"Expecting value|Extra data"):
                _shared.json_loads(bad)


class TestSessionIds:
    DOCUMENTED = re.compile(_shared.SESSION_ID_RULE)  # the pattern the writer used to compile

    @settings(max_examples=400)
    @given(
        st.one_of(
            st.text(alphabet="aZ09._-/\\ é\x00", max_size=140),
            st.text(max_size=5),
            st.text(alphabet="x", min_size=126, max_size=131),
        )
    )
    def test_the_rule_is_the_documented_pattern(self, value: str) -> None:
        documented = self.DOCUMENTED.fullmatch(value) is not None
        assert _shared.is_session_id(value) is documented
        if documented:
            assert _writer.validate_session_id(value) == value
        else:
            with pytest.raises(onlooker.AuditError, match="invalid audit session id"):
                _writer.validate_session_id(value)

    def test_the_error_names_the_rule(self) -> None:
        with pytest.raises(onlooker.AuditError) as caught:
            _writer.validate_session_id("../up")
        assert "[A-Za-z0-9][A-Za-z0-9._-]{0,127}" in str(caught.value)


@contextlib.contextmanager
def at_fixed_time() -> Iterator[None]:
    """Every record written at :data:`AT`, so whole files can be compared."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_writer, "iso_time", lambda: AT)
        yield


def stdlib_trail(events: list[dict[str, Any]], session_id: str = "s1") -> bytes:
    """The records the writer wrote with ``json`` and ``hashlib``, built from the documented format."""
    redactor = Redactor()
    prev, lines = GENESIS, []
    for seq, event in enumerate(events):
        record = {"v": 1, "seq": seq, "at": AT, "session_id": session_id, "prev": prev,
                  "event": redactor.redact_event(dict(event), max_chars=2000)}  # fmt: skip
        body = STDLIB(record).encode("utf-8", "backslashreplace")
        prev = hashlib.sha256(body).hexdigest()
        lines.append(body[:-1] + b',"hash":"' + prev.encode() + b'"}\n')
    return b"".join(lines)


EVENTS = st.lists(
    st.fixed_dictionaries(
        {"kind": st.just("ToolCallStarted"), "tool": st.text(max_size=10)},
        optional={"args": st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)},
    ),
    min_size=1,
    max_size=4,
)


class TestTrailBytes:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(EVENTS)
    def test_records_are_the_bytes_json_and_hashlib_give(
        self, events: list[dict[str, Any]]
    ) -> None:
        with tempfile.TemporaryDirectory() as folder, at_fixed_time():
            with TrailWriter(folder, "s1", fsync="never") as writer:
                writer.write(events)
            assert (Path(folder) / "s1" / "events.jsonl").read_bytes() == stdlib_trail(events)

    def test_a_trail_written_by_json_verifies_and_continues(self, tmp_path: Path) -> None:
        events = [
            {"kind": "ToolCallStarted", "tool": "édit ✓", "args": {"x": 0.1, "n": [1e300, -0.0]}},
            {"kind": "ToolCallStarted", "tool": "t", "args": {"deep": {"a": [{"b": None}]}}},
        ]
        session = tmp_path / "s1"
        session.mkdir()
        (session / "events.jsonl").write_bytes(stdlib_trail(events))
        assert audit.verify(session).ok
        with TrailWriter(tmp_path, "s1") as writer:  # picks the chain up from the old bytes
            writer.write(events)
        report = audit.verify(session)
        assert report.ok and (report.first_seq, report.last_seq) == (0, 3)

    def test_the_tail_file_keeps_its_bytes(self, tmp_path: Path) -> None:
        events = [{"kind": "ToolCallStarted", "tool": "t", "args": {"pad": "x" * 300}}] * 4
        with TrailWriter(tmp_path, "s1", max_bytes=600, keep=0) as writer:
            writer.write(events)
        last = json.loads((tmp_path / "s1" / ".tail").read_text())
        assert set(last) == {"seq", "hash"}
        expected = json.dumps({"seq": last["seq"], "hash": last["hash"]})  # json's own spacing
        assert (tmp_path / "s1" / ".tail").read_text() == expected


class TestHookStartUp:
    def test_recording_imports_neither_json_nor_re_nor_their_kin(self, tmp_path: Path) -> None:
        # The hook's start-up target (bench/hook.py) depends on it: json alone brings re and enum.
        # The console script as a current pip writes it: the one pip 23 (Python 3.11's ensurepip)
        # wrote imports re itself, before onlooker, which would hide any re onlooker imports.
        script = tmp_path / "bin" / "onlooker"
        script.parent.mkdir()
        script.write_text(
            f"#!{sys.executable}\nimport sys\nfrom onlooker._cli import main\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n"
        )
        script.chmod(0o755)
        trail = tmp_path / "audit"
        imported: set[str] = set()
        for payload in (bash("toolu_1", "ls"),
                        post("toolu_1", "Bash", {"command": "ls"}, {"stdout": "a\nb"})):  # fmt: skip
            done = hook_process(
                trail, payload, env={"PYTHONPROFILEIMPORTTIME": "1"}, executable=str(script)
            )
            assert done.returncode == 0, done.stderr
            imported |= {
                line.split("|")[-1].strip()
                for line in done.stderr.splitlines()
                if line.startswith("import time:")
            }
        assert "onlooker.plugins.audit._writer" in imported
        heavy = {"json", "re", "enum", "threading", "contextlib", "importlib", "typing"}
        assert not imported & heavy
        report = audit.verify(next(p for p in trail.iterdir() if p.is_dir()))
        assert report.ok and report.records == 3  # the session's start, the call's start and end


def test_a_value_holding_itself_or_nested_too_deep_is_a_type_error(tmp_path: Path) -> None:
    """As any other value neither json nor pydantic can serialize; the writer goes on."""
    looped: dict[str, object] = {"kind": "x"}
    looped["self"] = looped
    deep: list[object] = []
    for _ in range(10_000):
        deep = [deep]
    with TrailWriter(tmp_path, "s") as writer:
        for bad in (looped, {"kind": "x", "deep": deep}):
            with pytest.raises(TypeError, match="nested too deeply"):
                writer.write([bad])
        writer.write([{"kind": "x", "n": 1}])
    report = audit.verify(tmp_path / "s")
    assert report.ok and report.records == 1


def test_a_failed_encoding_leaves_nothing_behind() -> None:
    """The encoder's circular-reference table does not outlive a call that failed."""
    from onlooker._shared import json_dumps

    value: dict[str, object] = {"a": [object()]}
    with pytest.raises(TypeError):
        json_dumps(value)
    value["a"] = [1]
    assert json_dumps(value) == '{"a":[1]}'
