"""One copy of the rules the library and the coding-agent hook share.

``onlooker hook claude-code`` starts a fresh interpreter on every tool call a
coding agent makes, so what it needs from the library lives here, in a
module that imports only ``os`` and ``time`` when loaded (no ``typing``, no
pydantic; ``re`` and ``fnmatch`` only inside the functions that compile a
rule):

- the event envelope: :data:`SCHEMA_VERSION`, :data:`ENVELOPE_FIELDS`,
  :func:`envelope` and :func:`attribution` (the JSON form of the models in
  ``_events.py``; a test keeps the two equal);
- :func:`iso_time`, the ``at`` of events and audit records;
- :func:`lock_file` / :func:`unlock_file`, the exclusive lock concurrent
  writers of one file take (:func:`lock_file_within`: with a deadline);
- the session-id rule: :func:`is_session_id`, :func:`safe_session_id`;
- the audit switch: :data:`DISABLE_VARIABLE`, :func:`audit_disabled`;
- deny rules for shell commands: :data:`DEFAULT_DENIED_COMMANDS` and
  :func:`compile_command_rule`, used by ``policies.deny_commands()`` and by
  the hook's rule files alike;
- JSON without ``re``: :func:`json_loads`, :func:`json_loads_finite` (NaN and
  infinities read as None) and :func:`json_dumps` (compact, non-ASCII kept),
  CPython's own C scanner and encoder, as ``json`` uses them (an int too long
  for ``int()`` is read, and written, as a string saying so); importing
  ``json`` would import ``re``, ``enum`` and more, half the cost of a bare
  interpreter start, for a hook whose payload may need no regular
  expression at all;
- :func:`sha256`, CPython's own SHA-256 (``hashlib`` loads OpenSSL);
- :func:`truncate`, a long text cut with ``…[truncated N chars]`` (the stores, the summary);
- :func:`lazy_attribute`, the ``__getattr__`` (PEP 562) of the packages that
  load their public names on first use (``onlooker``, ``onlooker.plugins.audit``).
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing's: importing typing costs the hook milliseconds
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Mapping
    from typing import Any, Final, Literal

__all__ = [
    "ATTRIBUTION_FIELDS",
    "DEFAULT_DENIED_COMMANDS",
    "DISABLE_VARIABLE",
    "ENVELOPE_FIELDS",
    "SCHEMA_VERSION",
    "SESSION_ID_RULE",
    "attribution",
    "audit_disabled",
    "compile_command_rule",
    "envelope",
    "int_or_note",
    "is_session_id",
    "iso_time",
    "json_dumps",
    "json_loads",
    "json_loads_finite",
    "lock_file",
    "lock_file_within",
    "long_int_note",
    "noting_long_ints",
    "safe_session_id",
    "sha256",
    "truncate",
    "unlock_file",
    "without_long_ints",
    "without_surrogates",
]

# -- the event envelope ---------------------------------------------------------------------

SCHEMA_VERSION: Final = 1
"""The version of the event format written into every event's ``schema_version``."""

ENVELOPE_FIELDS: Final = (
    "kind",
    "event_id",
    "execution_id",
    "seq",
    "at",
    "attribution",
    "schema_version",
)
"""The fields every event carries besides its own (``_events._Envelope`` plus ``kind``)."""

ATTRIBUTION_FIELDS: Final = (
    "task_id",
    "phase",
    "parent_execution_id",
    "parent_tool_call_id",
    "depth",
    "intent_id",
)
"""The fields of :class:`onlooker.Attribution`, in its order."""


def attribution(
    *,
    parent_execution_id: str | None = None,
    parent_tool_call_id: str | None = None,
    depth: int = 0,
    task_id: str | None = None,
    phase: str | None = None,
    intent_id: str | None = None,
) -> dict[str, Any]:
    """The JSON form of an :class:`onlooker.Attribution`."""
    return {
        "task_id": task_id,
        "phase": phase,
        "parent_execution_id": parent_execution_id,
        "parent_tool_call_id": parent_tool_call_id,
        "depth": depth,
        "intent_id": intent_id,
    }


