"""Write the generated parts of a lazily importing package's ``__init__.py`` from its table.

A package that loads its public names on first use (PEP 562, so that the coding-agent
hook's ``import onlooker`` stays cheap) has one table, ``_LAZY``, mapping each public
name to the private module that defines it. Type checkers cannot read that table, so
two views of it are written into the file between marker lines, from the table alone:

- the ``TYPE_CHECKING`` imports, what mypy and editors read;
- ``__all__``, plainly sorted, what ``from onlooker import *`` and the docs read.

Edit only the table, then run ``make exports``. ``tests/test_exports.py`` fails while
a generated part differs from what this script would write.

Run: ``.venv/bin/python tools/public_api.py [--check]``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    ROOT / "src" / "onlooker" / "__init__.py",
    ROOT / "src" / "onlooker" / "plugins" / "audit" / "__init__.py",
)
BEGIN = "# --- generated from _LAZY by tools/public_api.py (make exports); do not edit ---"
END = "# --- end of generated code ---"
LINE_LENGTH = 100


def read_table(source: str) -> dict[str, str]:
    """The ``_LAZY`` table of a package's ``__init__.py``: public name -> module."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "_LAZY"
            and node.value is not None
        ):
            table = ast.literal_eval(node.value)
            if isinstance(table, dict):
                return {str(name): str(module) for name, module in table.items()}
    raise ValueError("no `_LAZY: dict[str, str] = {...}` table at the top level")


def isort_key(name: str) -> tuple[int, list[int | str]]:
    """ruff's isort order within one import: CONSTANTS, then Classes, then the rest.

    Within each, case-insensitive and numbers by value (``Tool2`` before
    ``Tool10``); a one-letter capital (``T``) is a class, as ruff has it.
    """
    if len(name) > 1 and name.isupper():
        kind = 0
    elif name[:1].isupper():
        kind = 1
    else:
        kind = 2
    parts = re.split(r"(\d+)", name.lower())
    return (kind, [int(part) if part.isdigit() else part for part in parts])


def import_lines(table: dict[str, str], indent: str) -> list[str]:
    """One ``from .module import ...`` per module, as ruff's formatter and isort write it."""
    by_module: dict[str, list[str]] = defaultdict(list)
    for name, module in table.items():
        by_module[module].append(name)
    lines: list[str] = []
    for module in sorted(by_module):
        names = sorted(by_module[module], key=isort_key)
        one_line = f"{indent}from .{module} import {', '.join(names)}"
        if len(one_line) <= LINE_LENGTH:
            lines.append(one_line)
        else:
            lines.append(f"{indent}from .{module} import (")
            lines.extend(f"{indent}    {name}," for name in names)
            lines.append(f"{indent})")
    return lines


def all_lines(table: dict[str, str]) -> list[str]:
    lines = ["__all__ = [  # noqa: RUF022  # plainly sorted, one name per line"]
    lines.extend(f'    "{name}",' for name in sorted(table))
    lines.append("]")
    return lines


def regenerate(source: str) -> str:
    """The file with both generated regions rewritten from its table."""
    table = read_table(source)
    lines = source.splitlines()
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 2 or len(ends) != 2:
        raise ValueError(f"expected two generated regions marked {BEGIN!r} ... {END!r}")
    imports_begin, all_begin = begins
    imports_end, all_end = ends
    indent = lines[imports_begin][: len(lines[imports_begin]) - len(BEGIN)]
    return "\n".join(
        [
            *lines[: imports_begin + 1],
            *import_lines(table, indent),
            *lines[imports_end : all_begin + 1],
            *all_lines(table),
            *lines[all_end:],
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale = []
    for path in PACKAGES:
        current = path.read_text()
        wanted = regenerate(current)
        if current != wanted:
            stale.append(path)
            if not args.check:
                path.write_text(wanted)
    verb = "stale" if args.check else "rewritten"
    for path in stale:
        print(f"{verb}: {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
