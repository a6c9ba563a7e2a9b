"""A rolling upgrade on MariaDB: a server of the previous release (the newest release that
CHANGELOG.md records before this commit, its tree taken from git) keeps ringing while this
tree's `clock-server db upgrade` migrates the schema under it and this tree's server starts
beside it; then the old one stops and another starts on the new schema. Every alarm created
before, during and after rings, none early."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from clock_server.store import migrate
from tests.release_record import Release, git, have_commit, releases
from tests.support import Cluster, ServerProcess, mariadb_database

pytestmark = [pytest.mark.process, pytest.mark.mariadb, pytest.mark.rabbitmq]

REPO = Path(__file__).resolve().parent.parent


def previous_release() -> Release:
    """The newest release CHANGELOG.md records, whose commit is an ancestor of this one."""
    head = git("rev-parse", "HEAD").stdout.strip()
    for each in releases():
        have_commit(each)
        before = git("merge-base", "--is-ancestor", each.commit, "HEAD", check=False)
        if before.returncode == 0 and each.commit != head:
            return each
    pytest.fail("CHANGELOG.md records no release before this commit")


def extract(commit: str, into: Path) -> Path:
    """The tree of `commit`, as `git archive` gives it."""
    into.mkdir()
    git_archive = ["git", "-C", str(REPO), "archive", commit]
    with subprocess.Popen(git_archive, stdout=subprocess.PIPE) as archive:
        subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.returncode == 0, f"git archive {commit} failed"
    return into


def clock_server(tree: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A one-off `clock-server` command of the code in `tree`."""
    return subprocess.run(
        [sys.executable, "-m", "clock_server.runtime.cli", *args],
        env={**os.environ, "CLOCK_DATABASE_URL": url, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=60,
    )


def create(cluster: Cluster, server: ServerProcess, key: str, in_ms: int) -> tuple[int, int]:
    """One alarm due `in_ms` from now, created through `server`: its id and its target."""
    target = int(time.time() * 1000) + in_ms
    body = {"application": cluster.application, "business_id": key, "target_ring_at": target}
    response = requests.post(
        server.base_url + "/v1/alarms", json={**body, "payload": key}, timeout=10
    )
    assert response.status_code == 201, response.text
    return response.json()["id"], target


def rung_total(server: ServerProcess) -> float:
    """What the server's own /metrics says it rang."""
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    prefix = "clock_alarms_rung_total{"
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_the_previous_release_rings_through_the_upgrade_beside_this_one(tmp_path: Path):
    previous = previous_release()
    tag = f"v{previous.version}"
    old_tree = extract(previous.commit, tmp_path / tag)
    with mariadb_database("clock_rolling", revision="base") as url:
        released = clock_server(old_tree, url, "migrate")
        assert released.returncode == 0, released.stderr
        cluster = Cluster(url, tmp_path)
        try:
            roll(cluster, old_tree, tag, url)
        finally:
            cluster.close()


def released_server(cluster: Cluster, name: str, old_tree: Path) -> ServerProcess:
    """A server of the release in `old_tree`, as a fleet runs it: it does not migrate."""
    server = cluster.server(name, CLOCK_MIGRATE_ON_START="false", PYTHONPATH=str(old_tree))
    server.cwd = old_tree
    return server.start()


def roll(cluster: Cluster, old_tree: Path, tag: str, url: str) -> None:
    old = released_server(cluster, "old", old_tree)
    openapi = requests.get(old.base_url + "/openapi.json", timeout=5).json()
    assert openapi["info"]["version"] == tag.removeprefix("v"), "not the release's code"
    schema_before = migrate.current_url(url)
    targets = dict(create(cluster, old, f"before{i}", 500 + 50 * i) for i in range(60))

    during: list[tuple[int, int]] = []
    upgraded = threading.Event()

    def keep_creating() -> None:
        while not upgraded.is_set():
            during.append(create(cluster, old, f"during{len(during)}", 1_000))

    creator = threading.Thread(target=keep_creating)
    creator.start()
    try:
        upgrade = clock_server(REPO, url, "db", "upgrade")
    finally:
        upgraded.set()
        creator.join(15)
    assert upgrade.returncode == 0, upgrade.stderr
    assert migrate.current_url(url) == migrate.head()
    assert schema_before == migrate.head() or f"from {schema_before} to" in upgrade.stdout
    assert during, "nothing was created while the schema was upgraded"
    targets.update(during)
    rung_by_old = rung_total(old)

    new = cluster.server("new").start()
    for i in range(30):
        targets.update([create(cluster, old, f"after-old{i}", 300 + 20 * i)])
        targets.update([create(cluster, new, f"after-new{i}", 300 + 20 * i)])
    cluster.collector.wait_for(len(targets), 20, "alarms of before, during and just after")
    assert rung_total(old) > rung_by_old, "the old release rang nothing on the new schema"
    assert old.terminate() == 0, old.log_path.read_text()[-2000:]
    # A server of the previous release (re)started on the new schema: a roll back's first step.
    again = released_server(cluster, "old-again", old_tree)
    for i in range(30):
        targets.update([create(cluster, new, f"last-new{i}", 200 + 20 * i)])
        targets.update([create(cluster, again, f"last-old{i}", 200 + 20 * i)])

    cluster.collector.wait_for(len(targets), 20, "every alarm")
    rows = {row.id: row for row in cluster.wait_all_rung()}
    assert set(rows) == set(targets)
    for delivery in cluster.collector.snapshot():
        alarm = delivery.body["id"]
        assert delivery.received_ms >= targets[alarm], f"alarm {alarm} rang early"
        assert rows[alarm].rung_at >= targets[alarm]
    assert set(cluster.collector.ids()) == set(targets)
