"""Bearer tokens: parsing the settings, looking tokens up, and what /v1 answers with them.

The API tests run on SQLite and on MariaDB through the `store` fixture (see conftest.py).
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clock_client import ClockClient, Forbidden, Unauthorized
from clock_server.api import create_app
from clock_server.api import tokens as auth
from clock_server.api.tokens import (
    Grant,
    TokenTable,
    check_exposure,
    hashed_form,
    load_tokens,
    parse_tokens,
    weakness,
)
from clock_server.errors import ConfigError
from clock_server.metrics import Metrics
from clock_server.runtime import cli
from clock_server.runtime.build_api import build_services
from clock_server.runtime.serve import log_authentication, serve
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.api_support import MINUTE, NOW, OpenApiChecker, assert_error, body, rows
from tests.support import ServerProcess, serve_wsgi

ORDERS = "orders-token-0123456789"  # orders and billing
OTHER = "other-token-0123456789ab"  # other
ADMIN = "admin-token-0123456789abc="  # every application
TOKENS = f"{ORDERS}=orders,billing; {OTHER}=other ;{ADMIN}=*"
SECRETS = (ORDERS, OTHER, ADMIN, ORDERS.upper(), "wrong-token-0123456789")
ONE = "/v1/alarms/{application}/{business_id}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- parsing -------------------------------------------------------------------------------


def test_inline_tokens_give_each_its_applications() -> None:
    table = parse_tokens(TOKENS, "CLOCK_TOKENS")
    assert table.enabled and len(table) == 3
    assert table.lookup(ORDERS) == Grant("CLOCK_TOKENS entry 1", frozenset({"orders", "billing"}))
    assert table.lookup(OTHER) == Grant("CLOCK_TOKENS entry 2", frozenset({"other"}))
    admin = table.lookup(ADMIN)
    assert admin is not None and admin.is_admin and admin.allows("anything")
    orders = table.lookup(ORDERS)
    assert orders is not None and not orders.is_admin
    assert orders.allows("orders") and orders.allows("billing")
    assert not orders.allows("other") and not orders.allows("Orders") and not orders.allows("*")


@pytest.mark.parametrize(
    "presented",
    ["", " ", ORDERS[:-1], ORDERS + "x", ORDERS.upper(), " " + ORDERS, ADMIN[:-1], "*", "orders"],
)
def test_only_the_exact_token_is_found(presented: str) -> None:
    assert parse_tokens(TOKENS, "CLOCK_TOKENS").lookup(presented) is None


def test_lookup_compares_with_every_token_whichever_matches(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    table = parse_tokens(TOKENS, "CLOCK_TOKENS")
    calls: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    for token in (ORDERS, ADMIN, "unknown-token-0123456789"):
        calls.clear()
        table.lookup(token)
        assert len(calls) == len(table)  # no early exit on the first match
        assert all(len(a) == len(b) == 32 for a, b in calls)  # digests: lengths do not leak


def test_the_table_keeps_digests_not_tokens() -> None:
    table = parse_tokens(TOKENS, "CLOCK_TOKENS")
    for secret in SECRETS:
        assert secret not in repr(table)
        assert secret.encode() not in b"".join(digest for digest, _ in table._entries)


def test_tokens_file_one_per_line_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(
        f"# clock tokens\n\n{ORDERS} = orders , billing\n   # ops\n{ADMIN}=*\r\n{OTHER}=other"
    )
    table = load_tokens("", str(path))
    assert len(table) == 3
    assert table.lookup(ORDERS) == Grant(
        "CLOCK_TOKENS_FILE line 3", frozenset({"orders", "billing"})
    )
    assert table.lookup(ADMIN) == Grant("CLOCK_TOKENS_FILE line 5", None)
    assert table.lookup(OTHER) == Grant("CLOCK_TOKENS_FILE line 6", frozenset({"other"}))


def test_a_hashed_entry_admits_the_token_it_digests_and_holds_nothing_to_present() -> None:
    hashed = hashed_form(ORDERS)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", hashed)
    table = parse_tokens(f"{hashed}=orders,billing:read;{ADMIN}=*", "CLOCK_TOKENS")
    assert table.lookup(ORDERS) == Grant(
        "CLOCK_TOKENS entry 1", frozenset({"orders", "billing"}), read_only=True
    )
    assert table.lookup(hashed) is None  # the setting's text is no token
    assert table.lookup(ADMIN) == Grant("CLOCK_TOKENS entry 2", None)
    upper = parse_tokens(f"sha256:{hashed[7:].upper()}=orders", "CLOCK_TOKENS")
    assert upper.lookup(ORDERS) is not None


def test_a_token_and_its_hashed_form_are_the_same_token() -> None:
    with pytest.raises(ConfigError, match="entry 2: this token is already configured"):
        parse_tokens(f"{ORDERS}=orders;{hashed_form(ORDERS)}=billing", "CLOCK_TOKENS")


@pytest.mark.parametrize(
    "token",
    [
        "a" * 16,  # one character
        "a" * 256,
        "ab" * 8,
        "abcde" * 4,  # fewer than 6 different characters
        "0000000000000001",
        "abcdef" * 3,  # a short pattern repeated
        "abcdefgh" * 2,
        "Passw0rd" * 4,
    ],
)
def test_a_weak_token_is_refused_at_start_naming_the_setting(token: str) -> None:
    with pytest.raises(ConfigError, match="CLOCK_TOKENS entry 2") as caught:
        load_tokens(f"{ORDERS}=orders;{token}=orders", "")
    assert caught.value.field == "tokens"
    assert token not in caught.value.message
    with pytest.raises(ConfigError):
        hashed_form(token)


@pytest.mark.parametrize(
    "token", ["abcdefghi" * 2, "0123456789abcdef", "q3ZpL0x9-Kt7wVbN", "aaaaaaaaaab.cdefg"]
)
def test_tokens_past_the_floor_are_taken(token: str) -> None:
    assert parse_tokens(f"{token}=orders", "CLOCK_TOKENS").lookup(token) is not None


def test_random_tokens_always_pass_the_floor() -> None:
    for _ in range(2000):
        assert weakness(secrets.token_urlsafe(12)) is None
        assert weakness(secrets.token_urlsafe(32)) is None


@pytest.mark.parametrize(
    "entry",
    ["sha256:abc=orders", "sha256:" + "g" * 64 + "=orders", "sha256:" + "a" * 65 + "=orders"],
)
def test_a_malformed_hashed_entry_is_refused(entry: str) -> None:
    with pytest.raises(ConfigError, match="CLOCK_TOKENS entry 1: a hashed token must be"):
        load_tokens(entry, "")


def test_hash_token_prints_the_hashed_form_of_standard_input(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cli.sys, "stdin", io.StringIO(ORDERS + "\n"))
    assert cli.main(["hash-token"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == "sha256:" + hashlib.sha256(ORDERS.encode()).hexdigest()
    assert parse_tokens(f"{printed}=orders", "CLOCK_TOKENS").lookup(ORDERS) is not None
    monkeypatch.setattr(cli.sys, "stdin", io.StringIO("a" * 20))
    assert cli.main(["hash-token"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "6 different characters" in captured.err


def test_no_tokens_means_authentication_off() -> None:
    assert not load_tokens("", "").enabled
    assert TokenTable().lookup("") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders", "expected <token>=<app>"),
        ("=orders", "expected <token>=<app>"),
        ("short-token=orders", "16 to 256 characters"),
        ("x" * 257 + "=orders", "16 to 256 characters"),
        ("has a space-0123456789=orders", "16 to 256 characters"),
        ("semi-colon-in-a-token-0123:x=orders", "16 to 256 characters"),
        ("non-ascii-tøken-0123456789=orders", "16 to 256 characters"),
        ("good-token-0123456789=", "is not an application name"),
        ("good-token-0123456789=orders,", "is not an application name"),
        ("good-token-0123456789=bad app", "is not an application name"),
        ("good-token-0123456789=" + "a" * 65, "is not an application name"),
        ("good-token-0123456789=*,orders", "'*' must stand alone"),
        ("good-token-0123456789=orders;good-token-0123456789=*", "already configured"),
        (";", "holds no token"),
        (" ; ;", "holds no token"),
    ],
)
def test_bad_inline_tokens_are_config_errors_naming_the_setting(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_tokens(text, "")
    assert caught.value.field == "tokens"
    assert caught.value.message.startswith("CLOCK_TOKENS")
    assert message in caught.value.message
    for secret in ("good-token-0123456789", "has a space-0123456789", "short-token"):
        assert secret not in caught.value.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "holds no token"),
        (b"# only a comment\n\n", "holds no token"),
        (b"good-token-0123456789=orders\nbroken line\n", "line 2"),
        (b"good-token-0123456789;other=orders\n", "16 to 256 characters"),
        (b"\xff\xfe not utf-8", "cannot be read"),
    ],
)
def test_bad_tokens_file_is_a_config_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_tokens("", str(path))
    assert caught.value.field == "tokens_file"
    assert caught.value.message.startswith("CLOCK_TOKENS_FILE")
    assert message in caught.value.message
    assert "good-token" not in caught.value.message


def test_missing_tokens_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"CLOCK_TOKENS_FILE=.*cannot be read") as caught:
        load_tokens("", str(tmp_path / "absent"))
    assert caught.value.field == "tokens_file"


def test_both_token_settings_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{ADMIN}=*\n")
    with pytest.raises(ConfigError, match="not both"):
        Settings.from_env({"CLOCK_TOKENS": f"{ORDERS}=orders", "CLOCK_TOKENS_FILE": str(path)})


def test_settings_from_env_keep_tokens_and_never_show_them() -> None:
    settings = Settings.from_env({"CLOCK_TOKENS": TOKENS, "CLOCK_ALLOW_UNAUTHENTICATED": "yes"})
    assert settings.allow_unauthenticated is True
    table = load_tokens(settings.tokens, settings.tokens_file)
    assert len(table) == 3
    assert table.lookup(OTHER) is not None
    shown = repr(settings) + str(settings.describe())
    assert "'tokens': '<set>'" in shown
    for secret in SECRETS:
        assert secret not in shown


# --- where the server may listen without tokens ----------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_without_tokens_is_allowed(host: str) -> None:
    check_exposure(host, TokenTable(), allow_unauthenticated=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "10.0.0.5", "clock.example.com"])
def test_other_hosts_without_tokens_refuse_to_start(host: str) -> None:
    with pytest.raises(ConfigError, match="without authentication") as caught:
        check_exposure(host, TokenTable(), allow_unauthenticated=False)
    assert caught.value.field == "host"
    assert "CLOCK_ALLOW_UNAUTHENTICATED" in caught.value.message
    check_exposure(host, TokenTable(), allow_unauthenticated=True)
    check_exposure(host, parse_tokens(TOKENS, "CLOCK_TOKENS"), allow_unauthenticated=False)


def test_serve_refuses_a_public_host_without_tokens_before_anything_starts() -> None:
    settings = Settings(host="0.0.0.0", database_url="sqlite:////nonexistent/dir/clock.db")
    with pytest.raises(ConfigError, match=re.escape("CLOCK_HOST='0.0.0.0'")):
        serve(settings)


def test_cli_exits_2_with_the_message(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    for name in ("CLOCK_TOKENS", "CLOCK_TOKENS_FILE", "CLOCK_ALLOW_UNAUTHENTICATED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOCK_HOST", "0.0.0.0")
    monkeypatch.setenv("CLOCK_DATABASE_URL", "sqlite:////nonexistent/dir/clock.db")
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and "CLOCK_HOST='0.0.0.0'" in err
    monkeypatch.setenv("CLOCK_TOKENS", "short=orders")
    assert cli.main(["serve"]) == 2
    assert "CLOCK_TOKENS entry 1" in capsys.readouterr().err


def test_start_warns_loudly_when_authentication_is_off(caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="clock_server.runtime.serve"):
        log_authentication(Settings(), TokenTable())
        log_authentication(Settings(tokens=TOKENS), load_tokens(TOKENS, ""))
    off, on = caplog.records
    assert off.levelno == logging.WARNING and "AUTHENTICATION IS OFF" in off.getMessage()
    assert on.levelno == logging.INFO and "3 bearer tokens" in on.getMessage()
    assert not any(secret in caplog.text for secret in SECRETS)


# --- the API with tokens -------------------------------------------------------------------


class AuthApi:
    def __init__(self, store: AlarmStore, clock: SettableClock) -> None:
        settings = Settings(payload_max_bytes=1024, batch_max_items=50, tokens=TOKENS)
        services = build_services(
            settings,
            store,
            clock,
            Metrics(),
            publisher=InMemoryPublisher(),
            tokens=load_tokens(settings.tokens, settings.tokens_file),
        )
        self.app = create_app(services)
        self.client = self.app.test_client()
        self.store = store
        self.clock = clock

    def open(self, method: str, url: str, token: str | None = None, **kwargs: Any) -> Any:
        headers = bearer(token) if token is not None else {}
        return self.client.open(url, method=method, headers=headers, **kwargs)

    def create(self, application: str, business_id: str = "b1") -> dict[str, Any]:
        data = body(application=application, business_id=business_id)
        response = self.open("POST", "/v1/alarms", ADMIN, json=data)
        assert response.status_code == 201, response.get_data(as_text=True)
        return response.get_json()  # type: ignore[no-any-return]


@pytest.fixture
def auth_api(store: AlarmStore, fake_clock: SettableClock) -> AuthApi:
    return AuthApi(store, fake_clock)


# Every /v1 route, with a body where it takes one, aimed at application "other".
V1_REQUESTS = [
    ("POST", "/v1/alarms", body(application="other")),
    ("POST", "/v1/alarms/batch", {"alarms": [body(application="other")]}),
    ("GET", "/v1/alarms", None),
    ("GET", "/v1/alarms?application=other", None),
    ("GET", "/v1/alarms/other/b1", None),
    ("PATCH", "/v1/alarms/other/b1", {"payload": "changed"}),
    ("DELETE", "/v1/alarms/other/b1", None),
    ("GET", "/v1/alarms/other/missing", None),
    ("GET", "/v1/nope", None),
]


@pytest.mark.parametrize(("method", "url", "data"), V1_REQUESTS)
@pytest.mark.parametrize(
    ("header", "error"),
    [
        (None, None),
        ("", None),
        (f"Basic {ORDERS}", "invalid_token"),
        ("Bearer", "invalid_token"),
        ("Bearer ", "invalid_token"),
        (ORDERS, "invalid_token"),
        (f"Token {ADMIN}", "invalid_token"),
        ("Bearer wrong-token-0123456789", "invalid_token"),
        (f"Bearer {ADMIN[:-1]}", "invalid_token"),
        (f"Bearer {ADMIN} {ADMIN}", "invalid_token"),
        (f"Bearer {ORDERS.upper()}", "invalid_token"),
    ],
)
def test_v1_without_a_valid_token_is_401(
    auth_api: AuthApi, method: str, url: str, data: Any, header: str | None, error: str | None
) -> None:
    auth_api.create("other")
    before = rows(auth_api)
    headers = {} if header is None else {"Authorization": header}
    response = auth_api.client.open(url, method=method, headers=headers, json=data)
    assert_error(response, 401, "unauthorized", None)
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ") and 'realm="clock"' in challenge
    assert ('error="invalid_token"' in challenge) == (error is not None)
    assert rows(auth_api) == before


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_scheme_is_case_insensitive(auth_api: AuthApi, scheme: str) -> None:
    response = auth_api.client.get("/v1/alarms", headers={"Authorization": f"{scheme}  {ADMIN} "})
    assert response.status_code == 200


@pytest.mark.parametrize("url", ["/livez", "/readyz", "/healthz", "/metrics", "/openapi.json"])
def test_open_endpoints_need_no_token(auth_api: AuthApi, url: str) -> None:
    assert auth_api.client.get(url).status_code == 200
    assert auth_api.client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 200


@pytest.mark.parametrize(("method", "url", "data"), V1_REQUESTS[:-2])
def test_an_application_the_token_does_not_cover_is_403(
    auth_api: AuthApi, method: str, url: str, data: Any
) -> None:
    auth_api.create("other")
    before = rows(auth_api)
    response = auth_api.open(method, url, ORDERS, json=data)
    if url.endswith("batch"):
        assert response.status_code == 200
        [result] = response.get_json()["results"]
        assert result["status"] == 403
        assert result["error"]["code"] == "forbidden"
        assert result["error"]["field"] == "application"
    else:
        assert_error(response, 403, "forbidden", "application")
    assert rows(auth_api) == before


def test_forbidden_does_not_tell_whether_the_alarm_exists(auth_api: AuthApi) -> None:
    auth_api.create("other", "exists")
    for business_id in ("exists", "missing"):
        for method in ("GET", "PATCH", "DELETE"):
            response = auth_api.open(
                method, f"/v1/alarms/other/{business_id}", ORDERS, json={"payload": "x"}
            )
            assert_error(response, 403, "forbidden")


def test_listing_needs_an_application_of_the_token_unless_admin(auth_api: AuthApi) -> None:
    for application in ("orders", "billing", "other"):
        auth_api.create(application)
    error = assert_error(auth_api.open("GET", "/v1/alarms", ORDERS), 403, "forbidden")
    assert "application=" in error["message"]
    page = auth_api.open("GET", "/v1/alarms?application=billing&status=pending", ORDERS)
    assert [a["application"] for a in page.get_json()["alarms"]] == ["billing"]
    page = auth_api.open("GET", "/v1/alarms?application=other", OTHER)
    assert [a["application"] for a in page.get_json()["alarms"]] == ["other"]
    page = auth_api.open("GET", "/v1/alarms", ADMIN)
    assert sorted(a["application"] for a in page.get_json()["alarms"]) == [
        "billing",
        "orders",
        "other",
    ]
    # malformed queries are still 400 for everyone
    assert_error(auth_api.open("GET", "/v1/alarms?limit=0", ORDERS), 400, "validation_error")


def test_a_token_works_on_its_own_applications(auth_api: AuthApi) -> None:
    c = auth_api
    created = c.open("POST", "/v1/alarms", ORDERS, json=body(application="orders"))
    assert created.status_code == 201
    assert c.open("POST", "/v1/alarms", ORDERS, json=body(application="orders")).status_code == 200
    assert c.open("GET", "/v1/alarms/orders/order-1", ORDERS).get_json() == created.get_json()
    patched = c.open("PATCH", "/v1/alarms/orders/order-1", ORDERS, json={"delay_ms": MINUTE})
    assert patched.status_code == 200 and patched.get_json()["target_ring_at"] == NOW + MINUTE
    cancelled = c.open("DELETE", "/v1/alarms/orders/order-1", ORDERS)
    assert cancelled.get_json()["status"] == "cancelled"
    # but the same key under another application is not its business
    assert c.open("GET", "/v1/alarms/other/order-1", ORDERS).status_code == 403


def test_batch_items_of_other_applications_get_their_own_403(auth_api: AuthApi) -> None:
    items = [
        body(application="orders", business_id="a"),
        body(application="other", business_id="b"),
        body(application="billing", business_id="c", latest_ring_at=0),  # 400 before 403
        body(application="nope", business_id="d", latest_ring_at=0),  # 400 before 403
        body(application="billing", business_id="e"),
        body(application="other", business_id="f", payload="x" * 2000),  # 413 before 403
    ]
    response = auth_api.open("POST", "/v1/alarms/batch", ORDERS, json={"alarms": items})
    assert response.status_code == 200
    results = response.get_json()["results"]
    assert [r["status"] for r in results] == [201, 403, 400, 400, 201, 413]
    assert results[1]["error"]["code"] == "forbidden"
    assert "'other'" in results[1]["error"]["message"]
    stored = {(a["application"], a["business_id"]) for a in rows(auth_api)}
    assert stored == {("orders", "a"), ("billing", "e")}
    check = OpenApiChecker(auth_api.client.get("/openapi.json").get_json())
    check.response("/v1/alarms/batch", "POST", response)


def test_a_batch_names_each_alarm_creator_and_refuses_each_foreign_item(
    auth_api: AuthApi,
) -> None:
    """The token is checked once per application of a batch: every item of an application
    it does not cover still gets its 403, and each created alarm's history names its creator."""
    applications = ("orders", "other", "orders", "other", "billing")
    items = [body(application=app, business_id=f"k{i}") for i, app in enumerate(applications)]
    response = auth_api.open("POST", "/v1/alarms/batch", ORDERS, json={"alarms": items})
    assert [r["status"] for r in response.get_json()["results"]] == [201, 403, 201, 403, 201]
    admin_items = [body(application="other", business_id="k9")]
    response = auth_api.open("POST", "/v1/alarms/batch", ADMIN, json={"alarms": admin_items})
    assert [r["status"] for r in response.get_json()["results"]] == [201]

    def creator(application: str, business_id: str) -> str:
        url = f"/v1/alarms/{application}/{business_id}/events"
        events = auth_api.open("GET", url, ADMIN).get_json()["events"]
        assert events[0]["kind"] == "created"
        return str(events[0]["actor"])

    created = (("orders", "k0"), ("orders", "k2"), ("billing", "k4"), ("other", "k9"))
    assert [creator(*key) for key in created] == ["orders", "orders", "billing", "admin"]


