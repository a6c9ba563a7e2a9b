# clock-server: API and engine in one process, served by waitress.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 clock && mkdir /data && chown clock:clock /data

WORKDIR /src
COPY setup.cfg pyproject.toml README.md LICENSE constraints.txt ./
COPY clock_server ./clock_server
COPY alembic ./alembic
# Every runtime dependency at the exact version of constraints.txt (audit it with pip-audit).
RUN pip install -c constraints.txt . && rm -rf /src

USER clock
WORKDIR /data
# Listen on every interface inside the container; the embedded SQLite file lives in /data.
# Off loopback the server refuses to start without bearer tokens: give them at run time,
#   -e CLOCK_TOKENS='<token>=orders,billing;<admin-token>=*'
# or mount a file (one <token>=<app>,<app> or <token>=* per line) and
#   -e CLOCK_TOKENS_FILE=/run/secrets/clock-tokens
# (make tokens with: python -c 'import secrets; print(secrets.token_urlsafe(32))').
# Only when something in front of clock authenticates: -e CLOCK_ALLOW_UNAUTHENTICATED=true,
# with the names clients reach it by: -e CLOCK_ALLOWED_HOSTS=clock.internal.
ENV CLOCK_HOST=0.0.0.0 \
    CLOCK_PORT=8080 \
    CLOCK_DATABASE_URL=sqlite:////data/clock.db \
    CLOCK_TOKENS= \
    CLOCK_TOKENS_FILE=
EXPOSE 8080
# /livez: the process and its engine's loops, never the database or the broker (a restart
# would bring neither back).
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/livez').status == 200 else 1)"
# Any clock-server command runs in place of serve: `docker run IMAGE db upgrade` migrates the
# database of CLOCK_DATABASE_URL and exits (also db downgrade REV, db current, db history).
ENTRYPOINT ["clock-server"]
CMD ["serve"]
