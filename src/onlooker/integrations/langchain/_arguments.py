"""A LangChain tool's own validation of its arguments, done before onlooker records the call.

LangChain validates a tool's arguments against its ``args_schema`` inside
the tool's invocation, after ``awrap_tool_call``. The wrapper runs that same
validation first, so ``ToolCallStarted.args`` are what the tool receives
(``"2"`` coerced to ``2``, defaults filled, as ``BaseTool`` hands them on) and
a pre-hook's rewrite the tool would refuse is refused with a
``ToolInputError`` naming the hook. Arguments no hook rewrote go on as the
model sent them, so LangChain validates them once; a rewrite goes on
validated, and LangChain validates it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .._arguments import Validate

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = ["validator"]

_VARIADIC: Final = frozenset({"args", "kwargs"})
"""The fields pydantic makes for ``*args`` / ``**kwargs``: passed on only when given."""


def validator(tool: BaseTool | None) -> Validate | None:
    """The validation ``BaseTool`` applies to the model's arguments; ``None`` if it applies none.

    A tool with no pydantic (v2) ``args_schema`` (a JSON-schema dict, no
    schema, a pydantic v1 model), or one with aliased fields, is left to
    LangChain. The arguments the ``ToolNode`` injects later (state, store,
    runtime, the call id) are not the model's: the tool's
    ``tool_call_schema`` leaves them out.
    """
    schema = None if tool is None else tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None
    assert tool is not None  # a schema was found on it
    model: type[BaseModel] = schema
    call_schema = tool.tool_call_schema
    if not (isinstance(call_schema, type) and issubclass(call_schema, BaseModel)):
        return None
    if set(call_schema.model_fields) != set(schema.model_fields):
        model = call_schema  # injected arguments left out (and the schema's own validators)
    if any(_aliased(name, field) for name, field in model.model_fields.items()):
        return None  # validated by field name, LangChain's second pass might not accept them

    def validate(args: dict[str, Any]) -> dict[str, Any]:
        # As ``BaseTool._parse_input``: every field the input gave or that has a
        # default, by field name, with its validated value (models stay models),
        # and the extra keys a schema that allows them kept.
        parsed = model.model_validate(args)
        given = {
            name: getattr(parsed, name)
            for name in type(parsed).model_fields
            if name in parsed.model_fields_set or name not in _VARIADIC
        }
        return {**given, **(parsed.model_extra or {})}

    return validate


def _aliased(name: str, field: FieldInfo) -> bool:
    return any(alias not in (None, name) for alias in (field.alias, field.validation_alias))
