"""The alarm as the service sees it, independent of storage and transport."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

PENDING = "pending"
# Handed to its application's webhook or pull channel, and not yet answered 2xx or acked.
DELIVERING = "delivering"
RUNG = "rung"
CANCELLED = "cancelled"
EXPIRED = "expired"
DEAD = "dead"
STATUSES = (PENDING, DELIVERING, RUNG, CANCELLED, EXPIRED, DEAD)
# The store's status column is this wide (fixed-size, see store.schema); a longer status
# needs a migration.
STATUS_LENGTH = 10

# Largest epoch ms we accept: 9999-12-31T23:59:59.999Z.
MAX_EPOCH_MS = 253_402_300_799_999
MAX_RING_AFTER_COUNT = 1_000_000
MAX_INCREMENT_BY = 1_000

# How an application's alarms reach it (ApplicationPolicy.channel).
AMQP = "amqp"  # published to RabbitMQ, the default
WEBHOOK = "webhook"  # POSTed to the application's URL, signed per Standard Webhooks
PULL = "pull"  # leased to the application's pullers over HTTP, acked by id
CHANNELS = (AMQP, WEBHOOK, PULL)

# An application names a routing key and a queue (clock.<application>): the one rule for it.
APPLICATION_CHARS = "A-Z, a-z, 0-9, '.', '_' or '-', other than '.' and '..'"
APPLICATION_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
_APPLICATION_RE = re.compile(APPLICATION_PATTERN)


# Names made only of the pattern's characters that a URL cannot carry as a path segment:
# clients and proxies remove "." and ".." segments, so a call for "../alarms/x" would act
# on another path.
DOT_SEGMENTS = frozenset({".", ".."})


def is_application_name(name: str) -> bool:
    """1 to 64 characters of APPLICATION_CHARS, other than "." and ".."."""
    return _APPLICATION_RE.fullmatch(name) is not None and name not in DOT_SEGMENTS


@dataclass(frozen=True, slots=True)
class NewAlarm:
    """A validated request to create an alarm; `created_by` is the caller's actor (see
    AlarmEvent), kept with the alarm for its history."""

    application: str
    business_id: str
    payload: str
    target_ring_at: int
    latest_ring_at: int | None
    created_by: str | None = None
    ring_after_count: int | None = None  # rings once this many are counted, or at the target


@dataclass(frozen=True, slots=True)
class AlarmChanges:
    """A validated PATCH: None leaves a field as it is; latest_ring_at is changed only when
    ``set_latest_ring_at`` is true (it may be set to None, meaning no cutoff)."""

    target_ring_at: int | None = None
    payload: str | None = None
    set_latest_ring_at: bool = False
    latest_ring_at: int | None = None


@dataclass(frozen=True, slots=True)
class AlarmFilter:
    """Which alarms a search or a bulk action covers; None matches anything. `due_from` and
    `due_to` bound `next_try_time` (from inclusive, to exclusive): when a pending alarm is
    next due, and when a finished one finished."""

    application: str | None = None
    status: str | None = None
    business_id_prefix: str | None = None
    due_from: int | None = None
    due_to: int | None = None


@dataclass(frozen=True, slots=True)
class BulkOutcome:
    """What a bulk action did: `changed` alarms in this call; `done` is False when it
    stopped at its time budget with more to do (the same call again goes on)."""

    changed: int
    done: bool
    per_application: dict[str, int] = field(default_factory=dict)  # of `changed`

    def to_json(self) -> dict[str, Any]:
        return {"changed": self.changed, "done": self.done}


@dataclass(frozen=True, slots=True)
class Alarm:
    """A stored alarm."""

    id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: int
    latest_ring_at: int | None
    next_try_time: int
    retry_times: int
    status: str
    rung_at: int | None
    created_at: int
    updated_at: int
    ring_after_count: int | None = None  # a count-triggered alarm: rings at this count
    count: int = 0  # what was counted on it so far

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "application": self.application,
            "business_id": self.business_id,
            "payload": self.payload,
            "target_ring_at": self.target_ring_at,
            "latest_ring_at": self.latest_ring_at,
            "next_try_time": self.next_try_time,
            "retry_times": self.retry_times,
            "status": self.status,
            "rung_at": self.rung_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "ring_after_count": self.ring_after_count,
            "count": self.count,
        }


# The kinds of an alarm's events. Those named like a status mean the alarm reached it.
CREATED = "created"
MOVED = "moved"  # a PATCH changed the target (and perhaps more)
CHANGED = "changed"  # a PATCH changed the cutoff or the payload, not the target
ATTEMPT_FAILED = "attempt_failed"
REDRIVEN = "redriven"
COUNT_REACHED = "count_reached"  # a count-triggered alarm's count reached ring_after_count
# Its application left the pull channel: a message waiting for pullers went back to pending.
REQUEUED = "requeued"
EVENT_KINDS = (
    CREATED, MOVED, CHANGED, CANCELLED, ATTEMPT_FAILED, COUNT_REACHED, RUNG, EXPIRED, DEAD,
    REDRIVEN, REQUEUED,
)  # fmt: skip

# Who acted, besides an application acting on its own alarms.
ADMIN = "admin"  # an admin token
ANONYMOUS = "anonymous"  # a caller of a server with no tokens configured
ENGINE = "clock"  # the engine: attempts, rings, expiries, deaths

# What a failed publish's event says: the publisher tells only whether the broker took each
# message, and whether it is connected.
NOT_CONFIRMED = "refused by the broker (nacked, or returned as unroutable)"


@dataclass(frozen=True, slots=True)
class AlarmEvent:
    """One step of an alarm's history: when (epoch ms), what (one of EVENT_KINDS), who (the
    application whose token was used, ADMIN, ANONYMOUS or ENGINE; never a token), and the
    kind's details (an attempt number, an error, the old and new target...)."""

    at: int
    kind: str
    actor: str
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "actor": self.actor, "detail": self.detail}


