"""The HTTP contract of the API: every route, every error case, and nothing changed by a 4xx.

Runs on SQLite and on MariaDB through the `api` fixture (see conftest.py).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest

from clock_server.api import create_app
from clock_server.metrics import Metrics
from clock_server.model import MAX_EPOCH_MS
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.db import open_database
from tests.api_support import DROP, MINUTE, NOW, OpenApiChecker, assert_error, body, rows
from tests.support import claim_as_before_slots

ALARM_KEYS = {
    "id", "application", "business_id", "payload", "target_ring_at", "latest_ring_at",
    "next_try_time", "retry_times", "status", "rung_at", "created_at", "updated_at",
    "ring_after_count", "count",
}  # fmt: skip
PROBES = ("/livez", "/readyz", "/healthz")


# --- helpers -------------------------------------------------------------------------------


def key_url(application: str, business_id: str) -> str:
    return f"/v1/alarms/{quote(application, safe='')}/{quote(business_id, safe='/')}"


def post(api, data: Any):  # type: ignore[no-untyped-def]
    return api.client.post("/v1/alarms", json=data)


def post_raw(api, raw: bytes | str, url: str = "/v1/alarms"):  # type: ignore[no-untyped-def]
    return api.client.post(url, data=raw, content_type="application/json")


def create(api, **overrides: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = post(api, body(**overrides))
    assert response.status_code == 201, response.get_data(as_text=True)
    return response.get_json()  # type: ignore[no-any-return]


@contextmanager
def unchanged(api) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The block's requests must leave the database and the engine untouched."""
    before, due_before = rows(api), list(api.notifier.due)
    yield
    assert rows(api) == before
    assert api.notifier.due == due_before


def assert_4xx(response) -> None:  # type: ignore[no-untyped-def]
    assert 400 <= response.status_code < 500, (response.status_code, response.get_data()[:300])
    assert_error(response, response.status_code)


def is_mariadb(api) -> bool:  # type: ignore[no-untyped-def]
    return api.store.db.dialect.name in ("mysql", "mariadb")


def ring(api, alarm_id: int) -> None:  # type: ignore[no-untyped-def]
    """Ring the (due) alarm through the engine's side of the store."""
    now = api.clock.now_ms()
    claims = SqlClaimStore(api.store)
    claimed = claims.load_due(now, 100)
    assert alarm_id in [claim.id for claim in claimed]
    with claims.ring_transaction() as tx:
        tx.mark_rung([(alarm_id, now)], now)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# --- POST /v1/alarms: success ---------------------------------------------------------------


def test_fake_clock_start(api) -> None:
    assert api.clock.now_ms() == NOW


def test_create_returns_201_and_the_full_alarm(api) -> None:
    response = post(api, body(latest_ring_at=NOW + 2 * MINUTE))
    assert response.status_code == 201
    assert response.mimetype == "application/json"
    alarm = response.get_json()
    assert set(alarm) == ALARM_KEYS
    assert isinstance(alarm["id"], int)
    assert alarm == {
        "id": alarm["id"],
        "application": "app",
        "business_id": "order-1",
        "payload": '{"hello": "world"}',
        "target_ring_at": NOW + MINUTE,
        "latest_ring_at": NOW + 2 * MINUTE,
        "next_try_time": NOW + MINUTE,
        "retry_times": 0,
        "status": "pending",
        "rung_at": None,
        "created_at": NOW,
        "updated_at": NOW,
        "ring_after_count": None,
        "count": 0,
    }
    assert rows(api) == [alarm]
    assert api.notifier.due == [NOW + MINUTE]


def test_create_with_delay_ms_computes_the_target_from_the_clock(api) -> None:
    api.clock.set(NOW + 12_345)
    alarm = create(api, target_ring_at=DROP, delay_ms=5_000)
    assert alarm["target_ring_at"] == NOW + 12_345 + 5_000
    assert alarm["next_try_time"] == alarm["target_ring_at"]
    assert alarm["created_at"] == alarm["updated_at"] == NOW + 12_345
    assert api.notifier.due == [alarm["target_ring_at"]]


def test_create_with_delay_zero_is_due_now(api) -> None:
    alarm = create(api, target_ring_at=DROP, delay_ms=0)
    assert alarm["target_ring_at"] == NOW


def test_retry_with_the_same_key_returns_200_and_the_stored_alarm_unchanged(api) -> None:
    first = create(api)
    api.clock.advance(5_000)
    with unchanged(api):
        again = post(api, body(payload="something else", target_ring_at=NOW + 9 * MINUTE))
    assert again.status_code == 200
    assert again.get_json() == first
    assert api.notifier.due == [NOW + MINUTE]
    metrics = api.client.get("/metrics").get_data(as_text=True)
    assert 'clock_alarms_created_total{application="app"} 1.0' in metrics


def test_concurrent_creates_are_written_together_and_each_gets_its_own_answer(
    api, monkeypatch
) -> None:
    """Creates that arrive while another is being written go to the database as one group;
    each still gets its own alarm, and a key sent by several at once is created once."""
    app = api.client.application
    group_commit = app.extensions["clock"].single_creates
    group_sizes: list[int] = []
    write_group = group_commit._write_group

    def recording(requests):  # type: ignore[no-untyped-def]
        group_sizes.append(len(requests))
        return write_group(requests)

    monkeypatch.setattr(group_commit, "_write_group", recording)

    def send(i: int):  # type: ignore[no-untyped-def]
        key = "shared" if i % 5 == 0 else f"own-{i}"
        answer = app.test_client().post("/v1/alarms", json=body(business_id=key, payload=f"p{i}"))
        return i, key, answer

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(send, range(300)))
    for i, key, answer in answers:
        if key != "shared":
            assert answer.status_code == 201
            assert (answer.get_json()["business_id"], answer.get_json()["payload"]) == (
                key,
                f"p{i}",
            )
    shared = [answer for _, key, answer in answers if key == "shared"]
    assert sorted(answer.status_code for answer in shared) == [200] * (len(shared) - 1) + [201]
    assert len({answer.get_json()["id"] for answer in shared}) == 1
    assert len(api.store.list("app", None, 1000, None)) == 241  # 240 own keys and "shared"
    assert max(group_sizes, default=0) > 1, "no two creates were ever written together"
    metrics = api.client.get("/metrics").get_data(as_text=True)
    assert 'clock_alarms_created_total{application="app"} 241.0' in metrics


def test_past_target_is_accepted_and_the_engine_is_told(api) -> None:
    alarm = create(api, target_ring_at=NOW - 10 * MINUTE)
    assert alarm["status"] == "pending"
    assert alarm["next_try_time"] == NOW - 10 * MINUTE
    assert api.notifier.due == [NOW - 10 * MINUTE]


@pytest.mark.parametrize("target", [0, MAX_EPOCH_MS])
def test_target_at_the_edges_of_the_range_is_accepted(api, target: int) -> None:
    assert create(api, target_ring_at=target)["target_ring_at"] == target


def test_latest_equal_to_target_is_accepted(api) -> None:
    alarm = create(api, latest_ring_at=NOW + MINUTE)
    assert alarm["latest_ring_at"] == alarm["target_ring_at"]


def test_application_and_business_id_at_their_maximum_lengths(api) -> None:
    application = "A.b_c-9" + "x" * 57
    assert len(application) == 64
    business_id = "🎉" * 128  # 128 characters of 4 bytes each
    alarm = create(api, application=application, business_id=business_id)
    assert (alarm["application"], alarm["business_id"]) == (application, business_id)
    got = api.client.get(key_url(application, business_id))
    assert got.status_code == 200
    assert got.get_json() == alarm


@pytest.mark.parametrize("payload", ["", "x" * 1024, "é" * 512], ids=["empty", "1024", "512x2"])
def test_payload_up_to_the_limit_in_utf8_bytes_is_accepted(api, payload: str) -> None:
    assert create(api, payload=payload)["payload"] == payload


