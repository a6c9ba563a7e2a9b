"""The nodes of CLOCK_AMQP_URL (one URL, or several of one cluster, comma-separated) as pika
connection parameters, shared by every connection clock opens to RabbitMQ."""

from __future__ import annotations

import pika

from clock_server.errors import ConfigError


def node_urls(url: str) -> list[str]:
    """Each node's URL, in the order given; ConfigError when there is none."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ConfigError("the AMQP url names no node", field="amqp_url")
    return urls


def node_parameters(url: str, connection_name: str, connect_timeout_s: float) -> pika.URLParameters:
    """One attempt per connect, within `connect_timeout_s`, named `connection_name` in the
    broker's management UI."""
    try:
        params = pika.URLParameters(url)
    except ValueError as exc:
        raise ConfigError(f"invalid AMQP url: {exc}", field="amqp_url") from exc
    params.connection_attempts = 1
    params.socket_timeout = params.stack_timeout = connect_timeout_s
    properties = dict(params.client_properties or {})
    params.client_properties = {"connection_name": connection_name, **properties}
    return params
