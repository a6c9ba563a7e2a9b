"""The registry of applications over HTTP: /v1/applications, its answers, its 400s naming
each field, and who may use it.

Runs on SQLite and on MariaDB through the `api` fixture (see conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import delete

from clock_server.api import Services, create_app
from clock_server.api.tokens import load_tokens
from clock_server.metrics import Metrics
from clock_server.model import MAX_EPOCH_MS, POLICY_FIELDS
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.schema import application_table, rate_bucket_table
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.api_support import MINUTE, NOW, OpenApiChecker, assert_error, body

ONE = "/v1/applications/{application}"
LIST = "/v1/applications"
APPLICATION_KEYS = {
    "name", *POLICY_FIELDS, "webhook_secret_set", "created_at", "updated_at", "registered",
    "counts",
}  # fmt: skip
NO_SETTINGS = {**dict.fromkeys(POLICY_FIELDS), "channel": "amqp"}
ZERO = {"pending": 0, "due_next_minute": 0, "overdue": 0, "dead": 0}

ADMIN = "apps-admin-token-0123456789"
ORDERS = "apps-orders-token-0123456789"  # orders only
TOKENS = f"{ADMIN}=*;{ORDERS}=orders"


@pytest.fixture(autouse=True)
def empty_registry(store: AlarmStore) -> None:
    with store.db.begin() as conn:
        conn.execute(delete(application_table))
        conn.execute(delete(rate_bucket_table))


def url(application: str) -> str:
    return f"/v1/applications/{application}"


def put(api, application: str, data: Any, status: int | None = None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = api.client.put(url(application), json=data)
    if status is not None:
        assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()  # type: ignore[no-any-return]


def patch(api, application: str, data: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = api.client.patch(url(application), json=data)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()  # type: ignore[no-any-return]


def get(api, application: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = api.client.get(url(application))
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()  # type: ignore[no-any-return]


def listed(api) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    response = api.client.get(LIST)
    assert response.status_code == 200, response.get_data(as_text=True)
    data = response.get_json()
    assert set(data) == {"applications"}
    names = [item["name"] for item in data["applications"]]
    assert names == sorted(names)
    return {item["name"]: item for item in data["applications"]}


def settings_of(application: dict[str, Any]) -> dict[str, Any]:
    return {name: application[name] for name in POLICY_FIELDS}


def add(api, application: str, business_id: str, target: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    data = body(application=application, business_id=business_id, target_ring_at=target)
    response = api.client.post("/v1/alarms", json=data)
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.get_json()  # type: ignore[no-any-return]


def unregister(api, application: str) -> None:  # type: ignore[no-untyped-def]
    """Take the application out of the registry, whether or not its alarms put it there."""
    with api.store.db.begin() as conn:
        conn.execute(delete(application_table).where(application_table.c.name == application))


def services_of(api) -> Services:  # type: ignore[no-untyped-def]
    return api.client.application.extensions["clock"]  # type: ignore[no-any-return]


# --- listing and counts ----------------------------------------------------------------------


def test_an_empty_registry_lists_nothing(api) -> None:
    assert listed(api) == {}


def test_the_list_counts_pending_due_overdue_and_dead_alarms(api) -> None:
    dead = add(api, "orders", "dead", NOW - 5 * MINUTE)
    claims = SqlClaimStore(api.store)
    assert [claim.id for claim in claims.load_due(NOW, 100)] == [dead["id"]]
    with claims.ring_transaction() as tx:
        tx.mark_dead([dead["id"]], NOW)
    add(api, "orders", "overdue-1", NOW - MINUTE)
    add(api, "orders", "overdue-2", NOW - 1)
    add(api, "orders", "due-now", NOW)
    add(api, "orders", "due-in-a-minute", NOW + MINUTE)
    add(api, "orders", "later", NOW + MINUTE + 1)
    add(api, "orders", "cancelled", NOW + 10)
    assert api.client.delete("/v1/alarms/orders/cancelled").status_code == 200
    add(api, "billing", "b1", NOW + 60 * MINUTE)
    put(api, "billing", {"max_pending": 10}, None)
    put(api, "idle", {}, 201)
    unregister(api, "orders")  # alarms, but no row in the registry

    found = listed(api)
    assert list(found) == ["billing", "idle", "orders"]
    orders = found["orders"]
    assert set(orders) == APPLICATION_KEYS
    assert orders == {
        "name": "orders",
        **NO_SETTINGS,
        "webhook_secret_set": False,
        "created_at": None,
        "updated_at": None,
        "registered": False,
        "counts": {"pending": 5, "due_next_minute": 2, "overdue": 2, "dead": 1},
    }
    assert found["billing"]["registered"] is True
    assert found["billing"]["max_pending"] == 10
    assert found["billing"]["counts"] == {**ZERO, "pending": 1}
    assert found["idle"] == {
        "name": "idle",
        **NO_SETTINGS,
        "webhook_secret_set": False,
        "created_at": NOW,
        "updated_at": NOW,
        "registered": True,
        "counts": ZERO,
    }
    assert get(api, "billing")["counts"] == {**ZERO, "pending": 1}

    api.clock.set(NOW + 2 * MINUTE)  # every pending one is overdue now
    assert listed(api)["orders"]["counts"] == {
        "pending": 5,
        "due_next_minute": 0,
        "overdue": 5,
        "dead": 1,
    }


# --- GET one ---------------------------------------------------------------------------------


def test_the_list_without_counts_names_the_same_applications(api) -> None:
    add(api, "orders", "o-1", NOW + MINUTE)
    add(api, "billing", "b-1", NOW + MINUTE)
    unregister(api, "billing")  # alarms, but no row in the registry
    put(api, "quiet", {"max_pending": 5})  # a row, but no alarms
    response = api.client.get(LIST + "?counts=false")
    assert response.status_code == 200
    OpenApiChecker(api.client.get("/openapi.json").get_json()).response(LIST, "GET", response)
    without = {item["name"]: item for item in response.get_json()["applications"]}
    counted = listed(api)
    assert list(without) == list(counted) == ["billing", "orders", "quiet"]
    assert {name: item["counts"] for name, item in without.items()} == dict.fromkeys(without)
    assert without["billing"]["registered"] is False and without["quiet"]["max_pending"] == 5
    assert counted["orders"]["counts"]["pending"] == 1
    assert_error(api.client.get(LIST + "?counts=no"), 400, "validation_error", "counts")
    checker = OpenApiChecker(api.client.get("/openapi.json").get_json())
    one = api.client.get(url("orders") + "?counts=false")
    checker.response("/v1/applications/{application}", "GET", one)
    assert one.get_json()["counts"] is None and get(api, "orders")["counts"]["pending"] == 1
    changed = api.client.patch(url("quiet") + "?counts=false", json={"max_pending": 6})
    assert changed.status_code == 200
    assert (changed.get_json()["max_pending"], changed.get_json()["counts"]) == (6, None)


def test_get_a_registered_application(api) -> None:
    put(api, "orders", {"create_rate_per_s": 5, "create_burst": 10}, 201)
    add(api, "orders", "o1", NOW + 10)
    application = get(api, "orders")
    assert set(application) == APPLICATION_KEYS
    assert application["name"] == "orders" and application["registered"] is True
    assert settings_of(application) == {**NO_SETTINGS, "create_rate_per_s": 5, "create_burst": 10}
    assert application["counts"] == {**ZERO, "pending": 1, "due_next_minute": 1}


def test_get_an_application_that_is_not_registered_is_404(api) -> None:
    assert_error(api.client.get(url("nobody")), 404, "not_found", None)
    add(api, "orders", "o1", NOW + 10)
    unregister(api, "orders")
    assert_error(api.client.get(url("orders")), 404, "not_found", None)  # alarms are not a row
    assert "orders" in listed(api)


# --- PUT -------------------------------------------------------------------------------------

EVERY_SETTING = {
    "create_rate_per_s": 2.5,
    "create_burst": 5,
    "max_pending": 1000,
    "ring_rate_per_s": 100.0,
    "ring_burst": 200,
    "retry_base_s": 0.5,
    "retry_cap_s": 60.0,
    "retry_max": 3,
    "default_cutoff_ms": 3_600_000,
    "retention_days": 7.5,
    "channel": "pull",
    "webhook_url": None,
    "webhook_timeout_s": 2.5,
    "webhook_max_in_flight": 4,
    "pull_visibility_s": 60.0,
}


def test_put_registers_with_201_then_replaces_with_200(api) -> None:
    created = put(api, "orders", EVERY_SETTING, 201)
    assert set(created) == APPLICATION_KEYS
    assert settings_of(created) == EVERY_SETTING
    assert (created["created_at"], created["updated_at"]) == (NOW, NOW)
    assert created["registered"] is True and created["counts"] == ZERO
    assert get(api, "orders") == created

    api.clock.set(NOW + 1_000)
    replaced = put(api, "orders", {"max_pending": 7}, 200)
    assert settings_of(replaced) == {**NO_SETTINGS, "max_pending": 7}  # the rest is null
    assert (replaced["created_at"], replaced["updated_at"]) == (NOW, NOW + 1_000)
    assert get(api, "orders") == replaced

    assert settings_of(put(api, "orders", {}, 200)) == NO_SETTINGS
    assert settings_of(put(api, "orders", NO_SETTINGS, 200)) == NO_SETTINGS


def test_put_registers_an_application_that_has_alarms_with_201(api) -> None:
    add(api, "orders", "o1", NOW + 10)
    unregister(api, "orders")
    created = put(api, "orders", {"retry_max": 0}, 201)
    assert created["retry_max"] == 0
    assert created["counts"] == {**ZERO, "pending": 1, "due_next_minute": 1}


@pytest.mark.parametrize(
    "settings",
    [
        {"create_rate_per_s": 0.000_001, "ring_rate_per_s": 1_000_000},
        {"create_rate_per_s": 1, "create_burst": 1, "ring_rate_per_s": 1, "ring_burst": 1},
        {"create_rate_per_s": 1, "create_burst": 2**31 - 1},
        {"max_pending": 1},
        {"max_pending": 2**63 - 1},
        {"retry_base_s": 0.001, "retry_cap_s": 0.001},
        {"retry_base_s": 1_000_000, "retry_cap_s": 1_000_000, "retry_max": 2**31 - 1},
        {"retry_cap_s": 0.5},  # no retry_base_s: nothing to compare with
        {"default_cutoff_ms": 0},
        {"default_cutoff_ms": MAX_EPOCH_MS},
        {"retention_days": 0.000_001},
        {"retention_days": 36_500},
    ],
    ids=lambda settings: ",".join(f"{k}={v}" for k, v in settings.items()),
)
def test_settings_at_the_edges_of_their_ranges_are_taken(api, settings: dict[str, Any]) -> None:
    stored = settings_of(put(api, "edges", settings, 201))
    expected = {**NO_SETTINGS, **settings}
    for name, value in expected.items():  # MariaDB keeps the numbers in single precision
        exact = value is None or isinstance(value, str)
        assert stored[name] == (value if exact else pytest.approx(value, rel=1e-6)), name
    assert settings_of(get(api, "edges")) == stored
    assert settings_of(patch(api, "edges", settings)) == stored


def test_an_integer_is_taken_where_a_number_goes(api) -> None:
    stored = put(api, "orders", {"create_rate_per_s": 3, "retention_days": 2}, 201)
    assert stored["create_rate_per_s"] == 3.0 and isinstance(stored["create_rate_per_s"], float)


# --- PATCH -----------------------------------------------------------------------------------


def test_patch_changes_only_the_settings_given_and_null_clears_one(api) -> None:
    created = put(api, "orders", EVERY_SETTING, 201)
    api.clock.set(NOW + 5_000)
    changed = patch(api, "orders", {"max_pending": 5, "retry_max": None})
    assert settings_of(changed) == {**EVERY_SETTING, "max_pending": 5, "retry_max": None}
    assert (changed["created_at"], changed["updated_at"]) == (created["created_at"], NOW + 5_000)
    assert get(api, "orders") == changed
    cleared = patch(api, "orders", {"create_burst": None, "create_rate_per_s": None})
    assert cleared["create_rate_per_s"] is None and cleared["create_burst"] is None


def test_patch_of_an_application_that_is_not_registered_is_404_and_registers_nothing(api) -> None:
    response = api.client.patch(url("nobody"), json={"max_pending": 5})
    assert_error(response, 404, "not_found", None)
    add(api, "orders", "o1", NOW + 10)
    unregister(api, "orders")
    assert_error(api.client.patch(url("orders"), json={"max_pending": 5}), 404, "not_found")
    assert listed(api)["orders"]["registered"] is False


def test_patches_of_different_settings_at_once_all_land(api) -> None:
    """Each PATCH writes only its settings, under the row's lock: none undoes another."""
    put(api, "orders", {}, 201)
    app = api.client.application
    values = {
        "max_pending": 11,
        "retry_max": 4,
        "default_cutoff_ms": 9,
        "retention_days": 3.0,
        "retry_base_s": 2.0,
    }

    def send(item: tuple[str, Any]) -> int:
        return app.test_client().patch(url("orders"), json=dict([item])).status_code

    with ThreadPoolExecutor(len(values)) as pool:
        for _ in range(3):
            assert list(pool.map(send, values.items())) == [200] * len(values)
    assert settings_of(get(api, "orders")) == {**NO_SETTINGS, **values}


