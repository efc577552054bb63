"""The fast paths of the audit trail give what the slow ones gave.

- ``Redactor.screen``: an event it passes is one the redactor would return
  unchanged (so its serialized text can be written as it is);
- a string far over ``max_chars`` is redacted scanning only its head: a
  secret inside the kept part, or straddling the cut, never shows;
- ``TrailWriter.encode`` and the plugin's ``EventEncoder`` write the bytes
  redacting every event value by value wrote.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onlooker
from onlooker.plugins.audit import Redactor, Rule, TrailWriter
from onlooker.plugins.audit._encode import json_bytes
from onlooker.plugins.audit._events import EventEncoder
from onlooker.plugins.audit._secrets import DEFAULT_RULES
from test_audit_redact import SHAPES

CWD = "/home/alice/project"
HOME = "/home/alice"
HINTS = sorted({hint for rule in DEFAULT_RULES for hint in rule.hints or ()})
FRAGMENTS = [text for _, text, _ in SHAPES] + [
    *HINTS,
    *(hint.upper() for hint in HINTS),
    "to\u212aen",  # the Kelvin sign lower-cases to "k"
    "\u0130",  # "İ" lower-cases to "i" and a combining dot
    "password",
    "Api-Key",
    "COOKIE",
    "/etc/passwd",
    "plain",
    'quo"te\\ and \n newline',
    "é ✓ \U0001f600",
]
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(FRAGMENTS),
    st.builds(
        lambda a, b, c: a + b + c,
        st.text(max_size=4),
        st.sampled_from(FRAGMENTS),
        st.text(max_size=4),
    ),
)
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
EVENTS = st.lists(st.dictionaries(TEXT, VALUES, max_size=4), min_size=1, max_size=8)
EVENT_VALUES = st.recursive(  # what an event can hold: JSON, so no infinity
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        TEXT,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


def redactors() -> list[Redactor]:
    return [
        Redactor(cwd=CWD, home=HOME, environ={}),
        Redactor(cwd=CWD, home=HOME, environ={"GITHUB_TOKEN": "ghx-env-value-0042"}),
        Redactor(cwd=CWD, home=HOME, environ={}, shorten_paths=True),
        Redactor(cwd=CWD, home=HOME, environ={}, extra_rules=[Rule("q", r'"[^"]*"', hints=['"'])]),
        Redactor(cwd=CWD, home=HOME, environ={}, extra_rules=[Rule("t", "TICKET-\\d+")]),
        Redactor(cwd=CWD, home=HOME, environ={}, secret_keys="plain"),
    ]


def check_screen(redactor: Redactor, events: list[dict[str, Any]], max_chars: int) -> None:
    texts = [json_bytes(event) for event in events]
    suspects = set(redactor.screen(texts, max_chars=max_chars))
    assert suspects <= set(range(len(events)))
    for index, event in enumerate(events):
        if index not in suspects:
            assert redactor.redact(event, max_chars=max_chars) == event, (index, event)


class TestScreen:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(EVENTS, st.sampled_from([8, 60, 2000]))
    def test_what_it_passes_redaction_leaves_unchanged(
        self, events: list[dict[str, Any]], max_chars: int
    ) -> None:
        for redactor in redactors():
            check_screen(redactor, events, max_chars)

    @pytest.mark.parametrize(("rule", "text", "secret"), SHAPES)
    def test_every_secret_shape_is_suspect_wherever_it_is(
        self, rule: str, text: str, secret: str
    ) -> None:
        redactor = Redactor(cwd=CWD, home=HOME, environ={})
        plain = {"kind": "ToolCallStarted", "tool": "read", "args": {"path": "a.py"}}
        events = [plain, {"args": {"x": text}}, plain, {text: 1}, {"deep": [[{"k": text}]]}]
        events += [{"x": text.upper()}, {"x": text.lower()}]
        assert redactor.screen([json_bytes(e) for e in events], max_chars=2000) == [1, 3, 4, 5, 6]

    def test_plain_events_pass_and_learned_secrets_are_caught(self) -> None:
        redactor = Redactor(cwd=CWD, home=HOME, environ={})
        plain = [{"tool": "read_file", "args": {"path": f"src/{i}.py"}} for i in range(300)]
        assert redactor.screen([json_bytes(e) for e in plain], max_chars=2000) == []
        redactor.redact({"password": "s3cr3t-value"})  # learned under a secret key
        echoed = [*plain[:5], {"result": "it was s3cr3t-value"}, *plain[5:]]
        assert redactor.screen([json_bytes(e) for e in echoed], max_chars=2000) == [5]

    def test_non_ascii_text_is_lower_cased_as_the_redactor_does(self) -> None:
        redactor = Redactor(cwd=CWD, home=HOME, environ={})
        kelvin = {"to\u212aen": "abcdef"}  # a secret key only once lower-cased
        assert redactor.redact(kelvin) != kelvin
        assert redactor.screen([json_bytes(kelvin), json_bytes({"é": 1})]) == [0]

    def test_many_known_secrets_send_everything_to_the_redactor(self) -> None:
        environ = {f"APP{i}_TOKEN": f"value-of-token-{i:04d}" for i in range(40)}
        redactor = Redactor(cwd=CWD, home=HOME, environ=environ)
        texts = [json_bytes({"a": "plain"})] * 3
        assert redactor.screen(texts) == [0, 1, 2]

    def test_pydantic_escapes_strings_as_json_does(self) -> None:
        # The screen looks for hints escaped as json escapes them, in model_dump_json's text.
        import pydantic_core

        every = "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000)
        assert pydantic_core.to_json(every) == json_bytes(every)


class TestLongStrings:
    @pytest.fixture
    def redactor(self) -> Redactor:
        return Redactor(cwd=CWD, home=HOME, environ={"DEPLOY_TOKEN": "deploy-token-value-77"})

    @pytest.mark.parametrize(("rule", "text", "secret"), SHAPES)
    def test_a_secret_straddling_the_cut_shows_no_readable_part(
        self, redactor: Redactor, rule: str, text: str, secret: str
    ) -> None:
        for before in range(2000 - len(text), 2001, max(len(text) // 6, 1)):
            value = "~" * before + "\n" + text + "\n" + "~" * 100_000
            out = redactor.redact(value, max_chars=2000)
            assert out.startswith("~" * min(before, 2000))
            assert len(out) <= 2000 + len("…[truncated 100000 chars]")
            context = text.replace(secret, " ") + f"[REDACTED:{rule}]"
            for size in range(6, len(secret) + 1):
                for start in range(len(secret) - size + 1):
                    part = secret[start : start + size]
                    assert part in context or part not in out, (before, out[-60:])

    def test_a_known_secret_straddling_the_cut(self, redactor: Redactor) -> None:
        for before in range(1980, 2001):
            value = "~" * before + " deploy-token-value-77 " + "~" * 50_000
            out = redactor.redact(value, max_chars=2000)
            assert "deploy-t" not in out and "-value-77" not in out

    def test_a_secret_inside_the_kept_part_is_redacted(self, redactor: Redactor) -> None:
        value = "see sk-" + "Z" * 40 + " then " + "~" * 100_000
        out = redactor.redact(value, max_chars=2000)
        assert out.startswith("see [REDACTED:openai_key] then ~~~")
        assert out.endswith(f"…[truncated {len(value) - 22 - 2000} chars]")

    def test_a_long_redaction_widens_what_is_scanned(self, redactor: Redactor) -> None:
        key = "-----BEGIN PRIVATE KEY-----\n" + "M" * 5000 + "\n-----END PRIVATE KEY-----"
        secret = "sk-" + "Q" * 40
        value = "a " + key + " b " + secret + " c " + "~" * 100_000
        out = redactor.redact(value, max_chars=2000)
        assert "MMMM" not in out and "QQQQ" not in out
        assert out.startswith("a [REDACTED:private_key] b [REDACTED:openai_key] c ~~~")
        whole = redactor.redact_text(value)
        assert out == whole[:2000] + f"…[truncated {len(whole) - 2000} chars]"

    def test_an_unclosed_private_key_to_the_end(self, redactor: Redactor) -> None:
        value = "x " + "-----BEGIN PRIVATE KEY-----\n" + "M" * 30_000
        assert redactor.redact(value, max_chars=2000) == "x [REDACTED:private_key]"


def tool_events(args: dict[str, Any]) -> list[onlooker.ExecutionEvent]:
    envelope: dict[str, Any] = {
        "execution_id": "e1",
        "at": "2025-01-01T00:00:00Z",
        "attribution": {},
    }
    return [
        onlooker.ToolCallStarted(
            **envelope, event_id="e1-1", seq=1, tool_call_id="c1", tool="t", args=args
        ),
        onlooker.ToolCallFinished(
            **envelope,
            event_id="e1-2",
            seq=2,
            tool_call_id="c1",
            tool="t",
            status="completed",
            result=args,
            duration_ms=0.5,
        ),
    ]


class TestEncoders:
    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(TEXT, EVENT_VALUES, max_size=4), st.sampled_from([10, 2000]))
    def test_the_plugin_writes_what_field_by_field_redaction_wrote(
        self, args: dict[str, Any], max_chars: int
    ) -> None:
        events = tool_events(args)
        for fresh, again in zip(redactors()[:3], redactors()[:3], strict=True):
            encoder = EventEncoder(fresh, max_chars)
            fast = encoder.encode(events, lambda _e, exc: pytest.fail(repr(exc)))
            one_by_one = EventEncoder(again, max_chars)
            for event in events:  # learns every secret of the batch, as the batch does
                one_by_one.event_json(event)
            slow = [one_by_one.event_json(e) for e in events]
            assert fast == slow

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(EVENTS, st.sampled_from([10, 2000]))
    def test_the_writer_encodes_what_serialize_gave(
        self, events: list[dict[str, Any]], max_chars: int
    ) -> None:
        folder = "/nonexistent-never-written"  # neither touches a file
        for fresh, again in zip(redactors()[:3], redactors()[:3], strict=True):
            fast = TrailWriter(folder, "s", redactor=fresh, max_value_chars=max_chars)
            slow = TrailWriter(folder, "s", redactor=again, max_value_chars=max_chars)
            for event in events:  # learns every secret of the batch, as the batch does
                slow.serialize(event)
            assert fast.encode(events) == [
                slow.serialize(e).encode("utf-8", "backslashreplace") for e in events
            ]

    def test_a_secret_learned_in_a_batch_is_scrubbed_from_the_whole_batch(self) -> None:
        plain = {"tool": "t", "result": "it said hunter2-learned"}
        events: list[dict[str, Any]] = [
            plain,
            {"args": {"password": "hunter2-learned"}},
            plain,
            {"x": "y"},
            plain,
        ]
        writer = TrailWriter("/nonexistent", "s", redactor=Redactor(environ={}))
        encoded = [json.loads(text) for text in writer.encode(events)]
        assert encoded[1] == {"args": {"password": "[REDACTED:secret_field]"}}
        scrubbed = {"tool": "t", "result": "it said [REDACTED:secret_field]"}
        assert encoded[0] == encoded[2] == encoded[4] == scrubbed  # before it too: unwritten
        assert encoded[3] == {"x": "y"}

    def test_a_huge_argument_is_not_serialized_before_it_is_cut(self, tmp_path: Path) -> None:
        encoder = EventEncoder(Redactor(environ={}), 2000)
        (started, _finished) = tool_events({"text": "y" * 1_000_000})
        (text,) = encoder.encode([started], lambda _e, exc: pytest.fail(repr(exc)))
        args = json.loads(text)["args"]
        assert args == {"text": "y" * 2000 + "…[truncated 998000 chars]"}


class TestExactBytes:
    @pytest.mark.parametrize(
        "value",
        [
            {"x": [1e-5, -2.5e-7, 0.00001234, 1e-10, 1e-4, 0.1, -0.0, 1e16, 1e300]},
            {"at": "12:00:00.000001Z", "note": "one-time re-run e-5"},
            {"lone": "a\ud800b", "n": float("nan"), "i": float("-inf"), "big": 10**40},
        ],
    )
    def test_the_writer_writes_what_json_writes(self, value: dict[str, Any]) -> None:
        writer = TrailWriter("/nonexistent", "s", redactor=Redactor(environ={}))
        expected = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode(value)
        assert writer.encode([value]) == [expected.encode("utf-8", "backslashreplace")]

    def test_what_json_refuses_and_pydantic_cannot_serialize_is_refused(self) -> None:
        writer = TrailWriter("/nonexistent", "s", redactor=Redactor(environ={}))
        with pytest.raises(TypeError, match="not JSON serializable"):
            writer.encode([{"x": object()}])


class TestAttribution:
    def test_a_secret_in_a_child_attribution_is_redacted(self) -> None:
        attribution = onlooker.Attribution(task_id="deploy with sk-" + "A" * 30, depth=1)
        event = onlooker.ToolCallStarted(
            execution_id="e2", at=datetime(2025, 1, 1, tzinfo=UTC), attribution=attribution,
            event_id="e2-1", seq=1, tool_call_id="c1", tool="t", args={},
        )  # fmt: skip
        encoder = EventEncoder(Redactor(environ={}), 2000)
        (text,) = encoder.encode([event], lambda _e, exc: pytest.fail(repr(exc)))
        assert json.loads(text)["attribution"]["task_id"] == "deploy with [REDACTED:openai_key]"
        writer = TrailWriter("/nonexistent", "s", redactor=Redactor(environ={}))
        (text,) = writer.encode([event.model_dump(mode="json")])
        assert json.loads(text)["attribution"]["task_id"] == "deploy with [REDACTED:openai_key]"

    def test_a_rule_that_changes_the_root_attribution_is_seen(self) -> None:
        redactor = Redactor(environ={}, extra_rules=[Rule("ph", "phase", hints=["phase"])])
        (event, _finished) = tool_events({})
        encoder = EventEncoder(redactor, 2000)
        (text,) = encoder.encode([event], lambda _e, exc: pytest.fail(repr(exc)))
        assert "[REDACTED:ph]" in json.loads(text)["attribution"]
        writer = TrailWriter("/nonexistent", "s", redactor=redactor)
        (text,) = writer.encode([event.model_dump(mode="json")])
        assert "[REDACTED:ph]" in json.loads(text)["attribution"]


def rules_by_lowered_hints(redactor: Redactor, text: str) -> str:
    """``redact_text`` as it is for short texts: each rule whose hints the lower-cased text holds
    (a hint's leading newline matching the text's start too)."""
    lowered = "\n" + text.lower()
    for rule, hints in redactor._rule_hints:
        if hints is None or any(hint in lowered for hint in hints):
            text = rule.apply(text)
    text = redactor._known.scrub(text)
    return redactor._paths.shorten_all(text) if redactor.shorten_paths else text


class TestHintsAtTheStart:
    """A hint's leading newline matches a text's start too: a Dockerfile's ENV line as an
    Edit's new_string or grep's first line, short or long, alone or in an event."""

    @pytest.mark.parametrize("tail", ["", "\nRUN make", "\nRUN make " + "y" * 300])
    def test_an_env_line_starting_the_text(self, tail: str, tmp_path: Path) -> None:
        text = "ENV MYSQL_ROOT_PASSWORD D0ckStart9xPw" + tail
        redactor = Redactor(environ={})
        assert "D0ckStart9xPw" not in redactor.redact_text(text)
        assert redactor.redact_text(text) == rules_by_lowered_hints(redactor, text)
        events: list[dict[str, Any]] = [
            {"kind": "ToolCallStarted", "args": {"new_string": text}},
            {"args": {"a": 1}},
        ]
        assert redactor.screen([json_bytes(e) for e in events], max_chars=2000) == [0]
        with TrailWriter(tmp_path, "s", redactor=redactor) as writer:
            writer.write(events)
        assert "D0ckStart9xPw" not in (tmp_path / "s" / "events.jsonl").read_text()

    def test_only_at_the_start(self) -> None:
        redactor = Redactor(environ={})
        for text in ("see ENV MYSQL_ROOT_PASSWORD word", "venv MYSQL_ROOT_PASSWORD word"):
            assert redactor.redact_text(text) == text


class TestLongTexts:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(TEXT, min_size=30, max_size=60))
    def test_the_rules_a_long_text_needs_are_found_on_a_squeezed_copy(
        self, parts: list[str]
    ) -> None:
        text = " ".join(parts).ljust(300, "~")  # past the length where the squeezed copy is used
        for redactor in redactors()[:5]:
            assert redactor.redact_text(text) == rules_by_lowered_hints(redactor, text)

    @pytest.mark.parametrize(("rule", "text", "secret"), SHAPES)
    def test_every_shape_in_a_long_text(self, rule: str, text: str, secret: str) -> None:
        redactor = Redactor(environ={})
        for long in ("x" * 300 + " " + text, text + " " + "y" * 300, text.upper() + " " * 300):
            assert redactor.redact_text(long) == rules_by_lowered_hints(redactor, long)
        assert secret not in redactor.redact_text("x" * 300 + " " + text)