def envelope(
    kind: str,
    *,
    execution_id: str,
    seq: int,
    at: str,
    attribution: dict[str, Any] | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """The JSON form of an event's envelope; add the event's own fields to it.

    ``event_id`` defaults to 24 random hex digits (unique across processes).
    """
    return {
        "kind": kind,
        "event_id": event_id if event_id is not None else os.urandom(12).hex(),
        "execution_id": execution_id,
        "seq": seq,
        "at": at,
        "attribution": attribution if attribution is not None else _ROOT,
        "schema_version": SCHEMA_VERSION,
    }


_ROOT: Final = {
    "task_id": None,
    "phase": None,
    "parent_execution_id": None,
    "parent_tool_call_id": None,
    "depth": 0,
    "intent_id": None,
}


def iso_time(moment: float | None = None) -> str:
    """``moment`` (epoch seconds; now by default) as ISO 8601 UTC with microseconds and ``Z``.

    Built with ``time`` alone: importing ``datetime`` costs the hook a
    millisecond it does not need.
    """
    if moment is None:
        moment = time.time()
    micros = int(moment * 1_000_000) % 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + f".{micros:06d}Z"


# -- locks ----------------------------------------------------------------------------------

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only

    def lock_file(fd: int) -> None:
        """Wait for and take an exclusive lock on the open file ``fd``."""
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)

    def _try_lock(fd: int) -> bool:
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def unlock_file(fd: int) -> None:
        """Release the lock :func:`lock_file` took (closing ``fd`` releases it too)."""
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def lock_file(fd: int) -> None:
        """Wait for and take an exclusive lock on the open file ``fd``."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock_file(fd: int) -> None:
        """Release the lock :func:`lock_file` took (closing ``fd`` releases it too)."""
        fcntl.flock(fd, fcntl.LOCK_UN)


def lock_file_within(fd: int, seconds: float) -> bool:
    """Take the lock :func:`lock_file` takes, waiting at most ``seconds``; whether it was taken.

    For a process that must not hang behind a holder that never lets go.
    """
    deadline = time.monotonic() + seconds
    pause = 0.001
    while not _try_lock(fd):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True


# -- session ids ----------------------------------------------------------------------------

_ID_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
SESSION_ID_RULE: Final = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
"""What a session id must match, whole: it becomes a directory name."""


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a safe session id: :data:`SESSION_ID_RULE`, no path separator."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 128
        and value[0] not in "._-"
        and all(c in _ID_CHARS for c in value)
    )


def safe_session_id(raw: str) -> str | None:
    """``raw`` made a safe session id (other characters become ``_``), or None if none is left."""
    cleaned = "".join(c if c in _ID_CHARS else "_" for c in raw[:256]).lstrip("._-")[:128]
    return cleaned if is_session_id(cleaned) else None


# -- the audit switch -----------------------------------------------------------------------

DISABLE_VARIABLE: Final = "ONLOOKER_AUDIT_DISABLE"
"""The environment variable that turns audit recording off."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})


def audit_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``ONLOOKER_AUDIT_DISABLE`` is ``1``, ``true``, ``yes`` or ``on`` (any case).

    Any other value (``0``, ``false``, empty, unset) leaves recording on: an
    audit trail is only switched off on purpose.
    """
    value = (environ if environ is not None else os.environ).get(DISABLE_VARIABLE, "")
    return value.strip().lower() in _TRUE


# -- deny rules for shell commands -----------------------------------------------------------

_WORD: Final = r"[^\s;&|()<>`]*"
"""Part of one shell word, up to a space or a separator (which a search never scans past)."""
_BARE: Final = r"[^\s;&|()<>`'\"]*"
"""An unquoted word: no quote in it, so a quoted value can be read one way only (two ways
would make the repeated prefixes below try 2^n paths on a command they do not match)."""
_TOKENS: Final = r"[^\s;&|()<>`'\"\\]|\\[^\n]|\"[^\"\n]*\"|'[^'\n]*'|\$\(\(?[^()\n;&|`]*\)\)?"
_VALUE: Final = r"(?:" + _TOKENS + r"|`[^`\n;&|]*`)*"
"""A ``VAR=`` value: plain characters, escaped ones (``a\\ b``), quoted texts, ``$(...)``,
``$((...))`` and backticks (not nested), one token at a time; each token's first character
tells which it is (one way to read it)."""
_CASE_PATTERN: Final = r"\(?(?:\"[^\"\n]*\"|'[^'\n]*'|" + _BARE + r")\)"
"""A ``case`` branch's pattern, ``start)`` or ``(*)``: the command after it starts one."""


