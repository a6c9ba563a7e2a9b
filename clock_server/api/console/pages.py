"""The console's pages and scripts, served as static files under strict security headers.

The pages hold no data and need no token: their scripts call the JSON API with the token
the operator typed, kept in the tab's sessionStorage. The console sets no cookie, so a
request another site makes the browser send carries no credential: actions are safe from
cross-site request forgery by construction. The Content-Security-Policy allows only this
server's own scripts and styles (no inline script), connections to this server, and no
framing or form submission anywhere.
"""

from __future__ import annotations

from flask import Blueprint, Response, redirect
from werkzeug.wrappers import Response as Redirect

from clock_server.api.forwarded import prefixed

console = Blueprint("console", __name__, static_folder="static", static_url_path="/console/static")

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",  # a new version's scripts are fetched after an upgrade
}


@console.get("/console")
def to_page() -> Redirect:
    """The page's own URL ends in "/", which its relative URLs are read against. The redirect
    names the path alone (no host), under the prefix of a trusted proxy."""
    return redirect(prefixed("/console/"))


@console.get("/console/")
def page() -> Response:
    """The one page: its script shows the overview, applications, search or an alarm by the
    URL's fragment, which never reaches the server. It reaches its scripts, styles and the
    API by relative URLs, so it works wherever a proxy serves it."""
    return console.send_static_file("console.html")


@console.after_request
def secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response
