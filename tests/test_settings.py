"""Settings refuse values the service could not honour, naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from clock_server.errors import ConfigError
from clock_server.runtime.build import build
from clock_server.setting_ranges import PAYLOAD_LIMIT_BYTES
from clock_server.settings import Settings


def test_the_defaults_are_valid():
    settings = Settings()
    assert settings.payload_max_bytes == 65_536 and settings.lease_ms == 30_000


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"payload_max_bytes": PAYLOAD_LIMIT_BYTES + 1}, "CLOCK_PAYLOAD_MAX_BYTES"),
        ({"payload_max_bytes": 0}, "CLOCK_PAYLOAD_MAX_BYTES"),
        ({"lease_s": 1.0, "preload_window_s": 1.0}, "CLOCK_LEASE_S"),
        ({"retry_base_s": 2.0, "retry_cap_s": 1.0}, "CLOCK_RETRY_CAP_S"),
        ({"web_nice": 20}, "CLOCK_WEB_NICE"),
        ({"ring_lead_max_ms": -1}, "CLOCK_RING_LEAD_MAX_MS"),
        ({"ring_lead_max_ms": 1_001}, "CLOCK_RING_LEAD_MAX_MS"),
        ({"batch_max_bytes": 0}, "CLOCK_BATCH_MAX_BYTES"),
        ({"queue_type": "stream"}, "CLOCK_QUEUE_TYPE"),
        ({"heartbeat_s": 0}, "CLOCK_HEARTBEAT_S"),
        ({"heartbeat_s": 1.5, "engine_dead_after_s": 2.9}, "CLOCK_ENGINE_DEAD_AFTER_S"),
        ({"lease_s": 2.0, "preload_window_s": 1.0}, "CLOCK_LEASE_S"),
        ({"payload_max_bytes": PAYLOAD_LIMIT_BYTES}, "CLOCK_BATCH_MAX_BYTES"),
        ({"loop_stall_s": 0}, "CLOCK_LOOP_STALL_S"),
        ({"amqp_ca_file": "/etc/clock/ca.pem"}, "CLOCK_AMQP_CA_FILE"),  # no amqps:// node
        ({"log_format": "yaml"}, "CLOCK_LOG_FORMAT"),
        ({"log_format": "JSON"}, "CLOCK_LOG_FORMAT"),
        ({"log_level": "verbose"}, "CLOCK_LOG_LEVEL"),
        ({"trusted_proxy_hops": -1}, "CLOCK_TRUSTED_PROXY_HOPS"),
        ({"trusted_proxy_hops": 11}, "CLOCK_TRUSTED_PROXY_HOPS"),
    ],
)
def test_impossible_values_are_refused_by_name(changes: dict, variable: str):
    with pytest.raises(ConfigError, match=variable):
        Settings(**changes)


def test_the_log_format_is_read_from_its_variable():
    assert Settings().log_format == "text"
    assert Settings.from_env({"CLOCK_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="CLOCK_LOG_FORMAT must be text or json, not 'xml'"):
        Settings.from_env({"CLOCK_LOG_FORMAT": "xml"})


def test_a_loop_may_stall_no_less_than_twice_the_publish_timeout():
    assert Settings().loop_stall_ms == 60_000
    assert Settings(loop_stall_s=5).loop_stall_ms == 40_000  # publish timeout 10 s
    assert Settings(loop_stall_s=5, publish_timeout_s=60).loop_stall_ms == 240_000


def test_the_largest_payload_setting_is_accepted_with_a_batch_limit_that_holds_it():
    settings = Settings(
        payload_max_bytes=PAYLOAD_LIMIT_BYTES,
        batch_max_bytes=32 * 1024 * 1024,
        page_max_bytes=32 * 1024 * 1024,
    )
    assert settings.payload_max_bytes == PAYLOAD_LIMIT_BYTES
    assert settings.single_body_max_bytes == 6 * PAYLOAD_LIMIT_BYTES + 16_384


def test_a_batch_limit_below_one_escaped_payload_names_what_it_must_be():
    with pytest.raises(ConfigError, match=r"at least 409600") as caught:
        Settings(batch_max_bytes=409_599)
    assert caught.value.field == "batch_max_bytes"
    assert Settings(batch_max_bytes=409_600).batch_max_bytes == 409_600


def test_a_page_limit_below_one_escaped_alarm_names_what_it_must_be():
    with pytest.raises(
        ConfigError, match=r"CLOCK_PAGE_MAX_BYTES must be at least 409600"
    ) as caught:
        Settings(page_max_bytes=409_599)
    assert caught.value.field == "page_max_bytes"
    assert Settings(page_max_bytes=409_600).page_max_bytes == 409_600
    assert Settings().page_max_bytes == 4 * 1024 * 1024


def test_settings_read_no_file_and_building_the_app_reads_the_tokens(tmp_path: Path) -> None:
    absent = tmp_path / "absent-tokens"
    database = tmp_path / "clock.db"
    environ = {
        "CLOCK_TOKENS_FILE": str(absent),
        "CLOCK_DATABASE_URL": f"sqlite:///{database}",
        "CLOCK_RUN_ENGINE": "false",
    }
    settings = Settings.from_env(environ)
    assert settings.tokens_file == str(absent)
    with pytest.raises(ConfigError, match="cannot be read") as caught:
        build(settings)
    assert caught.value.field == "tokens_file"
    assert not database.exists()  # refused before anything was touched
    absent.write_text("a-token-of-20-chars-x=orders\n")
    runtime = build(settings)
    try:
        assert runtime.app is not None and database.exists()
    finally:
        runtime.store.close()


def test_the_passwords_of_every_broker_node_are_masked():
    settings = Settings(amqp_url="amqp://u:secret1@a:5672/%2F,amqp://u:secret2@b:5673/%2F")
    shown = str(settings.describe())
    assert "secret1" not in shown and "secret2" not in shown
    assert "amqp://u:***@a:5672/%2F,amqp://u:***@b:5673/%2F" in shown


def test_the_dead_letter_exchange_defaults_to_clock_dead_and_empty_turns_it_off():
    assert Settings.from_env({}).dead_letter_exchange == "clock.dead"
    assert Settings.from_env({"CLOCK_DEAD_LETTER_EXCHANGE": "ops.dead"}).dead_letter_exchange == (
        "ops.dead"
    )
    assert Settings.from_env({"CLOCK_DEAD_LETTER_EXCHANGE": ""}).dead_letter_exchange == ""
    with pytest.raises(ConfigError, match="CLOCK_DEAD_LETTER_EXCHANGE"):
        Settings.from_env({"CLOCK_EXCHANGE": "x", "CLOCK_DEAD_LETTER_EXCHANGE": "x"})


def test_a_ca_file_goes_with_amqps_nodes_and_is_not_read_with_the_settings(tmp_path: Path):
    environ = {
        "CLOCK_AMQP_URL": "amqp://u:p@a:5672/%2F, amqps://u:p@b/%2F",
        "CLOCK_AMQP_CA_FILE": str(tmp_path / "absent.pem"),
    }
    assert Settings.from_env(environ).amqp_ca_file == str(tmp_path / "absent.pem")
