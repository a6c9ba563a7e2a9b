"""`clock-server db upgrade|downgrade|current|history` as an operator runs them: a process of
its own, settings from CLOCK_* variables, a working directory without alembic.ini, and from a
copy installed the way the image installs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from clock_server.store import migrate
from clock_server.store.db import open_database
from tests.support import mariadb_database

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parent.parent


MODULE = [sys.executable, "-m", "clock_server.runtime.cli"]


def clock_server(
    url: str, *args: str, cwd: Path, pythonpath: Path = REPO, program: list[str] = MODULE
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLOCK_DATABASE_URL": url, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [*program, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def revisions() -> list[str]:
    """This release's revisions, oldest first."""
    return [step.revision for step in reversed(migrate.history())]


def test_upgrade_downgrade_and_current_move_an_sqlite_database(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    first, second, head = revisions()[0], revisions()[1], migrate.head()
    assert clock_server(url, "db", "current", cwd=tmp_path).stdout == "base (no schema)\n"
    up = clock_server(url, "db", "upgrade", second, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    assert f"upgraded from base (no schema) to {second}" in up.stdout
    assert clock_server(url, "db", "current", cwd=tmp_path).stdout == f"{second}\n"
    down = clock_server(url, "db", "downgrade", first, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert f"downgraded from {second} to {first}" in down.stdout
    to_head = clock_server(url, "db", "upgrade", cwd=tmp_path)
    assert to_head.returncode == 0, to_head.stderr
    assert f"to {head} (head)" in to_head.stdout
    again = clock_server(url, "db", "upgrade", cwd=tmp_path)
    assert again.returncode == 0 and f"already at {head} (head)" in again.stdout
    behind = clock_server(url, "db", "upgrade", first, cwd=tmp_path)
    assert behind.returncode == 0
    assert f"at {head} (head), nothing to upgrade to {first}" in behind.stdout
    assert clock_server(url, "db", "current", cwd=tmp_path).stdout == f"{head} (head)\n"
    assert not (tmp_path / "alembic.ini").exists()


def test_migrate_is_still_db_upgrade(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    result = clock_server(url, "migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert clock_server(url, "db", "current", cwd=tmp_path).stdout == f"{migrate.head()} (head)\n"


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_a_revision_that_does_not_exist_is_a_clear_error(tmp_path: Path, action: str):
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    clock_server(url, "db", "upgrade", cwd=tmp_path)
    result = clock_server(url, "db", action, "nosuch", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"clock-server db {action}: revision 'nosuch': ")
    assert "Traceback" not in result.stderr
    assert clock_server(url, "db", "current", cwd=tmp_path).stdout == f"{migrate.head()} (head)\n"


def test_downgrade_needs_a_revision_and_db_an_action(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    for args in (("db", "downgrade"), ("db",), ("db", "sideways")):
        result = clock_server(url, *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "usage: clock-server db" in result.stderr and "Traceback" not in result.stderr


def test_a_database_of_a_newer_release_is_named_and_left_alone(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    clock_server(url, "db", "upgrade", cwd=tmp_path)
    db = open_database(url, pool_size=1)
    with db.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'from_a_newer_one'"))
    db.dispose()
    current = clock_server(url, "db", "current", cwd=tmp_path)
    assert current.stdout.startswith("from_a_newer_one (newer than this release")
    for args in (("upgrade",), ("downgrade", revisions()[0])):
        result = clock_server(url, "db", *args, cwd=tmp_path)
        assert result.returncode == 2, args
        assert "from_a_newer_one, which this release does not know" in result.stderr
        assert "Traceback" not in result.stderr


def test_an_unreachable_database_is_a_failure_that_names_it_without_its_password(tmp_path: Path):
    url = "mysql+pymysql://clock:hunter2@127.0.0.1:1/clock"
    result = clock_server(url, "db", "upgrade", cwd=tmp_path)
    assert result.returncode == 1
    assert "database mysql+pymysql://clock:***@127.0.0.1:1/clock" in result.stderr
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


def test_history_lists_every_revision_newest_first_with_the_head_marked(tmp_path: Path):
    result = clock_server("sqlite://", "db", "history", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(reversed(revisions()))
    assert lines[0].endswith("(head)") and not any(line.endswith("(head)") for line in lines[1:])


@pytest.mark.mariadb
def test_upgrade_and_downgrade_move_a_mariadb_database(tmp_path: Path):
    with mariadb_database("clock_cli", revision=revisions()[0]) as url:
        up = clock_server(url, "db", "upgrade", cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        assert (
            clock_server(url, "db", "current", cwd=tmp_path).stdout == f"{migrate.head()} (head)\n"
        )
        down = clock_server(url, "db", "downgrade", "base", cwd=tmp_path)
        assert down.returncode == 0, down.stderr
        assert clock_server(url, "db", "current", cwd=tmp_path).stdout == "base (no schema)\n"


def test_the_commands_run_from_a_copy_installed_as_the_image_installs_it(tmp_path: Path):
    """The Dockerfile copies these and runs `pip install .` (which builds in an isolated
    environment, as here): the migrations come along as clock_server.migrations, and the
    image's ENTRYPOINT, the installed `clock-server`, runs `docker run IMAGE db upgrade`."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source)
    for name in ("clock_server", "clock_client", "alembic"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    installed = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(installed)]
    built = subprocess.run([*pip, str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    shutil.rmtree(source)
    work = tmp_path / "data"
    work.mkdir()
    url = f"sqlite:///{work / 'clock.db'}"
    where = subprocess.run(
        [sys.executable, "-c", "from clock_server.store import migrate; print(migrate.__file__)"],
        env={**os.environ, "PYTHONPATH": str(installed)},
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed)
    (command,) = entrypoint()
    image = [str(installed / "bin" / command)]
    result = clock_server(url, "db", "upgrade", cwd=work, pythonpath=installed, program=image)
    assert result.returncode == 0, result.stderr
    current = clock_server(url, "db", "current", cwd=work, pythonpath=installed, program=image)
    assert current.stdout == f"{migrate.head()} (head)\n"


def entrypoint() -> list[str]:
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("ENTRYPOINT "):
            return list(json.loads(line.removeprefix("ENTRYPOINT ")))
    raise AssertionError("the Dockerfile has no ENTRYPOINT")
