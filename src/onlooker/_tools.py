"""``@tool``: plain typed functions declared as tools, validated with pydantic."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar, final, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ._errors import ToolInputError

__all__ = ["Tool", "ToolDeclaration", "ToolRegistry", "tool"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@final
@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """What a tool does, for a tool onlooker does not run itself (a framework's tool).

    ``engine.declare_tool(ToolDeclaration("Write", mutating=True, writes="file_path"))``
    lets ``policies.require_intent()`` and the summary interpret tracked calls
    of it, as ``@tool(mutating=..., reads=..., writes=..., edits=...)`` does
    for onlooker's own tools. ``reads`` / ``writes`` / ``edits`` name the
    argument that holds a file path.
    """

    name: str
    description: str = ""
    mutating: bool = False
    reads: str | None = None
    writes: str | None = None
    edits: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a tool declaration needs a non-empty name, not {self.name!r}")
        for role in ("reads", "writes", "edits"):
            arg = getattr(self, role)
            if arg is not None and (not isinstance(arg, str) or not arg):
                raise ValueError(f"tool {self.name!r}: {role} must name an argument, not {arg!r}")


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
        "_scalars",
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
        if not callable(fn):
            raise TypeError(f"a tool is a function, not {fn!r}")
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"a tool's name must be a non-empty string, not {name!r}")
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
        self._scalars = _scalar_parameters(self._params_model)
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
    def declaration(self) -> ToolDeclaration:
        """What this tool does, as a :class:`ToolDeclaration`."""
        return ToolDeclaration(
            self.name,
            description=self.description,
            mutating=self.mutating,
            reads=self.reads,
            writes=self.writes,
            edits=self.edits,
        )

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments."""
        return self._params_model.model_json_schema()

    def validate_args(
        self, args: Mapping[str, object], *, hook: str | None = None
    ) -> dict[str, Any]:
        """Validate and coerce ``args`` against the signature; raises ``ToolInputError``."""
        scalars = self._scalars
        if scalars is not None and len(args) == len(scalars):
            # Every parameter given, each exactly of its declared scalar type: pydantic
            # would return the same values, so they need no validation (nor a copy
            # beyond the dict: scalars are immutable).
            for name, value in args.items():
                if scalars.get(name) is not type(value):
                    break
            else:
                return dict(args)
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

    def validate_modified(self, args: Mapping[str, object], hook: str) -> dict[str, Any]:
        """Validate the input a pre-hook rewrote (``ToolInputError`` names the hook).

        ``validate_args(args, hook=hook)`` with the positional shape the hook
        runner calls, so the hot path hands over a bound method, not a closure.
        """
        return self.validate_args(args, hook=hook)

    async def invoke(self, args: dict[str, Any]) -> Any:
        """Run the tool with already validated arguments."""
        if self.is_async:
            return await self.fn(**args)  # type: ignore[call-arg,misc]  # validated kwargs
        result = self.fn(**args)  # type: ignore[call-arg]
        if inspect.isawaitable(result):
            return await result
        return result


_EXACT_SCALARS: Final = (str, int, float, bool)


def _scalar_parameters(model: type[BaseModel]) -> dict[str, type] | None:
    """Each parameter's type when every one is a plain ``str``/``int``/``float``/``bool``.

    ``None`` when any is not (a constrained, optional or compound type) or the
    tool takes ``**kwargs``: its arguments always go through validation.
    """
    if model.model_config.get("extra") != "forbid":
        return None
    types: dict[str, type] = {}
    for name, field in model.model_fields.items():
        if field.annotation not in _EXACT_SCALARS or field.metadata:
            return None
        types[name] = field.annotation  # type: ignore[assignment]  # one of _EXACT_SCALARS
    return types


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
    return create_model(f"{_type_name(tool_name)}_arguments", __config__=config, **fields)


def _type_name(tool_name: str) -> str:
    """A tool's name as a class's: one holding a NUL or a lone surrogate, which no type's
    name may, written out (``caf\\udce9``)."""
    try:
        tool_name.encode("utf-8")
    except UnicodeEncodeError:
        return ascii(tool_name)[1:-1]
    return tool_name.replace("\x00", "\\x00")


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
    """The engine's tools by name (read-only), and what every known tool does.

    As a mapping it holds the tools onlooker runs; :meth:`declaration` also
    knows the foreign tools declared with ``engine.declare_tool``.
    """

    __slots__ = ("_declared", "_tools", "runnable")

    def __init__(
        self,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] = (),
    ) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        self._declared: dict[str, ToolDeclaration] = {}
        for entry in tools:
            item = (
                entry if isinstance(entry, Tool) else Tool(entry)
            )  # a plain function is accepted too
            if item.name in self._tools:
                raise ValueError(f"two tools are named {item.name!r}")
            self._tools[item.name] = item
            self._declared[item.name] = item.declaration
        self.runnable: Callable[[str], Tool[..., Any] | None] = self._tools.get
        """The tool onlooker runs under a name, or ``None`` (a C call: every ``ctx.call`` asks)."""

    def __getitem__(self, name: str) -> Tool[..., Any]:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"

    def declaration(self, name: str) -> ToolDeclaration | None:
        """What the tool ``name`` does (a runnable or a declared foreign tool), or ``None``."""
        return self._declared.get(name)

    def declarations(self) -> Mapping[str, ToolDeclaration]:
        """Every known tool's declaration, runnable and foreign, by name (read-only)."""
        return dict(self._declared)

    def is_mutating(self, name: str) -> bool:
        """Whether the tool ``name`` is declared mutating (False when unknown)."""
        declared = self._declared.get(name)
        return declared is not None and declared.mutating

    def declare(self, declaration: ToolDeclaration) -> None:
        """Add a foreign tool's declaration (``engine.declare_tool`` calls this).

        Declaring the same thing twice is harmless; a different declaration
        for a known name, or one named like a runnable tool, is a ``ValueError``.
        """
        if not isinstance(declaration, ToolDeclaration):
            raise TypeError(f"expected a ToolDeclaration, not {type(declaration).__name__}")
        known = self._declared.get(declaration.name)
        if known == declaration and declaration.name not in self._tools:
            return
        if known is not None:
            what = "a tool onlooker runs" if declaration.name in self._tools else "declared"
            raise ValueError(
                f"tool {declaration.name!r} is already {what} as {known}; "
                f"cannot declare it as {declaration}"
            )
        self._declared[declaration.name] = declaration