ODD_TEXT = [
    "Robert'); DROP TABLE clock;--",
    '100%_off\\ OR 1=1; -- "quoted" `backtick`',
    "日本語-Ünïcödé-🎉-\u2028-\u0301e",
    "line\nbreak\ttab\rcr",
    "nul\x00byte",
    "q?x=1#frag&y=%20",
    "a/b/../c/./d",
    "\U0010ffff\ufeff",
]


@pytest.mark.parametrize("text", ODD_TEXT)
def test_unicode_and_sql_metacharacters_round_trip_exactly(api, text: str) -> None:
    alarm = create(api, business_id=text, payload=text * 3)
    assert alarm["business_id"] == text
    assert alarm["payload"] == text * 3
    got = api.client.get(key_url("app", text))
    assert got.status_code == 200
    assert got.get_json() == alarm
    assert api.client.get("/v1/alarms").get_json()["alarms"] == [alarm]
    assert api.store.get("app", text).to_json() == alarm
    assert rows(api) == [alarm]


def test_escaped_surrogate_pair_is_one_character(api) -> None:
    raw = json.dumps(body(business_id="\U0001f600", payload="\U0001f600"))  # ensure_ascii
    assert "\\ud83d\\ude00" in raw
    response = post_raw(api, raw)
    assert response.status_code == 201
    assert response.get_json()["business_id"] == "\U0001f600"


def test_a_body_that_is_not_sent_as_json_is_refused(api) -> None:
    response = api.client.post("/v1/alarms", data=json.dumps(body()), content_type="text/plain")
    assert response.status_code == 415
    assert response.get_json()["error"]["code"] == "unsupported_media_type"
    assert "'text/plain'" in response.get_json()["error"]["message"]
    assert api.client.get(key_url("app", "order-1")).status_code == 404


def test_keys_differing_only_by_trailing_space_are_distinct(api) -> None:
    plain = create(api, business_id="x", payload="plain")
    response = post(api, body(business_id="x ", payload="spaced"))
    assert response.status_code == 201
    assert response.get_json()["id"] != plain["id"]
    assert api.client.get(key_url("app", "x ")).get_json()["payload"] == "spaced"
    assert api.client.get(key_url("app", "x")).get_json()["payload"] == "plain"


# --- POST /v1/alarms: errors ----------------------------------------------------------------


def test_malformed_json_is_400(api) -> None:
    with unchanged(api):
        error = assert_error(post_raw(api, b'{"application": "app",'), 400, "validation_error")
    assert error["field"] is None
    assert "not valid JSON" in error["message"]


@pytest.mark.parametrize("raw", [b"[]", b"null", b"42", b'"text"', b"true", b"[{}]"])
def test_non_object_json_is_400(api, raw: bytes) -> None:
    with unchanged(api):
        error = assert_error(post_raw(api, raw), 400, "validation_error", None)
    assert "object" in error["message"]


def test_non_utf8_body_is_400(api) -> None:
    raw = json.dumps(body()).encode().replace(b"order-1", b"order-\xff\xfe")
    with unchanged(api):
        error = assert_error(post_raw(api, raw), 400, "validation_error", None)
    assert "UTF-8" in error["message"]


def test_duplicate_keys_are_400(api) -> None:
    raw = b'{"application": "app", "business_id": "a", "business_id": "b", "payload": "", '
    raw += b'"target_ring_at": 1}'
    with unchanged(api):
        error = assert_error(post_raw(api, raw), 400, "validation_error", None)
    assert "duplicate" in error["message"]


def test_deeply_nested_json_is_400(api) -> None:
    with unchanged(api):
        assert_error(post_raw(api, b"[" * 17_000), 400, "validation_error", None)
        assert_error(post_raw(api, b'{"a": ' * 2_500), 400, "validation_error", None)


def test_deeply_nested_json_over_the_body_limit_is_413(api) -> None:
    with unchanged(api):
        assert_error(post_raw(api, b"[" * 100_000), 413, "payload_too_large", None)


@pytest.mark.parametrize("field", ["application", "business_id", "payload"])
def test_missing_field_is_400(api, field: str) -> None:
    with unchanged(api):
        error = assert_error(post(api, body(**{field: DROP})), 400, "validation_error", field)
    assert field in error["message"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"target_ring_at": str(NOW)}, "target_ring_at"),
        ({"target_ring_at": float(NOW)}, "target_ring_at"),
        ({"target_ring_at": NOW + 0.5}, "target_ring_at"),
        ({"target_ring_at": True}, "target_ring_at"),
        ({"target_ring_at": [NOW]}, "target_ring_at"),
        ({"target_ring_at": {"ms": NOW}}, "target_ring_at"),
        ({"delay_ms": "1000", "target_ring_at": DROP}, "delay_ms"),
        ({"delay_ms": False, "target_ring_at": DROP}, "delay_ms"),
        ({"latest_ring_at": "tomorrow"}, "latest_ring_at"),
        ({"application": 5}, "application"),
        ({"application": None}, "application"),
        ({"business_id": 7}, "business_id"),
        ({"business_id": ["a"]}, "business_id"),
        ({"payload": {"a": 1}}, "payload"),
        ({"payload": None}, "payload"),
        ({"payload": 1}, "payload"),
    ],
)
def test_wrong_types_are_400(api, overrides: dict[str, Any], field: str) -> None:
    with unchanged(api):
        assert_error(post(api, body(**overrides)), 400, "validation_error", field)


def test_both_target_and_delay_are_400(api) -> None:
    with unchanged(api):
        error = assert_error(post(api, body(delay_ms=1000)), 400, "validation_error", "delay_ms")
    assert "not both" in error["message"]


@pytest.mark.parametrize("target", [DROP, None], ids=["absent", "null"])
def test_neither_target_nor_delay_is_400(api, target: Any) -> None:
    with unchanged(api):
        assert_error(
            post(api, body(target_ring_at=target)), 400, "validation_error", "target_ring_at"
        )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"target_ring_at": -1}, "target_ring_at"),
        ({"target_ring_at": MAX_EPOCH_MS + 1}, "target_ring_at"),
        ({"target_ring_at": 10**30}, "target_ring_at"),
        ({"target_ring_at": -(10**30)}, "target_ring_at"),
        ({"target_ring_at": DROP, "delay_ms": -1}, "delay_ms"),
        ({"target_ring_at": DROP, "delay_ms": MAX_EPOCH_MS + 1}, "delay_ms"),
        ({"target_ring_at": DROP, "delay_ms": MAX_EPOCH_MS - NOW + 1}, "delay_ms"),
        ({"latest_ring_at": -1}, "latest_ring_at"),
        ({"latest_ring_at": MAX_EPOCH_MS + 1}, "latest_ring_at"),
    ],
)
def test_numbers_out_of_range_are_400(api, overrides: dict[str, Any], field: str) -> None:
    with unchanged(api):
        assert_error(post(api, body(**overrides)), 400, "validation_error", field)


def test_delay_reaching_exactly_year_9999_is_accepted(api) -> None:
    alarm = create(api, target_ring_at=DROP, delay_ms=MAX_EPOCH_MS - NOW)
    assert alarm["target_ring_at"] == MAX_EPOCH_MS


@pytest.mark.parametrize(
    "overrides",
    [
        {"latest_ring_at": NOW + MINUTE - 1},
        {"target_ring_at": DROP, "delay_ms": 10, "latest_ring_at": NOW + 9},
    ],
    ids=["target", "delay"],
)
def test_latest_before_target_is_400(api, overrides: dict[str, Any]) -> None:
    with unchanged(api):
        assert_error(post(api, body(**overrides)), 400, "validation_error", "latest_ring_at")