def test_admin_token_sees_and_changes_every_application(auth_api: AuthApi) -> None:
    for application in ("orders", "other", "zzz"):
        response = auth_api.open("POST", "/v1/alarms", ADMIN, json=body(application=application))
        assert response.status_code == 201
        assert auth_api.open("GET", f"/v1/alarms/{application}/order-1", ADMIN).status_code == 200
        response = auth_api.open(
            "PATCH", f"/v1/alarms/{application}/order-1", ADMIN, json={"payload": "p"}
        )
        assert response.status_code == 200
        assert (
            auth_api.open("DELETE", f"/v1/alarms/{application}/order-1", ADMIN).status_code == 200
        )
    batch = {"alarms": [body(application=a, business_id="x") for a in ("a", "b", "c")]}
    results = auth_api.open("POST", "/v1/alarms/batch", ADMIN, json=batch).get_json()["results"]
    assert [r["status"] for r in results] == [201, 201, 201]
    assert len(auth_api.open("GET", "/v1/alarms", ADMIN).get_json()["alarms"]) == 6


def test_401_and_403_answers_conform_to_the_document(auth_api: AuthApi) -> None:
    document = auth_api.client.get("/openapi.json").get_json()
    assert document["components"]["securitySchemes"]["bearer"] == {
        **document["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    assert document["security"] == [{"bearer": []}]
    for probe in ("/livez", "/readyz", "/healthz"):
        assert document["paths"][probe]["get"]["security"] == []
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters" or not template.startswith("/v1/"):
                continue
            assert "401" in operation["responses"], (method, template)
            assert "403" in operation["responses"]  # a token's, or a foreign Origin's
    check = OpenApiChecker(document)
    auth_api.create("other")
    for method, url, data in V1_REQUESTS[:-2]:
        template = ONE if url.count("/") == 4 else url.split("?")[0]
        check.response(template, method, auth_api.open(method, url, None, json=data))
        check.response(template, method, auth_api.open(method, url, "wrong-token-01234", json=data))
        check.response(template, method, auth_api.open(method, url, OTHER, json=data))
        if template != "/v1/alarms/batch":
            check.response(template, method, auth_api.open(method, url, ORDERS, json=data))


def test_tokens_never_reach_the_logs(auth_api: AuthApi, caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.DEBUG):
        auth_api.create("other")
        for method, url, data in V1_REQUESTS:
            for token in SECRETS:
                auth_api.open(method, url, token, json=data)
            auth_api.client.open(
                url, method=method, json=data, headers={"Authorization": f"Basic {ORDERS}"}
            )
        log_authentication(Settings(tokens=TOKENS), load_tokens(TOKENS, ""))
        with pytest.raises(ConfigError):
            load_tokens(f"{ORDERS}=bad app", "")
    assert caplog.records  # something was logged, e.g. the 401s
    for record in caplog.records:
        text = record.getMessage() + repr(record.args) + repr(record.__dict__)
        for secret in SECRETS:
            assert secret not in text, record


# --- the SDK, end to end -------------------------------------------------------------------


@pytest.fixture
def auth_server(auth_api: AuthApi) -> Iterator[str]:
    yield from serve_wsgi(auth_api.app)


def test_client_sends_its_token(auth_server: str) -> None:
    target = NOW + 60 * MINUTE
    with ClockClient(auth_server, token=ORDERS, retries=0) as orders:
        alarm = orders.create("orders", "o-1", "p", target_ring_at=target)
        assert orders.get("orders", "o-1") == alarm
        assert [a.business_id for a in orders.list("orders")] == ["o-1"]
        assert orders.update("orders", "o-1", payload="q").payload == "q"
        assert orders.cancel("orders", "o-1").status == "cancelled"
        assert orders.health()["status"] == "ok"


def test_client_maps_401_and_403(auth_server: str) -> None:
    target = NOW + 60 * MINUTE
    for token in (None, "wrong-token-0123456789"):
        with ClockClient(auth_server, token=token, retries=0) as client:
            with pytest.raises(Unauthorized) as caught:
                client.create("orders", "o-1", "p", target_ring_at=target)
            assert (caught.value.status_code, caught.value.code) == (401, "unauthorized")
            with pytest.raises(Unauthorized):
                client.get("orders", "o-1")
            assert client.health()["status"] == "ok"  # open
    with ClockClient(auth_server, token=ORDERS, retries=0) as orders:
        with pytest.raises(Forbidden) as denied:
            orders.create("other", "o-1", "p", target_ring_at=target)
        assert (denied.value.status_code, denied.value.code) == (403, "forbidden")
        assert denied.value.field == "application"
        for call in (
            lambda: orders.get("other", "o-1"),
            lambda: orders.cancel("other", "o-1"),
            lambda: orders.update("other", "o-1", payload="x"),
            lambda: orders.list_page(),
            lambda: orders.list_page(application="other"),
        ):
            with pytest.raises(Forbidden):
                call()
        results = orders.batch_create(
            [
                {"application": "orders", "business_id": "b", "payload": "p", "delay": 60},
                {"application": "other", "business_id": "b", "payload": "p", "delay": 60},
            ]
        )
        assert [r.status for r in results] == [201, 403]
        assert results[0].ok and not results[1].ok
        assert isinstance(results[1].error, Forbidden)


@pytest.mark.process
def test_server_process_reads_a_tokens_file(tmp_path: Path) -> None:
    """The whole path: CLOCK_TOKENS_FILE -> settings -> waitress -> SDK; the log has no token."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# test tokens\n{ORDERS}=orders,billing\n{ADMIN}=*\n")
    env = {
        "CLOCK_DATABASE_URL": f"sqlite:///{tmp_path / 'clock.db'}",
        "CLOCK_RUN_ENGINE": "false",
        "CLOCK_TOKENS_FILE": str(tokens),
        "CLOCK_TOKENS": "",
    }
    server = ServerProcess(env, tmp_path / "server.log").start()
    try:
        with ClockClient(server.base_url, token=ORDERS, retries=0) as orders:
            orders.create("orders", "x", "p", delay=3600)
            with pytest.raises(Forbidden):
                orders.get("billing2", "x")
        with ClockClient(server.base_url, token=ADMIN, retries=0) as admin:
            assert [a.business_id for a in admin.list()] == ["x"]
        with (
            ClockClient(server.base_url, token=OTHER, retries=0) as other,
            pytest.raises(Unauthorized),
        ):
            other.get("orders", "x")
        assert server.terminate() == 0
    finally:
        server.ensure_stopped()
    log = (tmp_path / "server.log").read_text()
    assert "authentication on: 2 bearer tokens" in log
    assert "AUTHENTICATION IS OFF" not in log
    for secret in SECRETS:
        assert secret not in log


# --- every route with every kind of grant ----------------------------------------------------

ORDERS_READ = "orders-reader-token-0123456"  # orders, reads only
OPS_READ = "operator-reader-token-01234"  # every application, reads only
GRANTS = {
    "admin": ADMIN,
    "admin_read": OPS_READ,
    "app": ORDERS,
    "app_read": ORDERS_READ,
    "other_app": OTHER,
}
HOOK = "https://93.184.215.14/hooks/clock-7f3a?token=s3cr3t-in-the-query"

# (method, path, body, who may: "admin" for admin tokens only, "app" for a token of the
# application too, "any" for every valid token; and whether it only reads).
ROUTES: list[tuple[str, str, Any, str, bool]] = [
    ("POST", "/v1/alarms", body(application="orders", business_id="n"), "app", False),
    ("POST", "/v1/alarms/batch", {"alarms": [body(application="orders")]}, "app", False),
    ("GET", "/v1/alarms/orders/b1", None, "app", True),
    ("PATCH", "/v1/alarms/orders/b1", {"payload": "changed"}, "app", False),
    ("DELETE", "/v1/alarms/orders/b2", None, "app", False),
    ("POST", "/v1/alarms/orders/b3/count", {}, "app", False),
    ("GET", "/v1/alarms/orders/b1/events", None, "app", True),
    ("GET", "/v1/alarms?application=orders", None, "app", True),
    ("GET", "/v1/alarms", None, "admin", True),
    ("GET", "/v1/whoami", None, "any", True),
    ("GET", "/v1/applications", None, "admin", True),
    ("GET", "/v1/applications/orders", None, "admin", True),
    ("PUT", "/v1/applications/fresh", {}, "admin", False),
    ("PATCH", "/v1/applications/orders", {"max_pending": 50}, "admin", False),
    ("GET", "/v1/applications/orders/webhook-secret", None, "secrets", True),
    ("POST", "/v1/applications/orders/webhook-secret", {}, "admin", False),
    ("POST", "/v1/alarms/orders/b1/redrive", {}, "app", False),
    ("POST", "/v1/alarms/redrive", {}, "admin", False),
    ("POST", "/v1/alarms/cancel", {"application": "nothing"}, "admin", False),
    ("GET", "/v1/overview", None, "admin", True),
    ("GET", "/v1/stats?application=orders", None, "app", True),
    ("GET", "/v1/stats", None, "any", True),
    ("POST", "/v1/applications/orders/pull", {}, "app", False),
    ("POST", "/v1/applications/orders/ack", {"ids": ["1"]}, "app", False),
    ("PUT", "/v1/schedules/orders/s1", {"cron": "0 * * * *", "payload": "p"}, "app", False),
    ("GET", "/v1/schedules/orders/s1", None, "app", True),
    ("PATCH", "/v1/schedules/orders/s1", {"payload": "q"}, "app", False),
    ("DELETE", "/v1/schedules/orders/s1", None, "app", False),
    ("POST", "/v1/schedules/orders/s1/pause", None, "app", False),
    ("POST", "/v1/schedules/orders/s1/resume", None, "app", False),
    ("GET", "/v1/schedules/orders/s1/next", None, "app", True),
    ("GET", "/v1/schedules?application=orders", None, "app", True),
    ("GET", "/v1/schedules", None, "admin", True),
]


def _allowed(who: str, reads: bool, grant: str) -> bool:
    if grant.endswith("_read") and not reads:
        return False
    if who == "any":
        return True
    if who == "secrets":
        return grant == "admin"
    if who == "admin":
        return grant in ("admin", "admin_read")
    return grant in ("admin", "admin_read", "app", "app_read")


@pytest.fixture
def matrix_api(store: AlarmStore, fake_clock: SettableClock) -> AuthApi:
    tokens = f"{TOKENS}; {ORDERS_READ}=orders:read; {OPS_READ}=*:read"
    settings = Settings(payload_max_bytes=1024, tokens=tokens, webhook_allow_private=True)
    api = AuthApi.__new__(AuthApi)
    services = build_services(
        settings,
        store,
        fake_clock,
        Metrics(),
        publisher=InMemoryPublisher(),
        tokens=load_tokens(settings.tokens, settings.tokens_file),
    )
    api.app = create_app(services)
    api.client = api.app.test_client()
    api.store, api.clock = store, fake_clock
    return api


def test_the_routes_listed_are_every_v1_route(matrix_api: AuthApi) -> None:
    served = {
        (method, rule.rule)
        for rule in matrix_api.app.url_map.iter_rules()
        if rule.rule.startswith("/v1")
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    listed = {(method, matrix_api.app.url_map.bind("x").match(path.split("?")[0], method)[0])
              for method, path, *_ in ROUTES}  # fmt: skip
    endpoints = {
        (method, rule.endpoint)
        for rule in matrix_api.app.url_map.iter_rules()
        for method in rule.methods or ()
        if (method, rule.rule) in served
    }
    assert listed == endpoints


@pytest.mark.parametrize("grant", sorted(GRANTS))
@pytest.mark.parametrize(("method", "path", "data", "who", "reads"), ROUTES)
def test_every_route_with_every_grant(
    matrix_api: AuthApi, method: str, path: str, data: Any, who: str, reads: bool, grant: str
) -> None:
    """Each grant gets past the token checks exactly where it may (any answer but 401 and
    403), and a read-only one never sees a signing secret or a webhook URL's path or query."""
    api = matrix_api
    put = {"channel": "webhook", "webhook_url": HOOK}
    assert api.open("PUT", "/v1/applications/orders", ADMIN, json=put).status_code == 201
    for business_id in ("b1", "b2"):
        api.create("orders", business_id)
    counted = {**body(application="orders", business_id="b3"), "ring_after_count": 2}
    assert api.open("POST", "/v1/alarms", ADMIN, json=counted).status_code == 201
    secret = api.open("GET", "/v1/applications/orders/webhook-secret", ADMIN).get_json()
    assert secret["webhook_secret"].startswith("whsec_")
    response = api.open(method, path, GRANTS[grant], json=data)
    text = response.get_data(as_text=True)
    status, error = response.status_code, response.get_json().get("error")
    if path.endswith("batch") and status == 200:  # each item gets its own answer
        [result] = response.get_json()["results"]
        status, error = result["status"], result.get("error")
    if _allowed(who, reads, grant):
        assert status not in (401, 403), text
    else:
        assert status == 403, text
        assert error["code"] == "forbidden"
    assert secret["webhook_secret"] not in text or grant == "admin"
    if grant.endswith("_read"):
        assert "s3cr3t" not in text and "/hooks/" not in text


def test_a_read_only_token_sees_a_webhook_url_without_its_path_and_query(
    matrix_api: AuthApi,
) -> None:
    api = matrix_api
    put = {"channel": "webhook", "webhook_url": HOOK}
    assert api.open("PUT", "/v1/applications/orders", ADMIN, json=put).status_code == 201
    reader = api.open("GET", "/v1/applications/orders", OPS_READ).get_json()
    assert reader["webhook_url"] == "https://93.184.215.14/***"
    assert [a["webhook_url"] for a in api.open("GET", "/v1/applications", OPS_READ).get_json()[
        "applications"]] == ["https://93.184.215.14/***"]  # fmt: skip
    assert api.open("GET", "/v1/applications/orders", ADMIN).get_json()["webhook_url"] == HOOK
    refused = api.open("GET", "/v1/applications/orders/webhook-secret", OPS_READ)
    assert_error(refused, 403, "forbidden")
    assert "only read" in refused.get_json()["error"]["message"]
