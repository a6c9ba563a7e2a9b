"""The service harness: the API and an engine on one store, publisher and fake clock, wired
as the server wires them (`clock_server.runtime.build.compose`). Nothing starts: a test
steps the engine by hand on the fake clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from clock_server.api.services import Services
from clock_server.api.tokens import load_tokens
from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.model import NewAlarm
from clock_server.runtime.build import Given, compose
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.secret_box import SecretBox
from clock_server.testing import InMemoryDeadLetterPublisher, InMemoryPublisher, SettableClock
from tests.support import serve_wsgi, settle


class ServiceHarness:
    """The API (`client`, with the bearer tokens of `tokens`) and an engine (`engine`) on
    `store`, ringing on an in-memory `publisher` at the time of `clock`; dead letters go to
    an in-memory `dead_letters`. `call` sends `token` unless told another.

    With `policies_refresh_ms` the engine reads the applications' policies again that often
    on the clock (0: on every look), instead of every CLOCK_APPLICATION_REFRESH_S."""

    def __init__(
        self,
        store: AlarmStore,
        clock: SettableClock,
        tokens: str,
        token: str | None = None,
        policies_refresh_ms: int | None = None,
        **settings: Any,
    ) -> None:
        self.store = store
        self.clock = clock
        self.token = token
        self.policies_refresh_ms = policies_refresh_ms
        self.settings = Settings(tokens=tokens, **settings)
        self.registry = SqlApplicationRegistry(
            store, SecretBox.from_setting(self.settings.secret_keys)
        )
        self.publisher = InMemoryPublisher()
        self.dead_letters = InMemoryDeadLetterPublisher()
        given = Given(
            publisher=self.publisher,
            dead_letter_publisher=self.dead_letters,
            policies=self._policies(),
        )
        self.runtime = compose(self.settings, store, clock, True, load_tokens(tokens, ""), given)
        assert self.runtime.app is not None and self.runtime.engine is not None
        self.app: Any = self.runtime.app
        self.services: Services = self.app.extensions["clock"]
        self.metrics = self.services.metrics
        self.client = self.app.test_client()
        self.engine: AlarmEngine = self.runtime.engine

    def make_engine(self) -> AlarmEngine:
        """Another engine wired as the first, reading the registry as it is now."""
        return build_engine(
            self.settings,
            self.store,
            self.publisher,
            self.clock,
            dead_letter_publisher=self.dead_letters,
            policies=self._policies(),
        )

    def call(self, method: str, url: str, token: str | None = "", **kwargs: Any) -> Any:
        """`method` on `url` with `token` as the bearer ("": the harness's, None: none)."""
        token = self.token if token == "" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.client.open(url, method=method, headers=headers, **kwargs)

    def step(self) -> None:
        """Everything the engine does at this instant of the fake clock."""
        self.engine.preloader.run_once()
        settle(self.engine, self.clock)

    def step_through(self) -> None:
        """`step`, then move the clock to each moment a ring lane sleeps until (a batch took
        alarms due a little later than now, and holds their rows until then): every batch
        taken is recorded when this returns."""
        self.step()
        while (moment := self.clock.next_wake_ms()) is not None:
            self.clock.set(moment)
            settle(self.engine, self.clock)

    def serve(self) -> Iterator[str]:
        """The API on a real HTTP server, for the SDK: its base URL until closed."""
        yield from serve_wsgi(self.app)

    def _policies(self) -> CachedPolicies | None:
        if self.policies_refresh_ms is None:
            return None
        return CachedPolicies(self.registry.all, self.clock.now_ms, self.policies_refresh_ms)


# The engine alone, stepped on the fake clock, for the ring path's tests.


def engine_on(
    store: AlarmStore, clock: SettableClock, publisher: InMemoryPublisher, **overrides
) -> AlarmEngine:
    express_publisher = overrides.pop("express_publisher", None)
    values = dict(instance_id="fair", retry_base_s=1, retry_cap_s=8, retry_max=3)
    values.update(overrides)
    # The applications' policies are read again every 2 s of the clock (the default).
    return build_engine(
        Settings(**values), store, publisher, clock, express_publisher=express_publisher
    )


def create(store: AlarmStore, now: int, application: str, targets: list[int], **kw) -> list[int]:
    items = [
        NewAlarm(application, f"{application}-{i}", "p", target, kw.get("latest"))
        for i, target in enumerate(targets)
    ]
    return [alarm.id for alarm, _ in store.create_many(items, now)]


def preload(engine: AlarmEngine) -> None:
    while engine.preloader.run_once() == 0.0:  # a full batch: the loop goes on at once
        pass


class HoldingPublisher(InMemoryPublisher):
    """Holds every batch with a message of `held` until `release` is set: ring lanes busy
    with a slow backlog."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held
        self.release = threading.Event()

        self.holding = 0  # batches held now

    def publish_batch(self, messages, timeout_s):
        if any(message.application == self.held for message in messages):
            with self._lock:
                self.holding += 1
            assert self.release.wait(10), "the held batches were never released"
        return super().publish_batch(messages, timeout_s)