BAD_APPLICATIONS = [
    "",
    "a" * 65,
    "my app",
    "my/app",
    "appé",
    "app\n",
    "\napp",
    "\uff41pp",  # fullwidth a
    "app\x00",
    "a:b",
    ".",
    "..",
]


@pytest.mark.parametrize("application", BAD_APPLICATIONS)
def test_application_outside_the_pattern_is_400(api, application: str) -> None:
    with unchanged(api):
        assert_error(
            post(api, body(application=application)), 400, "validation_error", "application"
        )


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/alarms/%2E%2E/x"), ("DELETE", "/v1/alarms/%2E/x"),
     ("GET", "/v1/alarms?application=.."), ("PUT", "/v1/applications/%2E%2E"),
     ("GET", "/v1/applications/%2E")],
)  # fmt: skip
def test_dot_application_names_are_400(api, method: str, path: str) -> None:
    """ "." and ".." travel in no URL (clients remove such segments), so no application
    may have them as its name."""
    create(api, business_id="x")
    with unchanged(api):
        response = api.client.open(path, method=method, json={})
        assert_error(response, 400, "validation_error", "application")


@pytest.mark.parametrize(
    "business_id", ["", "b" * 129, "é" * 129], ids=["empty", "129", "129-unicode"]
)
def test_business_id_empty_or_too_long_is_400(api, business_id: str) -> None:
    with unchanged(api):
        assert_error(
            post(api, body(business_id=business_id)), 400, "validation_error", "business_id"
        )


@pytest.mark.parametrize("extra", ["status", "id", "Payload", "retry_times", ""])
def test_unknown_extra_field_is_400(api, extra: str) -> None:
    with unchanged(api):
        assert_error(post(api, {**body(), extra: 1}), 400, "validation_error", extra or None)


@pytest.mark.parametrize("payload", ["x" * 1025, "é" * 513], ids=["ascii", "utf8-bytes"])
def test_payload_over_the_limit_is_413(api, payload: str) -> None:
    with unchanged(api):
        error = assert_error(post(api, body(payload=payload)), 413, "payload_too_large", "payload")
    assert "1024" in error["message"]


def test_body_over_the_request_limit_is_413(api) -> None:
    limit = api.settings.single_body_max_bytes
    raw = json.dumps(body(payload="p")) + " " * limit  # valid JSON, payload tiny
    with unchanged(api):
        error = assert_error(post_raw(api, raw), 413, "payload_too_large", None)
    assert f"over the limit of {limit}" in error["message"]


# Each a unit of 1 to 4 UTF-8 bytes that a JSON encoder may write as up to 6 bytes per byte.
UNITS = {"ascii": "a", "control": "\x01", "euro": "€", "cjk": "中", "emoji": "😀"}


def payload_of(unit: str, size: int) -> str:
    """Exactly `size` UTF-8 bytes: as many `unit`s as fit, then ASCII."""
    width = len(unit.encode())
    return unit * (size // width) + "a" * (size % width)


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "raw"])
@pytest.mark.parametrize("unit", list(UNITS.values()), ids=list(UNITS))
def test_a_payload_at_its_limit_is_taken_however_it_is_written(api, unit, ensure_ascii) -> None:
    limit = api.settings.payload_max_bytes
    at_limit = payload_of(unit, limit)
    raw = json.dumps(body(payload=at_limit), ensure_ascii=ensure_ascii)
    response = post_raw(api, raw)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["payload"] == at_limit
    over = json.dumps(
        body(business_id="o", payload=payload_of(unit, limit + 1)), ensure_ascii=ensure_ascii
    )
    with unchanged(api):
        assert_error(post_raw(api, over), 413, "payload_too_large", "payload")


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "raw"])
@pytest.mark.parametrize("unit", list(UNITS.values()), ids=list(UNITS))
def test_a_payload_at_its_limit_is_taken_in_a_batch_and_a_patch(api, unit, ensure_ascii) -> None:
    limit = api.settings.payload_max_bytes
    items = [
        body(business_id="at", payload=payload_of(unit, limit)),
        body(business_id="over", payload=payload_of(unit, limit + 1)),
    ]
    raw = json.dumps({"alarms": items}, ensure_ascii=ensure_ascii)
    at, over = post_raw(api, raw, "/v1/alarms/batch").get_json()["results"]
    assert at["status"] == 201 and at["alarm"]["payload"] == payload_of(unit, limit)
    assert over["status"] == 413 and over["error"]["field"] == "payload"
    url = key_url("app", "at")
    patch = json.dumps({"payload": payload_of(unit, limit)[::-1]}, ensure_ascii=ensure_ascii)
    response = api.client.patch(url, data=patch, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["payload"] == payload_of(unit, limit)[::-1]
    too_long = json.dumps({"payload": payload_of(unit, limit + 1)}, ensure_ascii=ensure_ascii)
    with unchanged(api):
        response = api.client.patch(url, data=too_long, content_type="application/json")
        assert_error(response, 413, "payload_too_large", "payload")


@pytest.mark.parametrize("field", ["business_id", "payload"])
@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "x\\ud83dy", "\\ude00\\ud83d"])
def test_lone_surrogate_is_400(api, field: str, escape: str) -> None:
    raw = json.dumps(body(**{field: "SURROGATE"})).replace("SURROGATE", escape)
    with unchanged(api):
        assert_error(post_raw(api, raw), 400, "validation_error", field)


def test_lone_surrogate_in_a_key_is_400(api) -> None:
    raw = json.dumps({**body(), "EXTRA": 1}).replace("EXTRA", "\\ud800")
    with unchanged(api):
        assert_error(post_raw(api, raw), 400, "validation_error")


@pytest.mark.parametrize("raw", [b"", b"   ", b"\xef\xbb\xbf{}", "{}".encode("utf-16")])
def test_empty_or_oddly_encoded_body_is_400(api, raw: bytes) -> None:
    with unchanged(api):
        assert_error(post_raw(api, raw), 400, "validation_error")


# --- POST /v1/alarms/batch ------------------------------------------------------------------


def test_batch_gives_per_item_results_in_order(api) -> None:
    existing = create(api, business_id="existing", target_ring_at=NOW + 5 * MINUTE)
    api.notifier.due.clear()
    api.clock.advance(1_000)
    items = [
        body(business_id="a", payload="first a", target_ring_at=NOW + 3 * MINUTE),
        body(business_id="bad", latest_ring_at=NOW),  # a cutoff before its target
        body(business_id="b", target_ring_at=DROP, delay_ms=2 * MINUTE),
        body(business_id="a", payload="second a", target_ring_at=NOW + 9 * MINUTE),
        body(business_id="far", target_ring_at=DROP, delay_ms=MAX_EPOCH_MS),
        body(business_id="existing", payload="changed?"),
        body(business_id="big", payload="x" * 1025),
    ]
    response = api.client.post("/v1/alarms/batch", json={"alarms": items})
    assert response.status_code == 200
    results = response.get_json()["results"]
    assert [r["status"] for r in results] == [201, 400, 201, 200, 400, 200, 413]
    for result in results:
        assert set(result) == {"status", "alarm"} or set(result) == {"status", "error"}
        if "alarm" in result:
            assert set(result["alarm"]) == ALARM_KEYS
        else:
            assert set(result["error"]) == {"code", "message", "field"}
    a, bad, b, a_again, far, existing_again, big = results
    assert a["alarm"]["payload"] == "first a"
    assert a["alarm"]["created_at"] == NOW + 1_000
    assert a_again["alarm"] == a["alarm"]
    assert b["alarm"]["target_ring_at"] == NOW + 1_000 + 2 * MINUTE
    assert existing_again["alarm"] == existing
    assert bad["error"]["field"] == "latest_ring_at"
    assert bad["error"]["code"] == "validation_error"
    assert far["error"] == {**far["error"], "code": "validation_error", "field": "delay_ms"}
    assert big["error"] == {**big["error"], "code": "payload_too_large", "field": "payload"}
    stored = {(r["application"], r["business_id"]): r for r in rows(api)}
    assert set(stored) == {("app", "existing"), ("app", "a"), ("app", "b")}
    assert stored["app", "a"] == a["alarm"]
    assert stored["app", "b"] == b["alarm"]
    assert api.notifier.due == [NOW + 1_000 + 2 * MINUTE]  # the earliest new alarm