# --- what this process sees at once ----------------------------------------------------------


def test_put_and_patch_reach_this_process_policies_without_waiting(api) -> None:
    policies = services_of(api).policies
    assert policies.policy("orders").create_rate_per_s is None  # loaded now, kept 2 s
    assert not policies.known("orders")
    put(api, "orders", {"create_rate_per_s": 5}, 201)
    assert policies.known("orders")
    assert policies.policy("orders").create_rate_per_s == 5
    patch(api, "orders", {"max_pending": 3})
    policy = policies.policy("orders")
    assert (policy.create_rate_per_s, policy.max_pending) == (5, 3)


# --- 400s naming the field -------------------------------------------------------------------

INVALID = [
    ({"create_rate_per_s": 0}, "create_rate_per_s"),
    ({"create_rate_per_s": -1}, "create_rate_per_s"),
    ({"create_rate_per_s": 0.000_000_1}, "create_rate_per_s"),
    ({"create_rate_per_s": 1_000_001}, "create_rate_per_s"),
    ({"create_rate_per_s": 1e300}, "create_rate_per_s"),
    ({"create_rate_per_s": "5"}, "create_rate_per_s"),
    ({"create_rate_per_s": True}, "create_rate_per_s"),
    ({"create_rate_per_s": [5]}, "create_rate_per_s"),
    ({"ring_rate_per_s": 0}, "ring_rate_per_s"),
    ({"ring_rate_per_s": -0.5}, "ring_rate_per_s"),
    ({"create_rate_per_s": 1, "create_burst": 0}, "create_burst"),
    ({"create_rate_per_s": 1, "create_burst": -3}, "create_burst"),
    ({"create_rate_per_s": 1, "create_burst": 1.5}, "create_burst"),
    ({"create_rate_per_s": 1, "create_burst": 2.0}, "create_burst"),
    ({"create_rate_per_s": 1, "create_burst": 2**31}, "create_burst"),
    ({"create_rate_per_s": 1, "create_burst": "2"}, "create_burst"),
    ({"create_burst": 5}, "create_burst"),  # a burst without its rate
    ({"create_burst": 5, "ring_rate_per_s": 5}, "create_burst"),
    ({"ring_rate_per_s": 1, "ring_burst": 0}, "ring_burst"),
    ({"ring_burst": 5}, "ring_burst"),
    ({"ring_burst": 5, "create_rate_per_s": 5}, "ring_burst"),
    ({"max_pending": 0}, "max_pending"),
    ({"max_pending": -1}, "max_pending"),
    ({"max_pending": 2**63}, "max_pending"),
    ({"max_pending": 10.0}, "max_pending"),
    ({"max_pending": False}, "max_pending"),
    ({"retry_base_s": 0}, "retry_base_s"),
    ({"retry_base_s": -1}, "retry_base_s"),
    ({"retry_base_s": 0.000_1}, "retry_base_s"),
    ({"retry_base_s": 1_000_001}, "retry_base_s"),
    ({"retry_cap_s": 0}, "retry_cap_s"),
    ({"retry_cap_s": -2}, "retry_cap_s"),
    ({"retry_base_s": 10, "retry_cap_s": 5}, "retry_cap_s"),
    ({"retry_base_s": 1.001, "retry_cap_s": 1}, "retry_cap_s"),
    ({"retry_max": -1}, "retry_max"),
    ({"retry_max": 1.5}, "retry_max"),
    ({"retry_max": 2**31}, "retry_max"),
    ({"default_cutoff_ms": -1}, "default_cutoff_ms"),
    ({"default_cutoff_ms": MAX_EPOCH_MS + 1}, "default_cutoff_ms"),
    ({"default_cutoff_ms": 1.5}, "default_cutoff_ms"),
    ({"retention_days": 0}, "retention_days"),
    ({"retention_days": -1}, "retention_days"),
    ({"retention_days": 36_501}, "retention_days"),
    ({"retention_days": "30"}, "retention_days"),
    ({"name": "orders"}, "name"),
    ({"counts": {}}, "counts"),
    ({"registered": True}, "registered"),
    ({"created_at": NOW}, "created_at"),
    ({"bogus": 1}, "bogus"),
    ({"max_pending": 5, "Max_Pending": 5}, "Max_Pending"),
]


