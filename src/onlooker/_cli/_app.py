"""The typer application: ``onlooker`` and its command groups."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from typer.core import TyperCommand

from . import _ui_cmd
from ._audit_cmd import audit_app
from ._common import FlagCommand, FlagGroup, flag
from ._history_cmd import history_app
from ._hook_cmd import hook_app
from ._metrics_cmd import metrics_app
from ._run_cmd import run

__all__ = ["app"]

app = typer.Typer(
    name="onlooker",
    help=(
        "See, govern and keep a record of what tool-calling programs do.\n\n"
        "Exit codes: 0 ok, 1 the thing checked is bad (a failed execution, a tampered "
        "trail, an unknown id), 2 usage error, 130 / 143 a run stopped by Ctrl-C / SIGTERM."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=FlagGroup,
)
app.command(
    epilog=(
        "[b]Examples[/b]\n\n"
        "  onlooker run examples/research_agent.py --answer '{\"approve\": true}'\n\n"
        "  onlooker run agent.py:research --db sqlite:///runs.db --no-audit\n\n"
        "  onlooker run agent.py --interactive"
    )
)(run)
app.add_typer(history_app, name="history")
app.add_typer(audit_app, name="audit")
app.add_typer(metrics_app, name="metrics")
app.add_typer(hook_app, name="hook")
app.command(epilog=_ui_cmd.EPILOG)(_ui_cmd.ui)


@app.command(epilog="[b]Examples[/b]\n\n  onlooker schema > events.schema.json")
def schema() -> None:
    """Print the JSON Schema of the event union (every event onlooker writes)."""
    from pydantic import TypeAdapter

    import onlooker

    adapter: TypeAdapter[onlooker.ExecutionEvent] = TypeAdapter(onlooker.ExecutionEvent)
    typer.echo(json.dumps(adapter.json_schema(), indent=2))


def _version(value: bool) -> None:
    if value:
        from onlooker import __version__

        typer.echo(f"onlooker {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        flag("--version", help="Print the version and exit.", is_eager=True, callback=_version),
    ] = False,
) -> None:
    """See, govern and keep a record of what tool-calling programs do."""


def _show_flags_as_flags(typer_app: typer.Typer) -> None:
    """Every command and group's ``--help`` as a flag (typer shows ``<bool>`` after it)."""
    for command in typer_app.registered_commands:
        if command.cls in (None, TyperCommand):
            command.cls = FlagCommand
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            group.typer_instance.info.cls = FlagGroup
            group.cls = FlagGroup
            _show_flags_as_flags(group.typer_instance)


_show_flags_as_flags(app)