def test_batch_duplicate_key_inside_one_batch(api) -> None:
    items = [body(business_id="dup", payload="one"), body(business_id="dup", payload="two")]
    results = api.client.post("/v1/alarms/batch", json={"alarms": items}).get_json()["results"]
    assert [r["status"] for r in results] == [201, 200]
    assert results[0]["alarm"] == results[1]["alarm"]
    assert results[1]["alarm"]["payload"] == "one"
    assert len(rows(api)) == 1


def test_batch_where_every_item_is_bad_stores_nothing(api) -> None:
    items = [body(business_id="a", latest_ring_at=NOW), body(business_id="b", latest_ring_at=0)]
    with unchanged(api):
        response = api.client.post("/v1/alarms/batch", json={"alarms": items})
    assert response.status_code == 200
    assert [r["status"] for r in response.get_json()["results"]] == [400, 400]


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (42, "alarms.1"),
        (None, "alarms.1"),
        (body(payload=DROP), "alarms.1.payload"),
        (body(application="bad app"), "alarms.1.application"),
        (body(latest_ring_at={}), "alarms.1.latest_ring_at"),
        (body(target_ring_at=NOW, delay_ms=5), "alarms.1.delay_ms"),
        (body(target_ring_at=DROP), "alarms.1.target_ring_at"),
        (body(count_only=True), "alarms.1.ring_after_count"),
        (
            body(target_ring_at=DROP, count_only=True, ring_after_count=2, delay_ms=1),
            "alarms.1.delay_ms",
        ),
    ],
)
def test_a_batch_item_unlike_the_documents_create_request_makes_the_batch_400(
    api, item: Any, field: str
) -> None:
    """The document says each item is a CreateAlarm: one that is not is a 400 for the whole
    batch, naming the item, and nothing is stored. The rules the schema cannot state (a cutoff
    before the target, a delay past the year 9999, the payload's size in bytes) stay each
    item's own."""
    with unchanged(api):
        response = api.client.post("/v1/alarms/batch", json={"alarms": [body(), item]})
    error = assert_error(response, 400, "validation_error", field)
    assert error["message"].startswith("alarms[1]: ")


def test_batch_at_the_item_limit(api) -> None:
    items = [body(business_id=f"k{i}") for i in range(50)]
    results = api.client.post("/v1/alarms/batch", json={"alarms": items}).get_json()["results"]
    assert [r["status"] for r in results] == [201] * 50
    assert len(rows(api)) == 50


def test_batch_over_the_item_limit_is_413(api) -> None:
    items = [body(business_id=f"k{i}") for i in range(51)]
    with unchanged(api):
        response = api.client.post("/v1/alarms/batch", json={"alarms": items})
        error = assert_error(response, 413, "payload_too_large", "alarms")
    assert "50" in error["message"]


def test_batch_body_over_the_request_limit_is_413(api) -> None:
    raw = json.dumps({"alarms": [body()]}) + " " * api.settings.batch_max_bytes
    with unchanged(api):
        response = post_raw(api, raw, "/v1/alarms/batch")
        error = assert_error(response, 413, "payload_too_large", None)
    assert (
        f"over the limit of {api.settings.batch_max_bytes} (CLOCK_BATCH_MAX_BYTES)"
        in (error["message"])
    )


def test_batch_empty_list_is_400(api) -> None:
    with unchanged(api):
        response = api.client.post("/v1/alarms/batch", json={"alarms": []})
        assert_error(response, 400, "validation_error", "alarms")


@pytest.mark.parametrize(
    "data",
    [
        {"alarms": {}},
        {"alarms": "x"},
        {"alarms": None},
        {"alarms": 3},
        {},
        [body()],
        {"alarms": [], "x": 1},
    ],
)
def test_batch_not_a_list_is_400(api, data: Any) -> None:
    with unchanged(api):
        assert_error(api.client.post("/v1/alarms/batch", json=data), 400, "validation_error")


def test_batch_deeply_nested_json_is_400(api) -> None:
    with unchanged(api):
        assert_error(post_raw(api, b"[" * 100_000, "/v1/alarms/batch"), 400, "validation_error")
        raw = b'{"alarms": [' + b"[" * 50_000
        assert_error(post_raw(api, raw, "/v1/alarms/batch"), 400, "validation_error")


# --- GET /v1/alarms/{application}/{business_id} --------------------------------------------


def test_get_one(api) -> None:
    alarm = create(api)
    response = api.client.get("/v1/alarms/app/order-1")
    assert response.status_code == 200
    assert response.get_json() == alarm


def test_get_unknown_is_404(api) -> None:
    create(api)
    assert_error(api.client.get("/v1/alarms/app/order-2"), 404, "not_found", None)
    assert_error(api.client.get("/v1/alarms/other/order-1"), 404, "not_found", None)
    assert_error(api.client.get("/v1/alarms/APP/order-1"), 404, "not_found", None)


@pytest.mark.parametrize(
    "url",
    [
        "/v1/alarms/my%20app/x",
        "/v1/alarms/" + "a" * 65 + "/x",
        "/v1/alarms/app%0A/x",
        "/v1/alarms/%C3%A9/x",
    ],
)
def test_get_with_an_invalid_application_is_400(api, url: str) -> None:
    assert_error(api.client.get(url), 400, "validation_error", "application")


def test_get_with_a_too_long_business_id_is_400(api) -> None:
    assert_error(
        api.client.get("/v1/alarms/app/" + "b" * 129), 400, "validation_error", "business_id"
    )


@pytest.mark.parametrize("business_id", ["a/b", "a//b", "/lead", "trail/", "a/b/", "//", "%2F"])
def test_business_id_with_slashes_is_addressable(api, business_id: str) -> None:
    decoy = create(api, business_id="a/b" if business_id != "a/b" else "ab", payload="decoy")
    alarm = create(api, business_id=business_id, payload="mine")
    url = f"/v1/alarms/app/{business_id.replace('%', '%25')}"
    got = api.client.get(url)
    assert got.status_code == 200, got.get_data(as_text=True)
    assert got.get_json() == alarm
    patched = api.client.patch(url, json={"payload": "patched"})
    assert patched.status_code == 200
    assert patched.get_json()["business_id"] == business_id
    cancelled = api.client.delete(url)
    assert cancelled.status_code == 200
    assert cancelled.get_json()["id"] == alarm["id"]
    assert api.store.get("app", decoy["business_id"]).to_json() == decoy


def test_business_id_with_slashes_percent_encoded(api) -> None:
    alarm = create(api, business_id="a/b")
    assert api.client.get("/v1/alarms/app/a%2Fb").get_json() == alarm


# --- PATCH /v1/alarms/{application}/{business_id} ------------------------------------------


def patch(api, data: Any, business_id: str = "order-1"):  # type: ignore[no-untyped-def]
    return api.client.patch(key_url("app", business_id), json=data)


def test_patch_target_moves_next_try_time_and_tells_the_engine(api) -> None:
    alarm = create(api)
    api.clock.advance(1_000)
    response = patch(api, {"target_ring_at": NOW + 7 * MINUTE})
    assert response.status_code == 200
    changed = response.get_json()
    assert changed == {
        **alarm,
        "target_ring_at": NOW + 7 * MINUTE,
        "next_try_time": NOW + 7 * MINUTE,
        "updated_at": NOW + 1_000,
    }
    assert rows(api) == [changed]
    assert api.notifier.due == [NOW + MINUTE, NOW + 7 * MINUTE]


