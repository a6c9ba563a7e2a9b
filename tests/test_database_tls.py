"""clock on MariaDB over TLS, set by the database URL (`?ssl_ca=...`).

Starts one MariaDB server beside the machine's own (bench/chaos/sidedb.py, never touching
the main one) that takes TCP connections over TLS only (--require-secure-transport), with
certificates of a CA the test makes (tests/tls_support.py). A server built on it migrates,
takes an alarm and rings it over an encrypted session; a certificate the client does not
trust stops clock-server at start with a message naming the database. The server and its
directory are gone once the module's tests are done.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, exc
from sqlalchemy.pool import NullPool

from bench.chaos.sidedb import SideMariaDB
from clock_server.deadline import Deadline
from clock_server.errors import ConfigError
from clock_server.model import NewAlarm
from clock_server.runtime import cli
from clock_server.runtime.build import Given, build
from clock_server.settings import Settings
from clock_server.store.db import open_database
from clock_server.store.db_tls import check_connection
from clock_server.testing import InMemoryDeadLetterPublisher, InMemoryPublisher, SettableClock
from clock_server.tls import (
    ended_by_peer,
    names_another_host,
    refusal_alert,
    refused_certificate,
    why_untrusted,
)
from tests.support import MARIADB_URL, drive
from tests.tls_support import make_certificates


@dataclass
class TlsDatabase:
    url: str  # mysql+pymysql://root@127.0.0.1:<port>/<database>, without TLS options
    port: int
    tls: Path  # ca.pem, server.pem/.key, client.pem/.key

    def url_with(self, **options: str) -> str:
        return self.url + "?" + "&".join(f"{name}={value}" for name, value in options.items())


@pytest.fixture(scope="module")
def tls_db() -> Iterator[TlsDatabase]:
    if shutil.which("mariadbd", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("mariadbd is not installed")
    side = SideMariaDB()
    try:
        tls = make_certificates(side.directory / "tls")
        side.options = [
            f"--ssl-ca={tls / 'ca.pem'}",
            f"--ssl-cert={tls / 'server.pem'}",
            f"--ssl-key={tls / 'server.key'}",
            "--require-secure-transport=ON",
        ]
        side.start()
        yield TlsDatabase(side.url, side.port, tls)
    finally:
        side.stop()
    assert not side.directory.exists()


@pytest.mark.mariadb
def test_a_server_on_a_tls_database_migrates_and_rings_over_an_encrypted_session(
    tls_db: TlsDatabase,
) -> None:
    plain = create_engine(tls_db.url, poolclass=NullPool, connect_args={"ssl_disabled": True})
    with pytest.raises(exc.OperationalError, match="Access denied"):
        plain.connect().close()  # MariaDB's answer to plain text, with require_secure_transport

    clock = SettableClock()
    publisher = InMemoryPublisher()
    settings = Settings(database_url=tls_db.url_with(ssl_ca=tls_db.tls / "ca.pem"))
    given = Given(publisher=publisher, dead_letter_publisher=InMemoryDeadLetterPublisher())
    runtime = build(settings, clock, serve_http=False, given=given)
    engine = runtime.engine
    assert engine is not None
    try:
        now = clock.now_ms()
        alarm, _ = runtime.store.create(NewAlarm("orders", "o-1", "{}", now + 1_000, None), now)
        engine.liveness.run_once()
        engine.preloader.run_once()
        drive(engine, clock, now + 1_000)
        assert [message.message_id for message in publisher.published] == [str(alarm.id)]
        assert runtime.store.get("orders", "o-1").status == "rung"
        with runtime.store.db.connect() as connection:
            status = connection.exec_driver_sql("SHOW SESSION STATUS LIKE 'Ssl_cipher'").one()
            required = connection.exec_driver_sql("SELECT @@require_secure_transport").scalar()
        assert status[1], "the session is not encrypted"
        assert required == 1
    finally:
        assert engine.ringer.close(Deadline(5)) == 0
        runtime.store.close()


@pytest.mark.mariadb
@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_clock_server_stops_at_start_naming_a_database_whose_certificate_it_does_not_trust(
    tls_db: TlsDatabase, tmp_path: Path, monkeypatch, capsys, command: str
) -> None:
    other_ca = make_certificates(tmp_path / "other") / "ca.pem"
    monkeypatch.setenv("CLOCK_DATABASE_URL", tls_db.url_with(ssl_ca=other_ca))
    for name in ("CLOCK_TOKENS", "CLOCK_TOKENS_FILE", "CLOCK_HOST", "CLOCK_MIGRATE_ON_START"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main([command]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "clock-server: bad configuration: CLOCK_DATABASE_URL: the database at "
        f"127.0.0.1:{tls_db.port} was refused: its TLS certificate is not trusted ("
    ), err
    assert "Traceback" not in err and "ssl_ca" in err


@pytest.mark.mariadb
def test_a_client_certificate_is_presented_and_one_the_database_does_not_accept_is_named(
    tls_db: TlsDatabase, tmp_path: Path, monkeypatch, capsys
) -> None:
    ca = tls_db.tls / "ca.pem"
    admin = open_database(tls_db.url_with(ssl_ca=ca), pool_size=1)
    with admin.begin() as connection:
        connection.exec_driver_sql("CREATE USER IF NOT EXISTS 'x509'@'%%' REQUIRE X509")
        connection.exec_driver_sql("GRANT ALL ON clock_chaos.* TO 'x509'@'%%'")
    admin.dispose()
    x509_url = tls_db.url.replace("root@", "x509@")
    client = {"ssl_cert": tls_db.tls / "client.pem", "ssl_key": tls_db.tls / "client.key"}
    db = open_database(f"{x509_url}?ssl_ca={ca}&ssl_cert={client['ssl_cert']}"
                       f"&ssl_key={client['ssl_key']}", pool_size=1)  # fmt: skip
    try:
        check_connection(db)
        with db.connect() as connection:
            assert connection.exec_driver_sql("SELECT CURRENT_USER()").scalar() == "x509@%"
    finally:
        db.dispose()

    other = make_certificates(tmp_path / "other")  # a client certificate of another CA
    url = f"{x509_url}?ssl_ca={ca}&ssl_cert={other / 'client.pem'}&ssl_key={other / 'client.key'}"
    monkeypatch.setenv("CLOCK_DATABASE_URL", url)
    assert cli.main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "clock-server: bad configuration: CLOCK_DATABASE_URL: the database at "
        f"127.0.0.1:{tls_db.port} did not accept the client certificate ssl_cert="
        f"'{other / 'client.pem'}' ("
    ), err
    assert err.rstrip().endswith("it must be signed by a CA of the server's ssl_ca"), err


@pytest.mark.mariadb
def test_a_url_asking_for_tls_of_a_database_that_offers_none_is_refused(tmp_path: Path) -> None:
    plain = create_engine(MARIADB_URL, poolclass=NullPool)
    with plain.connect() as connection:
        have_ssl = connection.exec_driver_sql("SHOW VARIABLES LIKE 'have_ssl'").one()[1]
    assert have_ssl != "YES", "the machine's MariaDB offers TLS: this case needs one without"
    ca = make_certificates(tmp_path / "tls") / "ca.pem"
    db = open_database(f"{MARIADB_URL}/mysql?ssl_ca={ca}", pool_size=1)
    try:
        with pytest.raises(
            ConfigError, match=re.escape("offers no TLS, and the URL's ssl_* options")
        ):
            check_connection(db)
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("ssl_verify_cert=false", "ssl_verify_cert is not a TLS option clock passes on"),
        ("ssl_disabled=false", "ssl_disabled is not a TLS option"),
        ("ssl=true", "ssl is not a TLS option"),
        ("ssl_ca=/nonexistent/ca.pem", "ssl_ca='/nonexistent/ca.pem' cannot be read"),
        ("ssl_ca={ca}&ssl_ca={ca}", "ssl_ca is given more than once"),
        ("ssl_ca={ca}&ssl_check_hostname=maybe", "ssl_check_hostname='maybe' is neither"),
        ("ssl_ca={ca}&ssl_key={ca}", "ssl_key is the key of a client certificate"),
        ("ssl_cert={ca}", "TLS options without ssl_ca (or ssl_capath) would trust any"),
    ],
)
def test_tls_options_that_would_not_do_what_they_say_are_refused(
    tmp_path: Path, query: str, said: str
) -> None:
    ca = make_certificates(tmp_path / "tls") / "ca.pem"
    url = f"mysql+pymysql://clock@db.example:3306/clock?{query.format(ca=ca)}"
    with pytest.raises(ConfigError, match=re.escape("CLOCK_DATABASE_URL: " + said)) as e:
        open_database(url)
    assert e.value.field == "database_url"


def test_the_tls_options_clock_passes_on_are_taken(tmp_path: Path) -> None:
    tls = make_certificates(tmp_path / "tls")
    options = (
        f"ssl_ca={tls / 'ca.pem'}&ssl_cert={tls / 'client.pem'}&ssl_key={tls / 'client.key'}"
        "&ssl_check_hostname=false"
    )
    db = open_database(f"mysql+pymysql://clock@db.example:3306/clock?{options}")
    _, kwargs = db.dialect.create_connect_args(db.url)
    assert kwargs["ssl"] == {
        "ca": str(tls / "ca.pem"),
        "cert": str(tls / "client.pem"),
        "key": str(tls / "client.key"),
        "check_hostname": False,
    }
    db.dispose()


def _handshake(server: Path, ca: Path, host: str) -> ssl.SSLCertVerificationError:
    """A TLS handshake in memory between a server with `server`'s certificate and a client
    trusting `ca` and expecting `host`: the client's failure to verify the server."""
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(server / "server.pem", server / "server.key")
    to_client, to_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_client, from_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_end = ssl.create_default_context(cafile=ca).wrap_bio(
        to_client, from_client, server_hostname=host
    )
    server_end = serving.wrap_bio(to_server, from_server, server_side=True)
    for _ in range(10):
        try:
            client_end.do_handshake()
        except ssl.SSLCertVerificationError as failure:
            return failure
        except ssl.SSLWantReadError:
            pass
        to_server.write(from_client.read())
        with contextlib.suppress(ssl.SSLWantReadError):
            server_end.do_handshake()
        to_client.write(from_server.read())
    raise AssertionError("the client trusted the server")


