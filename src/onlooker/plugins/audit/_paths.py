"""Shortening absolute paths (an opt-in of the redactor: paths are evidence).

Standard library only (the coding-agent hook imports it).
"""

from __future__ import annotations

import os

from ._secrets import Rule

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    import re
    from typing import Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = ["PathShortener", "clean_dir"]

# An absolute path token: a "/" not preceded by a word character, a dot, a
# colon, a slash or "~" (so URLs, "and/or" and relative paths are left alone).
_PATH: Final = Rule("path", r"""/(?<![\w.:/~$@\\-]/)[^\s"'`;|&<>()\[\]{},=]+""")


def clean_dir(path: str | os.PathLike[str]) -> str:
    """``path`` absolute and normalized."""
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def working_dir() -> str:
    """The working directory, absolute and normalized; ``""`` when it was removed.

    A process whose working directory was removed (a daemon, a test in a
    temporary directory) still records: no path is inside ``""``.
    """
    try:
        return clean_dir(os.getcwd())
    except OSError:
        return ""


@final
class PathShortener:
    """Absolute paths outside ``cwd`` as ``~/...`` under ``home``, else their base name."""

    def __init__(self, cwd: str, home: str) -> None:
        self.cwd: Final = cwd
        self.home: Final = home

    def shorten_all(self, text: str) -> str:
        """``text`` with every absolute path in it shortened."""
        if "/" not in text:
            return text
        path = _PATH.pattern
        if path.search(text) is None:
            return text
        return path.sub(self._shorten, text)

    def shorten_path(self, path: str) -> str:
        """One absolute path shortened (kept as given inside ``cwd``)."""
        normal = os.path.normpath(path)
        if _inside(normal, self.cwd):
            return path
        if _inside(normal, self.home):
            return "~" if normal == self.home else "~/" + os.path.relpath(normal, self.home)
        return os.path.basename(normal) or path

    def _shorten(self, match: re.Match[str]) -> str:
        return self.shorten_path(match.group(0))


def _inside(path: str, directory: str) -> bool:
    if not directory:  # a working directory that was removed holds nothing
        return False
    if directory == "/":
        return True
    return path == directory or path.startswith(directory + "/")
