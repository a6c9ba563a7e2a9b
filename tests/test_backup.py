"""A backup restored, as docs/operations.md says to make and restore it: the database is all
of clock's state, so a server started on a restored copy rings every alarm that was pending
at the backup, those rung since included (at least once), and knows nothing of the alarms
created after it.

MariaDB: `mariadb-dump --single-transaction` of a database in use, restored with `mariadb`
into a fresh database on the machine's server. SQLite: the `sqlite3` shell's `.backup` of a
file in use, copied into place. The backup is taken while an engine holds claims, so the
restored copy has them too, under an engine that is silent from then on.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from clock_server.deadline import Deadline
from clock_server.errors import NotFound
from clock_server.model import NewAlarm
from clock_server.runtime.build import Given, Runtime, build
from clock_server.settings import Settings
from clock_server.testing import InMemoryDeadLetterPublisher, InMemoryPublisher, SettableClock
from tests.support import drive, mariadb_database

# (the source's URL, the restored copy's URL, backup(source URL, file), restore(file, URL))
Backend = tuple[str, str, Callable[[str, Path], None], Callable[[Path, str], None]]


def _server_options(url: str) -> list[str]:
    parsed = make_url(url)
    return [f"--host={parsed.host}", f"--port={parsed.port or 3306}", f"--user={parsed.username}"]


def _mariadb_dump(url: str, path: Path) -> None:
    database = make_url(url).database
    assert database is not None
    with path.open("wb") as out:
        subprocess.run(
            ["mariadb-dump", "--single-transaction", *_server_options(url), database],
            stdout=out, check=True, timeout=60,
        )  # fmt: skip


def _mariadb_restore(path: Path, url: str) -> None:
    database = make_url(url).database
    assert database is not None
    with path.open("rb") as dump:
        subprocess.run(
            ["mariadb", *_server_options(url), database], stdin=dump, check=True, timeout=60
        )


def _sqlite_file(url: str) -> str:
    database = make_url(url).database
    assert database is not None
    return database


def _sqlite_backup(url: str, path: Path) -> None:
    subprocess.run(["sqlite3", _sqlite_file(url), f".backup '{path}'"], check=True, timeout=60)


def _sqlite_restore(path: Path, url: str) -> None:
    shutil.copyfile(path, _sqlite_file(url))


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    tool = {"sqlite": "sqlite3", "mariadb": "mariadb-dump"}[request.param]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    if request.param == "sqlite":
        (tmp_path / "restored").mkdir()
        source, restored = tmp_path / "clock.db", tmp_path / "restored" / "clock.db"
        yield f"sqlite:///{source}", f"sqlite:///{restored}", _sqlite_backup, _sqlite_restore
        return
    with ExitStack() as databases:
        source_url = databases.enter_context(mariadb_database("clock_backup"))
        restored_url = databases.enter_context(mariadb_database("clock_restore", revision=None))
        yield source_url, restored_url, _mariadb_dump, _mariadb_restore


def _server(url: str, clock: SettableClock, name: str) -> tuple[Runtime, InMemoryPublisher]:
    """A server on `url` (migrated at start, as by default), ringing on an in-memory
    publisher at the time of `clock`; stepped by hand."""
    publisher = InMemoryPublisher()
    given = Given(publisher=publisher, dead_letter_publisher=InMemoryDeadLetterPublisher())
    settings = Settings(database_url=url, instance_id=name, db_pool_size=2)
    return build(settings, clock, serve_http=False, given=given), publisher


def _stop(runtime: Runtime) -> None:
    assert runtime.engine is not None
    assert runtime.engine.ringer.close(Deadline(5)) == 0
    runtime.store.close()


def _create(runtime: Runtime, name: str, count: int, target_ms: int, now_ms: int) -> list[str]:
    alarms = [NewAlarm("orders", f"{name}-{i}", "{}", target_ms, None) for i in range(count)]
    return [str(alarm.id) for alarm, _ in runtime.store.create_many(alarms, now_ms)]


def _rung(publisher: InMemoryPublisher) -> list[str]:
    return sorted(message.message_id for message in publisher.published)


def test_a_restored_backup_rings_what_was_pending_when_it_was_taken(
    backend: Backend, tmp_path: Path
) -> None:
    source_url, restored_url, backup, restore = backend
    clock = SettableClock()
    start = clock.now_ms()
    source, rung_at_source = _server(source_url, clock, "source")
    assert source.engine is not None
    try:
        soon = _create(source, "soon", 3, start + 1_000, start)  # claimed at the backup
        later = _create(source, "later", 3, start + 60_000, start)  # outside the window
        source.engine.liveness.run_once()
        source.engine.preloader.run_once()
        assert len(source.engine.heap) == len(soon)

        backup(source_url, tmp_path / "backup")

        drive(source.engine, clock, start + 1_000)
        assert _rung(rung_at_source) == sorted(soon)
        _create(source, "after", 1, start + 2_000, clock.now_ms())  # after the backup
    finally:
        _stop(source)

    restore(tmp_path / "backup", restored_url)
    clock.set(start + 5_000)  # the source's engine, in the copy, has been silent for 5 s
    restored, rung_again = _server(restored_url, clock, "restored")
    engine = restored.engine
    assert engine is not None
    try:
        assert restored.store.get("orders", "soon-0").status == "pending"
        engine.liveness.run_once()  # declares the source's engine dead, gives its claims back
        engine.preloader.run_once()
        drive(engine, clock, start + 5_000)
        assert _rung(rung_again) == sorted(soon), "rung again, long before their lease ends"

        clock.set(start + 60_000)
        engine.liveness.run_once()
        engine.preloader.run_once()
        drive(engine, clock, start + 60_000)
        assert _rung(rung_again) == sorted(soon + later)
        with pytest.raises(NotFound, match="no alarm orders/after-0"):
            restored.store.get("orders", "after-0")
    finally:
        _stop(restored)