def test_patch_target_of_a_claimed_alarm_drops_the_claim(api) -> None:
    """A claim as a release before slots took it (a rolling upgrade): the PATCH's time holds."""
    alarm = create(api, target_ring_at=NOW)
    claim_as_before_slots(api.store, [alarm["id"]], owner=7, lease_until_ms=NOW + 5 * MINUTE)
    assert api.store.get("app", "order-1").next_try_time == NOW + 5 * MINUTE
    changed = patch(api, {"target_ring_at": NOW + MINUTE}).get_json()
    assert changed["next_try_time"] == NOW + MINUTE
    assert changed["id"] == alarm["id"]


def test_patch_delay_ms(api) -> None:
    create(api)
    api.clock.advance(2_000)
    changed = patch(api, {"delay_ms": 30_000}).get_json()
    assert changed["target_ring_at"] == changed["next_try_time"] == NOW + 32_000
    assert api.notifier.due[-1] == NOW + 32_000


def test_patch_payload_only(api) -> None:
    alarm = create(api)
    api.clock.advance(1)
    changed = patch(api, {"payload": "new 🎉 payload"}).get_json()
    assert changed == {**alarm, "payload": "new 🎉 payload", "updated_at": NOW + 1}
    assert api.notifier.due == [NOW + MINUTE]  # the due time did not move


def test_patch_latest_ring_at_set_and_removed(api) -> None:
    alarm = create(api)
    changed = patch(api, {"latest_ring_at": NOW + 3 * MINUTE}).get_json()
    assert changed == {**alarm, "latest_ring_at": NOW + 3 * MINUTE}
    removed = patch(api, {"latest_ring_at": None}).get_json()
    assert removed == alarm
    assert rows(api) == [alarm]


def test_patch_target_and_latest_together(api) -> None:
    create(api, latest_ring_at=NOW + 2 * MINUTE)
    changed = patch(api, {"target_ring_at": NOW + 5 * MINUTE, "latest_ring_at": NOW + 6 * MINUTE})
    assert changed.status_code == 200
    assert changed.get_json()["latest_ring_at"] == NOW + 6 * MINUTE


@pytest.mark.parametrize(
    "data",
    [
        {"latest_ring_at": NOW + MINUTE - 1},  # before the stored target
        {"target_ring_at": NOW + 2 * MINUTE + 1},  # after the stored latest
        {"delay_ms": 2 * MINUTE + 1},
        {"target_ring_at": NOW + 4 * MINUTE, "latest_ring_at": NOW + 3 * MINUTE},
    ],
)
def test_patch_latest_before_target_is_400_merged_with_stored_values(api, data) -> None:
    create(api, latest_ring_at=NOW + 2 * MINUTE)
    with unchanged(api):
        assert_error(patch(api, data), 400, "validation_error", "latest_ring_at")


@pytest.mark.parametrize(
    "raw", [b"{}", b"", b"[]", b"null", b"{", b'{"payload": "a", "payload": "b"}']
)
def test_patch_empty_or_malformed_body_is_400(api, raw: bytes) -> None:
    create(api)
    with unchanged(api):
        response = api.client.patch(
            "/v1/alarms/app/order-1", data=raw, content_type="application/json"
        )
        assert_error(response, 400, "validation_error", None)


@pytest.mark.parametrize(
    ("data", "status", "field"),
    [
        ({"target_ring_at": NOW, "delay_ms": 5}, 400, "delay_ms"),
        ({"target_ring_at": "soon"}, 400, "target_ring_at"),
        ({"target_ring_at": -1}, 400, "target_ring_at"),
        ({"delay_ms": MAX_EPOCH_MS}, 400, "delay_ms"),
        ({"latest_ring_at": MAX_EPOCH_MS + 1}, 400, "latest_ring_at"),
        ({"payload": 5}, 400, "payload"),
        ({"status": "cancelled"}, 400, "status"),
        ({"application": "other"}, 400, "application"),
        ({"business_id": "other"}, 400, "business_id"),
        ({"payload": "x" * 1025}, 413, "payload"),
    ],
)
def test_patch_invalid_changes(api, data: dict[str, Any], status: int, field: str) -> None:
    create(api)
    with unchanged(api):
        assert_error(patch(api, data), status, None, field)


def test_patch_lone_surrogate_payload_is_400(api) -> None:
    create(api)
    with unchanged(api):
        response = api.client.patch(
            "/v1/alarms/app/order-1", data='{"payload": "\\ud800"}', content_type="application/json"
        )
        assert_error(response, 400, "validation_error", "payload")


def test_patch_after_cancel_is_409(api) -> None:
    create(api)
    api.client.delete("/v1/alarms/app/order-1")
    with unchanged(api):
        error = assert_error(patch(api, {"payload": "late"}), 409, "conflict", None)
    assert error["status"] == "cancelled"


def test_patch_after_ring_is_409(api) -> None:
    alarm = create(api, target_ring_at=NOW)
    ring(api, alarm["id"])
    with unchanged(api):
        error = assert_error(patch(api, {"target_ring_at": NOW + MINUTE}), 409, "conflict")
    assert error["status"] == "rung"


def test_patch_unknown_is_404(api) -> None:
    with unchanged(api):
        assert_error(patch(api, {"payload": "x"}, "nope"), 404, "not_found", None)


def test_patch_invalid_application_in_path_is_400(api) -> None:
    with unchanged(api):
        response = api.client.patch("/v1/alarms/bad%20app/x", json={"payload": "x"})
        assert_error(response, 400, "validation_error", "application")


# --- DELETE /v1/alarms/{application}/{business_id} -----------------------------------------


def test_delete_cancels_and_is_idempotent(api) -> None:
    alarm = create(api)
    api.clock.advance(500)
    first = api.client.delete("/v1/alarms/app/order-1")
    assert first.status_code == 200
    cancelled = first.get_json()
    # next_try_time becomes the moment it finished, which its retention counts from
    finished = {"status": "cancelled", "next_try_time": NOW + 500, "updated_at": NOW + 500}
    assert cancelled == {**alarm, **finished}
    api.clock.advance(500)
    with unchanged(api):
        again = api.client.delete("/v1/alarms/app/order-1")
    assert again.status_code == 200
    assert again.get_json() == cancelled
    assert api.client.get("/v1/alarms/app/order-1").get_json() == cancelled


def test_delete_a_claimed_alarm_cancels_it(api) -> None:
    create(api, target_ring_at=NOW)
    SqlClaimStore(api.store).load_due(NOW, 10)
    response = api.client.delete("/v1/alarms/app/order-1")
    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"


def test_delete_unknown_is_404(api) -> None:
    create(api)
    with unchanged(api):
        assert_error(api.client.delete("/v1/alarms/app/nope"), 404, "not_found", None)


def test_delete_rung_is_409(api) -> None:
    alarm = create(api, target_ring_at=NOW - 1)
    ring(api, alarm["id"])
    rung = api.client.get("/v1/alarms/app/order-1").get_json()
    assert rung["status"] == "rung"
    assert rung["rung_at"] == NOW
    with unchanged(api):
        error = assert_error(api.client.delete("/v1/alarms/app/order-1"), 409, "conflict", None)
    assert error["status"] == "rung"


def test_delete_invalid_key_is_400(api) -> None:
    assert_error(api.client.delete("/v1/alarms/a%2Bb/x"), 400, "validation_error", "application")
    assert_error(
        api.client.delete("/v1/alarms/app/" + "x" * 129), 400, "validation_error", "business_id"
    )


# --- GET /v1/alarms -------------------------------------------------------------------------