def _id(case: tuple[dict[str, Any], str]) -> str:
    data, field = case
    return f"{field}:" + json.dumps(data, separators=(",", ":"))


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize(("data", "field"), INVALID, ids=[_id(case) for case in INVALID])
def test_a_bad_setting_is_400_naming_its_field(
    api, method: str, data: dict[str, Any], field: str
) -> None:
    stored = put(api, "orders", {"max_pending": 9}, 201)
    response = api.client.open(url("orders"), method=method, json=data)
    assert_error(response, 400, "validation_error", field)
    assert get(api, "orders") == stored
    # and a PUT that would register an application registers nothing
    if method == "PUT":
        assert_error(api.client.put(url("fresh"), json=data), 400, "validation_error", field)
        assert "fresh" not in listed(api)


@pytest.mark.parametrize(
    "raw",
    [b'{"create_rate_per_s": NaN}', b'{"create_rate_per_s": Infinity}',
     b'{"create_rate_per_s": -Infinity}', b'{"create_rate_per_s": 1e400}'],
)  # fmt: skip
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_rate_that_is_not_finite_is_400(api, method: str, raw: bytes) -> None:
    put(api, "orders", {}, 201)
    response = api.client.open(
        url("orders"), method=method, data=raw, content_type="application/json"
    )
    assert_error(response, 400, "validation_error", "create_rate_per_s")


