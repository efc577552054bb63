"""Load ``PROGRAM.py[:function]`` for ``onlooker run``: the program and its tools."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from onlooker import Tool

__all__ = ["LoadError", "LoadedProgram", "load_program", "split_target"]


class LoadError(Exception):
    """The program file, its function or its tools cannot be used."""


@dataclass(frozen=True)
class LoadedProgram:
    """A program function and the tools it runs with."""

    name: str
    function: Callable[..., Any]
    tools: list[Tool[..., Any]]


def split_target(target: str) -> tuple[Path, str]:
    """``path/to/prog.py:fn`` -> (path, "fn"); the function defaults to ``main``."""
    path, sep, function = target.rpartition(":")
    if sep and path.endswith(".py") and function.isidentifier():
        return Path(path), function
    return Path(target), "main"


def load_program(target: str) -> LoadedProgram:
    """Import the program file and find its function and its tools.

    The tools are the module's ``TOOLS`` list when it has one, otherwise
    every module-level :class:`onlooker.Tool` (what ``@onlooker.tool``
    returns).
    """
    path, function_name = split_target(target)
    if path.suffix != ".py":
        raise LoadError(f"{str(path)!r} is not a Python file (expected PROGRAM.py[:function])")
    if not path.is_file():
        raise LoadError(f"no such program file: {str(path)!r}")
    module = _import(path)
    function = getattr(module, function_name, None)
    if function is None:
        raise LoadError(f"{path} has no function {function_name!r}")
    if not inspect.iscoroutinefunction(function) or not _takes_one_argument(function):
        raise LoadError(
            f"{path}:{function_name} must be an async function taking the ExecutionContext "
            "(async def main(ctx: onlooker.ExecutionContext) -> ...)"
        )
    return LoadedProgram(f"{path.stem}:{function_name}", function, _tools_of(module, path))


def _takes_one_argument(function: Any) -> bool:
    try:
        inspect.signature(function).bind(None)
    except TypeError:
        return False
    except ValueError:  # no signature to read: let the call say
        return True
    return True


def _import(path: Path) -> ModuleType:
    name = f"onlooker_program_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic and dataclasses look their module up by name
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the program may import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise LoadError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _tools_of(module: ModuleType, path: Path) -> list[Tool[..., Any]]:
    declared = getattr(module, "TOOLS", None)
    if declared is None:
        found = [value for value in vars(module).values() if isinstance(value, Tool)]
    elif not isinstance(declared, list | tuple) or not all(isinstance(t, Tool) for t in declared):
        raise LoadError(
            f"{path}: TOOLS must be a list of onlooker tools (made with @onlooker.tool)"
        )
    else:
        found = list(declared)
    tools: dict[str, Tool[..., Any]] = {}
    for tool in found:
        if tools.setdefault(tool.name, tool) is not tool:  # the same tool twice is one tool
            raise LoadError(f"{path}: two different tools are named {tool.name!r}")
    return list(tools.values())
