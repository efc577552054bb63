"""The ``onlooker`` command line: every command through typer's CliRunner, exit codes, JSON.

Exit codes: 0 ok, 1 the thing checked is bad, 2 usage error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import onlooker
import postgres
from onlooker._cli._app import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "research_agent.py"
ANSWER = '{"approve": true}'
EXECUTABLE = shutil.which("onlooker", path=str(Path(sys.executable).parent))

FAILING = '''
import onlooker

@onlooker.tool
def explode(reason: str) -> None:
    """Always fails."""
    raise RuntimeError(reason)

async def main(ctx: onlooker.ExecutionContext) -> None:
    await ctx.call(explode, reason="boom")
'''

WAITS = """
from pathlib import Path

import anyio


async def main(ctx):
    Path("waiting").touch()
    await anyio.sleep(60)
"""

BLOCKS = """
import time
from pathlib import Path

import onlooker


@onlooker.tool
def block(seconds: float) -> None:
    Path("waiting").touch()
    time.sleep(seconds)


async def main(ctx):
    await ctx.call("block", seconds=60)
"""

ENDS = """
import sys


class Stop(BaseException):
    pass


async def main(ctx):
    {ending}
"""

ODD_RESULT = """
async def main(ctx):
    class Opaque:
        def __repr__(self):
            raise RuntimeError("no repr")

    return {(1, 2): "pair", "name": "你好", "odd": Opaque(), "bidi": "\\u202eexe.txt", "name2": "caf\\udce9",
            "big": "x" * 100_000}


async def looped(ctx):
    value = {"name": "x"}
    value["me"] = value
    return value
"""

CHATTY = """
print("loading")


async def main(ctx):
    print("working")
    return 1
"""

FLOATS = """
from onlooker import ExecutionContext


async def main(ctx: ExecutionContext) -> dict[str, float]:
    return {"ratio": float("nan"), "max": float("inf"), "n": 1.5}
"""

ASK_JSON = """
from onlooker import ExecutionContext


async def main(ctx: ExecutionContext) -> str:
    answer = await ctx.elicit("Go on?")
    return f"{answer.action} {answer.content}"
"""

SNEAKY = """
import onlooker


@onlooker.tool
def shell(command: str) -> str:
    raise RuntimeError(command)


async def main(ctx):
    await ctx.call("shell", command="ls\x1b[1A\x1b[2K\u202erm -rf /")
"""

FORGED = """
import onlooker


@onlooker.tool
def shell(command: str) -> str:
    raise RuntimeError(command)


async def main(ctx):
    await ctx.call("shell", command="ls\\n99:00:00 ■ completed 3.94 s\\u202999:00:01 ■ done")
"""

BRACKETS = """
async def main(ctx):
    return "[/] and [bold]kept[/bold]"
"""

BACKSLASH = """
import onlooker


@onlooker.tool
def echo(path: str) -> str:
    return path


async def main(ctx):
    return await ctx.call("echo", path="C:\\\\dir\\\\")
"""

TWINS = """
import onlooker


@onlooker.tool(name="t")
def a() -> int:
    return 1


@onlooker.tool(name="t")
def b() -> int:
    return 2


async def main(ctx):
    return await ctx.call("t")
"""

GIVES_UP = """
from pathlib import Path

import anyio


async def main(ctx):
    with anyio.move_on_after(0.3):  # nobody answers in time: the program gives up
        await ctx.elicit("first?")
    Path("second").touch()
    answer = await ctx.elicit(
        "second?", schema={"type": "object", "properties": {"name": {"type": "string"}}}
    )
    return {"action": answer.action, "content": answer.content}
"""

ALIAS = """
import onlooker


@onlooker.tool(name="t")
def a() -> int:
    return 1


b = a  # the same tool under a second module-level name


async def main(ctx):
    return await ctx.call("t")
"""

ASKS = """
from pathlib import Path


async def main(ctx):
    Path("asking").touch()
    return await ctx.elicit("Deploy?")