@pytest.mark.parametrize(
    ("stored", "change", "field"),
    [
        # a burst whose rate is cleared, or a burst set where no rate is stored
        ({"create_rate_per_s": 5, "create_burst": 10}, {"create_rate_per_s": None},
         "create_rate_per_s"),
        ({"ring_rate_per_s": 5, "ring_burst": 10}, {"ring_rate_per_s": None}, "ring_rate_per_s"),
        ({"ring_rate_per_s": 5}, {"create_burst": 3}, "create_burst"),
        ({}, {"ring_burst": 3}, "ring_burst"),
        # the cap below the stored base, or the base above the stored cap
        ({"retry_base_s": 2, "retry_cap_s": 10}, {"retry_cap_s": 1}, "retry_cap_s"),
        ({"retry_base_s": 2, "retry_cap_s": 10}, {"retry_base_s": 11}, "retry_base_s"),
        ({"retry_base_s": 2}, {"retry_cap_s": 1.5}, "retry_cap_s"),
        ({"retry_cap_s": 2}, {"retry_base_s": 3}, "retry_base_s"),
    ],
)  # fmt: skip
def test_patch_rules_between_settings_hold_against_the_stored_ones(
    api, stored: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    before = put(api, "orders", stored, 201)
    assert_error(api.client.patch(url("orders"), json=change), 400, "validation_error", field)
    assert get(api, "orders") == before


@pytest.mark.parametrize(
    ("stored", "change"),
    [
        ({"create_rate_per_s": 5, "create_burst": 10},
         {"create_rate_per_s": None, "create_burst": None}),
        ({"create_rate_per_s": 5}, {"create_burst": 10}),
        ({"retry_base_s": 2, "retry_cap_s": 10}, {"retry_cap_s": None, "retry_base_s": 20}),
        ({"retry_base_s": 2, "retry_cap_s": 10}, {"retry_cap_s": 2}),
    ],
)  # fmt: skip
def test_patch_that_keeps_the_rules_with_the_stored_settings_is_taken(
    api, stored: dict[str, Any], change: dict[str, Any]
) -> None:
    put(api, "orders", stored, 201)
    assert settings_of(patch(api, "orders", change)) == {**NO_SETTINGS, **stored, **change}


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH"])
@pytest.mark.parametrize("name", ["bad name", "a" * 65, "ok!", "%C3%A9", "%00"])
def test_an_application_name_out_of_its_rule_is_400(api, method: str, name: str) -> None:
    response = api.client.open(url(name), method=method, json={"max_pending": 1})
    assert_error(response, 400, "validation_error", "application")
    assert listed(api) == {}


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"[]", b"null", b"5", b'"x"', b'{"max_pending": 1, "max_pending": 2}',
     b"\xff\xfe", b"[" * 10_000],
)  # fmt: skip
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_body_that_is_not_a_json_object_is_400(api, method: str, raw: bytes) -> None:
    put(api, "orders", {"max_pending": 3}, 201)
    response = api.client.open(
        url("orders"), method=method, data=raw, content_type="application/json"
    )
    assert_error(response, 400, "validation_error", None)
    assert get(api, "orders")["max_pending"] == 3


