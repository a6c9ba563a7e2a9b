"""TLS to MySQL and MariaDB, set by the database URL's query: the options SQLAlchemy hands to
PyMySQL as its TLS settings, checked before any connection, and the first connection's
refusal of the server's certificate told as such, naming the server."""

from __future__ import annotations

import os

from sqlalchemy import Engine, exc
from sqlalchemy.engine import URL

from clock_server.errors import ConfigError
from clock_server.tls import (
    ended_by_peer,
    names_another_host,
    refusal_alert,
    refused_certificate,
    why_untrusted,
)

# What SQLAlchemy's mysql+pymysql dialect turns into PyMySQL's TLS settings. Any other ssl*
# parameter would reach PyMySQL as text, where "false" is true.
TLS_OPTIONS = ("ssl_ca", "ssl_capath", "ssl_cert", "ssl_key", "ssl_cipher", "ssl_check_hostname")
_PATHS = ("ssl_ca", "ssl_capath", "ssl_cert", "ssl_key")
_CA = ("ssl_ca", "ssl_capath")
_BOOLEANS = ("true", "false", "1", "0", "yes", "no", "on", "off")
# PyMySQL's error for a server that offers no TLS to a client that asks for it.
_CR_SSL_CONNECTION_ERROR = 2026


def check_tls_options(url: URL) -> None:
    """ConfigError, naming CLOCK_DATABASE_URL, for a TLS option of the URL that would not do
    what it says: one SQLAlchemy does not pass on, one given twice, a file that cannot be
    read, a client certificate's key without it, or any of them without a CA to verify the
    server with (PyMySQL would then encrypt, and trust any certificate)."""
    given = {name: value for name, value in url.query.items() if name.startswith("ssl")}
    for name, value in given.items():
        if name not in TLS_OPTIONS:
            raise _bad(f"{name} is not a TLS option clock passes on; use {', '.join(TLS_OPTIONS)}")
        if not isinstance(value, str):
            raise _bad(f"{name} is given more than once")
        if name in _PATHS and not os.access(value, os.R_OK):
            raise _bad(f"{name}={value!r} cannot be read")
        if name == "ssl_check_hostname" and value.lower() not in _BOOLEANS:
            raise _bad(f"ssl_check_hostname={value!r} is neither true nor false")
    if "ssl_key" in given and "ssl_cert" not in given:
        raise _bad("ssl_key is the key of a client certificate: give ssl_cert too")
    if given and not any(name in given for name in _CA):
        raise _bad(
            "TLS options without ssl_ca (or ssl_capath) would trust any server certificate: "
            "give ssl_ca, a PEM file of the CA certificates that sign the server's"
        )


def check_connection(db: Engine) -> None:
    """With TLS options in the URL, open one connection now: ConfigError, naming the server,
    when its TLS certificate was not trusted, it did not accept the client certificate, or
    it offers no TLS. Any other failure is left to what comes next (the migration, or the
    engine's reconnects): a database that is down at start is an outage, not a bad
    configuration."""
    if db.dialect.name == "sqlite" or not any(name in db.url.query for name in TLS_OPTIONS):
        return
    try:
        with db.connect():
            pass
    except exc.DBAPIError as error:
        refusal = _refusal(db.url, error)
        if refusal is not None:
            raise _bad(f"the database at {db.url.host}:{db.url.port or 3306} {refusal}") from error


def _refusal(url: URL, error: exc.DBAPIError) -> str | None:
    failure = refused_certificate(error)
    if failure is not None:
        remedy = (
            "connect by a name it lists, or accept it with ssl_check_hostname=false"
            if names_another_host(failure)
            else "give the CA certificates that sign it in ssl_ca (PEM)"
        )
        return f"was refused: {why_untrusted(failure)}; {remedy}"
    if "ssl_cert" in url.query and (refusal_alert(error) or ended_by_peer(error)):
        said = refusal_alert(error) or "it closed the connection in the TLS handshake"
        return (
            f"did not accept the client certificate ssl_cert={url.query['ssl_cert']!r} "
            f"({said}); it must be signed by a CA of the server's ssl_ca"
        )
    if getattr(error.orig, "args", (None,))[:1] == (_CR_SSL_CONNECTION_ERROR,):
        return "offers no TLS, and the URL's ssl_* options ask for it"
    return None


def _bad(message: str) -> ConfigError:
    return ConfigError(f"CLOCK_DATABASE_URL: {message}", field="database_url")
