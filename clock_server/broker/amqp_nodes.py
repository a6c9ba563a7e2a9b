"""The nodes of CLOCK_AMQP_URL (one URL, or several of one cluster, comma-separated) as pika
connection parameters, shared by every connection clock opens to RabbitMQ."""

from __future__ import annotations

import ssl
import urllib.parse

import pika

from clock_server.errors import ConfigError
from clock_server.tls import (
    ended_by_peer,
    names_another_host,
    refusal_alert,
    refused_certificate,
    why_untrusted,
)


def node_urls(url: str) -> list[str]:
    """Each node's URL, in the order given; ConfigError when there is none."""
    urls = [part.strip() for part in url.split(",") if part.strip()]
    if not urls:
        raise ConfigError("the AMQP url names no node", field="amqp_url")
    return urls


def tls_context(ca_file: str) -> ssl.SSLContext | None:
    """What amqps:// nodes are verified with: the CA certificates of `ca_file` (PEM) alone,
    the host name checked; None, for pika's default (the system's CAs), when it is empty.
    ConfigError when the file cannot be read as CA certificates."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:  # ssl.SSLError too: no certificate in it
        raise ConfigError(
            f"CLOCK_AMQP_CA_FILE={ca_file!r} cannot be read as PEM CA certificates: {exc}",
            field="amqp_ca_file",
        ) from exc


def heartbeat_within(timeout_s: float) -> int:
    """The AMQP heartbeat (whole seconds) to ask for so that a live broker says something
    within `timeout_s`: half of it, 1 s at least (under 2 s, not always within it)."""
    return max(1, int(timeout_s / 2))


def node_parameters(
    url: str,
    connection_name: str,
    connect_timeout_s: float,
    tls: ssl.SSLContext | None = None,
    heartbeat_s: int | None = None,
) -> pika.URLParameters:
    """One attempt per connect, within `connect_timeout_s`, named `connection_name` in the
    broker's management UI; an amqps:// node is verified with `tls` when it is given; the
    heartbeat is `heartbeat_s` unless the url names one (None: what the broker proposes)."""
    try:
        params = pika.URLParameters(url)
    except ValueError as exc:
        raise ConfigError(f"invalid AMQP url: {exc}", field="amqp_url") from exc
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    if heartbeat_s is not None and "heartbeat" not in query:
        params.heartbeat = heartbeat_s
    params.connection_attempts = 1
    params.socket_timeout = params.stack_timeout = connect_timeout_s
    properties = dict(params.client_properties or {})
    params.client_properties = {"connection_name": connection_name, **properties}
    if tls is not None and params.ssl_options is not None:
        if "ssl_options" in query:
            raise ConfigError(
                "an AMQP url with ssl_options of its own names its CA there: leave "
                "CLOCK_AMQP_CA_FILE unset",
                field="amqp_ca_file",
            )
        params.ssl_options = pika.SSLOptions(tls)
    return params


def certificate_refusal(
    node: pika.URLParameters, error: object, opening: bool = True
) -> str | None:
    """What to tell an operator when `error` (a failed connection to `node`; `opening`: before
    it was open) is a refused TLS certificate, naming the node: the node's, not trusted
    here, or the client certificate of the URL's ssl_options, not accepted by the node;
    None for any other failure."""
    if not isinstance(error, BaseException):
        return None
    node_name = f"RabbitMQ at {node.host}:{node.port}"
    failure = refused_certificate(error)
    if failure is not None:
        remedy = (
            "name the node in CLOCK_AMQP_URL by a host its certificate lists"
            if names_another_host(failure)
            else "give the CA certificates that sign it in CLOCK_AMQP_CA_FILE (PEM)"
        )
        return f"{node_name} was refused: {why_untrusted(failure)}; {remedy}"
    alert = refusal_alert(error)
    if alert is not None:
        return (
            f"{node_name} did not accept the client certificate of the URL's ssl_options "
            f"({alert}): it must be signed by a CA of the node's ssl_options.cacertfile"
        )
    # Over TLS 1.3 a node refuses a client certificate after the client's handshake is done,
    # so its alert may be lost to the connection's end, which is then all that is seen.
    if opening and node.ssl_options is not None and ended_by_peer(error):
        return (
            f"{node_name} closed the TLS connection as it was being opened, as a node does "
            "with a client certificate it does not accept (the URL's ssl_options), or "
            "without one when it asks for one"
        )
    return None