def test_patch_with_nothing_to_change_is_400(api) -> None:
    put(api, "orders", {"max_pending": 3}, 201)
    assert_error(api.client.patch(url("orders"), json={}), 400, "validation_error", None)


def test_a_body_over_the_limit_is_413(api) -> None:
    data = {"max_pending": 3, "bogus": "x" * 20_000}
    for method in ("PUT", "PATCH"):
        response = api.client.open(url("orders"), method=method, json=data)
        assert_error(response, 413, "payload_too_large", None)
    assert listed(api) == {}


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("POST", LIST, {"GET"}), ("PUT", LIST, {"GET"}),
     ("DELETE", url("orders"), {"GET", "PUT", "PATCH"}),
     ("POST", url("orders"), {"GET", "PUT", "PATCH"})],
)  # fmt: skip
def test_wrong_method_is_405(api, method: str, path: str, allowed: set[str]) -> None:
    response = api.client.open(path, method=method, json={})
    assert_error(response, 405, "method_not_allowed", None)
    assert allowed <= {m.strip() for m in response.headers["Allow"].split(",")}


# --- who may ---------------------------------------------------------------------------------


@pytest.fixture
def auth_api(store: AlarmStore, fake_clock: SettableClock) -> Iterator[Any]:
    settings = Settings(tokens=TOKENS)
    services = build_services(
        settings,
        store,
        fake_clock,
        Metrics(),
        publisher=InMemoryPublisher(),
        tokens=load_tokens(settings.tokens, ""),
    )
    yield create_app(services).test_client()