_VALUED: Final = "CEILPadfknosu"
"""The letters of the runners' options that take a value (``env -u NAME -C DIR``, ``nice -n 5``,
``time -f FORMAT -o FILE``, ``timeout -s KILL -k 5``, ``xargs -a -d -E -I -L -n -P -s``);
not ``env -S``, whose value is a command line."""
_RUNNER_OPTIONS: Final = (
    r"(?:[ \t]+(?:-[^\s;&|()<>`'\"" + _VALUED + r"]*"
    r"(?:[" + _VALUED + r"][ \t]*[^\s;&|()<>`]+)?|\d[\d.]*[smhd]?))*"
)
_RUNNERS: Final = r"(?:nohup|env|nice|time|timeout|xargs)" + _RUNNER_OPTIONS
"""Programs that run the command their arguments start, and their options: a word starting
with ``-``, letters (``-0r``) or a long option (``--null``, ``--signal=KILL``), or letters
ending with one of :data:`_VALUED` and its value, attached or the next word (``-n 5``,
``-sKILL``; no letter before it is one of them: each word is read one way only); and numbers
(``timeout 5``)."""


def _prefixes(value: str) -> str:
    """Any reserved words or prefixes that run the next word as a command, each a whole word."""
    return (
        r"(?:(?:[!{]|if|then|elif|else|do|while|until|builtin|eval"
        r"|command(?:[ \t]+-p)?(?:[ \t]+--)?"  # command -v only prints: not a run
        # programs that run their arguments, at a path or not (/usr/bin/env), after their
        # options (env -u NAME, nice -n 5, timeout -s KILL 5, xargs -I {}, time -p)
        r"|(?:" + _BARE + r"/)?(?:" + _RUNNERS + ")"
        # exec -a NAME: NAME is not run (a name of one character or more: an empty one would
        # let a run of blanks be split many ways, in exponential time)
        r"|exec(?:[ \t]+-a[ \t]+" + _BARE + r"[^\s;&|()<>`'\"]|[ \t]+-[cl]+)*"
        r"|\w+=" + value + r")[ \t]+)*"
    )


