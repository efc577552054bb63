"""Times outside what the history can hold (years 1 to 9999 in UTC): a usage error, not a crash.

The CLI's ``--since`` / ``--until`` exit 2 naming the option, the UI's filters are a
400 page naming the parameter, and the store's methods raise a ``ValueError``
naming the argument (before, an ``OverflowError`` or a raw SQLAlchemy error).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from onlooker._cli._app import app as cli_app
from onlooker._ui import create_app
from onlooker.plugins import history

runner = CliRunner()

# In range as written, not in UTC: an hour before year 1, an hour after 9999.
BEFORE_YEAR_1 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
AFTER_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))

OUT_OF_RANGE = [
    pytest.param("99999999d", id="age-before-year-1"),
    pytest.param("9999999999d", id="age-beyond-timedelta"),
    pytest.param("9" * 400 + "s", id="age-infinite-float"),
    pytest.param(BEFORE_YEAR_1.isoformat(), id="before-year-1-in-utc"),
    pytest.param(AFTER_9999.isoformat(), id="after-9999-in-utc"),
]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """The URL of an empty history database (a SQLite file)."""
    url = f"sqlite:///{tmp_path / 'history.db'}"

    async def create() -> None:
        async with history.open(url):
            pass

    anyio.run(create)
    return url


class TestCli:
    @pytest.mark.parametrize("value", OUT_OF_RANGE)
    @pytest.mark.parametrize(
        "args",
        [["list", "--since"], ["list", "--until"], ["stats", "--since"]],
        ids=["list-since", "list-until", "stats-since"],
    )
    def test_an_out_of_range_time_is_a_usage_error_naming_the_option(
        self, db: str, args: list[str], value: str
    ) -> None:
        result = runner.invoke(cli_app, ["history", *args, value, "--db", db])
        assert result.exit_code == 2, result.output
        message = " ".join(result.output.replace("│", " ").split())
        assert f"Invalid value for {args[-1]}" in message
        assert "out of range" in message
        assert "Traceback" not in result.output and "database" not in message

    def test_the_ends_of_the_range_are_times(self, db: str) -> None:
        for value in ("0001-01-01T00:00:00+00:00", "9999-12-31T23:59:59"):
            result = runner.invoke(cli_app, ["history", "list", "--since", value, "--db", db])
            assert result.exit_code == 0, result.output


class TestUi:
    @pytest.mark.parametrize("value", OUT_OF_RANGE)
    @pytest.mark.parametrize("name", ["since", "until"])
    @pytest.mark.parametrize("page", ["/", "/stats", "/stream/list"])
    def test_an_out_of_range_time_is_a_400_page_naming_the_filter(
        self, db: str, page: str, name: str, value: str
    ) -> None:
        with TestClient(create_app(db), base_url="http://127.0.0.1") as ui:
            answer = ui.get(page, params={name: value})
        assert answer.status_code == 400
        if page != "/stream/list":
            assert f"{name}={value!r} is out of range" in html.unescape(answer.text)

    def test_the_ends_of_the_range_are_times(self, db: str) -> None:
        with TestClient(create_app(db), base_url="http://127.0.0.1") as ui:
            for page in ("/", "/stats"):
                assert ui.get(page, params={"since": "0001-01-01T00:00Z"}).status_code == 200
                assert ui.get(page, params={"until": "9999-12-31T23:59Z"}).status_code == 200


@pytest.mark.anyio
class TestLibrary:
    @pytest.mark.parametrize("name", ["since", "until"])
    @pytest.mark.parametrize("moment", [BEFORE_YEAR_1, AFTER_9999], ids=["before", "after"])
    async def test_list_executions_raises_a_value_error_naming_the_argument(
        self, db: str, name: str, moment: datetime
    ) -> None:
        async with history.open(db, read_only=True) as store:
            bound: dict[str, Any] = {name: moment}
            with pytest.raises(ValueError, match=f"^{name} is out of range"):
                await store.list_executions(**bound)

    @pytest.mark.parametrize("name", ["since", "until"])
    @pytest.mark.parametrize("moment", [BEFORE_YEAR_1, AFTER_9999], ids=["before", "after"])
    async def test_stats_raises_a_value_error_naming_the_argument(
        self, db: str, name: str, moment: datetime
    ) -> None:
        async with history.open(db, read_only=True) as store:
            with pytest.raises(ValueError, match=f"^{name} is out of range"):
                await store.stats(**{name: moment})

    async def test_the_ends_of_the_range_are_times(self, db: str) -> None:
        first = datetime.min.replace(tzinfo=UTC)
        last = datetime.max.replace(tzinfo=UTC)
        async with history.open(db, read_only=True) as store:
            assert list(await store.list_executions(since=first, until=last)) == []
            assert (await store.stats(since=first, until=last)).executions == 0
