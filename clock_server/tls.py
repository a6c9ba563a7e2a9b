"""TLS certificates refused, found behind a driver's error and told in words, for the
database's and the broker's connections alike: the peer's, that this side did not trust, and
this side's own, that the peer did not accept."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

# Where drivers keep the error they wrap: SQLAlchemy's `orig`, PyMySQL's
# `original_exception`, pika's `exception` (one phase of a connection) and `exceptions`
# (every attempt of one).
_WRAPPED = ("orig", "original_exception", "exception")
_WRAPPED_MANY = ("exceptions",)
# OpenSSL's verify codes for a certificate that does not name the host or address connected
# to (X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH).
_NAME_MISMATCH = (62, 64)
# The alerts, as OpenSSL names them, of a peer that did not accept this side's certificate.
_OWN_CERTIFICATE_REFUSED = (
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
)


def refused_certificate(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The failed verification of the peer's certificate behind `error`, or None."""
    for inner in _inner_errors(error):
        if isinstance(inner, ssl.SSLCertVerificationError):
            return inner
    return None


def refusal_alert(error: BaseException) -> str | None:
    """The alert with which the peer refused this side's certificate behind `error` (an
    SSLError's reason, or its name in an error's text, where a driver kept only that, as pika
    does when the connection was lost), or None."""
    for inner in _inner_errors(error):
        said = f"{getattr(inner, 'reason', None)} {inner}"
        for alert in _OWN_CERTIFICATE_REFUSED:
            if alert in said:
                return alert
    return None


def ended_by_peer(error: BaseException) -> bool:
    """Whether the peer ended the TLS connection without a word behind `error` (MariaDB does
    so with a client certificate it does not accept): an SSLEOFError, or a reset when what
    this side had sent was still unread, or their names in an error's text (pika's)."""
    ends = (ssl.SSLEOFError, ConnectionResetError)
    return any(
        isinstance(inner, ends) or any(end.__name__ in str(inner) for end in ends)
        for inner in _inner_errors(error)
    )


def names_another_host(failure: ssl.SSLCertVerificationError) -> bool:
    """Whether the certificate was trusted but names another host or address than the one
    connected to."""
    return failure.verify_code in _NAME_MISMATCH


def why_untrusted(failure: ssl.SSLCertVerificationError) -> str:
    """Why the certificate was not trusted, as the end of a sentence ("its certificate ...")."""
    reason = failure.verify_message or failure.reason or str(failure)
    if names_another_host(failure):
        return f"its TLS certificate does not name the host connected to ({reason})"
    return f"its TLS certificate is not trusted ({reason})"


def _inner_errors(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    waiting: list[BaseException] = [error]
    while waiting:
        current = waiting.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, *current.args]
        linked += [getattr(current, name, None) for name in _WRAPPED]
        for name in _WRAPPED_MANY:
            linked += list(getattr(current, name, None) or ())
        waiting += [each for each in linked if isinstance(each, BaseException)]