def test_a_refused_certificate_is_told_by_what_was_wrong_with_it(tmp_path: Path) -> None:
    tls, other = make_certificates(tmp_path / "tls"), make_certificates(tmp_path / "other")
    unknown = _handshake(tls, other / "ca.pem", "127.0.0.1")
    assert why_untrusted(unknown).startswith("its TLS certificate is not trusted (")
    misnamed = _handshake(tls, tls / "ca.pem", "db.example")
    assert names_another_host(misnamed) and not names_another_host(unknown)
    assert why_untrusted(misnamed) == (
        "its TLS certificate does not name the host connected to (Hostname mismatch, "
        "certificate is not valid for 'db.example'.)"
    )
    # Found behind the errors drivers wrap it in, however they keep it.
    wrapped = RuntimeError("connecting failed")
    wrapped.original_exception = unknown  # type: ignore[attr-defined]
    try:
        raise ValueError("the driver's own") from wrapped
    except ValueError as error:
        assert refused_certificate(error) is unknown
    assert refused_certificate(OSError("connection refused")) is None


def test_a_client_certificate_refused_is_found_also_where_only_text_is_kept() -> None:
    # pika keeps a lost stream's error only as text, as in these.
    alert = "SSLError(1, '[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca (_ssl.c:2580)')"
    assert refusal_alert(RuntimeError(f"Stream connection lost: {alert}")) == (
        "TLSV1_ALERT_UNKNOWN_CA"
    )
    eof = "SSLEOFError(8, 'EOF occurred in violation of protocol (_ssl.c:2427)')"
    assert ended_by_peer(RuntimeError(f"Stream connection lost: {eof}"))
    assert ended_by_peer(ConnectionResetError(104, "Connection reset by peer"))
    refused = ConnectionRefusedError(111, "Connection refused")
    assert not ended_by_peer(refused) and refusal_alert(refused) is None
