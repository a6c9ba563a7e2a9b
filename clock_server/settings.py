"""Configuration: one frozen, validated value built once from CLOCK_* environment variables.

Building it reads no file: the tokens file is read where the app is built
(clock_server.runtime.build)."""

from __future__ import annotations

import base64
import binascii
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from clock_server.errors import ConfigError
from clock_server.setting_ranges import check_number, read_number

DEFAULT_DATABASE_URL = "sqlite:///clock.db"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
# A publish is waited for at most this many CLOCK_PUBLISH_TIMEOUT_S while the broker still
# says something (broker.confirms.waits_on_s).
PUBLISH_PATIENCE = 3
# Settings whose empty value means something (off), rather than "the default".
_EMPTY_MEANS_OFF = frozenset({"dead_letter_exchange"})
NUMBER_TYPES = ("int", "float")  # the types of the fields setting_ranges reads and checks


def _default_instance_id() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


# A JSON encoder may write each byte of a payload's UTF-8 as six: a control character is
# "\u0001", and with ensure_ascii (Python's default) "€" (3 bytes) is "\u20ac" and an emoji
# (4 bytes) a pair of those. A body may so be six times its payload, and some room around it.
ESCAPED_BYTES_PER_PAYLOAD_BYTE = 6
BODY_OVERHEAD_BYTES = 16_384