"""

WITH_TOOLS_LIST = '''
import onlooker

@onlooker.tool
def hidden() -> int:
    """Not in TOOLS: unknown to the engine."""
    return 1

@onlooker.tool
def shown() -> int:
    """In TOOLS."""
    return 2

TOOLS = [shown]

async def go(ctx: onlooker.ExecutionContext) -> list[str]:
    try:
        await ctx.call("hidden")
    except onlooker.UnknownToolError:
        pass
    return [str(await ctx.call("shown"))]
'''


def process(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``onlooker ARGS`` as a real process in ``cwd`` (its output captured, 200 columns)."""
    assert EXECUTABLE is not None
    return subprocess.run(
        [EXECUTABLE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
        timeout=60,
    )


def wait_for(marker: Path) -> None:
    """Until a program run in a process writes ``marker`` (30 s at most)."""
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def statuses(directory: Path, table: str = "executions") -> list[str]:
    """The statuses in a table of the history a run in ``directory`` recorded."""
    with contextlib.closing(sqlite3.connect(directory / ".onlooker" / "history.db")) as db:
        return [status for (status,) in db.execute(f"SELECT status FROM {table}")]


def onlooker_bound_by_modes(*args: str) -> subprocess.CompletedProcess[str]:
    """``onlooker ARGS`` in a process that file modes bind: as root, without the capabilities
    that read any directory (a user's 0700 directory is then closed to it)."""
    as_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    command = [*(as_user if os.geteuid() == 0 else []), sys.executable, "-m", "onlooker"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, check=False
    )


def invoke(*args: str, input: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=input)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh current directory: .onlooker/ (history, audit) is created here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def recorded(workdir: Path) -> dict[str, Any]:
    """The research agent run once; its execution id, trail and JSON listing."""
    result = invoke("run", str(EXAMPLE), "--answer", ANSWER, "--session", "demo", "--quiet")
    assert result.exit_code == 0, result.output
    listing = invoke("history", "list", "--json")
    assert listing.exit_code == 0, listing.output
    records = [json.loads(line) for line in listing.stdout.splitlines()]
    root = next(r for r in records if r["parent_execution_id"] is None)
    return {
        "root": root["execution_id"],
        "records": records,
        "trail": workdir / ".onlooker/audit/demo",
    }


def trail_file(trail: Path) -> Path:
    (path,) = sorted(trail.glob("events*.jsonl"))[-1:]
    return path


class TestHelpAndUsage:
    @pytest.mark.parametrize(
        "command",
        [
            ["run"],
            ["schema"],
            ["history", "list"],
            ["history", "show"],
            ["history", "stats"],
            ["audit", "verify"],
            ["audit", "tail"],
            ["audit", "replay"],
            ["metrics", "serve"],
            ["hook", "claude-code"],
            ["hook", "install"],
            ["hook", "uninstall"],
            ["hook", "status"],
            ["ui"],
        ],
    )
    def test_every_command_has_help_with_examples(self, command: list[str]) -> None:
        result = invoke(*command, "--help")
        assert result.exit_code == 0, result.output
        assert "Examples" in result.output
        assert f"onlooker {' '.join(command)}" in " ".join(result.output.split())

    def test_no_command_shows_help(self) -> None:
        result = invoke()
        assert "history" in result.output and "audit" in result.output

    def test_version(self) -> None:
        result = invoke("--version")
        assert (result.exit_code, result.output) == (0, f"onlooker {onlooker.__version__}\n")

    @pytest.mark.parametrize(
        "command",
        [[], ["run"], ["audit", "tail"], ["audit", "verify"], ["history", "list"], ["hook"],
         ["hook", "install"], ["hook", "claude-code"]],
    )  # fmt: skip
    def test_boolean_options_show_as_flags(self, command: list[str]) -> None:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
        assert result.exit_code == 0
        assert "<bool>" not in result.output
        assert "--help" in result.output

    @pytest.mark.parametrize(
        "args",
        [
            ["frobnicate"],
            ["run", "missing.py"],
            ["run", "notes.txt"],
            ["run", str(EXAMPLE), "--answer", "[1, 2]"],
            ["run", str(EXAMPLE), "--answer", "{oops"],
            ["run", str(EXAMPLE), "--answer", '{"a": ' + "[" * 20_000 + "]" * 20_000 + "}"],
            ["run", str(EXAMPLE), "--answer", "{}", "--interactive"],
            ["run", f"{EXAMPLE}:no_such_function"],
            ["run", f"{EXAMPLE}:search"],  # a tool, not an async program
            ["history", "list", "--status", "exploded"],
            ["history", "list", "--since", "last tuesday"],
            ["history", "list", "--limit", "0"],
            ["history", "list", "--limit", "10001"],
            ["history", "list", "--cursor", "garbage"],
            ["audit", "verify", "no/such/trail"],
        ],
    )
    def test_usage_errors_exit_2(self, args: list[str], workdir: Path) -> None:
        result = invoke(*args)
        assert result.exit_code == 2, result.output


class TestSchema:
    def test_prints_the_event_union(self) -> None:
        result = invoke("schema")
        assert result.exit_code == 0
        schema = json.loads(result.stdout)
        assert set(schema["discriminator"]["mapping"]) == {
            "ExecutionStarted",
            "ToolCallStarted",
            "ToolCallFinished",
            "InteractionStarted",
            "InteractionResolved",
            "ExecutionFinished",
        }


SURROGATE_KEY = """
import onlooker


@onlooker.tool
def count_entries(entries: dict) -> int:
    return len(entries)


async def main(ctx):
    # a listing keyed by file names, one undecodable (os.listdir gives a lone surrogate)
    return await ctx.call(count_entries, entries={"ok.txt": 1, "caf\\udce9.txt": 2})
"""


class TestRun:
    def test_progress_shows_a_call_whose_arguments_hold_a_lone_surrogate_in_a_key(
        self, workdir: Path
    ) -> None:
        """model_dump(mode="json") refuses such a key: the progress observer failed, with
        a traceback, and the call's line was missing."""
        (workdir / "listing.py").write_text(SURROGATE_KEY)
        result = invoke("run", "listing.py", "--no-audit")
        assert result.exit_code == 0, result.output
        assert "failed on ToolCallStarted" not in result.stderr
        assert "→ count_entries(" in result.stderr
        assert "caf\\udce9.txt" in result.stderr

    def test_prints_the_tree_and_the_summary(self, workdir: Path) -> None:
        result = invoke("run", str(EXAMPLE), "--answer", ANSWER)
        assert result.exit_code == 0, result.output
        out = result.stdout
        for expected in ("read_file", "search", "fetch", "write_file", "count_words", "summarize"):
            assert expected in out
        assert "unreachable" in out  # the failing call, with its error
        assert "Write the report" in out and "accepted" in out
        assert "report written" in out
        assert "success rate" in out
        assert "onlooker history show" in out
        assert (workdir / ".onlooker" / "history.db").exists()
        assert any((workdir / ".onlooker" / "audit").iterdir())
        assert "→ read_file" in result.stderr  # progress, on stderr

    def test_a_question_without_answer_is_declined(self, workdir: Path) -> None:
        result = invoke("run", str(EXAMPLE), "--no-audit", "--quiet")
        assert result.exit_code == 0, result.output
        assert "declined" in result.stdout
        assert "not approved" in result.stdout
        assert not (workdir / ".onlooker" / "audit").exists()

    def test_a_failed_execution_exits_1(self, workdir: Path) -> None:
        (workdir / "failing.py").write_text(FAILING)
        result = invoke("run", "failing.py", "--quiet")
        assert result.exit_code == 1, result.output
        assert "boom" in result.stdout
        assert "failed" in result.stdout

    def test_a_tools_list_and_a_named_function(self, workdir: Path) -> None:
        (workdir / "listed.py").write_text(WITH_TOOLS_LIST)
        result = invoke("run", "listed.py:go", "--quiet", "--no-audit")
        assert result.exit_code == 0, result.output
        assert '["2"]' in result.stdout

    def test_interactive_asks_in_the_terminal(self, workdir: Path) -> None:
        result = runner.invoke(
            app, ["run", str(EXAMPLE), "--interactive", "--no-audit", "--quiet"], input="y\ny\n"
        )
        assert result.exit_code == 0, result.output
        assert "report written" in result.stdout

    def test_enter_at_an_interactive_prompt_takes_its_default(self, workdir: Path) -> None:
        """cli.md: Enter answers "Answer it?" (default yes), and Enter at the JSON prompt
        gives its default ``{}``."""
        (workdir / "ask.py").write_text(ASK_JSON)
        result = runner.invoke(
            app, ["run", "ask.py", "--interactive", "--no-audit", "--json"], input="\n\n"
        )
        assert result.exit_code == 0, result.output
        assert "Please enter" not in result.stdout and "not JSON" not in result.stdout
        assert '"result": "accept {}"' in result.stdout

    def test_a_json_answer_nested_too_deeply_is_asked_again(self, workdir: Path) -> None:
        (workdir / "ask.py").write_text(ASK_JSON)
        deep = "[" * 20_000 + "]" * 20_000
        result = runner.invoke(
            app, ["run", "ask.py", "--interactive", "--no-audit", "--json"], input=f"y\n{deep}\n\n"
        )
        assert result.exit_code == 0, result.output
        assert "not JSON: JSON nested too deeply" in result.output
        assert '"result": "accept {}"' in result.stdout

    def test_enter_at_a_property_takes_its_default_or_leaves_an_optional_one_out(
        self, workdir: Path
    ) -> None:
        schema = {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "default": True},
                "count": {"type": "integer", "default": 5},
                "ratio": {"type": "number"},
                "comment": {"type": "string"},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "tags": {"type": "array", "default": ["a"]},
                "extra": {"type": "object"},
            },
            "required": ["approve", "ratio"],
        }
        (workdir / "form.py").write_text(
            "import json\n"
            "import onlooker\n\n"
            "async def main(ctx: onlooker.ExecutionContext) -> str:\n"
            f"    answer = await ctx.elicit('Fill it in', schema={schema!r})\n"
            "    return json.dumps(answer.content, sort_keys=True)\n"
        )
        # Answer it; approve, count: defaults; ratio: nan is asked again, then 0.5;
        # comment, color: left out; tags: default; extra: left out.
        lines = ["", "", "", "nan", "0.5", "", "", "", ""]
        result = runner.invoke(
            app,
            ["run", "form.py", "--interactive", "--no-audit", "--json"],
            input="\n".join(lines) + "\n",
        )
        assert result.exit_code == 0, result.output
        assert "Please enter a finite number" in result.output
        outcome = json.loads(result.stdout[result.stdout.index("{") :])
        assert json.loads(outcome["result"]) == {
            "approve": True,
            "count": 5,
            "ratio": 0.5,
            "tags": ["a"],
        }

    def test_a_default_and_choices_reach_the_terminal_written_out(self, workdir: Path) -> None:
        """cli.md: recorded values never send their control characters to the terminal;
        a string property's default and enum choices are shown as its question is."""
        schema = {
            "type": "object",
            "properties": {
                "title": {"type": "string", "default": "\x1b[2Jdefault"},
                "color": {"type": "string", "enum": ["\x1b]0;pwned\x07red", "blue"]},
            },
        }
        (workdir / "form.py").write_text(
            "import json\n"
            "import onlooker\n\n"
            "async def main(ctx: onlooker.ExecutionContext) -> str:\n"
            f"    answer = await ctx.elicit('Fill it in', schema={schema!r})\n"
            "    return json.dumps(answer.content)\n"
        )
        result = runner.invoke(
            app, ["run", "form.py", "--interactive", "--no-audit", "--quiet"], input="\n\nblue\n"
        )
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output
        assert "(\\x1b[2Jdefault)" in result.output
        assert "[\\x1b]0;pwned" in result.output  # (rich drops the BEL itself)
        assert "\\u001b[2Jdefault" in result.output  # the answer keeps the real default

    def test_json_output_is_json_with_nan_and_infinity_as_null(self, workdir: Path) -> None:
        (workdir / "floats.py").write_text(FLOATS)
        result = invoke("run", "floats.py", "--quiet", "--no-audit", "--json")
        assert result.exit_code == 0, result.output

        def refuse(constant: str) -> None:
            raise ValueError(f"not JSON: {constant}")

        outcome = json.loads(result.stdout, parse_constant=refuse)
        assert outcome["result"] == {"ratio": None, "max": None, "n": 1.5}

    @pytest.mark.parametrize("ending", ["sys.exit(4)", "raise Stop('enough')"])
    def test_a_program_ending_by_a_base_exception_is_shown_and_exits_1(
        self, workdir: Path, ending: str
    ) -> None:
        """sys.exit or a BaseException of the program's own: recorded cancelled (the engine
        passes it on), and run still shows the tree, and exits 1 as for any other end."""
        (workdir / "ends.py").write_text(ENDS.format(ending=ending))
        shown = invoke("run", "ends.py", "--no-audit")
        assert shown.exit_code == 1, shown.output
        assert "cancelled" in shown.stdout and "history show" in shown.stdout
        as_json = invoke("run", "ends.py", "--no-audit", "--json", "--quiet")
        assert as_json.exit_code == 1
        assert json.loads(as_json.stdout)["status"] == "cancelled"

    def test_any_result_is_shown_as_it_is_recorded(self, workdir: Path) -> None:
        """Keys that are no strings, a value holding itself, a repr that raises, text in any
        script, and a huge value (cut as the trail cuts it): the tree prints them all."""
        (workdir / "odd.py").write_text(ODD_RESULT)
        shown = invoke("run", "odd.py", "--no-audit", "--quiet")
        assert shown.exit_code == 0, shown.output
        line = shown.stdout.split("result: ", 1)[1].split("\nhistory:")[0].replace("\n", "")
        assert '"(1, 2)": "pair"' in line and "你好" in line and "…[truncated" in line
        assert "\u202e" not in shown.stdout and "\\u202eexe.txt" in line  # written out
        assert "caf\\udce9" in line  # an undecodable name, written out
        assert len(line) < 2_200
        looped = invoke("run", "odd.py:looped", "--no-audit", "--quiet")
        assert looped.exit_code == 0, looped.output
        assert "Circular reference" in looped.stdout  # marked, as the event holds it

    def test_history_json_holds_an_undecodable_name(self, workdir: Path) -> None:
        (workdir / "odd.py").write_text(ODD_RESULT)
        assert invoke("run", "odd.py", "--no-audit", "--quiet").exit_code == 0
        listed = invoke("history", "list", "--json")
        assert listed.exit_code == 0, listed.output
        (record,) = [json.loads(line) for line in listed.stdout.splitlines()]
        shown = invoke("history", "show", record["execution_id"], "--json")
        assert shown.exit_code == 0, shown.output
        assert "\\udce9" in shown.stdout  # the name's escape, which reads back as the name
        assert shown.stdout.isascii() and "\\u202eexe.txt" in shown.stdout  # no reordering
        assert json.loads(shown.stdout)["result"]["name2"] == "caf\udce9"
        assert json.loads(shown.stdout)["result"]["bidi"] == "\u202eexe.txt"

    def test_json_keeps_a_key_that_holds_an_undecodable_name(self, workdir: Path) -> None:
        """A key holding a lone surrogate (a dict keyed by os.listdir's names) reads back as
        itself from every --json output: pydantic's JSON mode wrote it as U+FFFD."""
        (workdir / "keyed.py").write_text(
            "async def main(ctx):\n    return {'caf\\udce9.txt': 1, 'caf\\u00e9': 2}\n"
        )
        assert invoke("run", "keyed.py", "--quiet", "--session", "k").exit_code == 0
        listed = invoke("history", "list", "--json")
        (record,) = [json.loads(line) for line in listed.stdout.splitlines()]
        shown = invoke("history", "show", record["execution_id"], "--json")
        tail = invoke("audit", "tail", ".onlooker/audit/k", "--json")
        (finished,) = [
            json.loads(line) for line in tail.stdout.splitlines() if "ExecutionFinished" in line
        ]
        for result in (record["result"], json.loads(shown.stdout)["result"], finished["result"]):
            assert result == {"caf\udce9.txt": 1, "caf\u00e9": 2}
        assert listed.stdout.isascii() and shown.stdout.isascii() and tail.stdout.isascii()

    def test_what_the_program_prints_never_breaks_the_json(self, workdir: Path) -> None:
        (workdir / "chatty.py").write_text(CHATTY)
        result = invoke("run", "chatty.py", "--no-audit", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["result"] == 1

    def test_no_verify_hint_for_a_trail_never_written(self, workdir: Path) -> None:
        (workdir / "floats.py").write_text(FLOATS)
        (workdir / "aud" / "s" / "events.jsonl").mkdir(parents=True)  # where the file must go
        result = invoke("run", "floats.py", "--quiet", "--audit-dir", "aud", "--session", "s")
        assert "audit verify" not in result.stdout
        assert "audit:   no trail was written" in result.stdout
        as_json = invoke(
            "run", "floats.py", "--quiet", "--json", "--audit-dir", "aud", "--session", "s"
        )
        assert json.loads(as_json.stdout)["audit"] is None

    def test_control_characters_of_recorded_values_never_reach_the_terminal(
        self, workdir: Path
    ) -> None:
        """A recorded command may hold an escape sequence (cursor up, erase line) that would
        hide the lines above it: every view writes it out (``\\x1b``) instead."""
        (workdir / "sneaky.py").write_text(SNEAKY)
        ran = invoke("run", "sneaky.py", "--session", "s")
        execution_id = ran.stdout.split("history show ")[1].split()[0]
        views = {
            "run": ran,
            "tail": invoke("audit", "tail", ".onlooker/audit/s"),
            "show": invoke("history", "show", execution_id),
        }
        for name, view in views.items():
            assert view.exit_code in (0, 1), (name, view.output)
            assert "\x1b" not in view.output and "\u202e" not in view.output, name
            assert "\\x1b[1A" in view.output, name

    def test_a_newline_in_a_recorded_value_stays_on_its_events_line(self, workdir: Path) -> None:
        """cli.md: tail prints one line per event. A recorded command holding a newline
        (or U+2029, where splitlines breaks) would start a line of its own that passes for
        another event (the run finishing)."""
        (workdir / "forged.py").write_text(FORGED)
        ran = invoke("run", "forged.py", "--session", "s")
        tail = invoke("audit", "tail", ".onlooker/audit/s")
        assert tail.exit_code == 0, tail.output
        lines = tail.stdout.splitlines()
        assert len(lines) == 4, lines  # started, the call's two events, finished
        assert "shell(command=ls\\n99:00:00" in lines[1]
        assert "ls\\n99:00:00 ■ completed 3.94 s\\u202999:00:01" in lines[2]  # the error
        for view in (tail.stdout, ran.stderr):  # run's progress: the same lines
            assert not any(line.startswith("99:00:0") for line in view.splitlines()), view
        for as_json in (
            invoke("audit", "tail", ".onlooker/audit/s", "--json"),
            invoke("history", "list", "--json"),
        ):  # JSON Lines: one document per line, U+2029 escaped as JSON escapes it
            assert as_json.exit_code == 0, as_json.output
            documents = [json.loads(line) for line in as_json.stdout.splitlines()]
            assert as_json.stdout.isascii() and "\\u2029" in as_json.stdout
        assert len(documents) == 1 and "\u2029" in documents[0]["error"]["message"]

    def test_a_plain_db_path_with_a_urls_marks_is_that_file(self, workdir: Path) -> None:
        """cli.md: a plain path is read as a SQLite file, '?' and '#' in it too (they were
        read as a URL's query: --db 'q?x.db' made a file named 'q')."""
        (workdir / "floats.py").write_text(FLOATS)
        result = invoke("run", "floats.py", "--quiet", "--no-audit", "--db", "q?x#1%.db")
        assert result.exit_code == 0, result.output
        assert (workdir / "q?x#1%.db").is_file() and not (workdir / "q").exists()
        listing = invoke("history", "list", "--db", "q?x#1%.db", "--json")
        assert listing.exit_code == 0, listing.output
        assert len(listing.stdout.strip().splitlines()) == 1  # one execution, one JSON line

    def test_the_result_and_the_paths_are_text_not_markup(self, workdir: Path) -> None:
        (workdir / "brackets.py").write_text(BRACKETS)
        folder = workdir / "d[x]"
        result = invoke(
            "run", "brackets.py", "--quiet", "--db", f"{folder}/h.db", "--audit-dir", str(folder)
        )
        assert result.exit_code == 0, result.output
        assert 'result: "[/] and [bold]kept[/bold]"' in result.stdout
        assert f"--db 'sqlite:///{folder}/h.db'" in result.stdout  # quoted for the shell
        verify = next(line for line in result.stdout.splitlines() if line.startswith("audit:"))
        assert f"onlooker audit verify '{folder}/" in verify

    def test_a_trailing_backslash_is_shown_once(self, workdir: Path) -> None:
        (workdir / "backslash.py").write_text(BACKSLASH)
        result = invoke("run", "backslash.py", "--no-audit")
        assert result.exit_code == 0, result.output
        assert "echo(path=C:\\dir\\)" in result.stdout
        assert "echo(path=C:\\dir\\\\)" not in result.stdout + result.stderr
        assert "→ echo(path=C:\\dir\\)" in result.stderr

    def test_two_different_tools_of_one_name_are_a_usage_error(self, workdir: Path) -> None:
        (workdir / "twins.py").write_text(TWINS)
        result = invoke("run", "twins.py", "--quiet", "--no-audit")
        assert result.exit_code == 2, result.output
        assert "two different tools are named 't'" in result.output

    def test_one_tool_under_two_names_is_one_tool(self, workdir: Path) -> None:
        (workdir / "alias.py").write_text(ALIAS)
        result = invoke("run", "alias.py", "--quiet", "--no-audit")
        assert result.exit_code == 0, result.output
        assert "result: 1" in result.stdout

    def test_another_programs_database_is_refused_and_left_alone(self, workdir: Path) -> None:
        with contextlib.closing(sqlite3.connect(workdir / "app.db")) as db:
            db.execute("CREATE TABLE executions (x)")
            db.commit()
        result = invoke("run", str(EXAMPLE), "--db", "app.db", "--no-audit", "--quiet")
        assert result.exit_code == 1, result.output
        assert "not an onlooker history database" in result.output
        assert "Traceback" not in result.output
        assert sorted(os.listdir(workdir)) == ["app.db"]

    def test_an_explicit_database(self, workdir: Path) -> None:
        result = invoke("run", str(EXAMPLE), "--db", "other.db", "--no-audit", "--quiet")
        assert result.exit_code == 0, result.output
        assert (workdir / "other.db").exists()
        assert not (workdir / ".onlooker" / "history.db").exists()
        listing = invoke("history", "list", "--db", "other.db", "--json")
        assert len(listing.stdout.splitlines()) == 2  # the root and its child

    @pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
    def test_a_database_password_is_not_printed(self, workdir: Path, as_json: bool) -> None:
        """The test server trusts every login, so a URL with a password opens it."""
        cluster = postgres.cluster_or_skip()
        url = cluster.create_database()
        try:
            with_password = url.replace("@", ":s3cret-pw@", 1)
            extra = ["--json"] if as_json else []
            result = invoke("run", str(EXAMPLE), "--answer", ANSWER, "--no-audit", "--quiet",
                            "--db", with_password, *extra)  # fmt: skip
            assert result.exit_code == 0, result.output
            assert "s3cret-pw" not in result.output
            masked = with_password.replace("s3cret-pw", "***")
            if as_json:
                assert json.loads(result.stdout.splitlines()[-1])["history"] == masked
            else:
                assert f"--db {shlex.quote(masked)}" in result.output
        finally:
            cluster.drop_database(url)


class TestHistory:
    def test_list_as_json_lines(self, recorded: dict[str, Any]) -> None:
        records = recorded["records"]
        assert len(records) == 2
        assert {r["program"] for r in records} == {"main", "summarize"}
        assert all(r["status"] == "completed" for r in records)

    def test_list_filters(self, recorded: dict[str, Any]) -> None:
        failed = invoke("history", "list", "--status", "failed", "--json")
        assert failed.exit_code == 0 and failed.stdout == ""
        by_tool = invoke("history", "list", "--tool", "count_words", "--json", "--since", "1h")
        assert [json.loads(line)["program"] for line in by_tool.stdout.splitlines()] == [
            "summarize"
        ]
        paged = invoke("history", "list", "--limit", "1", "--json")
        lines = [json.loads(line) for line in paged.stdout.splitlines()]
        assert len(lines) == 2 and "next_cursor" in lines[-1]
        rest = invoke(
            "history", "list", "--limit", "1", "--json", "--cursor", lines[-1]["next_cursor"]
        )
        assert json.loads(rest.stdout.splitlines()[0])["execution_id"] != lines[0]["execution_id"]

    def test_list_as_a_table(self, recorded: dict[str, Any]) -> None:
        result = runner.invoke(app, ["history", "list"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        assert recorded["root"] in result.stdout
        assert "completed" in result.stdout

    def test_show(self, recorded: dict[str, Any]) -> None:
        result = invoke("history", "show", recorded["root"])
        assert result.exit_code == 0, result.output
        assert "fetch" in result.stdout and "summarize" in result.stdout

    def test_show_as_json(self, recorded: dict[str, Any]) -> None:
        result = invoke("history", "show", recorded["root"], "--json")
        tree = json.loads(result.stdout)
        assert tree["execution_id"] == recorded["root"]
        statuses = [call["status"] for call in tree["tool_calls"]]
        assert statuses.count("failed") == 1
        assert tree["interactions"][0]["status"] == "accepted"
        assert [child["program"] for child in tree["children"]] == ["summarize"]

    def test_show_an_unknown_id_exits_1(self, recorded: dict[str, Any]) -> None:
        result = invoke("history", "show", "no-such-execution")
        assert result.exit_code == 1
        assert "no-such-execution" in result.output
        escaped = invoke("history", "show", "\x1b[2Jx")  # written out once, not twice
        assert "no execution '\\x1b[2Jx' in the history" in escaped.output

    def test_stats(self, recorded: dict[str, Any]) -> None:
        result = invoke("history", "stats")
        assert result.exit_code == 0
        assert "fetch" in result.stdout and "executions: 2" in result.stdout
        data = json.loads(invoke("history", "stats", "--json").stdout)
        assert data["executions"] == 2
        fetch = next(t for t in data["tools"] if t["tool"] == "fetch")
        assert fetch["failed"] == 1

    @pytest.mark.parametrize(
        ("statement", "command"),
        [
            ("UPDATE executions SET started_at = 'yesterday'", ["list"]),
            ("UPDATE tool_calls SET started_at = 'soon'", ["show"]),
            ("UPDATE interactions SET resolved_at = 'x'", ["show"]),
            ("UPDATE tool_calls SET duration_ms = 'abc'", ["stats"]),
        ],
    )
    def test_a_row_edited_by_hand_exits_1_naming_it(
        self, recorded: dict[str, Any], workdir: Path, statement: str, command: list[str]
    ) -> None:
        with contextlib.closing(sqlite3.connect(workdir / ".onlooker" / "history.db")) as db:
            db.execute(statement)
            db.commit()
        if command == ["show"]:
            command = ["show", recorded["root"]]
        result = invoke("history", *command)
        assert result.exit_code == 1, result.output
        output = " ".join(result.output.split())  # as wrapped to the terminal's width
        assert "corrupt history row" in output and "of execution" in output


class TestAudit:
    def test_verify_an_intact_trail(self, recorded: dict[str, Any]) -> None:
        result = invoke("audit", "verify", str(recorded["trail"]))
        assert result.exit_code == 0, result.output
        assert "ok" in result.stdout

    def test_verify_a_tampered_trail_names_file_and_line(self, recorded: dict[str, Any]) -> None:
        path = trail_file(recorded["trail"])
        lines = path.read_text().splitlines(keepends=True)
        lines[3] = lines[3].replace("fetch", "fetcH").replace("search", "seArch")
        assert lines[3] != path.read_text().splitlines(keepends=True)[3]
        path.write_text("".join(lines))
        result = invoke("audit", "verify", str(recorded["trail"]))
        assert result.exit_code == 1
        assert path.name in result.stdout
        assert "4" in result.stdout

    def test_verify_a_torn_tail(self, recorded: dict[str, Any]) -> None:
        path = trail_file(recorded["trail"])
        with path.open("a") as handle:
            handle.write('{"seq": 99, "half a rec')
        result = invoke("audit", "verify", str(recorded["trail"]))
        assert result.exit_code == 1
        assert path.name in result.stdout

    def test_verify_the_audit_directory_checks_every_session(
        self, recorded: dict[str, Any]
    ) -> None:
        root = recorded["trail"].parent
        intact = invoke("audit", "verify", str(root))
        assert intact.exit_code == 0, intact.output
        assert "ok" in intact.stdout
        path = trail_file(recorded["trail"])
        lines = path.read_text().splitlines(keepends=True)
        lines[2] = lines[2].replace('"seq":2', '"seq":7')
        path.write_text("".join(lines))
        damaged = invoke("audit", "verify", str(root))
        assert damaged.exit_code == 1
        assert recorded["trail"].name in damaged.stdout

    def test_a_session_it_cannot_read_is_not_ok(self, tmp_path: Path) -> None:
        """An audit directory shared by users (sessions are mode 0700): a session verify
        cannot list is named and fails the check, never skipped under an "ok"."""
        from onlooker.plugins.audit import TrailWriter

        root = tmp_path / "audit"
        for session in ("s1", "s2"):
            with TrailWriter(root, session) as writer:
                writer.write([{"kind": "x", "n": n} for n in range(3)])
        (root / "s2").chmod(0)
        try:
            verified = onlooker_bound_by_modes("audit", "verify", str(root), "--json")
            replayed = onlooker_bound_by_modes(
                "audit", "replay", str(root), "--db", str(tmp_path / "h.db")
            )
        finally:
            (root / "s2").chmod(0o700)
        assert verified.returncode == 1, verified.stderr
        sessions = json.loads(verified.stdout)["sessions"]
        assert [(Path(s["path"]).name, s["ok"]) for s in sessions] == [("s1", True), ("s2", False)]
        assert sessions[1]["reason"] == "unreadable" and "s2" in sessions[1]["detail"]
        assert replayed.returncode == 1, replayed.stdout + replayed.stderr
        assert "s2" in replayed.stderr

    def test_the_only_session_it_cannot_read_is_not_ok_either(self, tmp_path: Path) -> None:
        """One session or many: the audit directory's unreadable session is named, exit 1."""
        from onlooker.plugins.audit import TrailWriter

        root = tmp_path / "audit"
        with TrailWriter(root, "s1") as writer:
            writer.write([{"kind": "x", "n": 0}])
        (root / "s1").chmod(0)
        try:
            verified = onlooker_bound_by_modes("audit", "verify", str(root), "--json")
        finally:
            (root / "s1").chmod(0o700)
        assert verified.returncode == 1, verified.stderr
        sessions = json.loads(verified.stdout)["sessions"]
        assert [(Path(s["path"]).name, s["ok"], s["reason"]) for s in sessions] == [
            ("s1", False, "unreadable")
        ]

    def test_verify_where_there_is_no_trail_is_a_usage_error(self, workdir: Path) -> None:
        (workdir / "empty").mkdir()
        result = invoke("audit", "verify", str(workdir / "empty"))
        assert result.exit_code == 2
        assert "no audit trail" in result.output

    def test_tail(self, recorded: dict[str, Any]) -> None:
        result = invoke("audit", "tail", str(recorded["trail"]))
        assert result.exit_code == 0
        assert "fetch" in result.stdout
        as_json = invoke("audit", "tail", str(recorded["trail"]), "--json")
        events = [onlooker.parse_event(line) for line in as_json.stdout.splitlines()]
        assert {e.execution_id for e in events} >= {recorded["root"]}
        assert events[0].kind == "ExecutionStarted"

    def test_tail_prints_one_line_per_event_however_long(self, workdir: Path) -> None:
        """A long line is not wrapped at the console's width: the wrapped rest of a recorded
        value would start a line of its own, one that can pass for another event's."""
        from onlooker.plugins import audit

        # 99:00:01, a time no event has ("12:00:01" is a real one's, once a day, in UTC)
        forged = "refused:by:policy:" + "-" * 25 + " 99:00:01 \u25a0 completed 0.9 ms"

        @onlooker.tool
        def deploy(target: str) -> None:
            raise onlooker.ToolError(forged)

        async def program(ctx: onlooker.ExecutionContext) -> None:
            await ctx.call("deploy", target="prod")

        async def record() -> None:
            trail = audit.plugin(directory=workdir / "trails", session_id="s")
            async with onlooker.ExecutionEngine(tools=[deploy], plugins=[trail]) as engine:
                await engine.execute(program)

        anyio.run(record)
        result = invoke("audit", "tail", str(workdir / "trails" / "s"))
        assert result.exit_code == 0
        lines = result.stdout.splitlines()
        assert len(lines) == 4  # started, call started, call failed, finished
        assert not any(line.startswith("99:00:01") for line in lines)
        assert forged in lines[2]

    def test_tail_of_the_audit_directory_names_a_session_to_tail(
        self, recorded: dict[str, Any]
    ) -> None:
        result = invoke("audit", "tail", ".onlooker/audit")
        assert result.exit_code == 2
        assert "holds the trails of 1 session(s)" in result.output
        words = " ".join(result.output.replace("│", " ").split())
        assert "onlooker audit tail .onlooker/audit/demo" in words

    def test_tail_of_the_audit_directory_names_the_newest_session(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """By when its trail was written, not by name: Claude Code's session ids are random."""
        monkeypatch.chdir(tmp_path)
        for age, session in enumerate(["zz-old", "aa-newest"]):
            trail = Path("audit") / session
            trail.mkdir(parents=True)
            (trail / "events.jsonl").write_text("")
            os.utime(trail / "events.jsonl", (1_000_000 + age, 1_000_000 + age))
        result = invoke("audit", "tail", "audit")
        assert result.exit_code == 2
        words = " ".join(result.output.replace("│", " ").split())
        assert "holds the trails of 2 session(s); tail the newest:" in words
        assert "onlooker audit tail audit/aa-newest" in words

    @pytest.mark.parametrize(
        "signature", ["async def main():", "async def main(ctx, extra):", "async def main(*, ctx):"]
    )
    def test_a_program_that_cannot_take_the_context_is_a_usage_error(
        self, workdir: Path, signature: str
    ) -> None:
        (workdir / "prog.py").write_text(f"{signature}\n    return 1\n")
        result = invoke("run", "prog.py", "--quiet")
        assert result.exit_code == 2
        words = " ".join(result.output.replace("│", " ").split())
        assert "must be an async function taking the ExecutionContext" in words
        assert not (workdir / ".onlooker").exists()  # nothing recorded for a program never run

    def test_replay_rebuilds_history_idempotently(
        self, recorded: dict[str, Any], workdir: Path
    ) -> None:
        target = f"sqlite:///{workdir / 'rebuilt.db'}"
        first = invoke("audit", "replay", str(recorded["trail"]), "--db", target)
        assert first.exit_code == 0, first.output
        again = invoke("audit", "replay", str(recorded["trail"]), "--db", target)
        assert again.exit_code == 0, again.output
        listing = invoke("history", "list", "--db", target, "--json")
        rebuilt = [json.loads(line) for line in listing.stdout.splitlines()]
        assert sorted(r["execution_id"] for r in rebuilt) == sorted(
            r["execution_id"] for r in recorded["records"]
        )
        shown = json.loads(
            invoke("history", "show", recorded["root"], "--db", target, "--json").stdout
        )
        assert len(shown["tool_calls"]) == 6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TestMetrics:
    def test_serve_outlives_a_database_it_cannot_read(
        self, recorded: dict[str, Any], workdir: Path
    ) -> None:
        """It serves the last figures and warns, rather than dying with a traceback."""
        assert EXECUTABLE is not None
        port = free_port()
        server = subprocess.Popen(
            [EXECUTABLE, "metrics", "serve", "--port", str(port), "--interval", "0.1"],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "40"},  # each message stays one line anyway
        )
        try:
            assert server.stderr is not None
            first = server.stderr.readline().decode()
            assert "serving the metrics" in first
            assert first.rstrip().endswith(f"at http://127.0.0.1:{port}/metrics")
            with contextlib.closing(sqlite3.connect(workdir / ".onlooker" / "history.db")) as db:
                db.execute("DROP TABLE tool_calls")
                db.commit()
            warning = server.stderr.readline().decode()
            assert "warning: cannot read" in warning and "no such table: tool_calls" in warning
            assert server.poll() is None, "still serving"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                assert 'tool="fetch"' in reply.read().decode()  # the last figures
        finally:
            server.terminate()
            server.wait(timeout=10)
            if server.stderr is not None:
                server.stderr.close()

    def test_a_database_that_fails_a_read_is_an_error_not_a_traceback(
        self, recorded: dict[str, Any], workdir: Path
    ) -> None:
        with contextlib.closing(sqlite3.connect(workdir / ".onlooker" / "history.db")) as db:
            db.execute("DROP TABLE tool_calls")
            db.commit()
        result = invoke("history", "stats")
        assert result.exit_code == 1
        output = " ".join(result.output.split())  # as wrapped to the terminal's width
        assert "the history database cannot be read" in output
        assert "no such table: tool_calls" in output
        assert "Traceback" not in output

    def test_serve_exposes_the_history(self, recorded: dict[str, Any], workdir: Path) -> None:
        assert EXECUTABLE is not None
        port = free_port()
        server = subprocess.Popen(
            [EXECUTABLE, "metrics", "serve", "--port", str(port)],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            body = ""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                        body = r.read().decode()
                    break
                except OSError:
                    if server.poll() is not None:
                        break
                    time.sleep(0.05)
            assert server.stderr is not None
            assert "onlooker_" in body, server.stderr.read().decode() if server.poll() else body
            assert 'tool="fetch"' in body
        finally:
            server.terminate()
            server.wait(timeout=10)
            if server.stderr is not None:
                server.stderr.close()


class TestEndToEnd:
    def test_run_as_a_real_process_on_a_fresh_database(self, tmp_path: Path) -> None:
        result = process("run", str(EXAMPLE), "--answer", ANSWER, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "fetch" in result.stdout and "unreachable" in result.stdout
        assert "report written" in result.stdout
        assert (tmp_path / ".onlooker" / "history.db").is_file()
        (trail,) = (tmp_path / ".onlooker" / "audit").iterdir()
        verify = process("audit", "verify", str(trail), cwd=tmp_path)
        assert verify.returncode == 0, verify.stdout + verify.stderr

    @pytest.mark.parametrize("as_json", [False, True])
    def test_what_run_prints_keeps_no_secret_the_stores_would_not(
        self, tmp_path: Path, as_json: bool
    ) -> None:
        """Progress lines, the summary's errors, the result and ``--json`` are redacted as
        history and the trail are: a log of the run is no leak."""
        program = tmp_path / "leaky.py"
        program.write_text(
            "import onlooker\n\n"
            "@onlooker.tool\n"
            "def connect(dsn: str, password: str) -> str:\n"
            '    raise ConnectionError(f"auth failed for {dsn} with password {password}")\n\n'
            "@onlooker.tool\n"
            "def get_password() -> str:\n"
            '    return "a tool whose name holds a secret word"\n\n'
            "async def main(ctx: onlooker.ExecutionContext) -> dict[str, str]:\n"
            "    await ctx.call(get_password)\n"
            "    try:\n"
            '        await ctx.call(connect, dsn="postgresql://bob:pa55w0rd-xyz@db/x",'
            ' password="hunter2-secret-pw")\n'
            "    except ConnectionError:\n"
            "        pass\n"
            '    return {"api_key": "sk-live-1234567890abcdef1234", "note": "ok"}\n'
        )
        result = process("run", str(program), *(["--json"] if as_json else []), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        printed = result.stdout + result.stderr
        assert "connect" in result.stderr and "[REDACTED:" in result.stdout
        for secret in ("pa55w0rd-xyz", "hunter2-secret-pw", "sk-live-1234567890abcdef1234"):
            assert secret not in printed
        if as_json:
            outcome = json.loads(result.stdout)
            assert outcome["result"] == {"api_key": "[REDACTED:secret_field]", "note": "ok"}
            (error,) = outcome["summary"]["errors"]
            assert "[REDACTED:url_credentials]" in error["message"]
            assert outcome["summary"]["tool_usage"] == {"connect": 1, "get_password": 1}

    @pytest.mark.parametrize("quiet", [False, True])
    def test_stdout_starts_with_the_tree(self, tmp_path: Path, quiet: bool) -> None:
        """As the docs show it: the line that ends the progress lines goes with them."""
        (tmp_path / "hello.py").write_text("async def main(ctx):\n    return 'hi'\n")
        result = process("run", "hello.py", "--no-audit", *(["-q"] if quiet else []), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("main ")
        assert result.stderr.endswith("\n\n") != quiet

    def test_run_as_json_keeps_what_subprocesses_print_off_stdout(self, tmp_path: Path) -> None:
        program = tmp_path / "shell.py"
        program.write_text(
            "import os, subprocess, sys\n"
            "import onlooker\n\n"
            "@onlooker.tool\n"
            "def sh(cmd: str) -> int:\n"
            "    return subprocess.run(cmd, shell=True).returncode\n\n"
            "async def main(ctx: onlooker.ExecutionContext) -> str:\n"
            '    await ctx.call(sh, cmd="echo from-subprocess")\n'
            '    os.write(1, b"from-fd-1\\n")\n'
            '    print("from-print")\n'
            '    return "ok"\n'
        )
        result = process("run", str(program), "--json", "--quiet", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["result"] == "ok"
        assert result.stderr.split() == ["from-subprocess", "from-fd-1", "from-print"]

    def test_ctrl_c_at_an_interactive_prompt_ends_the_run(self, tmp_path: Path) -> None:
        """The prompt waits in a thread for a person who never answers; Ctrl-C cancels the
        run, records it, and the process exits (it used to wait for that thread for ever)."""
        assert EXECUTABLE is not None
        (tmp_path / "ask.py").write_text(ASKS)
        process = subprocess.Popen(
            [EXECUTABLE, "run", "ask.py", "--interactive", "--no-audit", "--quiet"],
            cwd=tmp_path,
            stdin=subprocess.PIPE,  # open, and nobody types
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(tmp_path / "asking")
            time.sleep(0.5)  # the prompt's thread is reading by now
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 130
        finally:
            process.kill()
            assert process.stdin is not None
            process.stdin.close()
        assert statuses(tmp_path) == ["cancelled"]

    def test_sigterm_ends_the_run_recorded_cancelled(self, tmp_path: Path) -> None:
        """timeout, docker stop, systemd and CI stop a process with SIGTERM: the run is
        cancelled and recorded as Ctrl-C's is (it stayed 'running' for ever), exit 143."""
        assert EXECUTABLE is not None
        (tmp_path / "waits.py").write_text(WAITS)
        process = subprocess.Popen(
            [EXECUTABLE, "run", "waits.py", "--quiet"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(tmp_path / "waiting")
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 143
        finally:
            process.kill()
        assert statuses(tmp_path) == ["cancelled"]

    @pytest.mark.parametrize(
        ("signals", "code"),
        [
            ((signal.SIGINT,), 130),  # a blocking tool: the cancel waited for its end
            ((signal.SIGINT, signal.SIGINT), 130),  # an impatient user
            ((signal.SIGTERM, signal.SIGTERM), 143),  # timeout: the process and its group
        ],
    )
    def test_a_stop_during_a_blocking_tool_is_recorded_and_a_second_one_waits_for_it(
        self, tmp_path: Path, signals: tuple[signal.Signals, ...], code: int
    ) -> None:
        """The first signal stops even a synchronous tool at once; a second one arriving
        during the close is told to wait (it cut the close short: tracebacks, a hang)."""
        assert EXECUTABLE is not None
        (tmp_path / "blocks.py").write_text(BLOCKS)
        process = subprocess.Popen(
            [EXECUTABLE, "run", "blocks.py", "--quiet"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(tmp_path / "waiting")
            for number in signals:
                process.send_signal(number)
                time.sleep(0.005)
            assert process.wait(timeout=30) == code  # not the 60 s the tool sleeps
            assert process.stderr is not None
            assert "Traceback" not in process.stderr.read()
        finally:
            process.kill()
            if process.stderr is not None:
                process.stderr.close()
        assert statuses(tmp_path) == ["cancelled"]
        assert statuses(tmp_path, "tool_calls") == ["cancelled"]

    def test_a_program_that_catches_the_interrupt_is_stopped_all_the_same(
        self, workdir: Path
    ) -> None:
        """The stop also cancels the run from the event loop: catching ``KeyboardInterrupt``
        cannot keep it going. Run in this process, which gets its handlers back after."""
        (workdir / "stubborn.py").write_text(
            "import os, signal\n"
            "import anyio\n\n"
            "async def main(ctx):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C\n"
            "        await anyio.sleep(30)\n"
            "    except KeyboardInterrupt:\n"
            "        pass  # and carries on\n"
            "    await anyio.sleep(30)\n"
            "    return 'carried on'\n"
        )
        before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        result = invoke("run", "stubborn.py", "--quiet", "--no-audit")
        assert result.exit_code == 130
        assert {number: signal.getsignal(number) for number in before} == before
        assert statuses(workdir) == ["cancelled"]

    def test_a_question_the_program_gave_up_on_does_not_eat_the_next_answer(
        self, tmp_path: Path
    ) -> None:
        assert EXECUTABLE is not None
        (tmp_path / "gives_up.py").write_text(GIVES_UP)
        process = subprocess.Popen(
            [EXECUTABLE, "run", "gives_up.py", "--interactive", "--no-audit", "--json"],
            cwd=tmp_path,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(tmp_path / "second")
            time.sleep(0.3)  # the second prompt waits for its lines by now
            out, _ = process.communicate(b"y\nann\n", timeout=30)
        finally:
            process.kill()
        assert json.loads(out)["result"] == {"action": "accept", "content": {"name": "ann"}}


class TestReadOnlyCommands:
    @pytest.mark.parametrize(
        "args",
        [
            ["history", "list"],
            ["history", "stats"],
            ["history", "show", "some-id"],
            ["history", "list", "--db", "typo/runs.db"],
            ["history", "list", "--db", "sqlite:///typo/runs.db"],
        ],
    )
    def test_a_missing_database_is_an_error_and_nothing_is_created(
        self, workdir: Path, args: list[str]
    ) -> None:
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        assert "no history database" in result.output
        assert list(workdir.iterdir()) == []

    @pytest.mark.parametrize(
        "command",
        [
            ["history", "list"],
            ["history", "stats"],
            ["history", "show", "some-id"],
            ["metrics", "serve", "--port", "0"],
        ],
    )
    def test_a_database_that_is_not_onlookers_is_an_error_and_left_alone(
        self, workdir: Path, command: list[str]
    ) -> None:
        """A mistyped --db naming an application's SQLite file must not gain our tables."""
        import hashlib
        import sqlite3

        app_db = workdir / "app.db"
        with contextlib.closing(sqlite3.connect(app_db)) as conn:
            conn.execute("CREATE TABLE users (name TEXT)")
            conn.commit()
        before = hashlib.sha256(app_db.read_bytes()).hexdigest()
        result = invoke(*command, "--db", str(app_db))
        assert result.exit_code == 1, result.output
        assert "not an onlooker history database" in result.output
        assert hashlib.sha256(app_db.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in workdir.iterdir()) == ["app.db"]

    def test_an_older_onlookers_database_is_migrated_and_read(
        self, recorded: dict[str, Any], workdir: Path
    ) -> None:
        """Read commands open read-only, but an older onlooker's database is still read:
        it is migrated first, as opening it for writing would."""
        import sqlalchemy as sa

        from onlooker.plugins.history import tables

        url = f"sqlite:///{workdir / '.onlooker' / 'history.db'}"
        engine = sa.create_engine(url)
        with engine.begin() as conn:  # a version 1 database: the event log alone
            for table in (tables.interactions, tables.tool_calls, tables.executions):
                table.drop(conn)
            conn.execute(sa.update(tables.schema_version).values(version=1))
        engine.dispose()
        result = invoke("history", "list", "--json")
        assert result.exit_code == 0, result.output
        listed = [json.loads(line) for line in result.stdout.splitlines()]
        assert listed == recorded["records"]

    def test_a_path_option_written_with_equals_and_tilde_is_the_home(
        self, workdir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The shell expands no ``~`` in ``--audit-dir=~/x``: onlooker does, as for ``~/x``."""
        from onlooker._cli import main

        monkeypatch.setenv("HOME", str(workdir / "home"))
        args = ["run", str(EXAMPLE), "--answer", ANSWER, "--quiet", "--session", "t"]
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--audit-dir=~/trails", "--db=~/history.db"])
        assert exit_.value.code in (0, None)
        assert (workdir / "home" / "trails" / "t").is_dir()
        assert (workdir / "home" / "history.db").is_file()
        assert not (workdir / "~").exists()

    def test_a_history_lost_during_the_run_still_shows_the_summary_and_result(
        self, workdir: Path
    ) -> None:
        """The tree cannot be read back; the run completed, so it says so and exits 0."""
        (workdir / "prog.py").write_text(
            "import glob, os\n"
            "import onlooker\n\n"
            "async def main(ctx: onlooker.ExecutionContext) -> str:\n"
            "    for name in glob.glob('.onlooker/history.db*'):\n"
            "        os.remove(name)\n"
            "    os.mkdir('.onlooker/history.db')  # no database can be opened there\n"
            "    return 'finished'\n"
        )
        result = invoke("run", "prog.py", "--quiet", "--no-audit")
        assert result.exit_code == 0, result.output
        assert "the tree cannot be read back" in result.output
        assert "success rate" in result.output and '"finished"' in result.output

    def test_run_names_a_database_it_cannot_use(self, workdir: Path) -> None:
        """DESIGN section 9: a clear error that names the problem, not a traceback; the
        path whole, however long (it was cut across lines at the console's width)."""
        junk = workdir / ("a-rather-long-directory-name-" * 3) / "junk.db"
        junk.parent.mkdir()
        junk.write_text("not a database")
        result = invoke("run", str(EXAMPLE), "--quiet", "--no-audit", "--db", str(junk))
        assert result.exit_code == 1
        assert "error: cannot set up history database" in result.output
        assert str(junk) in result.output and "Traceback" not in result.output

    def test_metrics_serve_needs_an_existing_database(self, workdir: Path) -> None:
        result = invoke("metrics", "serve", "--port", "0")
        assert result.exit_code == 1
        assert "no history database" in result.output
        assert list(workdir.iterdir()) == []


class TestMachineReadable:
    def test_run_as_json(self, workdir: Path) -> None:
        result = invoke(
            "run", str(EXAMPLE), "--answer", ANSWER, "--quiet", "--json", "--session", "j"
        )
        assert result.exit_code == 0, result.output
        outcome = json.loads(result.stdout)
        assert outcome["status"] == "completed" and outcome["error"] is None
        assert outcome["result"] == "report written: 171 characters from 2 sources"
        assert outcome["summary"]["tool_calls"] == 6
        assert outcome["audit"].endswith(".onlooker/audit/j")

    def test_verify_and_replay_as_json(self, recorded: dict[str, Any], workdir: Path) -> None:
        verified = json.loads(invoke("audit", "verify", str(recorded["trail"]), "--json").stdout)
        assert verified["ok"] is True
        (session,) = verified["sessions"]
        assert session["records"] > 0 and session["reason"] is None
        target = f"sqlite:///{workdir / 'other.db'}"
        replayed = invoke("audit", "replay", ".onlooker/audit", "--db", target, "--json")
        assert replayed.exit_code == 0, replayed.output
        report = json.loads(replayed.stdout)
        assert report["new_events"] == session["records"]
        again = json.loads(
            invoke("audit", "replay", ".onlooker/audit", "--db", target, "--json").stdout
        )
        assert again["new_events"] == 0

    def test_verify_as_json_names_the_bad_line(self, recorded: dict[str, Any]) -> None:
        path = trail_file(recorded["trail"])
        lines = path.read_text().splitlines(keepends=True)
        lines[1] = lines[1].replace("read_file", "read_filE")
        path.write_text("".join(lines))
        result = invoke("audit", "verify", str(recorded["trail"].parent), "--json")
        assert result.exit_code == 1
        report = json.loads(result.stdout)
        assert report["ok"] is False
        assert report["sessions"][0]["first_bad"] == f"{path}:2"


class TestAuditDirectory:
    def test_replay_accepts_the_audit_directory(
        self, recorded: dict[str, Any], workdir: Path
    ) -> None:
        second = invoke("run", str(EXAMPLE), "--answer", ANSWER, "--session", "two", "--quiet")
        assert second.exit_code == 0
        target = f"sqlite:///{workdir / 'all.db'}"
        result = invoke("audit", "replay", ".onlooker/audit", "--db", target)
        assert result.exit_code == 0, result.output
        assert "from 2 sessions" in result.output
        listing = invoke("history", "list", "--db", target, "--json")
        assert len(listing.stdout.splitlines()) == 4

    def test_replay_of_a_directory_without_trails_is_a_usage_error(self, workdir: Path) -> None:
        (workdir / "empty").mkdir()
        result = invoke("audit", "replay", "empty", "--db", str(workdir / "x.db"))
        assert result.exit_code == 2
        assert not (workdir / "x.db").exists()

    @pytest.mark.parametrize("command", ["verify", "tail", "replay"])
    def test_a_path_that_holds_no_trail_is_a_usage_error(self, workdir: Path, command: str) -> None:
        (workdir / "empty").mkdir()
        (workdir / "notes.txt").write_text("not a trail\n")
        for path in ("empty", "notes.txt"):
            result = invoke(
                "audit", command, path, *(["--db", "x.db"] if command == "replay" else [])
            )
            assert result.exit_code == 2, (path, result.output)
        assert sorted(os.listdir(workdir)) == ["empty", "notes.txt"]  # nothing created


class TestInteractiveAndLayout:
    def test_end_of_input_declines_the_question(self, workdir: Path) -> None:
        result = runner.invoke(
            app, ["run", str(EXAMPLE), "--interactive", "--no-audit", "--quiet"], input=""
        )
        assert result.exit_code == 0, result.output
        assert "declined" in result.stdout
        assert "not approved" in result.stdout

    def test_history_list_fits_80_columns(self, recorded: dict[str, Any]) -> None:
        result = runner.invoke(app, ["history", "list", "--limit", "1"], env={"COLUMNS": "80"})
        assert result.exit_code == 0
        lines = result.stdout.splitlines()
        header = next(line for line in lines if "execution" in line)
        for column in ("program", "trigger", "status", "started (UTC)", "duration"):
            assert column in header
        assert all(len(line) <= 80 for line in lines if not line.startswith("more:"))
        (more,) = [line for line in lines if line.startswith("more: --cursor ")]
        token = more.removeprefix("more: --cursor ")
        assert invoke("history", "list", "--cursor", token, "--json").exit_code == 0

    @pytest.mark.parametrize("width", [77, 60, 40])
    def test_history_list_narrower_than_the_table_cuts_off_no_column(
        self, recorded: dict[str, Any], width: int
    ) -> None:
        result = runner.invoke(
            app, ["history", "list", "--limit", "1"], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0
        listed = json.loads(
            invoke("history", "list", "--limit", "1", "--json").stdout.split("\n")[0]
        )
        shown = " ".join(result.stdout.split())
        assert f"{listed['execution_id']} {listed['status']}" in shown
        assert f"{listed['program']} {listed['trigger']}" in shown and " ms" in shown
        lines = result.stdout.splitlines()
        assert all(len(line) <= width for line in lines if not line.startswith("more:"))