# A shell (sh, bash, zsh, ksh, dash, fish) and the options it takes before -c: -e,
# -o pipefail (-o NAME and -O NAME take a value), --login; four at most.
_SHELL: Final = r"\b(?:ba|z|k|da|fi)?sh"
_SHELL_OPTIONS: Final = r"(?:[ \t]+(?:[-+][a-zA-Z]*[oO][ \t]+[\w-]+|[-+][a-zA-Z]+|--[\w-]+)){0,4}"
_SEP: Final = (
    r"(?:(?:(?:^|[\n;&|])[ \t]*(?:" + _CASE_PATTERN + r"[ \t]+)?"
    # case WORD in PATTERN) ...: "in" after a case on that line (not in prose: "in (rare) x")
    r"|\bcase[ \t](?:(?!\bcase\b)[^\n;&|])*?\bin[ \t]+" + _CASE_PATTERN + r"[ \t]+"
    r"|\$?\([ \t]*"  # after "$(", a "WORD)" closes the substitution: no pattern
    # a function's body, one line: f() { sudo ls; }, function f { ...; } (the "{" is a prefix)
    r"|(?:\(\)|\bfunction[ \t]+"
    + _BARE
    + r"(?:[ \t]*\(\))?)[ \t]*(?=\{)"
    # the command a shell is given to run: sh -c 'CMD', bash -lc "CMD", bash -o pipefail -c,
    # bash <<< 'CMD' (a here-string is its script)
    # (four options at most before -c: each start of a search then scans a bounded text)
    # (the -c option's letters read one way only: before the c, none is a c; -o NAME and
    # -O NAME take a value)
    + r"|"
    + _SHELL
    + _SHELL_OPTIONS
    + r"?"
    r"(?:[ \t]+-[abd-zA-Z]*c[a-zA-Z]*[ \t]+|[ \t]*<<<[ \t]*)[\"']?[ \t]*)"
    + _prefixes(_VALUE)
    # A backtick opens or closes a substitution, and a value may hold one: after a
    # backtick, values hold none, or each one in a row of VAR=`x` would scan to the end.
    + r"|`[ \t]*"
    + _prefixes(r"(?:" + _TOKENS + r")*")
    + ")"
)
"""Command position: the start, or after a separator (a newline too), a subshell, a
substitution or a ``case`` pattern; then any reserved word or prefix that runs the next word
as a command (``then``, ``do``, ``{``, ``!``, ``time``, ``exec``, ``env``, ``nice``,
``timeout``, ``xargs``, ``VAR=value``, ...)."""
_NAME: Final = (
    # a quote right after "(": a subshell's or a substitution's ("('sudo')", "$('reboot')"),
    # or around a whole word ("f('sudo' ls)"); not a call's argument ("print('su')")
    r"(?:\\|(?<!\()[\"']|(?<=(?<![\w.\])])\()[\"']"
    r"|(?<=\()\"(?=[^\"\s]*\"[ \t])|(?<=\()'(?=[^'\s]*'[ \t]))?"
    r"(?:" + _WORD + r"/)?"
)
"""Before a program's name: a backslash or an opening quote (``\\sudo``, ``"sudo"``), a path."""
_END: Final = r"(?=$|[\s;&|)`<>'\"])"
"""The end of a word: a space, a separator, a redirection or a closing quote."""


def _operands(command: str, flag: str, target: str) -> str:
    """``command`` given ``flag`` and ``target`` among its arguments, in either order.

    Searched from each place ``command`` starts, this would take quadratic time on a
    command that repeats it (``rm -r rm -r ...``): so before its flag (or target) the
    scan stops at the next ``command``, and after it at the next ``command`` that reaches
    a flag (or target) itself, which a later start of the search finds as well.
    """
    flag, target = "(?:" + flag + ")" + _END, "(?:" + target + ")" + _END
    again = r"[^\s;&|]*\b" + command  # an argument where the command starts again
    # Arguments: words on this line (a newline ends the command; "\" + newline goes on),
    # up to a comment ("#" starting a word). A quoted text is part of its word, blanks,
    # "#" and newlines in it too ("build #1"); possessive, so a word is read one way only.
    word = r"""(?!#)(?:"[^"]*+"|'[^']*+'|[^\s;&|])++"""
    head = r"(?:" + _BLANKS + r"(?!" + again + r"\s|" + flag + "|" + target + r")" + word
    head += r")*" + _BLANKS
    flag_then = flag + r"(?:" + _BLANKS + r"(?!" + again + head + flag + r")" + word
    flag_then += r")*?" + _BLANKS + target
    target_then = target + r"(?:" + _BLANKS + r"(?!" + again + head + target + r")" + word
    target_then += r")*?" + _BLANKS + flag
    return r"\b" + command + r"[\"']?" + head + "(?:" + flag_then + "|" + target_then + ")"


_BLANKS: Final = r"(?:[ \t]|\\\n)+"
"""The blanks between a command's arguments: spaces, tabs, and escaped newlines."""


