"""``audit.err``: the problems of a trail, one JSON line each, beside it.

Standard library only (the coding-agent hook imports it).
"""

from __future__ import annotations

import os

from onlooker._shared import iso_time, json_dumps

TYPE_CHECKING = False  # not typing's: the hook imports this module
if TYPE_CHECKING:
    from typing import Any, Final, final
else:

    def final(cls: type) -> type:
        return cls


__all__ = ["ERROR_NAME", "Sidecar"]

ERROR_NAME: Final = "audit.err"
"""The sidecar file's name, in the session directory (or, failing that, the trail's root)."""
_MAX_UNREPORTED: Final = 1000  # problems held while the disk refuses them


@final
class Sidecar:
    """Appends problems to ``<session>/audit.err``, falling back to ``<directory>/audit.err``.

    When neither can be written (a full disk), problems are held (the last
    1,000) and appended, marked ``"delayed": true``, by :meth:`report_late`.
    """

    def __init__(self, directory: str, session_dir: str, session_id: str) -> None:
        self.path: Final = os.path.join(session_dir, ERROR_NAME)
        self._fallback: Final = os.path.join(directory, ERROR_NAME)
        self._session_id: Final = session_id
        self._held: list[dict[str, Any]] = []
        self._lost = 0

    @property
    def holding(self) -> bool:
        """Whether problems wait to be written."""
        return bool(self._held)

    def report(self, message: str, **fields: object) -> bool:
        """Append one problem; never raises. Returns whether it was written now."""
        entry = {"at": iso_time(), "session_id": self._session_id, "message": message, **fields}
        if self._append(json_dumps(entry)):
            return True
        self._held.append(entry)
        if len(self._held) > _MAX_UNREPORTED:
            del self._held[0]
            self._lost += 1
        return False

    def report_late(self) -> None:
        """The problems the disk refused to record when they happened, now that it takes writes."""
        held, self._held = self._held, []
        if self._lost:
            held.insert(
                0,
                {
                    "at": iso_time(),
                    "session_id": self._session_id,
                    "message": f"{self._lost} older problem report(s) were lost",
                },
            )
            self._lost = 0
        lines = "\n".join(json_dumps({**entry, "delayed": True}) for entry in held)
        if not self._append(lines):
            self._held = held + self._held

    def _append(self, line: str) -> bool:
        data = (line + "\n").encode("utf-8", "backslashreplace")
        for path in (self.path, self._fallback):
            try:
                os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError:
                continue
            start, written = -1, 0
            try:
                start = os.fstat(fd).st_size
                view = memoryview(data)
                while written < len(data):  # a disk that fills mid-line writes part of it
                    wrote = os.write(fd, view[written:])
                    if not wrote:
                        raise OSError("no byte written")
                    written += wrote
                return True
            except OSError:
                # Never leave a torn line, which would also spoil the next one appended:
                # cut the file back, as the trail does, when it ends with our part alone
                # (another process's report appended meanwhile is left whole).
                try:
                    if written and os.fstat(fd).st_size == start + written:
                        os.ftruncate(fd, start)
                except OSError:
                    pass
                continue
            finally:
                os.close(fd)
        return False