def list_page(api, **params: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = api.client.get("/v1/alarms", query_string=params)
    assert response.status_code == 200, response.get_data(as_text=True)
    page = response.get_json()
    assert set(page) == {"alarms", "next_cursor"}
    return page  # type: ignore[no-any-return]


def test_list_empty(api) -> None:
    assert list_page(api) == {"alarms": [], "next_cursor": None}


def test_list_filters_by_application_and_status(api) -> None:
    a1 = create(api, application="a", business_id="1")
    a2 = create(api, application="a", business_id="2")
    b1 = create(api, application="b", business_id="1")
    a2c = api.client.delete("/v1/alarms/a/2").get_json()
    assert list_page(api)["alarms"] == [a1, a2c, b1]
    assert list_page(api, application="a")["alarms"] == [a1, a2c]
    assert list_page(api, application="b")["alarms"] == [b1]
    assert list_page(api, application="c")["alarms"] == []
    assert list_page(api, status="cancelled")["alarms"] == [a2c]
    assert list_page(api, status="pending")["alarms"] == [a1, b1]
    assert list_page(api, status="rung")["alarms"] == []
    assert list_page(api, application="a", status="pending")["alarms"] == [a1]
    assert list_page(api, application="", status="")["alarms"] == [a1, a2c, b1]
    assert a2["id"] == a2c["id"]


def test_list_limit(api) -> None:
    for i in range(3):
        create(api, business_id=str(i))
    page = list_page(api, limit=2)
    assert len(page["alarms"]) == 2
    assert page["next_cursor"] is not None
    assert list_page(api, limit=3)["next_cursor"] is not None  # a full page: maybe more
    assert list_page(api, limit=4)["next_cursor"] is None


def test_list_pagination_over_25_alarms(api) -> None:
    created = [create(api, business_id=f"k{i:02}") for i in range(25)]
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 10}
        if cursor is not None:
            params["cursor"] = cursor
        page = list_page(api, **params)
        pages.append(page["alarms"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [10, 10, 5]
    seen = [alarm for page in pages for alarm in page]
    assert seen == created  # id order: no duplicates, no gaps
    assert len({a["id"] for a in seen}) == 25


def test_list_pagination_with_a_filter_and_an_exact_multiple(api) -> None:
    for i in range(8):
        create(api, application="a" if i % 2 else "b", business_id=str(i))
    first = list_page(api, application="a", limit=2)
    second = list_page(api, application="a", limit=2, cursor=first["next_cursor"])
    third = list_page(api, application="a", limit=2, cursor=second["next_cursor"])
    assert [a["business_id"] for a in first["alarms"] + second["alarms"]] == ["1", "3", "5", "7"]
    assert third == {"alarms": [], "next_cursor": None}


@pytest.mark.parametrize(
    "limit", ["0", "101", "x", "-1", "1.5", " 5", "+5", "", "²", "٣٣٣", "9" * 5000]
)
def test_list_bad_limit_is_400(api, limit: str) -> None:
    response = api.client.get("/v1/alarms", query_string={"limit": limit})
    assert_error(response, 400, "validation_error", "limit")


@pytest.mark.parametrize("status", ["PENDING", "bogus", "pending ", "rung,cancelled"])
def test_list_bad_status_is_400(api, status: str) -> None:
    response = api.client.get("/v1/alarms", query_string={"status": status})
    assert_error(response, 400, "validation_error", "status")


def test_list_bad_application_is_400(api) -> None:
    response = api.client.get("/v1/alarms", query_string={"application": "bad app"})
    assert_error(response, 400, "validation_error", "application")


@pytest.mark.parametrize(
    "cursor",
    ["!!!", "zzzz", "%%%", b64("id:x"), b64("id:-1"), b64("id:"), b64("no:5"), b64("5"),
     b64("id:1.5"), b64("id:²"), b64("id:" + "9" * 30), b64("id:" + "9" * 5000),
     b64("[-1]"), b64("[1.5]"), b64("[true]"), b64("[" + "9" * 30 + "]"), b64("[1,2]"),
     b64('["x"]'), b64("[]"), b64("{}"), b64("[" * 5000), b64("[1e3]")],
)  # fmt: skip
def test_list_bad_cursor_is_400(api, cursor: str) -> None:
    response = api.client.get("/v1/alarms", query_string={"cursor": cursor})
    assert_error(response, 400, "validation_error", "cursor")


# --- /healthz, /metrics (every probe and state: test_health.py) -----------------------------


def test_healthz_ok(api) -> None:
    create(api)  # registers "app", on the amqp channel
    response = api.client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "database": "ok",
        "broker": "ok",
        "channels": {"amqp": "ok"},
    }


def test_healthz_broker_down_is_200_degraded(api) -> None:
    """The server still takes and keeps alarms: nothing an orchestrator should restart."""
    create(api)
    api.publisher.healthy = False
    response = api.client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "degraded",
        "database": "ok",
        "broker": "down",
        "channels": {"amqp": "down"},
    }
    assert post(api, body(business_id="during-the-outage")).status_code == 201


def test_metrics(api) -> None:
    create(api)
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    text = response.get_data(as_text=True)
    assert "# TYPE clock_alarms_created_total counter" in text
    assert 'clock_alarms_created_total{application="app"} 1.0' in text


# --- unknown routes and methods --------------------------------------------------------------