# the root or the home, as a whole argument: /, /*, //*, ~, ~/, "$HOME"/*, ${HOME}, ...
# ("${HOME:?}" too, and ${HOME:-x}: the home when it is set; not ${HOME:+x}, which is x)
# (a quote that closes the word ends it; one a path goes on after does not: "${HOME:?}"/x)
_ROOT_OR_HOME: Final = (
    r"[\"']?(?:/|~|\$\{?HOME\}?|\$\{HOME:?[-?=][^}\s;&|]*\})[\"']?[/*]*[\"']?"
    r"(?![\"'][^\s;&|)<>`\"'])"
)
_DOWNLOAD: Final = r"\b(?:curl|wget|fetch)(?![\w-])"  # not fetch-env, curl-config
_UNTIL_DOWNLOAD: Final = r"(?:(?!" + _DOWNLOAD + r")[^;&|])*"
_RM_RECURSIVE: Final = r"-[a-qs-zA-QS-Z]*[rR][a-zA-Z]*|--recursive"
# cd (or pushd) to the root or the home (cd alone: the home), then at once rm: * and ./* are
# that folder's
_IN_ROOT_OR_HOME: Final = (
    r"(?P<in_root>\b(?:cd(?:[ \t]+" + _ROOT_OR_HOME + r")?|pushd[ \t]+" + _ROOT_OR_HOME + ")"
    r"[ \t]*(?:&&|;|\n)(?:\s|\\\n)*" + _NAME + ")?"
)
# the runners that hand their standard input on to the program they run (xargs makes its
# lines the program's arguments: curl LIST | xargs -n1 sh -c '...' runs no download)
_INPUT_RUNNERS: Final = r"(?:nohup|env|nice|time|timeout)" + _RUNNER_OPTIONS
# a program a download is piped to that runs what it reads: a shell, or an interpreter
# reading its script from its standard input (python3 -, perl with no argument); through
# sudo and the runners (timeout 60 bash)
_RUNS_ITS_INPUT: Final = (
    r"\s*(?:(?:[^\s;&|]*/)?(?:sudo(?:[ \t]+-[^\s;&|]+)*|" + _INPUT_RUNNERS + r")\s+)*"
    r"(?:[^\s;&|]*/)?(?:(?:ba|z|k|da|fi)?sh\b"
    r"|(?:python[\d.]*(?:[ \t]+-[BbdEIOqsSuvx]+)*|perl|ruby|node)"
    r"(?:[ \t]+-(?=[\s;&|)]|$)|(?=[ \t]*(?:$|[\n;&|)]))))"
)
# a find's arguments that act on every file it finds, before -delete: the test -type alone
# (find ~ -type f -delete deletes every file), and what prints
_FIND_WORD: Final = r"[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s;&|'\"]+)"
_FIND_NO_TEST: Final = (
    r"(?:[ \t]+-(?:depth|xdev|mount|noleaf|print0?|(?:min|max)depth[ \t]+\d+|type[ \t]+[a-zA-Z,]+"
    r"|(?:printf|fprint0?)" + _FIND_WORD + "|fprintf" + _FIND_WORD + _FIND_WORD + r"))*"
)

