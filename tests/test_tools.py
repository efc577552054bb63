"""@tool: names, declarations, argument schemas, and clear errors for bad tools."""

from __future__ import annotations

from typing import Any

import pytest

import onlooker


def test_defaults_come_from_the_function() -> None:
    @onlooker.tool
    def read_file(path: str, limit: int = 10) -> str:
        """Read a file.

        More detail.
        """
        return path

    assert read_file.name == "read_file"
    assert read_file.description == "Read a file.\n\nMore detail."
    assert (read_file.mutating, read_file.reads, read_file.writes, read_file.edits) == (
        False,
        None,
        None,
        None,
    )
    assert read_file("a.md") == "a.md"  # calling the tool calls the function


def test_declarations_and_input_schema() -> None:
    @onlooker.tool(name="fs.write", description="Write.", mutating=True, writes="path")
    async def write(path: str, text: str = "") -> int:
        return len(text)

    assert (write.name, write.description, write.mutating, write.writes) == (
        "fs.write",
        "Write.",
        True,
        "path",
    )
    schema = write.input_schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"path", "text"}
    assert schema["required"] == ["path"]


def test_a_role_naming_no_parameter_is_an_error() -> None:
    def read(path: str) -> str:
        return path

    with pytest.raises(ValueError, match=r"reads='file'.*names no parameter"):
        onlooker.tool(reads="file")(read)


def test_a_bad_name_or_function_is_refused() -> None:
    def read(path: str) -> str:
        return path

    with pytest.raises(TypeError, match="a tool's name must be a non-empty string, not 5"):
        onlooker.tool(name=5)(read)  # type: ignore[call-overload]  # the point of the test
    with pytest.raises(TypeError, match="a tool's name must be a non-empty string, not ''"):
        onlooker.tool(name="")(read)
    with pytest.raises(TypeError, match="a tool is a function, not 'read'"):
        onlooker.tool("read")  # type: ignore[call-overload]  # the point of the test


@pytest.mark.parametrize("name", ["caf\udce9", "a\x00b", "\ud800", "café"])
def test_any_non_empty_name_is_a_tools_name(name: str) -> None:
    """A NUL or a lone surrogate (an undecodable file name made a tool's name) raised an
    internal error: no Python type may be named so. The tool keeps the name it was given."""

    def echo(x: int) -> int:
        return x

    declared = onlooker.tool(name=name)(echo)
    assert declared.name == name
    assert declared.validate_args({"x": "3"}) == {"x": 3}
    with pytest.raises(onlooker.ToolInputError) as info:
        declared.validate_args({"x": "three"})
    assert info.value.tool == name


def test_positional_only_parameters_are_refused() -> None:
    def positional(path: str, /) -> str:
        return path

    with pytest.raises(TypeError, match="passable by keyword"):
        onlooker.tool(positional)


def test_validation_names_every_problem() -> None:
    @onlooker.tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add.validate_args({"a": "1", "b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(onlooker.ToolInputError) as info:
        add.validate_args({"a": "one", "c": 3})
    message = str(info.value)
    assert "'add'" in message and "a:" in message and "b:" in message and "c:" in message
    assert info.value.tool == "add"


def test_two_tools_with_one_name_are_refused() -> None:
    def first() -> None: ...

    def second() -> None: ...

    tools: list[onlooker.Tool[..., Any]] = [
        onlooker.tool(name="same")(first),
        onlooker.tool(name="same")(second),
    ]
    with pytest.raises(ValueError, match="two tools are named 'same'"):
        onlooker.ExecutionEngine(tools=tools)
