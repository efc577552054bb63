"""The coding-agent hook's deny rules: fail-closed, decided before and apart from recording.

One table of payloads and rules, each with the decision the hook must print;
then the ways a decision could be slipped (no session id, a malformed
payload, a recording failure, recording switched off, unreadable rules).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import onlooker
from onlooker import ToolCallFinished, ToolCallStarted, ToolUseContext
from onlooker._cli import _claude_hook, main
from onlooker._cli._app import app
from onlooker._cli._rules import RuleError, load_rules
from onlooker.policies import DEFAULT_DENIED_COMMANDS, deny_commands
from test_cli_hook_support import (
    CWD,
    SESSION,
    Hook,
    bash,
    decision,
    hook_process,
    post,
    pre,
)

HOME = str(Path.home())
RULES = r"""# a comment, then one rule per line
git push .*--force
re:\bsudo\b
glob:rm -rf /*
write:.env
edit:config/prod.*
read:~/.ssh
path:/etc/shadow
tool:mcp__github__delete_*
ask: tool:WebFetch
ask: glob:git push *
deny: \bmkfs\b
"""

# (id, payload, expected decision or None)
TABLE: list[tuple[str, dict[str, Any], str | None]] = [
    ("regex anywhere", bash("t1", "cd repo && git push origin main --force"), "deny"),
    ("re: prefix", bash("t1", "echo hi; sudo reboot"), "deny"),
    ("glob, whole command", bash("t1", "rm -rf /var/lib/postgresql"), "deny"),
    ("glob, not a prefix", bash("t1", "echo rm -rf /home"), None),
    ("deny: prefix", bash("t1", "mkfs.ext4 /dev/sda1"), "deny"),
    ("a list command", pre("t1", "Bash", {"command": ["sudo", "ls"]}), "deny"),
    ("harmless command", bash("t1", "ls -la"), None),
    ("ask: glob", bash("t1", "git push origin main"), "ask"),
    ("deny wins over ask", bash("t1", "git push origin main --force"), "deny"),
    ("write a name", pre("t1", "Write", {"file_path": f"{CWD}/.env", "content": "A=1"}), "deny"),
    ("write another name", pre("t1", "Write", {"file_path": f"{CWD}/.envrc"}), None),
    ("write, relative", pre("t1", "Write", {"file_path": ".env"}), "deny"),
    ("edit at any depth", pre("t1", "Edit", {"file_path": f"{CWD}/config/prod.yml"}), "deny"),
    ("edit elsewhere", pre("t1", "Edit", {"file_path": f"{CWD}/config/dev.yml"}), None),
    ("multi-edit", pre("t1", "MultiEdit", {"file_path": "/srv/app/config/prod.json"}), "deny"),
    ("read a directory", pre("t1", "Read", {"file_path": f"{HOME}/.ssh/id_rsa"}), "deny"),
    ("read with ~", pre("t1", "Read", {"file_path": "~/.ssh/config"}), "deny"),
    ("read, dot-dot", pre("t1", "Read", {"file_path": f"{HOME}/x/../.ssh/id_ed25519"}), "deny"),
    ("grep a directory", pre("t1", "Grep", {"pattern": "x", "path": f"{HOME}/.ssh"}), "deny"),
    ("path: any access", pre("t1", "Read", {"file_path": "/etc/shadow"}), "deny"),
    ("read elsewhere", pre("t1", "Read", {"file_path": f"{CWD}/README.md"}), None),
    ("an MCP tool", pre("t1", "mcp__github__delete_repo", {"repo": "x"}), "deny"),
    ("another MCP tool", pre("t1", "mcp__github__get_issue", {"number": 1}), None),
    ("ask about a tool", pre("t1", "WebFetch", {"url": "https://example.com"}), "ask"),
    ("not a PreToolUse", post("t1", "Bash", {"command": "sudo ls"}, "ok"), None),
    ("no session_id", {**bash("t1", "sudo reboot"), "session_id": None}, "deny"),
    ("empty session_id", {**bash("t1", "sudo reboot"), "session_id": ""}, "deny"),
    ("no tool_input", {k: v for k, v in bash("t1", "x").items() if k != "tool_input"}, "deny"),
    ("tool_input not an object", {**bash("t1", "x"), "tool_input": "sudo ls"}, "deny"),
    ("no hook_event_name", {"tool_name": "Bash", "tool_input": {"command": "ls"}}, "deny"),
]


# Where a command starts, the built-in rules must see it: after a newline, a
# reserved word (then, do, else, {, !, time) or a prefix that runs the next word.
DEFAULTS_DENIED = [
    "cd /srv\nsudo apt-get install x",
    "make build\nshutdown -h now",
    "cd /\nsu -",
    "ls\n  reboot",
    "cd x &&\n  sudo ls",
    "if true; then sudo ls; fi",
    "if true\nthen\n  sudo ls\nfi",
    "if false; then :; else reboot; fi",
    "while true; do sudo ls; done",
    "{ sudo ls; }",
    "time sudo ls",
    "time -p sudo ls",
    "! sudo ls",
    "A=1 sudo ls",
    "env sudo ls",
    "exec reboot",
    "nohup /sbin/shutdown now",
    "cd x; time /usr/bin/sudo ls",
    "env -i sudo ls",
    "command -p sudo ls",
    "exec -a x sudo ls",
    'FOO="a b" sudo ls',
    "X='y z' reboot",
    "command -- sudo reboot",
    "bash -c ':(){ :|:& };:'",
    'sh -c ":(){ :|:& };:"',
]
DEFAULTS_ALLOWED = [
    "echo then sudo",
    "echo do reboot",
    "echo {sudo,x}",
    "thence sudo ls",
    "timeout 5 ls",
    "command -v sudo",
    "man sudo",
    "grep -n reboot\nls docs/",
    "git commit -m 'fix su typo'",
    "echo pseudo",
    "exec -a sudo ls",  # runs ls, calling it sudo
]


def library_denies(command: str) -> bool:
    """Whether ``onlooker.policies.deny_commands()`` (the built-in rules) refuses ``command``."""
    use = ToolUseContext("Bash", {"command": command}, "c1", onlooker.Attribution(), "e", False)
    return deny_commands().pre[0](use) is not None


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "deny.txt"
    path.write_text(RULES)
    return path


@pytest.fixture
def hook(tmp_path: Path) -> Hook:
    return Hook(tmp_path / "audit")


class TestTheTable:
    @pytest.mark.parametrize(("payload", "expected"), [(p, e) for _, p, e in TABLE],
                             ids=[name for name, _, _ in TABLE])  # fmt: skip
    def test_decision(
        self, hook: Hook, rules: Path, payload: dict[str, Any], expected: str | None
    ) -> None:
        printed = decision(hook(payload, "--deny-commands", str(rules)))
        assert (printed[0] if printed else None) == expected, printed

    def test_a_symbolic_link_to_a_denied_file_is_denied(
        self, hook: Hook, rules: Path, tmp_path: Path
    ) -> None:
        (tmp_path / "secret.env").write_text("A=1")
        link = tmp_path / "innocent.txt"
        link.symlink_to(tmp_path / ".env")
        payload = pre("t1", "Write", {"file_path": str(link), "content": "x"})
        assert decision(hook(payload, "--deny-commands", str(rules))) is not None

    def test_the_reason_is_plain_text_naming_the_rule_and_where_it_is(
        self, hook: Hook, rules: Path
    ) -> None:
        printed = decision(hook(bash("t1", "sudo reboot"), "--deny-commands", str(rules)))
        assert printed is not None
        reason = printed[1]
        assert reason == (
            f"onlooker denied this Bash call: the command matches the rule re:\\bsudo\\b "
            f"({rules}, line 3)"
        )
        assert "'" not in reason and "\\\\" not in reason  # no repr() anywhere

    def test_a_denied_call_is_recorded_blocked_with_its_rule(self, hook: Hook, rules: Path) -> None:
        hook(bash("t1", "rm -rf /var/lib/postgresql"), "--deny-commands", str(rules))
        *_, started, finished = hook.events()
        assert isinstance(started, ToolCallStarted) and isinstance(finished, ToolCallFinished)
        assert started.args["command"] == "rm -rf /var/lib/postgresql"
        assert finished.status == "blocked"
        assert finished.metadata["denied_by"] == "glob:rm -rf /*"  # the rule as written
        assert finished.error is not None and "glob:rm -rf /*" in finished.error.message

    def test_an_asked_call_is_recorded_with_its_rule(self, hook: Hook, rules: Path) -> None:
        payload = pre("t1", "WebFetch", {"url": "https://example.com", "prompt": "read"})
        hook(payload, "--deny-commands", str(rules))
        hook(post("t1", "WebFetch", payload["tool_input"], "page"), "--deny-commands", str(rules))
        finished = hook.events()[-1]
        assert isinstance(finished, ToolCallFinished)
        assert (finished.status, finished.metadata["asked_by"]) == ("completed", "tool:WebFetch")


class TestFailClosed:
    @pytest.mark.parametrize(
        ("content", "problem"),
        [
            (None, "cannot read the rule file"),
            ("ok\n(unclosed\n", "line 2"),
            ("glob:\n", "empty pattern"),
            (b"\xff\xfe not utf-8", "cannot read the rule file"),
        ],
    )
    def test_rules_that_cannot_be_read_deny_every_call_and_say_why(
        self, hook: Hook, tmp_path: Path, content: str | bytes | None, problem: str
    ) -> None:
        path = tmp_path / "deny.txt"
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        for payload in (bash("t1", "ls"), pre("t2", "Read", {"file_path": "README.md"})):
            printed = decision(hook(payload, "--deny-commands", str(path)))
            assert printed is not None and printed[0] == "deny"
            assert problem in printed[1] and str(path) in printed[1]
        assert hook(post("t1", "Bash", {"command": "ls"}, "ok"), "--deny-commands", str(path)) == ""

    def test_an_option_without_its_file_denies(self, hook: Hook) -> None:
        printed = decision(hook(bash("t1", "ls"), "--deny-commands"))
        assert printed is not None and printed[0] == "deny"

    @pytest.mark.parametrize("option", ["--audit-dir", "--history-db"])
    def test_an_option_missing_its_value_never_takes_the_rules_option_as_one(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
    ) -> None:
        """``--audit-dir $DIR --deny-commands FILE`` with ``$DIR`` empty keeps its rules."""
        path = tmp_path / "deny.txt"
        path.write_text("@defaults\n")
        monkeypatch.chdir(tmp_path)
        out = io.StringIO()
        monkeypatch.setattr(
            sys,
            "stdin",
            io.TextIOWrapper(io.BytesIO(json.dumps(bash("t1", "sudo reboot")).encode())),
        )
        monkeypatch.setattr(sys, "stdout", out)
        assert _claude_hook.run([option, "--deny-commands", str(path)]) == 0
        printed = decision(out.getvalue())
        assert printed is not None and printed[0] == "deny"
        assert not (tmp_path / "--deny-commands").exists()
        assert (
            f"option {option} needs a value" in (tmp_path / ".onlooker/audit/audit.err").read_text()
        )

    def test_option_values_starting_with_a_tilde_are_in_the_home(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A settings command holding ``--deny-commands=~/deny.txt``: no shell expands it."""
        (tmp_path / "deny.txt").write_text("@defaults\n")
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.chdir(tmp_path)
        payload = json.dumps(bash("t1", "sudo reboot")).encode()
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(SystemExit) as exit_:  # the console script's entry point
            main(["hook", "claude-code", "--audit-dir=~/trails", "--deny-commands=~/deny.txt"])
        assert exit_.value.code == 0
        printed = decision(out.getvalue())
        assert printed is not None and "rule sudo" in printed[1]
        assert (tmp_path / "trails").is_dir() and not (tmp_path / "~").exists()

    def test_malformed_input_is_denied_when_rules_are_on(self, hook: Hook, rules: Path) -> None:
        for raw in ("{not json", "[1, 2]", ""):
            printed = decision(hook(raw, "--deny-commands", str(rules)))
            assert printed is not None and printed[0] == "deny", raw
        assert hook("{not json") == ""  # no rules: nothing to enforce, only recorded problems

    @pytest.mark.parametrize("depth", [1000, 100_000])
    def test_input_nested_too_deeply_is_denied(
        self, tmp_path: Path, rules: Path, depth: int
    ) -> None:
        # Any tool whose input takes arbitrary JSON (an MCP tool) could carry it.
        payload = bash("t1", "sudo rm -rf /srv")
        text = json.dumps({**payload, "tool_input": {**payload["tool_input"], "x": "NEST"}})
        raw = text.replace('"NEST"', "[" * depth + "]" * depth)
        result = hook_process(tmp_path, raw, "--deny-commands", str(rules))
        assert (result.returncode, result.stderr) == (0, "")
        printed = decision(result.stdout)
        assert printed is not None and printed[0] == "deny"
        assert "is not JSON: JSON nested too deeply" in printed[1]
        (line,) = (tmp_path / "audit.err").read_text().splitlines()
        assert "nested too deeply" in json.loads(line)["message"]
        assert "sudo" not in line  # never the input itself

    def test_denies_even_when_recording_fails(self, tmp_path: Path, rules: Path) -> None:
        blocker = tmp_path / "audit"
        blocker.write_text("")
        result = hook_process(blocker, bash("t1", "sudo reboot"), "--deny-commands", str(rules))
        assert result.returncode == 0
        printed = decision(result.stdout)
        assert printed is not None and printed[0] == "deny"

    def test_denies_without_a_session_id_in_a_real_process(
        self, tmp_path: Path, rules: Path
    ) -> None:
        payload = {k: v for k, v in bash("t1", "sudo reboot").items() if k != "session_id"}
        result = hook_process(tmp_path, payload, "--deny-commands", str(rules))
        printed = decision(result.stdout)
        assert printed is not None and printed[0] == "deny"
        assert "no session_id" in (tmp_path / "audit.err").read_text()

    def test_a_hook_that_cannot_start_denies(
        self, rules: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from onlooker import _cli

        monkeypatch.setitem(sys.modules, "onlooker._cli._claude_hook", None)  # a broken install
        with pytest.raises(SystemExit) as exited:
            _cli.main(["hook", "claude-code", f"--deny-commands={rules}"])
        assert exited.value.code == 0
        printed = decision(capsys.readouterr().out)
        assert printed is not None and printed[0] == "deny"
        assert "the hook cannot start (ModuleNotFoundError: " in printed[1]
        with pytest.raises(ImportError):  # without rules there is nothing to enforce
            _cli.main(["hook", "claude-code"])

    def test_denies_when_recording_is_switched_off(
        self, hook: Hook, rules: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ONLOOKER_AUDIT_DISABLE", "1")
        printed = decision(hook(bash("t1", "sudo reboot"), "--deny-commands", str(rules)))
        assert printed is not None and printed[0] == "deny"
        assert not (hook.audit_dir / SESSION).exists()


class TestDefaults:
    @pytest.mark.parametrize("command", DEFAULTS_DENIED)
    def test_a_command_wherever_it_starts_is_denied(self, hook: Hook, command: str) -> None:
        path = hook.audit_dir.parent / "deny.txt"
        path.write_text("@defaults\n")
        printed = decision(hook(bash("t1", command), "--deny-commands", str(path)))
        assert printed is not None and printed[0] == "deny", command
        assert library_denies(command)

    @pytest.mark.parametrize("command", DEFAULTS_ALLOWED)
    def test_words_and_arguments_are_not_commands(self, hook: Hook, command: str) -> None:
        path = hook.audit_dir.parent / "deny.txt"
        path.write_text("@defaults\n")
        assert hook(bash("t1", command), "--deny-commands", str(path)) == ""
        assert not library_denies(command)

    def test_a_long_command_is_judged_in_linear_time(self) -> None:
        # Each place a command may start is searched only up to the next separator. No
        # timing is asserted (bench/ measures speed): a rule that backtracks again (the
        # 40 KB blob took 11.7 s) makes this test take minutes.
        long_word = "echo " + "QUJD" * 10_000 + " | base64 -d > model.bin"  # a 40 KB blob
        quoted = " ".join(f'VAR{n}="{n}"' for n in range(2_000)) + " ./build.sh"
        for command in (";A=1" * 100_000, "\n " * 100_000, ";{ " * 100_000, long_word, quoted):
            assert not library_denies(command)


class TestRuleFiles:
    def test_defaults_are_the_librarys(self, tmp_path: Path) -> None:
        path = tmp_path / "deny.txt"
        path.write_text("@defaults\nask: @defaults\n")
        rules = load_rules(path)
        names = [rule.text for rule in rules.rules if rule.decision == "deny"]
        assert names == list(DEFAULT_DENIED_COMMANDS)
        assert onlooker.policies.DEFAULT_DENIED_COMMANDS is DEFAULT_DENIED_COMMANDS

    def test_invalid_rules_name_the_file_and_line(self, tmp_path: Path) -> None:
        path = tmp_path / "deny.txt"
        path.write_text("# fine\nls\n[unclosed\n")
        with pytest.raises(RuleError, match=rf"{path}, line 3: .* in the rule \[unclosed"):
            load_rules(path)

    def test_a_byte_order_mark_is_not_part_of_the_first_rule(self, tmp_path: Path) -> None:
        path = tmp_path / "deny.txt"
        path.write_bytes("\ufeff@defaults\ntool:WebFetch\n".encode())
        names = [rule.text for rule in load_rules(path).rules]
        assert names == [*DEFAULT_DENIED_COMMANDS, "tool:WebFetch"]

    @pytest.mark.parametrize("line", ["Tool:WebFetch", "DENY: sudo", "Read:~/.ssh"])
    def test_a_kind_in_another_case_is_an_error_not_a_regex(
        self, tmp_path: Path, line: str
    ) -> None:
        path = tmp_path / "deny.txt"
        path.write_text(f"ls\n{line}\n")
        with pytest.raises(RuleError, match=rf"line 2: unknown kind {line.split(':')[0]}:"):
            load_rules(path)
        path.write_text(f"re:{line}\n")  # spelled out, it is a regular expression
        assert [rule.pattern for rule in load_rules(path).rules] == [line]

    def test_same_decisions_as_the_library_policy(self, tmp_path: Path) -> None:
        patterns = [r"\bsudo\b", r"git push .*--force", r"curl[^|]*\|\s*sh"]
        policy = deny_commands(patterns).pre[0]
        path = tmp_path / "rules.txt"
        path.write_text("\n".join(patterns) + "\nglob:npm publish*\n")
        rules = load_rules(path)
        globbed = deny_commands(["npm publish*"], syntax="glob").pre[0]
        commands = ["sudo ls", "ls", "git push x --force", "curl a | sh", "echo curl",
                    "pseudo x", "npm publish --tag next", "echo; npm publish"]  # fmt: skip
        for command in commands:
            use = ToolUseContext(
                "Bash", {"command": command}, "c1", onlooker.Attribution(), "e", False
            )
            library = policy(use) is not None or globbed(use) is not None
            assert (rules.match_command(command) is not None) == library, command


class TestHelpAndInstall:
    def test_help_shows_the_real_rule_syntax(self) -> None:
        result = CliRunner().invoke(app, ["hook", "claude-code", "--help"], env={"COLUMNS": "200"})
        text = " ".join(result.output.split())
        for syntax in (
            "glob:",
            "tool:",
            "write:",
            "read:",
            "ask:",
            "@defaults",
            "regular expression",
        ):
            assert syntax in text, syntax
        assert "re:REGEX" not in text

    @pytest.mark.parametrize("content", [None, "(unclosed\n"])
    def test_install_refuses_rules_it_cannot_read(
        self, tmp_path: Path, content: str | None
    ) -> None:
        rules = tmp_path / "deny.txt"
        if content is not None:
            rules.write_text(content)
        settings = tmp_path / "settings.json"
        result = CliRunner().invoke(
            app, ["hook", "install", "--settings", str(settings), "--deny-commands", str(rules)]
        )
        assert result.exit_code == 1
        assert str(rules) in " ".join(result.output.split())
        assert not settings.exists()

    def test_a_rule_written_from_the_help_denies(self, hook: Hook, tmp_path: Path) -> None:
        path = tmp_path / "deny.txt"
        path.write_text("re:\\bsudo\\b\n")
        assert decision(hook(bash("t1", "sudo ls"), "--deny-commands", str(path))) is not None
