"""Pull the rung alarms of one application over HTTP and hand them to a handler."""

from __future__ import annotations

import logging
import threading

from .backoff import Backoff
from .client import ClockClient
from .errors import ClockError, RateLimited, Unavailable
from .models import Handler, PulledMessage

logger = logging.getLogger(__name__)

_RATE_LIMITED_WAIT_S = 0.5  # when a 429 gives no Retry-After


class PullConsumer:
    """Delivers the alarms rung for a pull ``application`` to ``handler``, one at a time.

    Leases up to ``max`` messages at a time with ``client.pull``, waiting up to ``wait_s``
    for one when none is ready. ``handler(message)`` gets an AlarmMessage, as a Consumer's
    handler does. When it returns, the message is acked (after the whole batch is
    handled, in one request); when it raises, the exception is logged and the message is
    not acked, so it is leased again once its lease ends (``redelivered=True``), until its
    application's retries are spent and it is dead. Delivery is at least once: deduplicate
    on ``message.message_id``.

    ``run()`` blocks until ``stop()``, callable from any thread and before run() starts.
    A pull in flight ends first (within ``wait_s``); messages it leased are not handled,
    and come back once their lease ends. A lost database or server is retried after a wait
    drawn at random up to ``retry_first_s``, doubling with each failure in a row up to
    ``retry_cap_s`` (a stop ends the wait at once), so pullers cut off together do not all
    come back in the same instant; any other error the server answers (the token, a channel
    other than pull) ends run() by raising it. ``client`` is used only by the thread calling
    run(), and must not be used by another meanwhile. A PullConsumer runs once.
    """

    def __init__(
        self,
        client: ClockClient,
        application: str,
        handler: Handler,
        *,
        max: int = 10,
        wait_s: float = 20.0,
        retry_first_s: float = 0.5,
        retry_cap_s: float = 30.0,
    ) -> None:
        if not 1 <= max <= 100:
            raise ValueError("max must be from 1 to 100")
        if not 0 <= wait_s <= 20:
            raise ValueError("wait_s must be from 0 to 20")
        self.client = client
        self.application = application
        self.handler = handler
        self.max = max
        self.wait_s = wait_s
        self._backoff = Backoff(retry_first_s, retry_cap_s)
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards _started
        self._started = False

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask run() to return once the message being handled is finished and acked."""
        self._stopping.set()

    def run(self) -> None:
        """Pull, handle and ack until stopped. Raises RuntimeError when called twice, and
        the ClockError of an answer that trying again cannot change."""
        with self._lock:
            if self._started:
                raise RuntimeError("a PullConsumer runs once; create a new one")
            self._started = True
        while not self._stopping.is_set():
            try:
                pulled = self.client.pull(self.application, self.max, self.wait_s)
                self._handle(pulled)
            except Unavailable as error:
                wait_s = self._backoff.next_s()
                logger.warning("pulling %s failed (%s); trying again in %.3f s",
                               self.application, error, wait_s)  # fmt: skip
                self._stopping.wait(wait_s)
                continue
            except RateLimited as error:  # as many pulls wait in the server as it lets
                self._stopping.wait(error.retry_after_s or _RATE_LIMITED_WAIT_S)
                continue
            self._backoff.reset()
        logger.info("pull consumer of %s stopped", self.application)

    def _handle(self, pulled: list[PulledMessage]) -> None:
        """Hand each message to the handler until a stop; ack those it handled."""
        handled: list[str] = []
        try:
            for item in pulled:
                if self._stopping.is_set():
                    break
                message = item.message
                try:
                    self.handler(message)
                except Exception:
                    logger.exception(
                        "handler failed for alarm %s (%s/%s); not acked, it comes back after "
                        "its lease",
                        message.message_id,
                        message.application,
                        message.business_id,
                    )
                    continue
                handled.append(item.id)
        finally:
            if handled:
                self._ack(handled)

    def _ack(self, ids: list[str]) -> None:
        try:
            result = self.client.ack(self.application, ids)
        except ClockError as error:
            logger.warning("acking %d messages of %s failed (%s); they come back after "
                           "their lease", len(ids), self.application, error)  # fmt: skip
            return
        if result.not_acked:
            logger.warning(
                "%d messages of %s were not acked (rung, expired or dead meanwhile): %s",
                len(result.not_acked),
                self.application,
                ", ".join(result.not_acked),
            )