DEFAULT_DENIED_COMMANDS: Final[Mapping[str, str]] = {
    # -r up to its first r or R (one way to read it): any option holding one, --recursive
    "rm-recursive-root": _IN_ROOT_OR_HOME
    + _operands("rm", _RM_RECURSIVE, _ROOT_OR_HOME + r"|(?(in_root)(?:\./)?\.?\*|(?!))"),
    # find on the root or the home deleting all it finds: no test (-name, -type) before
    "find-delete-root": (
        r"\bfind(?:[ \t]+-[HLP])*(?:[ \t]+"
        + _ROOT_OR_HOME
        + r")+"
        + _FIND_NO_TEST
        + r"[ \t]+-(?:delete|exec(?:dir)?[ \t]+"
        + _NAME
        + r"rm)"
        + _END
    ),
    "sudo": _SEP + _NAME + r"(?:sudo(?:edit)?|doas|pkexec|run0)\b",
    "su": _SEP + _NAME + r"su" + _END,
    "mkfs": r"\b(?:mkfs(?:\.\w+)?|mke2fs)\b"
    + "|"
    + _operands("wipefs", r"-[a-zA-Z]*a[a-zA-Z]*|--all", r"[\"']?/dev/[^\s;&|'\"]+[\"']?"),
    # up to the next dd at most (a later search starts there): linear on "dd dd dd ..."
    "dd-to-device": (
        r"\bdd\b(?:(?!\bdd\b)[^;&|])*?\bof=[\"']?/dev/"
        r"(?!(?:null|zero|full|stdout|stderr|tty|u?random)(?:$|[\s;&|\"'()`<>])|fd/|shm/)"
    ),
    "redirect-to-device": r">\|?\s*[\"']?/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)\w*",
    # the name starts a word or a quoted text (the lookbehind): tried once per word
    "fork-bomb": (
        r"(?<![^\s(){}|&;'\"])(?P<bomb>[^\s(){}|&;'\"]+)\s*\(\)\s*\{\s*(?P=bomb)\s*\|\s*(?P=bomb)\s*&\s*\}"
    ),
    # through any stages (| tee FILE | sh), each one stopping at a download too (where a
    # later search starts: linear)
    "download-piped-to-shell": (
        _DOWNLOAD + r"(?:" + _UNTIL_DOWNLOAD + r"\|)+" + _RUNS_ITS_INPUT + r"|"
        # or a shell given the download as its -c script or its file (no pipe): the install
        # lines of Homebrew and oh-my-zsh, bash <(curl ...), source <(curl ...), eval "$(curl)"
        # (options as a shell takes them before -c: -e, -o pipefail, --login; four at most)
        # (a here-string's text may follow its <<< at once: bash <<<"$(curl ...)")
        r"(?:" + _SHELL + _SHELL_OPTIONS + r"?(?:[ \t]+-[abd-zA-Z]*c[a-zA-Z]*[ \t]+"
        r"|[ \t]*<<<[ \t]*)|\beval[ \t]+)[\"']?(?:\$\(|`)[ \t]*(?:[^\s;&|()`]*/)?"
        + _DOWNLOAD
        # bash <(curl ...), bash < <(curl ...) (its standard input), source <(...), . <(...)
        + r"|(?:"
        + _SHELL
        + _SHELL_OPTIONS
        + r"(?:[ \t]+<)?|\bsource|(?<![^\s;&|(])\.)"
        r"[ \t]+<\([ \t]*(?:[^\s;&|()`]*/)?" + _DOWNLOAD
    ),
    "chmod-recursive-root": _operands(
        "chmod", r"-[a-zA-QS-Z]*R[a-zA-Z]*|--recursive", r"[\"']?/[/*]*[\"']?"
    ),
    "chown-recursive-root": _operands(
        "ch(?:own|grp)", r"-[a-zA-QS-Z]*R[a-zA-Z]*|--recursive", r"[\"']?/[/*]*[\"']?"
    ),
    "power": (
        _SEP
        + _NAME
        + r"(?:(?:systemctl[ \t]+(?:-[^\s;&|]*[ \t]+)*)?(?:shutdown|reboot|poweroff|halt)"
        + r"|(?:tel)?init[ \t]+[06])"
        + _END
    ),
}
"""The built-in command rules: rule name -> regular expression (``re.search``).

A floor against obvious accidents (``rm -rf /``, ``cd / && rm -rf *``,
``find / -delete``, ``sudo``, ``mkfs``, writing to a disk device, fork bombs,
``curl ... | sh``, ``chmod -R ... /``, ``chown -R ... /``, ``shutdown``), not a sandbox: a
determined program can spell a command in ways no pattern list foresees.
"""