class Claim(NamedTuple):
    """An alarm held in memory: due at ``due_ms``, valid while the row still has ``version``.

    A tuple, not an ordered dataclass: the heap compares claims about 30 times per insert,
    and tuples compare in C (6.4 -> 3.3 µs per claim pushed onto a heap of 50,000)."""

    due_ms: int
    id: int
    version: int
    application: str = ""  # whose it is: the heap shares a backlog between applications
    slot: int = 0  # where it lies in the slots (clock_server.slot_space)


class RingRow(NamedTuple):
    """What the ring path reads of a claimed alarm under its row lock (a tuple: a thousand
    are made per ring batch, and a frozen dataclass costs three times as much to build)."""

    id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: int
    latest_ring_at: int | None
    retry_times: int
    ring_after_count: int | None = None
    counted: int = 0
    redrives: int = 0

    @property
    def delivery_id(self) -> str:
        """The message id on the AMQP and webhook channels: the alarm id, the same on every
        attempt; after the n-th re-drive, "<id>-r<n>", a delivery of its own."""
        return str(self.id) if not self.redrives else f"{self.id}-r{self.redrives}"

    @property
    def count_reached(self) -> bool:
        """A count-triggered alarm whose count was reached: it rings before its target."""
        return self.ring_after_count is not None and self.counted >= self.ring_after_count


def ring_message(row: RingRow, published_at: int) -> dict[str, Any]:
    """What an alarm's message says, the same on every channel: `row` as locked to ring it,
    sent (or leased) at `published_at`."""
    body: dict[str, Any] = {
        "id": row.id,
        "application": row.application,
        "business_id": row.business_id,
        "payload": row.payload,
        "target_ring_at": row.target_ring_at,
        "attempt": row.retry_times + 1,
        "published_at": published_at,
    }
    if row.ring_after_count is not None:  # what made it ring: its count, or its deadline
        body["trigger"] = "count" if row.count_reached else "time"
        body["count"] = row.counted
    return body


class OutgoingMessage(NamedTuple):
    """One alarm ready to be published (a tuple: one is built per alarm on the ring path)."""

    message_id: str
    application: str  # the routing key; also names the queue clock.<application>
    body: bytes  # JSON, UTF-8


class DeadLetter(NamedTuple):
    """An alarm that died, as the dead-letter exchange gets it: the alarm as it was when it
    died, when (`died_at`, epoch ms), after how many attempts, and the last error.
    `letter_id` orders the letters and names each one while it waits to be published."""

    letter_id: int
    alarm_id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: int
    latest_ring_at: int | None
    died_at: int
    attempts: int
    error: str


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """A running engine as the clock_engine table knows it (times in epoch ms)."""

    id: int
    instance_id: str
    started_at: int
    heartbeat_at: int
    lease_ms: int
    dead_at: int | None  # set once another engine found it silent
    slot_from: int = 0  # the slots it owned at its last beat: slot_from up to slot_to
    slot_to: int = 0
    moves: int = 0  # others' moves of alarms in its slots to an earlier time, counted
    moved_from: int | None = None  # the earliest due time they gave, until it reads them


