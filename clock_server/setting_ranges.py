"""The numbers a setting may hold: the range of every numeric setting, and the one way a
number is read from its CLOCK_* variable and checked.

Every bound is finite, so that no setting is NaN or infinite and none overflows where it is
turned into milliseconds, a 64-bit column, a C integer or a timeout. A server default that an
application may override has the range the application's own setting has."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import NoReturn

from clock_server.errors import ConfigError

PAYLOAD_LIMIT_BYTES = 4 * 1024 * 1024
MAX_PROXY_HOPS = 10
DAY_S = 86_400
GIB = 1024 * 1024 * 1024
INT_MAX = 2**31 - 1  # the retry count's column
MILLISECOND = 0.001  # the clock's resolution: a shorter time would be 0 ms


@dataclass(frozen=True)
class Range:
    """From `low` to `high`, both included; `why` is added to the message of a value outside."""

    low: int | float
    high: int | float
    why: str = ""


SECONDS = Range(MILLISECOND, DAY_S)
# Each of these is also the range of the application setting of the same name
# (api/application_validation.py): a default and its override take the same values.
DAYS = Range(0.000_001, 36_500)  # 86 ms to a century
RETRY_SECONDS = Range(MILLISECOND, 1_000_000)  # a millisecond to about 11.5 days
WEBHOOK_TIMEOUT_S = Range(0.1, 300)
IN_FLIGHT = Range(1, 1_000)  # calls at once to one application's endpoint: a thread each
VISIBILITY_S = Range(1, 43_200)  # a second to 12 hours
LEAD_MS = Range(0, 1_000)
BODY_BYTES = Range(1, GIB)

RANGES: dict[str, Range] = {
    "port": Range(1, 65_535, "a TCP port"),
    "http_threads": Range(1, 1_000),
    "http_connection_limit": Range(1, 1_000_000),
    "http_idle_timeout_s": Range(1, DAY_S),
    "http_header_timeout_s": SECONDS,
    "trusted_proxy_hops": Range(
        0, MAX_PROXY_HOPS, "the number of reverse proxies in front of the server, 0 trusts none"
    ),
    "web_processes": Range(1, 256),
    "web_nice": Range(0, 19, "a process's niceness"),
    "preload_window_s": SECONDS,
    "preload_interval_s": SECONDS,
    "preload_read_groups": Range(1, 32, "groups of the slots read side by side"),
    "heap_size": Range(1, 10_000_000),
    "lease_s": SECONDS,
    "heartbeat_s": SECONDS,
    "engine_dead_after_s": SECONDS,
    "claim_batch": Range(1, 100_000),
    "ring_batch": Range(1, 100_000),
    "ring_lanes": Range(1, 64),
    "ring_lead_ms": LEAD_MS,
    "ring_lead_max_ms": LEAD_MS,
    "ring_gather_ms": LEAD_MS,
    "publish_timeout_s": SECONDS,
    "retry_base_s": RETRY_SECONDS,
    "retry_cap_s": RETRY_SECONDS,
    "retry_max": Range(0, INT_MAX),
    "payload_max_bytes": Range(
        1,
        PAYLOAD_LIMIT_BYTES,
        "an alarm, escaped, must fit one statement within MariaDB's max_allowed_packet",
    ),
    "batch_max_items": Range(1, 100_000),
    "batch_max_bytes": BODY_BYTES,
    "list_max_limit": Range(1, 100_000),
    "page_max_bytes": BODY_BYTES,
    "db_pool_size": Range(1, 1_000),
    "shutdown_timeout_s": SECONDS,
    "loop_stall_s": SECONDS,
    "application_refresh_s": SECONDS,
    "retention_days": DAYS,
    "purge_interval_s": SECONDS,
    "purge_batch": Range(1, 1_000, "each batch is one short transaction"),
    "stats_retention_days": DAYS,
    "webhook_timeout_s": WEBHOOK_TIMEOUT_S,
    "webhook_max_in_flight": IN_FLIGHT,
    "pull_visibility_s": VISIBILITY_S,
    "pull_poll_ms": Range(1, 10_000),
}

# Plain decimal only: "+", spaces, "_", an exponent, "0x", "nan" and "inf" are refused; a "-"
# is read, for the range to refuse with its message.
_WHOLE = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_LONGEST = 40  # characters; longer is outside every range (and int() refuses 4,300 digits)


def read_number(name: str, kind: str, raw: str) -> int | float:
    """The value of CLOCK_<NAME> for a setting of type `kind` ("int" or "float"), checked."""
    whole = kind == "int"
    if not (_WHOLE if whole else _DECIMAL).fullmatch(raw):
        shape = "whole number, as 8080" if whole else "decimal number, as 2.5"
        raise ConfigError(
            f"CLOCK_{name.upper()}={raw!r} is not a plain {shape} (no spaces, '+', '_', "
            "exponent, '0x', 'nan' or 'inf')",
            field=name,
        )
    if len(raw) > _LONGEST:
        _refuse(name, raw)
    value = int(raw) if whole else float(raw)
    check_number(name, kind, value)
    return value


def check_number(name: str, kind: str, value: object) -> None:
    """Refuse a value of the wrong type, NaN, an infinity or a number outside the range."""
    types = (int,) if kind == "int" else (int, float)
    if isinstance(value, bool) or not isinstance(value, types):
        what = "a whole number" if kind == "int" else "a number"
        raise ConfigError(f"CLOCK_{name.upper()} must be {what}, not {value!r}", field=name)
    bound = RANGES[name]
    if not bound.low <= value <= bound.high:  # NaN is refused here too: it compares false
        _refuse(name, value)


def _refuse(name: str, value: object) -> NoReturn:
    bound = RANGES[name]
    why = f": {bound.why}" if bound.why else ""
    raise ConfigError(
        f"CLOCK_{name.upper()} must be from {shown(bound.low)} to {shown(bound.high)}{why}, "
        f"not {_cut(shown(value) if isinstance(value, int | float) else str(value))}",
        field=name,
    )


def _cut(text: str) -> str:
    return text if len(text) <= _LONGEST else f"{text[:_LONGEST]}..."


def shown(number: int | float) -> str:
    """A bound as plain decimal digits, as docs/configuration.md writes it: 0.000001, 86400."""
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return format(Decimal(repr(number)), "f")
