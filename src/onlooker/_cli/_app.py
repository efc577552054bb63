"""The typer application: ``onlooker`` and its command groups."""

from __future__ import annotations

import json

import typer

from ._audit_cmd import audit_app
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
        "trail, an unknown id), 2 usage error."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
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


@app.command(epilog="[b]Examples[/b]\n\n  onlooker schema > events.schema.json")
def schema() -> None:
    """Print the JSON Schema of the event union (every event onlooker writes)."""
    from pydantic import TypeAdapter

    import onlooker

    adapter: TypeAdapter[onlooker.ExecutionEvent] = TypeAdapter(onlooker.ExecutionEvent)
    typer.echo(json.dumps(adapter.json_schema(), indent=2))
