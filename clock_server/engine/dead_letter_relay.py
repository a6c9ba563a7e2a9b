"""The dead-letter relay: publishes the dead letters of the outbox to the dead-letter exchange.

A ring batch that marks alarms dead writes their dead letters in its own transaction
(store.dead_letters). One server at a time, the holder of the relay's job lease, reads them
oldest first, publishes them with confirms and deletes those the broker confirmed: each dead
letter is published at least once, and one the broker did not take, because it was down when
the alarm died (often why the alarm died), is tried again on the next pass until it does. A
letter published twice (the relay stopped between the confirm and the delete, or two servers
briefly both believed they held the lease) has the same message_id (the alarm id) and
died_at.
"""

from __future__ import annotations

import logging
from collections import Counter

from clock_server.broker.publisher import DeadLetterPublisher
from clock_server.engine.job_leases import LeaseKeeper
from clock_server.metrics import Metrics
from clock_server.store.ports import DeadLetterOutbox, JobLease
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

RELAY_JOB = "dead_letter_relay"
RELAY_INTERVAL_S = 1.0
RELAY_LEASE_S = 10.0
RELAY_BATCH = 500


class DeadLetterRelay:
    """One pass (`run_once`) publishes up to `batch` dead letters; the engine runs it in a
    loop every `interval_s`, and at once when a ring batch has marked alarms dead.

    The lease lasts `lease_s` and is kept by `job_leases.LeaseKeeper`: the holder writes its
    row every few seconds, not every pass, and a holder that died hands the relay over within
    about one and a half leases.
    """

    def __init__(
        self,
        outbox: DeadLetterOutbox,
        lease: JobLease,
        publisher: DeadLetterPublisher,
        clock: Clock,
        metrics: Metrics,
        *,
        owner: str,
        publish_timeout_s: float,
        interval_s: float = RELAY_INTERVAL_S,
        lease_s: float = RELAY_LEASE_S,
        batch: int = RELAY_BATCH,
    ) -> None:
        self.outbox = outbox
        self.publisher = publisher
        self.clock = clock
        self.metrics = metrics
        self.publish_timeout_s = publish_timeout_s
        self.interval_s = interval_s
        self.batch = batch
        self._lease = LeaseKeeper(lease, RELAY_JOB, owner, int(lease_s * 1000))
        self._unconfirmed = False  # the last pass left letters unconfirmed

    def run_once(self) -> float:
        """Publish the next letters; returns seconds until the next pass (0: more are left)."""
        if not self._lease.holds(self.clock.now_ms()):
            return self.interval_s
        letters = self.outbox.next_letters(self.batch)
        if not letters:
            return self.interval_s
        flags = self.publisher.publish_dead(letters, self.publish_timeout_s)
        sent = [letter for letter, ok in zip(letters, flags, strict=True) if ok]
        self.outbox.remove([letter.letter_id for letter in sent])
        by_application = Counter(letter.application for letter in sent)
        self.metrics.count(self.metrics.dead_letters, by_application)
        if sent:
            log.info(
                "published %d dead letters (by application: %s)",
                len(sent),
                dict(by_application),
                extra={"action": "dead_letters_published", "published": len(sent)},
            )
        if len(sent) < len(letters):
            # Once per spell: while the broker stays away, every pass fails the same way.
            log.log(
                logging.DEBUG if self._unconfirmed else logging.WARNING,
                "%d dead letters not confirmed by the broker; tried again in %.0f s",
                len(letters) - len(sent),
                self.interval_s,
                extra={"action": "dead_letters_unconfirmed"},
            )
            self._unconfirmed = True
            return self.interval_s
        self._unconfirmed = False
        return 0.0 if len(letters) == self.batch else self.interval_s
