# clock-server: API and engine in one process, served by waitress.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 clock && mkdir /data && chown clock:clock /data

WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY clock_server ./clock_server
COPY clock_client ./clock_client
COPY alembic ./alembic
RUN pip install . && rm -rf /src

USER clock
WORKDIR /data
# Listen on every interface inside the container; the embedded SQLite file lives in /data.
ENV CLOCK_HOST=0.0.0.0 \
    CLOCK_PORT=8080 \
    CLOCK_DATABASE_URL=sqlite:////data/clock.db
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
ENTRYPOINT ["clock-server"]
CMD ["serve"]