REQUESTS = [
    ("GET", LIST, None),
    ("GET", url("orders"), None),
    ("PUT", url("orders"), {"max_pending": 5}),
    ("PATCH", url("orders"), {"max_pending": 6}),
    ("GET", url("bad name"), None),  # the 403 comes before the 400
    ("PUT", url("orders"), {"max_pending": 0}),
]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(("method", "path", "data"), REQUESTS)
def test_a_token_for_some_applications_is_403_even_for_its_own(
    auth_api, method: str, path: str, data: Any
) -> None:
    response = auth_api.open(path, method=method, json=data, headers=_bearer(ORDERS))
    error = assert_error(response, 403, "forbidden", None)
    assert "admin" in error["message"]
    assert auth_api.get(LIST, headers=_bearer(ADMIN)).get_json() == {"applications": []}


@pytest.mark.parametrize(("method", "path", "data"), REQUESTS)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789", f"Basic {ADMIN}"])
def test_without_a_valid_token_is_401(
    auth_api, method: str, path: str, data: Any, header: str | None
) -> None:
    headers = {"Authorization": header} if header else {}
    response = auth_api.open(path, method=method, json=data, headers=headers)
    assert_error(response, 401, "unauthorized", None)
    assert response.headers["WWW-Authenticate"].startswith("Bearer ")
    assert auth_api.get(LIST, headers=_bearer(ADMIN)).get_json() == {"applications": []}


