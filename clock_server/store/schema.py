"""The tables: the alarms (named `clock` in SQL, as in the seed design), their events and the
rest, as SQLAlchemy Core metadata. The Alembic migrations create them."""

from __future__ import annotations

from sqlalchemy import (
    CHAR,
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql

from clock_server.minute_stats import LATENESS_BOUNDS_MS
from clock_server.model import STATUS_LENGTH

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY, so the id is INTEGER there.
_ID = BigInteger().with_variant(Integer(), "sqlite")
# On MySQL/MariaDB the migration gives application and business_id a binary NO PAD collation
# (keys are case-sensitive and "x" differs from "x "); its name differs between the two servers.
_KEY = String(128)
_APP = String(64)
_PAYLOAD = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")

alarm_table = Table(
    "clock",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("application", _APP, nullable=False),
    Column("business_id", _KEY, nullable=False),
    Column("payload", _PAYLOAD, nullable=False),
    Column("target_ring_at", BigInteger, nullable=False),
    Column("latest_ring_at", BigInteger, nullable=True),
    # When somebody should next try this alarm: the target, a retry's backoff time, or,
    # while an engine holds the alarm in memory, the expiry of that claim.
    Column("next_try_time", BigInteger, nullable=False),
    Column("retry_times", Integer, nullable=False, server_default="0"),
    # Fixed-size, like every column a claim or a ring rewrites: a row that grows in a full
    # page makes MariaDB split or reorganize the page (migration 0012). So the status is a
    # CHAR as long as the longest status, and rung_at is 0 until the alarm rings.
    Column("status", CHAR(STATUS_LENGTH), nullable=False),
    Column("rung_at", BigInteger, nullable=False, server_default="0"),
    # Bumped whenever a claim is taken or given up or the due time moves, so the ring
    # thread can tell a stale in-memory entry from a live one.
    Column("version", BigInteger, nullable=False, server_default="0"),
    # The clock_engine row of the engine holding the claim, 0 when none does; only meaningful
    # while next_try_time is a claim's lease end. A fixed-size integer, so that claiming
    # rewrites the row in place.
    Column("claimed_by", Integer, nullable=False, server_default="0"),
    Column("create_time", BigInteger, nullable=False),
    Column("update_time", BigInteger, nullable=False),
    # Who created the alarm (an application, "admin", "anonymous"), for its history: its
    # "created" event is read from this row, not written apart. NULL for alarms created
    # before the history existed.
    Column("created_by", _APP, nullable=True),
    # A count-triggered alarm rings once `counted` reaches `ring_after_count` (NULL: rings by
    # time only), or at its target, whichever comes first (store/counts.py).
    Column("ring_after_count", Integer, nullable=True),
    Column("counted", Integer, nullable=False, server_default="0"),
    # How many times an operator re-drove the alarm: part of its message id from the first
    # re-drive on (model.delivery_id), so that a receiver that deduplicated the delivery
    # before takes the re-driven one.
    Column("redrives", Integer, nullable=False, server_default="0"),
    # Where the alarm lies among the slots engines share (clock_server.slot_space), set at
    # insert from its key; an engine claims only the alarms of the slots it owns.
    Column("slot", SmallInteger, nullable=False, server_default="0"),
    UniqueConstraint("application", "business_id", name="uq_clock_application_business_id"),
    # The slot last: an engine's reading of its own slots filters the others' on the index
    # entries, in (next_try_time, id) order (alembic 0018).
    Index("ix_clock_status_next_try_time", "status", "next_try_time", "id", "slot"),
    Index("ix_clock_application_id", "application", "id"),
    Index("ix_clock_application_due", "application", "status", "next_try_time", "id", "slot"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# What a read of a whole alarm selects.
ALARM_COLUMNS = (
    alarm_table.c.id,
    alarm_table.c.application,
    alarm_table.c.business_id,
    alarm_table.c.payload,
    alarm_table.c.target_ring_at,
    alarm_table.c.latest_ring_at,
    alarm_table.c.next_try_time,
    alarm_table.c.retry_times,
    alarm_table.c.status,
    alarm_table.c.rung_at,
    alarm_table.c.create_time,
    alarm_table.c.update_time,
    alarm_table.c.ring_after_count,
    alarm_table.c.counted,
    alarm_table.c.slot,
)

# Each alarm's history (store/events.py), deleted with the alarm. What the alarm row already
# says is not written here: its creation and its ring.
event_table = Table(
    "clock_event",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("alarm_id", BigInteger, nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("actor", _APP, nullable=False),
    Column("detail", Text, nullable=False),  # a JSON object
    Index("ix_clock_event_alarm_id_id", "alarm_id", "id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# One row per running engine: it beats every CLOCK_HEARTBEAT_S; once silent for
# CLOCK_ENGINE_DEAD_AFTER_S another engine sets dead_at and gives its claims back.
engine_table = Table(
    "clock_engine",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("instance_id", String(128), nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    Column("lease_ms", BigInteger, nullable=False),
    Column("dead_at", BigInteger, nullable=True),
    # The slots it owned at its last beat, slot_from up to slot_to: its share of the work.
    Column("slot_from", Integer, nullable=False, server_default="0"),
    Column("slot_to", Integer, nullable=False, server_default="0"),
    # Others' moves of alarms in its slots to an earlier due time (store.engine_registry's
    # mark_moved): how many, and the earliest due time since it last read them.
    Column("moves", BigInteger, nullable=False, server_default="0"),
    Column("moved_from", BigInteger, nullable=True),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# The registry of applications: one row each, every limit NULL (none) until an admin sets it.
application_table = Table(
    "clock_application",
    metadata,
    Column("name", _APP, primary_key=True),
    Column("create_rate_per_s", Double, nullable=True),
    Column("create_burst", Integer, nullable=True),
    Column("max_pending", BigInteger, nullable=True),
    Column("ring_rate_per_s", Double, nullable=True),
    Column("ring_burst", Integer, nullable=True),
    Column("retry_base_s", Double, nullable=True),
    Column("retry_cap_s", Double, nullable=True),
    Column("retry_max", Integer, nullable=True),
    Column("default_cutoff_ms", BigInteger, nullable=True),
    Column("retention_days", Double, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # How its alarms reach it: "amqp", "webhook" (to webhook_url, signed with webhook_secret)
    # or "pull".
    Column("channel", String(16), nullable=False, server_default="amqp"),
    Column("webhook_url", String(2048), nullable=True),
    Column("webhook_secret", String(255), nullable=True),  # sealed: see store/secret_box.py
    Column("webhook_timeout_s", Double, nullable=True),
    Column("webhook_max_in_flight", Integer, nullable=True),
    Column("pull_visibility_s", Double, nullable=True),
    # The secret a rotation replaced, still signing beside the new one until this (epoch ms).
    Column("webhook_previous_secret", String(255), nullable=True),
    Column("webhook_previous_secret_until", BigInteger, nullable=True),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# One token bucket per application and kind ("create", "ring"), shared by every process.
rate_bucket_table = Table(
    "clock_rate_bucket",
    metadata,
    Column("application", _APP, primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("tokens", Double, nullable=False),
    Column("refilled_at", BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# One row per periodic job that must run on one server at a time (the retention purge): the
# server named in `owner` holds it until `until_ms`, and renews it on each run.
job_lease_table = Table(
    "clock_job_lease",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("until_ms", BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Each increment_id counted on a count-triggered alarm, so that a repeat is not counted again;
# deleted with the alarm.
count_increment_table = Table(
    "clock_count_increment",
    metadata,
    Column("alarm_id", BigInteger, primary_key=True, autoincrement=False),
    Column("increment_id", _KEY, primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# The dead-letter outbox (store/dead_letters.py): a ring batch that marks alarms dead adds
# one row for each, in its own transaction, with the alarm as it was then; the relay publishes
# the rows in id order and deletes those the broker confirmed.
dead_letter_table = Table(
    "clock_dead_letter",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("alarm_id", BigInteger, nullable=False),
    Column("application", _APP, nullable=False),
    Column("business_id", _KEY, nullable=False),
    Column("payload", _PAYLOAD, nullable=False),
    Column("target_ring_at", BigInteger, nullable=False),
    Column("latest_ring_at", BigInteger, nullable=True),
    Column("died_at", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("error", Text, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# The per-minute statistics (store/minute_stats.py): one row per minute and application, its
# counters added to by every process. The lateness is counted per bucket, the column
# `lateness_le_<ms>` for the lateness up to <ms>, `lateness_over` for the rest.
LATENESS_COLUMNS = (*(f"lateness_le_{bound}" for bound in LATENESS_BOUNDS_MS), "lateness_over")
COUNTER_COLUMNS = ("created", "rung", "failed", *LATENESS_COLUMNS, "lateness_sum_ms")
minute_stats_table = Table(
    "clock_minute_stats",
    metadata,
    Column("minute", BigInteger, primary_key=True, autoincrement=False),
    Column("application", _APP, primary_key=True),
    *(Column(name, BigInteger, nullable=False, server_default="0") for name in COUNTER_COLUMNS),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)

# Recurring schedules (store/schedules.py): each occurrence is made an alarm of `clock` a
# short while before it is due, and `next_at` moved past it in the same transaction.
schedule_table = Table(
    "clock_schedule",
    metadata,
    Column("application", _APP, primary_key=True),
    Column("schedule_id", _APP, primary_key=True),
    Column("cron", String(255), nullable=True),
    Column("every_s", BigInteger, nullable=True),
    Column("timezone", String(64), nullable=False),
    Column("payload", _PAYLOAD, nullable=False),
    Column("start_at", BigInteger, nullable=False),
    Column("end_at", BigInteger, nullable=True),
    Column("cutoff_ms", BigInteger, nullable=True),
    Column("catch_up", String(8), nullable=False),
    Column("catch_up_max", Integer, nullable=False),
    Column("paused", Boolean, nullable=False),
    # The first occurrence not yet made an alarm; NULL once the schedule has ended.
    Column("next_at", BigInteger, nullable=True),
    Column("version", BigInteger, nullable=False, server_default="0"),
    Column("create_time", BigInteger, nullable=False),
    Column("update_time", BigInteger, nullable=False),
    Index("ix_clock_schedule_next_at", "paused", "next_at"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