@pytest.mark.parametrize("url", ["/nope", "/v1", "/v1/alarm", "/v1/alarms/app", "/v2/alarms"])
def test_unknown_route_is_404_json(api, url: str) -> None:
    assert_error(api.client.get(url), 404, "not_found", None)


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("PUT", "/v1/alarms", {"GET", "POST"}),
        ("DELETE", "/v1/alarms", {"GET", "POST"}),
        ("GET", "/v1/alarms/batch", {"POST"}),
        ("POST", "/v1/alarms/app/x", {"GET", "PATCH", "DELETE"}),
        ("PUT", "/v1/alarms/app/x", {"GET", "PATCH", "DELETE"}),
        ("POST", "/healthz", {"GET"}),
        ("DELETE", "/openapi.json", {"GET"}),
    ],
)
def test_wrong_method_is_405_json(api, method: str, url: str, allowed: set[str]) -> None:
    with unchanged(api):
        response = api.client.open(url, method=method, json=body())
        assert_error(response, 405, "method_not_allowed", None)
    allow = {m.strip() for m in response.headers.get("Allow", "").split(",")}
    assert allowed <= allow
    assert not {"PUT"} & allow


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("PATCH", "/v1/alarms/app/order-1/count", "OPTIONS, POST"),
        ("DELETE", "/v1/alarms/app/order-1/count", "OPTIONS, POST"),
        ("GET", "/v1/alarms/app/order-1/redrive", "OPTIONS, POST"),
        ("PATCH", "/v1/alarms/app/order-1/redrive", "OPTIONS, POST"),
        ("DELETE", "/v1/alarms/app/order-1/events", "GET, HEAD, OPTIONS"),
        ("POST", "/v1/alarms/app/order-1/events", "GET, HEAD, OPTIONS"),
        ("PATCH", "/v1/alarms/app/" + "b" * 128 + "/events", "GET, HEAD, OPTIONS"),
    ],
)
def test_a_method_an_alarms_sub_resource_does_not_take_is_405(
    api, method: str, url: str, allowed: str
) -> None:
    """.../count, .../redrive and .../events name the sub-resource for every method, also one
    that only the alarm itself takes; the alarm "order-1/count" is reached with %2F."""
    create(api, business_id="order-1/count")
    with unchanged(api):
        response = api.client.open(url, method=method, json={"payload": "p"})
        assert_error(response, 405, "method_not_allowed", None)
    assert response.headers["Allow"] == allowed
    escaped = api.client.delete("/v1/alarms/app/order-1%2Fcount")
    assert escaped.status_code == 200
    assert escaped.get_json()["business_id"] == "order-1/count"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("/v1/alarms/app/x/count", "OPTIONS, POST"),
        ("/v1/alarms/app/x/redrive", "OPTIONS, POST"),
        ("/v1/alarms/app/x/events", "GET, HEAD, OPTIONS"),
    ],
)
def test_options_of_an_alarms_sub_resource_lists_its_methods_only(
    api, url: str, allowed: str
) -> None:
    response = api.client.options(url)
    assert response.status_code == 200
    assert response.headers["Allow"] == allowed
    alarm = {m.strip() for m in api.client.options("/v1/alarms/app/x").headers["Allow"].split(",")}
    assert alarm == {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH"}


# --- hostile input never gives a 500 ---------------------------------------------------------


def _hostile_bodies() -> list[bytes]:
    valid = body()
    surrogate = json.dumps(valid).replace("order-1", "\\udc80")
    return [
        b"", b"\x00", b"\r\n", b"{", b"}", b"[1,", b"nul", b"{}", b"[]", b"null", b"-0", b"1e999",
        b"\xff\xfe\x00\x00", b"\xef\xbb\xbf" + json.dumps(valid).encode(),
        json.dumps(valid).encode("utf-16"), json.dumps(valid).encode("utf-32"),
        b'{"target_ring_at": NaN}', b'{"target_ring_at": Infinity}',
        b'{"target_ring_at": -Infinity}',
        json.dumps({**valid, "target_ring_at": 1e400}).encode(),
        json.dumps(valid).replace(str(NOW + MINUTE), "9" * 5000).encode(),
        json.dumps(valid).replace(str(NOW + MINUTE), "1" + "0" * 400).encode(),
        json.dumps(valid).replace(str(NOW + MINUTE), "1E+2").encode(),
        surrogate.encode(), surrogate.replace("\\udc80", "\\u0000\\ud800").encode(),
        b"[" * 16_000, b"{" * 16_000, b'{"a":' * 3_000 + b"1" + b"}" * 3_000,
        b'{"alarms": ' + b"[" * 16_000,
        json.dumps({**valid, "payload": [[[[[]]]]]}).encode(),
        json.dumps({**valid, "payload": {"nested": {"deep": [1, 2, {"x": None}]}}}).encode(),
        json.dumps({**valid, "\x00": 1}).encode(),
        json.dumps({**valid, "k" * 5000: 1}).encode(),
        json.dumps({f"k{i}": i for i in range(1_000)}).encode(),
        json.dumps({**valid, "application": "a" * 10_000}).encode(),
        json.dumps({**valid, "business_id": "\U0001f600" * 129}).encode(),
        json.dumps({**valid, "application": ["app"]}).encode(),
        json.dumps({**valid, "latest_ring_at": True}).encode(),
        json.dumps({"alarms": None}).encode(), json.dumps({"alarms": [[]] * 60}).encode(),
        json.dumps({"alarms": [valid] * 51}).encode(),
        b'{"payload": "a", "payload": "a"}',
        "{\"payload\": \"\udcff\"}".encode("utf-8", "surrogatepass"),  # CESU-style raw surrogate
        "{\"business_id\": \"\udcff\"}".encode("utf-8", "surrogateescape"),
    ]  # fmt: skip


HOSTILE = _hostile_bodies()


@pytest.mark.parametrize("raw", HOSTILE, ids=[f"body{i}" for i in range(len(HOSTILE))])
@pytest.mark.parametrize("url", ["/v1/alarms", "/v1/alarms/batch", "/v1/alarms/app/order-1"])
def test_hostile_bodies_are_4xx(api, raw: bytes, url: str) -> None:
    method = "PATCH" if url.endswith("order-1") else "POST"
    if method == "PATCH":
        create(api)
    with unchanged(api):
        response = api.client.open(url, method=method, data=raw, content_type="application/json")
        if url.endswith("batch") and response.status_code == 200:
            results = response.get_json()["results"]  # a batch may reject item by item
            assert all(400 <= r["status"] < 500 for r in results)
        else:
            assert_4xx(response)


HOSTILE_URLS = [
    "/v1/alarms?limit=%C2%B2", "/v1/alarms?limit=" + "1" * 5000, "/v1/alarms?limit=1e2",
    "/v1/alarms?limit=99999999999999999999999", "/v1/alarms?limit=-0",
    "/v1/alarms?cursor=" + b64("id:99999999999999999999999999"),
    "/v1/alarms?cursor=" + b64("id:9223372036854775808"), "/v1/alarms?cursor=%00",
    "/v1/alarms?cursor=%ff%fe", "/v1/alarms?application=%00", "/v1/alarms?application=a%0A",
    "/v1/alarms?due_from=%00", "/v1/alarms?due_to=" + "9" * 5000, "/v1/alarms?due_from=1e3",
    "/v1/alarms?business_id_prefix=x",
    "/v1/alarms?application=a&business_id_prefix=" + "x" * 129,
    "/v1/alarms?status=%00", "/v1/alarms?status=pending%00",
    "/v1/alarms/%00/x", "/v1/alarms/app/%ff%fe", "/v1/alarms/app/x%00y", "/v1/alarms/%ff/x",
    "/v1/alarms/app/" + "x" * 5000, "/v1/alarms/" + "a" * 5000 + "/x",
    "/v1/alarms/..%2F..%2Fetc/passwd", "/v1/alarms/app/%ED%A0%80",
]  # fmt: skip


@pytest.mark.parametrize("url", HOSTILE_URLS, ids=[f"url{i}" for i in range(len(HOSTILE_URLS))])
@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_hostile_urls_are_4xx(api, url: str, method: str) -> None:
    create(api, business_id="x")
    with unchanged(api):
        response = api.client.open(url, method=method, json={"payload": "p"})
        assert_4xx(response)


@pytest.mark.parametrize(
    "cursor",
    [b64('["\\ud800"]'), b64('["a\\udfff"]'), b64('["\\u0000' + "x" * 128 + '"]'), b64('[""]')],
)
def test_a_forged_key_cursor_is_400(api, cursor: str) -> None:
    """A cursor of the key order holding a lone surrogate (not text) or a key out of its
    rules was a 500 once it reached the database."""
    create(api, business_id="k1")
    query = {"application": "app", "business_id_prefix": "k", "cursor": cursor}
    response = api.client.get("/v1/alarms", query_string=query)
    assert_error(response, 400, "validation_error", "cursor")


def test_cursor_beyond_the_last_id_is_an_empty_page(api) -> None:
    create(api)
    assert list_page(api, cursor=b64("[9223372036854775807]")) == {
        "alarms": [],
        "next_cursor": None,
    }


# --- /openapi.json ---------------------------------------------------------------------------


def _openapi(api) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = api.client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()  # type: ignore[no-any-return]


def test_openapi_is_a_3_1_document_with_valid_schemas(api) -> None:
    from jsonschema import Draft202012Validator

    document = _openapi(api)
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] and document["info"]["version"]
    assert isinstance(document["paths"], dict) and document["paths"]
    for name, schema in document["components"]["schemas"].items():
        assert Draft202012Validator.check_schema(schema) is None, name
    alarm = document["components"]["schemas"]["Alarm"]
    assert set(alarm["required"]) == set(alarm["properties"]) == ALARM_KEYS
    for path_item in document["paths"].values():
        for method, operation in path_item.items():
            if method == "parameters":
                continue
            assert method in {"get", "post", "patch", "delete", "put"}
            assert operation["responses"]
            for status in operation["responses"]:
                assert re.fullmatch(r"[1-5]\d\d", status)