def test_an_admin_token_may_do_everything(auth_api) -> None:
    admin = _bearer(ADMIN)
    assert auth_api.put(url("orders"), json={"max_pending": 5}, headers=admin).status_code == 201
    assert auth_api.patch(url("orders"), json={"retry_max": 1}, headers=admin).status_code == 200
    application = auth_api.get(url("orders"), headers=admin).get_json()
    assert (application["max_pending"], application["retry_max"]) == (5, 1)
    assert list(auth_api.get(LIST, headers=admin).get_json()["applications"][0]) == list(
        application
    )


# --- the document ----------------------------------------------------------------------------


def test_the_webhook_secret_routes_document_no_query_parameter(api) -> None:
    """They read none: a documented one (counts, once) invites requests they cannot refuse."""
    document = api.client.get("/openapi.json").get_json()
    item = document["paths"]["/v1/applications/{application}/webhook-secret"]
    assert [(p["name"], p["in"]) for p in item["parameters"]] == [("application", "path")]
    assert [p["name"] for p in document["paths"][ONE]["parameters"]] == ["application", "counts"]


def test_real_answers_conform_to_the_openapi_document(api, auth_api) -> None:
    check = OpenApiChecker(api.client.get("/openapi.json").get_json())
    c = api.client
    check.request(ONE, "PUT", EVERY_SETTING)
    check.request(ONE, "PATCH", {"max_pending": None})
    check.response(LIST, "GET", c.get(LIST))
    add(api, "orders", "o1", NOW - 1)
    unregister(api, "orders")
    check.response(LIST, "GET", c.get(LIST))  # not registered: null times
    check.response(ONE, "PUT", c.put(url("orders"), json=EVERY_SETTING))  # 201
    check.response(ONE, "PUT", c.put(url("orders"), json={}))  # 200
    check.response(ONE, "PUT", c.put(url("orders"), json={"create_burst": 1}))  # 400
    check.response(ONE, "PUT", c.put(url("orders"), json={"bogus": "x" * 20_000}))  # 413
    check.response(ONE, "GET", c.get(url("orders")))
    check.response(ONE, "GET", c.get(url("nobody")))  # 404
    check.response(ONE, "GET", c.get(url("bad%20name")))  # 400
    check.response(ONE, "PATCH", c.patch(url("orders"), json={"retry_max": 2}))
    check.response(ONE, "PATCH", c.patch(url("orders"), json={}))  # 400
    check.response(ONE, "PATCH", c.patch(url("nobody"), json={"retry_max": 2}))  # 404
    check.response(LIST, "GET", c.get(LIST))
    for method, path, data in REQUESTS:
        template = LIST if path == LIST else ONE
        check.response(template, method, auth_api.open(path, method=method, json=data))  # 401
        response = auth_api.open(path, method=method, json=data, headers=_bearer(ORDERS))
        check.response(template, method, response)  # 403
