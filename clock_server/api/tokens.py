"""Bearer tokens and the applications each may use: parsed once at start, then only looked up.

One grammar serves both settings. ``CLOCK_TOKENS`` holds entries separated by ``;``, and
``CLOCK_TOKENS_FILE`` names a text file with one entry per line (blank lines and lines
starting with ``#`` are skipped)::

    <token>=<application>[,<application>...]     the token may use these applications
    <token>=*                                    the token may use every application (admin)
    <token>=*:read  or  <token>=<app>[,...]:read  the same, but only to read: every write is 403

A token is 16 to 256 characters of ``A-Z a-z 0-9 - . _ ~ + /`` with optional trailing ``=``
(RFC 6750's b64token), so ``secrets.token_urlsafe(32)`` makes a good one. It must also not
look like a placeholder (`weakness`): at least 6 different characters, and not one pattern of
up to 8 characters repeated. In place of the token an entry may give its SHA-256 digest,
``sha256:<64 hex digits>`` (`hashed_form`, or ``clock-server hash-token``), so that the
setting holds nothing a caller could present; a digest cannot be checked for weakness.
Error messages name the setting and the entry, never the token. Pure logic: no Flask, no I/O
but reading the file.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path

from clock_server.errors import ConfigError
from clock_server.model import APPLICATION_CHARS, is_application_name

ALL_APPLICATIONS = "*"
READ_ONLY = "read"
MIN_TOKEN_CHARS = 16
MIN_DISTINCT_CHARS = 6
LONGEST_REPEATED_PATTERN = 8
HASH_PREFIX = "sha256:"
_TOKEN_RE = re.compile(rf"[A-Za-z0-9._~+/-]{{{MIN_TOKEN_CHARS},256}}=*")
_HASHED_RE = re.compile(r"sha256:[0-9a-fA-F]{64}")
TOKEN_RULE = (
    f"a token must be {MIN_TOKEN_CHARS} to 256 characters of A-Z, a-z, 0-9, "
    "'-', '.', '_', '~', '+', '/' (optionally ending in '=')"
)


@dataclass(frozen=True)
class Grant:
    """What one token may do. `label` says where it was configured and is safe to log."""

    label: str
    applications: frozenset[str] | None  # None: every application
    read_only: bool = False  # reads only: every other method is refused

    @property
    def is_admin(self) -> bool:
        return self.applications is None

    def allows(self, application: str) -> bool:
        return self.applications is None or application in self.applications


@dataclass(frozen=True)
class TokenTable:
    """The configured tokens, kept only as SHA-256 digests; empty means authentication is off."""

    _entries: tuple[tuple[bytes, Grant], ...] = field(default=(), repr=False)

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> Grant | None:
        """The grant of `token`, or None. Compares with every token, in constant time each."""
        presented = _digest(token)
        found: Grant | None = None
        for digest, grant in self._entries:  # no early exit: the time does not tell which
            if hmac.compare_digest(presented, digest):
                found = grant
        return found


class LiveTokens:
    """The token table in force, which a reload of CLOCK_TOKENS_FILE replaces whole: each
    request looks its token up in the table of the moment. Reads as a TokenTable."""

    def __init__(self, table: TokenTable) -> None:
        self._table = table

    @property
    def table(self) -> TokenTable:
        return self._table

    @property
    def enabled(self) -> bool:
        return self._table.enabled

    def __len__(self) -> int:
        return len(self._table)

    def lookup(self, token: str) -> Grant | None:
        return self._table.lookup(token)

    def replace(self, table: TokenTable) -> None:
        """Put `table` in force for the requests from now on."""
        self._table = table


def load_tokens(inline: str, path: str) -> TokenTable:
    """The table from CLOCK_TOKENS (`inline`) or CLOCK_TOKENS_FILE (`path`); both empty: off."""
    if inline and path:
        raise ConfigError("give CLOCK_TOKENS or CLOCK_TOKENS_FILE, not both", field="tokens")
    if inline:
        return parse_tokens(inline, "CLOCK_TOKENS")
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(
                f"CLOCK_TOKENS_FILE={path!r} cannot be read: {error}", field="tokens_file"
            ) from None
        return parse_tokens(text, "CLOCK_TOKENS_FILE")
    return TokenTable()


def parse_tokens(text: str, setting: str) -> TokenTable:
    """Parse `text` in the grammar above; `setting` names the variable in error messages.

    CLOCK_TOKENS separates entries with ";", the file with line breaks (and allows comments).
    """
    in_file = setting == "CLOCK_TOKENS_FILE"
    field_name = setting.removeprefix("CLOCK_").lower()
    where = "line" if in_file else "entry"
    raw_entries = text.splitlines() if in_file else text.split(";")
    entries: list[tuple[bytes, Grant]] = []
    for number, raw in enumerate(raw_entries, start=1):
        entry = raw.strip()
        if not entry or (in_file and entry.startswith("#")):
            continue
        label = f"{setting} {where} {number}"
        digest, grant = _parse_entry(entry, label, field_name)
        if any(hmac.compare_digest(digest, seen) for seen, _ in entries):
            raise ConfigError(f"{label}: this token is already configured", field=field_name)
        entries.append((digest, grant))
    if not entries:
        raise ConfigError(
            f"{setting} is set but holds no token; format: <token>=<app>[,<app>...] or <token>=*",
            field=field_name,
        )
    return TokenTable(tuple(entries))


def _parse_entry(entry: str, label: str, field_name: str) -> tuple[bytes, Grant]:
    token, sep, apps = entry.rpartition("=")  # applications never hold "=", tokens may end in it
    token, apps = token.strip(), apps.strip()
    apps, colon, role = apps.partition(":")
    apps, role = apps.strip(), role.strip()
    if colon and role != READ_ONLY:
        raise ConfigError(
            f"{label}: {role!r} is not a role; the only one is {READ_ONLY!r} (<token>=*:read)",
            field=field_name,
        )
    read_only = bool(colon)
    if not sep or not token:
        raise ConfigError(
            f"{label}: expected <token>=<app>[,<app>...] or <token>=*", field=field_name
        )
    digest = _entry_digest(token, label, field_name)
    if apps == ALL_APPLICATIONS:
        return digest, Grant(label, None, read_only)
    names = [name.strip() for name in apps.split(",")]
    for name in names:
        if name == ALL_APPLICATIONS:
            raise ConfigError(f"{label}: '*' must stand alone", field=field_name)
        if not is_application_name(name):
            raise ConfigError(
                f"{label}: {name!r} is not an application name (1 to 64 characters of "
                f"{APPLICATION_CHARS})",
                field=field_name,
            )
    return digest, Grant(label, frozenset(names), read_only)


def _entry_digest(token: str, label: str, field_name: str) -> bytes:
    """The digest an entry configures: given as sha256:<hex>, or of the plain token."""
    if token.startswith(HASH_PREFIX):
        if not _HASHED_RE.fullmatch(token):
            raise ConfigError(
                f"{label}: a hashed token must be {HASH_PREFIX} and 64 hex digits "
                "(clock-server hash-token prints it)",
                field=field_name,
            )
        return bytes.fromhex(token.removeprefix(HASH_PREFIX))
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"{label}: {problem}", field=field_name)
    return _digest(token)


def token_problem(token: str) -> str | None:
    """Why `token` may not be a bearer token (its form, or `weakness`), or None."""
    if not _TOKEN_RE.fullmatch(token):
        return TOKEN_RULE
    return weakness(token)


def weakness(token: str) -> str | None:
    """Why a well-formed token is too easy to guess, or None: fewer than 6 different
    characters, or one pattern of up to 8 characters repeated ("aaaa...", "abcdefgh" x 2).
    A floor against placeholders and slips, not a strength meter: a random token
    (secrets.token_urlsafe(32)) always passes."""
    if len(set(token)) < MIN_DISTINCT_CHARS:
        return (
            f"a token must hold at least {MIN_DISTINCT_CHARS} different characters "
            "(make one with secrets.token_urlsafe(32))"
        )
    for period in range(1, LONGEST_REPEATED_PATTERN + 1):
        if len(token) > period and token == (token[:period] * len(token))[: len(token)]:
            return (
                "a token must not repeat one short pattern "
                "(make one with secrets.token_urlsafe(32))"
            )
    return None


def hashed_form(token: str) -> str:
    """The entry form of `token` that holds only its digest: sha256:<64 hex digits>.
    Raises ConfigError when the token may not be a bearer token."""
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(problem, field="token")
    return HASH_PREFIX + _digest(token).hex()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def is_loopback(host: str) -> bool:
    """Whether binding to `host` keeps the server reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, tokens: TokenTable, allow_unauthenticated: bool) -> None:
    """Refuse to serve without tokens on anything but loopback, unless explicitly allowed."""
    if tokens.enabled or allow_unauthenticated or is_loopback(host):
        return
    raise ConfigError(
        f"CLOCK_HOST={host!r} would expose the API without authentication: configure tokens "
        "(CLOCK_TOKENS or CLOCK_TOKENS_FILE), bind to 127.0.0.1, or set "
        "CLOCK_ALLOW_UNAUTHENTICATED=true if something in front of clock authenticates",
        field="host",
    )


# What a request looks its token up in: a fixed table, or the one a reload replaces.
Tokens = TokenTable | LiveTokens