def _served_routes(api) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    routes: dict[str, set[str]] = {}
    for rule in api.client.application.url_map.iter_rules():
        if rule.endpoint.endswith("static") or rule.rule.startswith("/console"):
            continue  # files, and the console's page for people (docs/console.md)
        template = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        methods = {m.lower() for m in rule.methods or ()} - {"head", "options"}
        routes.setdefault(template, set()).update(methods)
    return routes


def test_openapi_documents_every_route_the_app_serves(api) -> None:
    document = _openapi(api)
    served = _served_routes(api)
    assert set(served) == {
        "/v1/alarms",
        "/v1/alarms/batch",
        "/v1/alarms/{application}/{business_id}",
        "/v1/alarms/{application}/{business_id}/events",
        "/v1/alarms/{application}/{business_id}/redrive",
        "/v1/alarms/{application}/{business_id}/count",
        "/v1/alarms/redrive",
        "/v1/alarms/cancel",
        "/v1/applications",
        "/v1/applications/{application}",
        "/v1/applications/{application}/webhook-secret",
        "/v1/applications/{application}/pull",
        "/v1/applications/{application}/ack",
        "/v1/overview",
        "/v1/stats",
        "/v1/whoami",
        "/v1/schedules",
        "/v1/schedules/{application}/{schedule_id}",
        "/v1/schedules/{application}/{schedule_id}/pause",
        "/v1/schedules/{application}/{schedule_id}/resume",
        "/v1/schedules/{application}/{schedule_id}/next",
        *PROBES,
        "/metrics",
        "/openapi.json",
    }
    documented = {
        path: {m for m in item if m != "parameters"} for path, item in document["paths"].items()
    }
    for path, methods in served.items():
        assert path in documented, f"{path} is served but not documented"
        assert methods == documented[path], path
    for path in documented:
        assert path in served, f"{path} is documented but not served"
    item = document["paths"]["/v1/alarms/{application}/{business_id}"]
    assert {p["name"] for p in item["parameters"] if p["in"] == "path"} == {
        "application",
        "business_id",
    }


def test_real_responses_validate_against_the_openapi_schemas(api) -> None:
    check = OpenApiChecker(_openapi(api))
    one = "/v1/alarms/{application}/{business_id}"
    c = api.client

    new = body(latest_ring_at=NOW + 2 * MINUTE)
    check.request("/v1/alarms", "POST", new)
    check.request("/v1/alarms", "POST", body(target_ring_at=DROP, delay_ms=5))
    check.response("/v1/alarms", "POST", c.post("/v1/alarms", json=new))  # 201
    check.response("/v1/alarms", "POST", c.post("/v1/alarms", json=new))  # 200
    check.response("/v1/alarms", "POST", c.post("/v1/alarms", json={}))  # 400
    check.response("/v1/alarms", "POST", c.post("/v1/alarms", json=body(payload="x" * 2000)))  # 413

    batch = {"alarms": [body(business_id="b1"), body(business_id="b1"),
                        body(business_id="late", latest_ring_at=NOW),
                        body(business_id="big", payload="x" * 2000)]}  # fmt: skip
    response = c.post("/v1/alarms/batch", json=batch)
    assert [r["status"] for r in response.get_json()["results"]] == [201, 200, 400, 413]
    check.response("/v1/alarms/batch", "POST", response)
    check.request("/v1/alarms/batch", "POST", {"alarms": [body(business_id="b1")]})
    check.response("/v1/alarms/batch", "POST", c.post("/v1/alarms/batch", json={"alarms": []}))
    check.response(
        "/v1/alarms/batch", "POST", c.post("/v1/alarms/batch", json={"alarms": [{}] * 51})
    )

    check.response("/v1/alarms", "GET", c.get("/v1/alarms?limit=1"))
    check.response("/v1/alarms", "GET", c.get("/v1/alarms?limit=50"))
    check.response("/v1/alarms", "GET", c.get("/v1/alarms?limit=0"))

    check.response(one, "GET", c.get("/v1/alarms/app/order-1"))
    check.response(one, "GET", c.get("/v1/alarms/app/missing"))
    check.response(one, "GET", c.get("/v1/alarms/bad%20app/x"))
    check.request(one, "PATCH", {"payload": "p", "latest_ring_at": None})
    check.response(one, "PATCH", c.patch("/v1/alarms/app/order-1", json={"payload": "p"}))
    check.response(one, "PATCH", c.patch("/v1/alarms/app/order-1", json={}))
    check.response(one, "PATCH", c.patch("/v1/alarms/app/order-1", json={"payload": "x" * 2000}))
    check.response(one, "PATCH", c.patch("/v1/alarms/app/missing", json={"payload": "p"}))
    check.response(one, "DELETE", c.delete("/v1/alarms/app/order-1"))
    check.response(one, "DELETE", c.delete("/v1/alarms/app/missing"))
    check.response(one, "PATCH", c.patch("/v1/alarms/app/order-1", json={"payload": "p"}))  # 409

    rung = create(api, business_id="rung", target_ring_at=NOW)
    ring(api, rung["id"])
    check.response(one, "GET", c.get("/v1/alarms/app/rung"))
    check.response(one, "DELETE", c.delete("/v1/alarms/app/rung"))  # 409 with status

    for probe in PROBES:
        assert {"200", "503"} <= set(check.document["paths"][probe]["get"]["responses"])
        check.response(probe, "GET", c.get(probe))  # 200
    api.publisher.healthy = False
    check.response("/healthz", "GET", c.get("/healthz"))  # 200 degraded


def test_the_probes_503_answers_validate_against_the_openapi_schemas(api) -> None:
    check = OpenApiChecker(_openapi(api))
    unreachable = AlarmStore(open_database("mysql+pymysql://root@127.0.0.1:1/none", pool_size=1))
    stalled = {"clock-ring": api.clock.now_ms() - 3_600_000}
    services = build_services(
        Settings(), unreachable, api.clock, Metrics(), loops=StaticLoops(stalled)
    )
    client = create_app(services).test_client()
    try:
        for probe in PROBES:
            response = client.get(probe)
            assert response.status_code == 503, probe
            check.response(probe, "GET", response)
    finally:
        unreachable.close()


class StaticLoops:
    def __init__(self, beats: dict[str, int | None]) -> None:
        self.beats = beats

    def loop_beats(self) -> dict[str, int | None]:
        return self.beats


@pytest.mark.parametrize("unit", list(UNITS.values())[1:], ids=list(UNITS)[1:])
def test_the_default_limit_takes_a_payload_escaped_six_times_over(store, fake_clock, unit) -> None:
    """At the default 64 KiB, a payload escaped as JSON does (every byte of a control
    character as six) is far over its own size: the body limit allows for it."""
    settings = Settings()
    app = create_app(build_services(settings, store, fake_clock, Metrics()))
    at_limit = payload_of(unit, settings.payload_max_bytes)
    raw = json.dumps(body(payload=at_limit))  # ensure_ascii, as requests' json= does
    assert len(raw) > settings.payload_max_bytes + 16_384
    response = app.test_client().post("/v1/alarms", data=raw, content_type="application/json")
    assert response.status_code == 201, response.get_data(as_text=True)[:200]
    assert response.get_json()["payload"] == at_limit


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("/v1/stats?minutes=5&minutes=abc", "minutes"),
        ("/v1/stats?application=a&application=b", "application"),
        ("/v1/alarms?limit=1&limit=2", "limit"),
        ("/v1/alarms?application=orders&status=dead&status=pending", "status"),
        ("/v1/applications?counts=false&counts=true", "counts"),
        ("/v1/schedules?limit=1&limit=2", "limit"),
    ],
)
def test_a_query_parameter_given_twice_is_a_400_naming_it(api, query: str, name: str) -> None:
    answer = api.client.get(query)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    error = answer.get_json()["error"]
    assert (error["field"], error["message"]) == (
        name, f"the query parameter {name} is given more than once",
    )  # fmt: skip