def compile_command_rule(
    name: str, pattern: str | re.Pattern[str], syntax: Literal["regex", "glob"] = "regex"
) -> re.Pattern[str]:
    """One command rule compiled; ``ValueError`` naming the rule when it is invalid.

    ``syntax="regex"``: a regular expression found anywhere in the command
    (use ``re.search`` on the result). ``syntax="glob"``: a shell-style glob
    matched against the whole command (``*`` matches any text, ``/`` too).
    A compiled ``re.Pattern`` is returned as it is.
    """
    import re

    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"rule {name}: a pattern must be a non-empty string")
    if syntax == "glob":
        from fnmatch import translate

        return re.compile(r"\A" + translate(pattern))
    if syntax != "regex":
        raise ValueError(f"rule {name}: syntax must be 'regex' or 'glob', not {syntax!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"rule {name}: invalid regular expression: {exc}") from None


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters plus ``…[truncated N chars]``, if longer."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}…[truncated {len(text) - max_chars} chars]"


def without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (an undecodable file name) as U+FFFD: what UTF-8
    encoders take (a text column, a metric's label, XML)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


# -- JSON and SHA-256 without their heavy modules ---------------------------------------------


def _codec() -> tuple[
    Callable[[str | bytes], Any], Callable[[Any], str], Callable[[str | bytes], Any]
]:
    """``loads``, compact ``dumps`` and finite ``loads``, on ``_json`` (or ``json`` without it)."""
    try:
        from _json import encode_basestring, make_encoder, make_scanner

        class _Decoding:  # what the C scanner reads from json.JSONDecoder
            strict = True
            object_hook = None
            object_pairs_hook = None

            def __init__(
                self,
                parse_float: Callable[[str], Any],
                constants: dict[str, float | None],
                parse_int: Callable[[str], Any] = int,  # int itself: the scanner's fast path
            ) -> None:
                self.parse_float = parse_float
                self.parse_constant = constants.__getitem__
                self.parse_int = parse_int

        # typeshed: make_scanner takes a JSONDecoder; these attributes are all it reads
        scan = make_scanner(_Decoding(float, _CONSTANTS))  # type: ignore[arg-type]
        scan_finite = make_scanner(_Decoding(_finite_float, _NO_CONSTANTS))  # type: ignore[arg-type]
        # What reads an int too long for int() (json.loads refuses it): tried after a failure.
        scan_long = make_scanner(_Decoding(float, _CONSTANTS, int_or_note))  # type: ignore[arg-type]
        scan_long_finite = make_scanner(
            _Decoding(_finite_float, _NO_CONSTANTS, int_or_note)  # type: ignore[arg-type]
        )

        def default(value: object) -> Any:
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    except (ImportError, TypeError):  # pragma: no cover - another interpreter
        import json

        def loads_finite(text: str | bytes) -> Any:
            try:
                return json.loads(
                    text,
                    parse_float=_finite_float,
                    parse_constant=_NO_CONSTANTS.__getitem__,
                    parse_int=int_or_note,
                )
            except RecursionError:
                raise ValueError("JSON nested too deeply") from None

        encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

        def dumps_json(value: Any) -> str:
            try:
                return encode(value)
            except ValueError as exc:
                return noting_long_ints(exc, value, encode)

        return (lambda text: json.loads(text, parse_int=int_or_note), dumps_json, loads_finite)

    def loader(
        scan: Callable[[str, int], tuple[Any, int]],
        scan_long: Callable[[str, int], tuple[Any, int]],
        finite: bool,
    ) -> Callable[..., Any]:
        def loads(text: str | bytes) -> Any:
            if not isinstance(text, str):
                text = text.decode("utf-8")
            start = len(text) - len(text.lstrip(" \t\n\r"))
            try:
                value, end = scan(text, start)
            except StopIteration as stop:
                raise ValueError(f"Expecting value: char {stop.value}") from None
            except RecursionError:  # json's own error; a ValueError like every bad input
                raise ValueError("JSON nested too deeply") from None
            except Exception:  # an int too long for int(), or JSON that is not valid
                try:
                    value, end = scan_long(text, start)
                except Exception:  # the C scanner reports errors through json.decoder,
                    import json  # which may not be loaded yet: let json itself say what is wrong

                    try:
                        if finite:
                            return json.loads(
                                text,
                                parse_float=_finite_float,
                                parse_constant=_NO_CONSTANTS.__getitem__,
                                parse_int=int_or_note,
                            )
                        return json.loads(text, parse_int=int_or_note)
                    except RecursionError:  # a ValueError like every bad input
                        raise ValueError("JSON nested too deeply") from None
            rest = len(text) - len(text.rstrip(" \t\n\r"))
            if end != len(text) - rest:
                raise ValueError(f"Extra data: char {end}")
            return value

        return loads

    def dumps(value: Any) -> str:
        if isinstance(value, str):
            return str(encode_basestring(value))
        # A new encoder per call: its table of containers being encoded (the
        # circular-reference check) must not outlive a call that failed.
        encode = make_encoder({}, default, encode_basestring, None, ":", ",", False, False, True)
        try:
            return "".join(encode(value, 0))
        except ValueError as exc:
            return noting_long_ints(exc, value, dumps)

    return loader(scan, scan_long, False), dumps, loader(scan_finite, scan_long_finite, True)


def noting_long_ints(error: ValueError, value: Any, encode: Callable[[Any], str]) -> str:
    """After ``encode(value)`` raised ``error``: ``encode`` of ``value`` with each int too
    long for ``str()`` (json's ``ValueError``) replaced by :func:`long_int_note`; ``error``
    again when ``value`` holds no such int (a circular reference, say)."""
    try:
        noted = without_long_ints(value)
    except RecursionError:  # a circular reference: json's own error
        raise error from None
    if noted is value:
        raise error
    return encode(noted)


def long_int_note(value: int) -> str:
    """What stands for an int too long for JSON readers (``int()`` takes 4,300 digits)."""
    return f"<int of {value.bit_length()} bits: too long for JSON readers>"


def without_long_ints(value: Any) -> Any:
    """``value`` (JSON: lists, dicts, scalars) with each int ``str()`` refuses replaced by
    :func:`long_int_note`; ``value`` itself when it holds none. For failure paths: it walks."""
    kind = type(value)
    if isinstance(value, int) and kind is not bool:
        try:
            repr(value)
        except ValueError:
            return long_int_note(value)
        return value
    if kind is not dict and kind is not list and kind is not tuple:
        return value
    items = value.items() if kind is dict else enumerate(value)
    out: Any = None
    for key, item in items:
        new = without_long_ints(item)
        if new is not item:
            if out is None:
                out = dict(value) if kind is dict else list(value)
            out[key] = new
    return value if out is None else out


def int_or_note(digits: str) -> int | str:
    """A JSON integer; one with more digits than ``int()`` takes as a string saying so."""
    try:
        return int(digits)
    except ValueError:
        return f"<int of {len(digits.lstrip('-'))} digits: too long for JSON readers>"


_CONSTANTS: Final[dict[str, float | None]] = {
    "-Infinity": -1e999,
    "Infinity": 1e999,
    "NaN": 1e999 - 1e999,
}
_NO_CONSTANTS: Final[dict[str, float | None]] = dict.fromkeys(_CONSTANTS)


def _finite_float(text: str) -> float | None:
    """A JSON number as a float, or None when it is out of range (``1e999``)."""
    value = float(text)
    return value if value - value == 0 else None


json_loads, json_dumps, json_loads_finite = _codec()
"""``json.loads`` (``ValueError`` on bad input, nesting too deep included) and ``json.dumps``
with ``separators=(",", ":")`` and ``ensure_ascii=False``: the same C code, without importing
``json``. ``json_loads_finite`` reads ``NaN``, ``Infinity``, ``-Infinity`` and numbers out of a
float's range (``1e999``) as None, as onlooker's events hold them (JSON has no infinity or NaN):
what reads input that becomes a record."""

if TYPE_CHECKING:
    from hashlib import sha256
else:  # CPython's own SHA-256: loading OpenSSL through hashlib costs ~2.5 ms per hook call
    try:
        from _sha2 import sha256  # 3.12+
    except ImportError:
        try:
            from _sha256 import sha256  # 3.11
        except ImportError:  # pragma: no cover - a build without them
            from hashlib import sha256


# -- public names loaded on first use ----------------------------------------------------


def lazy_attribute(
    package: str, table: Mapping[str, str], name: str, submodules: frozenset[str] = frozenset()
) -> Any:
    """``package``'s public ``name``, imported from the module ``table`` maps it to.

    The body of a lazily loading package's ``__getattr__`` (PEP 562): the value is
    kept in the package, so each name is imported once. ``__import__`` rather than
    ``importlib.import_module``: importing importlib costs the hook about 1 ms.
    """
    module = table.get(name)
    if module is not None:
        value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
    elif name in submodules:
        value = __import__(f"{package}.{name}", fromlist=["__name__"])
    else:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    setattr(sys.modules[package], name, value)
    return value