@dataclass(frozen=True, slots=True)
class ApplicationPolicy:
    """An application's row in the registry. A limit of None is no limit; a retry field or
    the retention of None means the server's default."""

    name: str
    create_rate_per_s: float | None = None  # alarms created per second, with a burst
    create_burst: int | None = None  # None: one second's worth (at least 1)
    max_pending: int | None = None  # the most pending alarms it may have
    ring_rate_per_s: float | None = None  # alarms rung per second, with a burst
    ring_burst: int | None = None
    retry_base_s: float | None = None
    retry_cap_s: float | None = None
    retry_max: int | None = None
    default_cutoff_ms: int | None = None  # latest_ring_at = target + this, when not given
    retention_days: float | None = None  # finished alarms are deleted after this long
    channel: str = AMQP  # one of CHANNELS
    webhook_url: str | None = None
    webhook_timeout_s: float | None = None  # None: CLOCK_WEBHOOK_TIMEOUT_S
    webhook_max_in_flight: int | None = None  # None: CLOCK_WEBHOOK_MAX_IN_FLIGHT
    pull_visibility_s: float | None = None  # None: CLOCK_PULL_VISIBILITY_S
    created_at: int = 0
    updated_at: int = 0
    # Signs the webhooks; never part of to_json (the admin API reads it on its own route).
    webhook_secret: str | None = field(default=None, repr=False)
    # The secret the last rotation replaced: it signs too, beside the new one, until then.
    webhook_previous_secret: str | None = field(default=None, repr=False)
    webhook_previous_secret_until: int | None = None  # epoch ms

    def signing_secrets(self, now_ms: int) -> tuple[str, ...]:
        """The secrets that sign a webhook sent at `now_ms`: the current one, and the one it
        replaced while its overlap lasts."""
        current = (self.webhook_secret,) if self.webhook_secret is not None else ()
        until = self.webhook_previous_secret_until
        if self.webhook_previous_secret is None or until is None or now_ms >= until:
            return current
        return (*current, self.webhook_previous_secret)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "create_rate_per_s": self.create_rate_per_s,
            "create_burst": self.create_burst,
            "max_pending": self.max_pending,
            "ring_rate_per_s": self.ring_rate_per_s,
            "ring_burst": self.ring_burst,
            "retry_base_s": self.retry_base_s,
            "retry_cap_s": self.retry_cap_s,
            "retry_max": self.retry_max,
            "default_cutoff_ms": self.default_cutoff_ms,
            "retention_days": self.retention_days,
            "channel": self.channel,
            "webhook_url": self.webhook_url,
            "webhook_timeout_s": self.webhook_timeout_s,
            "webhook_max_in_flight": self.webhook_max_in_flight,
            "pull_visibility_s": self.pull_visibility_s,
            "webhook_secret_set": self.webhook_secret is not None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


# The settings of an application that an admin may set (PUT / PATCH), in the order above.
POLICY_FIELDS = (
    "create_rate_per_s",
    "create_burst",
    "max_pending",
    "ring_rate_per_s",
    "ring_burst",
    "retry_base_s",
    "retry_cap_s",
    "retry_max",
    "default_cutoff_ms",
    "retention_days",
    "channel",
    "webhook_url",
    "webhook_timeout_s",
    "webhook_max_in_flight",
    "pull_visibility_s",
)


def burst_of(rate_per_s: float, burst: int | None) -> int:
    """A bucket's size: the given burst, or one second's worth of the rate (at least 1)."""
    return burst if burst is not None else max(1, int(rate_per_s))


@dataclass(frozen=True, slots=True)
class ApplicationCounts:
    """Live counts of one application's alarms."""

    pending: int = 0
    due_next_minute: int = 0  # pending, due from now to a minute ahead
    overdue: int = 0  # pending, due before now
    dead: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "pending": self.pending,
            "due_next_minute": self.due_next_minute,
            "overdue": self.overdue,
            "dead": self.dead,
        }
