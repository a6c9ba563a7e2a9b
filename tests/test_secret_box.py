"""Webhook secrets encrypted at rest with CLOCK_SECRET_KEYS: sealing and opening, plain rows
of before, key rotation (clock-server reencrypt-secrets), the start refused when a secret
cannot be opened, and a webhook signed end to end with a sealed secret. On SQLite and
MariaDB where a database is involved."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import standardwebhooks
from cryptography.fernet import Fernet
from sqlalchemy import select

from clock_server.delivery.secrets import new_secret
from clock_server.errors import ConfigError
from clock_server.model import ApplicationPolicy
from clock_server.runtime import cli
from clock_server.runtime.build import build
from clock_server.runtime.serve import log_secret_keys
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.db import open_database
from clock_server.store.schema import application_table
from clock_server.store.secret_box import SEALED_PREFIX, SecretBox, SecretUnreadable
from clock_server.store.stored_secrets import StoredSecrets
from clock_server.testing import SettableClock
from tests.webhook_harness import Harness, real_now_ms
from tests.webhook_receiver import Receiver, receiving

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()
NOW = 1_800_000_000_000


def raw(store: AlarmStore, name: str) -> tuple[str | None, str | None]:
    c = application_table.c
    query = select(c.webhook_secret, c.webhook_previous_secret).where(c.name == name)
    with store.db.connect() as conn:
        row = conn.execute(query).one()
    return row[0], row[1]


# --- the box -----------------------------------------------------------------------------------


def test_a_sealed_secret_holds_nothing_of_the_secret_and_opens_again() -> None:
    box = SecretBox((OLD_KEY,))
    secret = new_secret()
    sealed = box.seal(secret)
    assert sealed is not None and sealed.startswith(SEALED_PREFIX)
    assert secret not in sealed and secret[6:] not in sealed
    assert len(sealed) <= 255  # the column's width
    assert box.open(sealed) == secret
    assert box.seal(secret) != sealed  # a fresh IV each time
    assert box.open(secret) == secret  # a plain secret of before is read as it is
    assert box.open(None) is None and box.seal(None) is None


def test_without_keys_secrets_are_stored_plain_and_a_sealed_one_cannot_be_read() -> None:
    box = SecretBox()
    secret = new_secret()
    assert not box.encrypts and box.seal(secret) == secret and box.open(secret) == secret
    with pytest.raises(SecretUnreadable, match="CLOCK_SECRET_KEYS is unset"):
        box.open(SecretBox((OLD_KEY,)).seal(secret))


def test_a_rotation_opens_with_every_key_and_reseals_with_the_first() -> None:
    secret = new_secret()
    under_old = SecretBox((OLD_KEY,)).seal(secret)
    both = SecretBox((NEW_KEY, OLD_KEY))
    assert both.open(under_old) == secret
    assert not both.is_current(under_old) and not both.is_current(secret)
    resealed = both.reseal(under_old)
    assert resealed != under_old and both.is_current(resealed)
    assert both.reseal(resealed) == resealed  # already under the first key: kept
    assert SecretBox((NEW_KEY,)).open(resealed) == secret  # the old key can go
    with pytest.raises(SecretUnreadable, match="a key not in CLOCK_SECRET_KEYS"):
        SecretBox((NEW_KEY,)).open(under_old)


@pytest.mark.parametrize(
    ("value", "number"),
    [("not-a-key", 1), (f"{OLD_KEY},", 2), (f"{OLD_KEY},{OLD_KEY[:-2]}", 2), ("é" * 44, 1)],
)
def test_a_bad_key_is_refused_at_start_naming_the_setting(value: str, number: int) -> None:
    with pytest.raises(ConfigError, match=f"CLOCK_SECRET_KEYS key {number} is not a Fernet key"):
        Settings.from_env({"CLOCK_SECRET_KEYS": value})


def test_the_keys_are_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(secret_keys=f"{NEW_KEY},{OLD_KEY}")
    shown = repr(settings) + str(settings.describe())
    assert NEW_KEY not in shown and OLD_KEY not in shown and "<2 set>" in shown
    with caplog.at_level(logging.INFO, logger="clock_server.runtime.serve"):
        log_secret_keys(settings)
        log_secret_keys(Settings())
    on, off = caplog.records
    assert on.levelno == logging.INFO and "encrypted (2 keys" in on.getMessage()
    assert off.levelno == logging.WARNING and "unencrypted" in off.getMessage()
    assert NEW_KEY not in caplog.text


# --- in the database ---------------------------------------------------------------------------


def test_the_registry_stores_secrets_sealed_and_reads_them_in_the_clear(store: AlarmStore) -> None:
    registry = SqlApplicationRegistry(store, SecretBox((OLD_KEY,)))
    registry.put(ApplicationPolicy("hooks"), NOW)
    first, second = new_secret(), new_secret()
    registry.set_secret("hooks", first, NOW)
    stored, _ = raw(store, "hooks")
    assert stored is not None and stored.startswith(SEALED_PREFIX) and first not in stored
    assert registry.get("hooks").webhook_secret == first
    registry.set_secret("hooks", second, NOW + 1, previous_until_ms=NOW + 60_000)
    current, previous = raw(store, "hooks")
    assert current is not None and previous is not None
    assert previous.startswith(SEALED_PREFIX) and first not in previous
    policy = registry.get("hooks")
    assert (policy.webhook_secret, policy.webhook_previous_secret) == (second, first)
    assert policy.signing_secrets(NOW + 2) == (second, first)


def test_plain_rows_of_before_are_read_and_reencrypt_seals_them_then_rotates_the_key(
    store: AlarmStore,
) -> None:
    plain = SqlApplicationRegistry(store)  # a server without keys wrote these
    secrets = {}
    for name in ("a-hooks", "b-hooks"):
        plain.put(ApplicationPolicy(name), NOW)
        secrets[name] = new_secret()
        plain.set_secret(name, secrets[name], NOW)
    plain.put(ApplicationPolicy("c-amqp"), NOW)
    assert raw(store, "a-hooks")[0] == secrets["a-hooks"]
    old = SqlApplicationRegistry(store, SecretBox((OLD_KEY,)))
    assert old.get("a-hooks").webhook_secret == secrets["a-hooks"]  # plain is still read
    assert StoredSecrets(store, old.box).reseal() == 2  # sealed now; c-amqp has none
    assert StoredSecrets(store, old.box).reseal() == 0
    assert all(raw(store, name)[0].startswith(SEALED_PREFIX) for name in secrets)  # type: ignore[union-attr]
    # The rotation: the new key first, the old one after it; re-encrypt; drop the old key.
    both = SecretBox((NEW_KEY, OLD_KEY))
    assert StoredSecrets(store, SecretBox((NEW_KEY,))).unreadable() == ["a-hooks", "b-hooks"]
    assert StoredSecrets(store, both).reseal() == 2
    new = SqlApplicationRegistry(store, SecretBox((NEW_KEY,)))
    assert StoredSecrets(store, new.box).unreadable() == []
    assert {name: new.get(name).webhook_secret for name in secrets} == secrets


def test_a_secret_no_key_opens_is_read_as_none_and_logged(
    store: AlarmStore, caplog: pytest.LogCaptureFixture
) -> None:
    sealing = SqlApplicationRegistry(store, SecretBox((OLD_KEY,)))
    sealing.put(ApplicationPolicy("hooks", retention_days=3), NOW)
    sealing.set_secret("hooks", new_secret(), NOW)
    with caplog.at_level(logging.ERROR, logger="clock_server.store.applications"):
        policy = SqlApplicationRegistry(store, SecretBox((NEW_KEY,))).get("hooks")
    assert policy.webhook_secret is None and policy.retention_days == 3
    assert "a key not in CLOCK_SECRET_KEYS" in caplog.text


def test_the_start_is_refused_while_a_secret_opens_with_no_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    settings = Settings(database_url=url, run_engine=False, secret_keys=OLD_KEY)
    build(settings).store.close()
    store = AlarmStore(open_database(url, 2))
    registry = SqlApplicationRegistry(store, SecretBox((OLD_KEY,)))
    registry.put(ApplicationPolicy("hooks"), NOW)
    registry.set_secret("hooks", new_secret(), NOW)
    store.close()
    for keys in ("", NEW_KEY):
        with pytest.raises(
            ConfigError, match=r"CLOCK_SECRET_KEYS opens none .* 1 applications \(hooks\)"
        ):
            build(Settings(database_url=url, run_engine=False, secret_keys=keys))
    build(
        Settings(database_url=url, run_engine=False, secret_keys=f"{NEW_KEY},{OLD_KEY}")
    ).store.close()


def test_the_reencrypt_command(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    build(Settings(database_url=url, run_engine=False)).store.close()
    store = AlarmStore(open_database(url, 2))
    secret = new_secret()
    registry = SqlApplicationRegistry(store)
    registry.put(ApplicationPolicy("hooks"), NOW)
    registry.set_secret("hooks", secret, NOW)
    monkeypatch.setenv("CLOCK_DATABASE_URL", url)
    monkeypatch.delenv("CLOCK_SECRET_KEYS", raising=False)
    assert cli.main(["reencrypt-secrets"]) == 2
    assert "CLOCK_SECRET_KEYS is unset" in capsys.readouterr().err
    monkeypatch.setenv("CLOCK_SECRET_KEYS", f"{NEW_KEY},{OLD_KEY}")
    assert cli.main(["reencrypt-secrets"]) == 0
    assert "of 1 applications" in capsys.readouterr().out
    sealed = raw(store, "hooks")[0]
    assert sealed is not None and secret not in sealed
    assert SecretBox((NEW_KEY,)).open(sealed) == secret
    monkeypatch.setenv("CLOCK_SECRET_KEYS", OLD_KEY)  # a key that does not open it
    assert cli.main(["reencrypt-secrets"]) == 2
    assert "a key not in CLOCK_SECRET_KEYS" in capsys.readouterr().err
    store.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def test_a_webhook_is_signed_with_the_secret_sealed_in_the_database(
    store: AlarmStore, fake_clock: SettableClock, receiver: Receiver
) -> None:
    fake_clock.set(real_now_ms())
    h = Harness(store, fake_clock, secret_keys=f"{NEW_KEY},{OLD_KEY}")
    try:
        t0 = fake_clock.now_ms()
        h.configure("hooks", channel="webhook", webhook_url=receiver.url())
        secret = h.secret("hooks")
        assert secret.startswith("whsec_")
        stored = raw(store, "hooks")[0]
        assert stored is not None and stored.startswith(SEALED_PREFIX) and secret not in stored
        h.create("order-1", target_ring_at=t0 + 1_000)
        h.ring_at(t0 + 1_000)
        [call] = receiver.wait_for(1)
        message = standardwebhooks.Webhook(secret).verify(call.body, call.headers)
        assert message["business_id"] == "order-1"
    finally:
        h.close()
