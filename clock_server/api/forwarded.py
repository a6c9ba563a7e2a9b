"""The path a reverse proxy serves clock under (`X-Forwarded-Prefix: /clock`), taken from
the proxy only when the operator says it is trusted (CLOCK_TRUSTED_PROXY_HOPS).

The console needs no header to work under a prefix: its page and scripts use relative
URLs. The prefix matters only where the server writes a path itself (the redirect from
/console to /console/): werkzeug's ProxyFix puts it in SCRIPT_NAME, where
`request.script_root` reads it. Any client may send the header, so without trusted hops it
changes nothing; a trusted one that is not a plain path is refused, never written back into
a Location. The probes, /metrics and /openapi.json write no path, so they answer whatever the
prefix, as they answer whatever the Host.
"""

from __future__ import annotations

import re

from flask import Flask, request
from werkzeug.middleware.proxy_fix import ProxyFix

from clock_server.errors import ValidationError

HEADER = "X-Forwarded-Prefix"
# Segments of unreserved characters and percent escapes: no scheme, host, "//", "..",
# query or fragment, which would turn a redirect into one to elsewhere.
_PREFIX = re.compile(r"(/(?!\.\.?(/|$))[A-Za-z0-9._~%!$&'()*+,;=:@-]+)*/?")
UNPREFIXED = frozenset({"/livez", "/readyz", "/healthz", "/metrics", "/openapi.json"})


def trust_proxies(app: Flask, hops: int) -> None:
    """Honour the X-Forwarded-Prefix of the `hops` proxies in front of `app` (0: none)."""
    if hops <= 0:
        return
    app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
        app.wsgi_app, x_for=0, x_proto=0, x_host=0, x_port=0, x_prefix=hops
    )
    app.before_request(screen_prefix)


def screen_prefix() -> None:
    """Flask before_request hook: a 400 naming the header when the prefix is not a path."""
    if request.path not in UNPREFIXED and not _PREFIX.fullmatch(request.script_root):
        raise ValidationError(
            f"{HEADER} {request.script_root!r} is not a path such as /clock: the proxy in "
            "front (trusted by CLOCK_TRUSTED_PROXY_HOPS) sends one that cannot be served under",
            field=HEADER,
        )


def prefixed(path: str) -> str:
    """`path` (from the server's root) as the client reaches it: under the trusted prefix."""
    return request.script_root + path