@dataclass(frozen=True)
class Settings:
    """Every knob of the service. Each field is read from CLOCK_<FIELD NAME IN UPPER CASE>."""

    database_url: str = DEFAULT_DATABASE_URL
    amqp_url: str = DEFAULT_AMQP_URL
    amqp_ca_file: str = ""  # PEM CA certificates amqps:// nodes are verified with
    exchange: str = "clock"
    dead_letter_exchange: str = "clock.dead"  # empty: dead alarms are not published
    queue_prefix: str = "clock."
    declare_queues: bool = True
    queue_type: str = "classic"
    host: str = "127.0.0.1"
    port: int = 8080
    http_threads: int = 32
    http_connection_limit: int = 1_000  # open client connections per web process
    http_idle_timeout_s: int = 30  # a connection with nothing to do is closed after this
    http_header_timeout_s: float = 10.0  # a request line and headers must arrive within this
    allowed_hosts: str = ""  # Host names served, comma-separated (api/request_guard.py)
    allowed_origins: str = ""  # browser origins served besides the server's own
    trusted_proxy_hops: int = 0  # proxies in front whose X-Forwarded-Prefix is honoured
    metrics_token_required: bool = False
    web_processes: int = 1
    web_nice: int = 5
    migrate_on_start: bool = True
    run_engine: bool = True
    preload_window_s: float = 10.0
    preload_interval_s: float = 1.0
    preload_read_groups: int = 1  # groups of the slots read side by side (not on SQLite)
    heap_size: int = 100_000
    lease_s: float = 30.0
    heartbeat_s: float = 0.5
    engine_dead_after_s: float = 2.0
    claim_batch: int = 1_000
    ring_batch: int = 1_000
    ring_lanes: int = 4
    ring_lead_ms: int = 5
    ring_lead_max_ms: int = 50
    ring_gather_ms: int = 50
    publish_timeout_s: float = 10.0
    retry_base_s: float = 1.0
    retry_cap_s: float = 300.0
    retry_max: int = 16
    payload_max_bytes: int = 65_536
    batch_max_items: int = 1_000
    batch_max_bytes: int = 16 * 1024 * 1024
    list_max_limit: int = 1_000
    page_max_bytes: int = 4 * 1024 * 1024  # the largest list page or pull answer
    db_pool_size: int = 20
    shutdown_timeout_s: float = 10.0
    loop_stall_s: float = 60.0  # /livez: see loop_stall_ms
    log_level: str = "INFO"
    log_format: str = "text"  # or "json": one JSON object per line
    instance_id: str = field(default_factory=_default_instance_id)
    tokens: str = field(default="", repr=False)  # see clock_server/api/tokens.py for the format
    tokens_file: str = ""
    allow_unauthenticated: bool = False
    require_registered_applications: bool = False
    application_refresh_s: float = 2.0
    retention_days: float = 30.0
    purge_interval_s: float = 60.0
    purge_batch: int = 1_000
    stats_retention_days: float = 14.0  # the per-minute statistics (clock_minute_stats)
    webhook_timeout_s: float = 10.0  # an application's own webhook_timeout_s overrides these
    webhook_max_in_flight: int = 16
    webhook_allow_private: bool = False  # loopback, private and link-local targets allowed
    # Fernet keys sealing webhook secrets at rest, comma-separated: the first seals, all open.
    secret_keys: str = field(default="", repr=False)
    pull_visibility_s: float = 30.0
    pull_poll_ms: int = 25  # how often a long poll looks again for due messages

    def __post_init__(self) -> None:
        if self.tokens and self.tokens_file:
            raise ConfigError("give CLOCK_TOKENS or CLOCK_TOKENS_FILE, not both", field="tokens")
        _check_secret_keys(self.secret_keys)
        for f in fields(self):
            if f.type in NUMBER_TYPES:
                check_number(f.name, str(f.type), getattr(self, f.name))
        if self.batch_max_bytes < self.single_body_max_bytes:
            raise ConfigError(
                f"CLOCK_BATCH_MAX_BYTES must be at least {self.single_body_max_bytes}, so that "
                "a batch can carry any one alarm a single create takes (six bytes per payload "
                "byte, as JSON may escape them, and 16 KiB more)",
                field="batch_max_bytes",
            )
        if self.page_max_bytes < self.single_body_max_bytes:
            raise ConfigError(
                f"CLOCK_PAGE_MAX_BYTES must be at least {self.single_body_max_bytes}, so that "
                "a page can hold any one alarm (six bytes per payload byte, as JSON may escape "
                "them, and 16 KiB more)",
                field="page_max_bytes",
            )
        if self.amqp_ca_file and not any(
            url.strip().lower().startswith("amqps://") for url in self.amqp_url.split(",")
        ):
            raise ConfigError(
                "CLOCK_AMQP_CA_FILE verifies amqps:// nodes, and CLOCK_AMQP_URL names none: "
                "give amqps:// URLs, or leave it unset",
                field="amqp_ca_file",
            )
        if self.queue_type not in ("classic", "quorum"):
            raise ConfigError(
                f"CLOCK_QUEUE_TYPE must be classic or quorum, not {self.queue_type!r}",
                field="queue_type",
            )
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(
                f"CLOCK_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}",
                field="log_level",
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                f"CLOCK_LOG_FORMAT must be text or json, not {self.log_format!r}",
                field="log_format",
            )
        if self.lease_s < 2 * self.preload_window_s:
            raise ConfigError(
                "CLOCK_LEASE_S must be at least twice CLOCK_PRELOAD_WINDOW_S, so a claim "
                "never expires before the alarm it holds is due",
                field="lease_s",
            )
        if self.engine_dead_after_s < 2 * self.heartbeat_s:
            raise ConfigError(
                "CLOCK_ENGINE_DEAD_AFTER_S must be at least twice CLOCK_HEARTBEAT_S, so that "
                "one late heartbeat does not get a live engine declared dead",
                field="engine_dead_after_s",
            )
        if self.lease_s <= self.engine_dead_after_s:
            raise ConfigError(
                "CLOCK_LEASE_S must be longer than CLOCK_ENGINE_DEAD_AFTER_S: the lease is the "
                "backstop for what the heartbeats miss",
                field="lease_s",
            )
        if self.dead_letter_exchange and self.dead_letter_exchange == self.exchange:
            raise ConfigError(
                "CLOCK_DEAD_LETTER_EXCHANGE must differ from CLOCK_EXCHANGE (or be empty to "
                "publish no dead letters): dead letters go to a topic exchange of their own",
                field="dead_letter_exchange",
            )
        if self.metrics_token_required and not (self.tokens or self.tokens_file):
            raise ConfigError(
                "CLOCK_METRICS_TOKEN_REQUIRED=true needs tokens (CLOCK_TOKENS or "
                "CLOCK_TOKENS_FILE): without them no request could read /metrics",
                field="metrics_token_required",
            )
        if self.retry_cap_s < self.retry_base_s:
            raise ConfigError(
                "CLOCK_RETRY_CAP_S must be >= CLOCK_RETRY_BASE_S", field="retry_cap_s"
            )

    @property
    def single_body_max_bytes(self) -> int:
        """The largest body of a single create or PATCH: a payload at its limit, escaped."""
        return ESCAPED_BYTES_PER_PAYLOAD_BYTE * self.payload_max_bytes + BODY_OVERHEAD_BYTES

    @property
    def preload_window_ms(self) -> int:
        return int(self.preload_window_s * 1000)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)

    @property
    def loop_stall_ms(self) -> int:
        """How long /livez lets a loop go past its beat: CLOCK_LOOP_STALL_S, and never less
        than one CLOCK_PUBLISH_TIMEOUT_S more than the longest wait for a publish's confirms,
        so that a step that waits one out beside a slow database is not taken for a stall."""
        floor_s = (PUBLISH_PATIENCE + 1) * self.publish_timeout_s
        return int(max(self.loop_stall_s, floor_s) * 1000)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from CLOCK_* variables; a bad value raises ConfigError naming it."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            if not f.init:
                continue
            raw = environ.get(f"CLOCK_{f.name.upper()}")
            if raw is not None and (raw != "" or f.name in _EMPTY_MEANS_OFF):
                values[f.name] = _parse(f.name, f.type, raw)
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        """The settings for the start-up log, with passwords in URLs and tokens masked."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        out["tokens"] = "<set>" if self.tokens else ""
        out["secret_keys"] = f"<{len(self.secret_keys.split(','))} set>" if self.secret_keys else ""
        out["database_url"] = mask_url(self.database_url)
        out["amqp_url"] = ",".join(mask_url(url) for url in self.amqp_url.split(","))
        return out


def _check_secret_keys(value: str) -> None:
    """Each of CLOCK_SECRET_KEYS must be a Fernet key: 32 bytes in URL-safe base64."""
    if not value:
        return
    for number, key in enumerate(value.split(","), start=1):
        try:
            valid = len(base64.urlsafe_b64decode(key.strip().encode("ascii"))) == 32
        except (binascii.Error, UnicodeEncodeError, ValueError):
            valid = False
        if not valid:
            raise ConfigError(
                f"CLOCK_SECRET_KEYS key {number} is not a Fernet key (32 bytes in URL-safe "
                "base64; make one with: python3 -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')",
                field="secret_keys",
            )


def _parse(name: str, type_name: object, raw: str) -> object:
    if type_name in NUMBER_TYPES:
        return read_number(name, str(type_name), raw)
    if type_name == "bool":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"CLOCK_{name.upper()}={raw!r} is not a valid bool", field=name)
    return raw


def mask_url(url: str) -> str:
    """Hide the password in scheme://user:password@host URLs."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
