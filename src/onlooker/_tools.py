"""``@tool``: plain typed functions declared as tools, validated with pydantic."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, final, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ._errors import ToolInputError

__all__ = ["Tool", "ToolRegistry", "tool"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@final
class Tool(Generic[P, R_co]):
    """A function declared with ``@onlooker.tool``; calling it calls the function.

    ``reads``, ``writes`` and ``edits`` name the argument that holds a file
    path the tool reads, writes or edits; ``mutating`` marks tools that
    change the world (governed by ``policies.require_intent()``).
    """

    __slots__ = (
        "__wrapped__",
        "_params_model",
        "description",
        "edits",
        "fn",
        "is_async",
        "mutating",
        "name",
        "reads",
        "writes",
    )

    def __init__(
        self,
        fn: Callable[P, R_co],
        *,
        name: str | None = None,
        description: str | None = None,
        mutating: bool = False,
        reads: str | None = None,
        writes: str | None = None,
        edits: str | None = None,
    ) -> None:
        self.fn = fn
        self.__wrapped__ = fn
        self.name: str = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.description: str = description or inspect.cleandoc(fn.__doc__ or "")
        self.mutating = mutating
        self.reads = reads
        self.writes = writes
        self.edits = edits
        self.is_async = inspect.iscoroutinefunction(fn)
        self._params_model = _params_model(fn, self.name)
        for role, arg in (("reads", reads), ("writes", writes), ("edits", edits)):
            if arg is not None and arg not in self._params_model.model_fields:
                raise ValueError(
                    f"tool {self.name!r}: {role}={arg!r} names no parameter of the function"
                )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name!r}>"

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments."""
        return self._params_model.model_json_schema()

    def validate_args(
        self, args: Mapping[str, object], *, hook: str | None = None
    ) -> dict[str, Any]:
        """Validate and coerce ``args`` against the signature; raises ``ToolInputError``."""
        try:
            validated = self._params_model.__pydantic_validator__.validate_python(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            source = f" (input modified by hook {hook!r})" if hook else ""
            raise ToolInputError(
                f"invalid arguments for tool {self.name!r}{source}: {problems}",
                tool=self.name,
                hook=hook,
            ) from None
        return validated.__dict__  # type: ignore[no-any-return]

    async def invoke(self, args: dict[str, Any]) -> Any:
        """Run the tool with already validated arguments."""
        if self.is_async:
            return await self.fn(**args)  # type: ignore[call-arg,misc]  # validated kwargs
        result = self.fn(**args)  # type: ignore[call-arg]
        if inspect.isawaitable(result):
            return await result
        return result


def _params_model(fn: Callable[..., Any], tool_name: str) -> type[BaseModel]:
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {tool_name!r}: cannot resolve its type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    extra = "forbid"
    for param in signature.parameters.values():
        if (
            param.kind is inspect.Parameter.VAR_POSITIONAL
            or param.kind is inspect.Parameter.POSITIONAL_ONLY
        ):
            raise TypeError(
                f"tool {tool_name!r}: parameters must be passable by keyword ({param.name})"
            )
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)  # type: ignore[typeddict-item]
    return create_model(f"{tool_name}_arguments", __config__=config, **fields)


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    mutating: bool = False,
    reads: str | None = None,
    writes: str | None = None,
    edits: str | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    mutating: bool = False,
    reads: str | None = None,
    writes: str | None = None,
    edits: str | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Declare a function (sync or async) as a tool.

    ``@tool`` alone uses the function's name and docstring; ``@tool(name=...,
    description=..., mutating=..., reads=..., writes=..., edits=...)`` sets
    them. Arguments are validated from the type hints on every call.
    """
    if fn is not None:
        return Tool(fn)

    def decorate(inner: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            inner,
            name=name,
            description=description,
            mutating=mutating,
            reads=reads,
            writes=writes,
            edits=edits,
        )

    return decorate


class ToolRegistry(Mapping[str, Tool[..., Any]]):
    """The engine's tools by name (read-only)."""

    __slots__ = ("_tools",)

    def __init__(
        self,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] = (),
    ) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        for entry in tools:
            item = (
                entry if isinstance(entry, Tool) else Tool(entry)
            )  # a plain function is accepted too
            if item.name in self._tools:
                raise ValueError(f"two tools are named {item.name!r}")
            self._tools[item.name] = item

    def __getitem__(self, name: str) -> Tool[..., Any]:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"
