"""The operations around the API, as data: the probes (api/health_routes.py), the console's
overview (api/console), the per-minute statistics (api/stats_routes.py), /metrics and this
document (api/routes.py)."""

from __future__ import annotations

from clock_server.api.answers.errors import Error
from clock_server.api.answers.health import Health, Live, Ready
from clock_server.api.answers.overview import Overview
from clock_server.api.answers.stats import Stats
from clock_server.api.openapi import parameters
from clock_server.api.openapi.operation import Answer, Operation

OPEN: list[dict[str, list[str]]] = []  # no token, also when the server has tokens
EVERY_APPLICATION = Answer("the token is not one of every application ('*' or '*:read')", Error)

OPERATIONS = [
    Operation(
        "get", "/livez", "getLiveness", "health",
        "Liveness: the process and the engine's loops are alive; restart it on 503. Touches "
        "neither the database nor the broker",
        answers={
            200: Answer("alive", Live),
            503: Answer("a loop is stalled (named in `stalled`)", Live),
        },
        security=OPEN,
    ),
    Operation(
        "get", "/readyz", "getReadiness", "health",
        "Readiness: the process can accept and store alarms (the database answers)",
        answers={200: Answer("ready", Ready), 503: Answer("the database is down", Ready)},
        security=OPEN,
    ),
    Operation(
        "get", "/healthz", "getHealth", "health",
        "Each part: database, broker and the channels in use. A broker outage is `degraded` "
        "with 200 (alarms are still taken and kept); 503 only when the database is down",
        answers={
            200: Answer("ok, or degraded (the broker or a channel is down)", Health),
            503: Answer("unavailable: the database is down", Health),
        },
        security=OPEN,
    ),
    Operation(
        "get", "/v1/overview", "getOverview", "console",
        "What the console's overview shows: counts capped at count_cap, alarms due soon, "
        "recent lateness, health (a token of every application)",
        answers={200: Answer("the overview", Overview), 403: EVERY_APPLICATION},
        errors=(401, 503),
    ),
    Operation(
        "get", "/v1/stats", "getStats", "console",
        "Per-minute statistics of the last `minutes`: alarms created, rung and failed, and the "
        "engine's lateness, by application and in total (\"*\"); a token of every "
        "application sees every application, an application's token its own",
        answers={200: Answer("one entry per minute in every series", Stats)},
        errors=(400, 401, 403, 503),
        parameters=tuple(parameters.STATS),
    ),
    Operation(
        "get", "/metrics", "getMetrics", "metrics",
        "Prometheus metrics; a token of every application only with "
        "CLOCK_METRICS_TOKEN_REQUIRED=true",
        answers={
            200: Answer(
                "the text exposition format", {"type": "string"}, media_type="text/plain"
            ),
            403: EVERY_APPLICATION,
        },
        errors=(401,),
        security=[{}, {"bearer": []}],
    ),
    Operation(
        "get", "/openapi.json", "getOpenApiDocument", "document", "This document",
        answers={200: Answer("OpenAPI 3.1", {"type": "object"})},
        security=OPEN,
    ),
]  # fmt: skip
