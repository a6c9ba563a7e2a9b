"""deploy/compose.yaml: docker-compose accepts it; every file it mounts exists; the Prometheus
configuration passes `promtool check config` with the files it names read where the Compose
file mounts them; Grafana's provisioning reaches the dashboard and the data source; the servers
start after the migration, never migrate themselves, and reach the database and the broker
with the credentials those were given; Prometheus's token may read /metrics. Nothing is
started: these read the files."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from clock_server.api.tokens import check_exposure, parse_tokens
from clock_server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
RULES = DEPLOY / "prometheus" / "clock-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "clock-dashboard.json"

# Where the images read their configuration by default.
PROMETHEUS_CONFIG_IN_IMAGE = "/etc/prometheus/prometheus.yml"
GRAFANA_DASHBOARD_PROVIDERS = "/etc/grafana/provisioning/dashboards"
GRAFANA_DATASOURCES = "/etc/grafana/provisioning/datasources"
MIGRATE_COMMAND = ["db", "upgrade"]
SERVE_COMMAND = ["serve"]

_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")


def interpolate(value: Any) -> Any:
    """A Compose document as Compose reads it with none of its variables set: `${NAME:-x}`
    and `${NAME-x}` are x, `${NAME}` and `$NAME` are empty, `$$` is `$`."""
    if isinstance(value, dict):
        return {key: interpolate(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item) for item in value]
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: "$" if m[0] == "$$" else (m[2] or ""), value)
    return value


def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    return interpolate(yaml.safe_load(path.read_text()))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Mount:
    source: Path  # on the host
    target: str  # in the container


def mounts(compose: dict[str, Any], service: str, base: Path) -> list[Mount]:
    """What `service` sees of the host: its bind mounts, in the short syntax or the long, and
    the files of its secrets and configs. Relative sources are relative to `base`, the
    Compose file's folder; named volumes are not the host's."""
    spec = compose["services"][service]
    found = []
    for volume in spec.get("volumes", []):
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0]
            if not rest or not source.startswith((".", "/", "~")):
                continue  # an anonymous or a named volume
        elif volume.get("type") == "bind":
            source, target = volume["source"], volume["target"]
        else:
            continue
        found.append(Mount(base / Path(source).expanduser(), target))
    for kind, default_folder in (("secrets", "/run/secrets"), ("configs", "/")):
        for item in spec.get(kind, []):
            name = item if isinstance(item, str) else item["source"]
            target = name if isinstance(item, str) else item.get("target", name)
            file = compose.get(kind, {}).get(name, {}).get("file")
            if file is not None:
                found.append(Mount(base / file, str(PurePosixPath(default_folder, target))))
    return found


def host_path(service_mounts: list[Mount], container_path: str) -> Path | None:
    """Where `container_path` comes from on the host: under the mount with the deepest target
    that holds it. None when no mount holds it."""
    path = PurePosixPath(container_path)
    holding = [m for m in service_mounts if PurePosixPath(m.target) in (path, *path.parents)]
    if not holding:
        return None
    mount = max(holding, key=lambda m: len(PurePosixPath(m.target).parts))
    return mount.source / path.relative_to(mount.target)


def files_under(service_mounts: list[Mount], folder: str) -> set[Path]:
    """The host files a container sees in `folder` and below: those under the mount that holds
    the folder, and those of the mounts inside it."""
    inside = PurePosixPath(folder)
    roots = [host_path(service_mounts, folder)]
    roots += [m.source for m in service_mounts if inside in PurePosixPath(m.target).parents]
    found = set()
    for root in roots:
        if root is not None and root.is_dir():
            found |= {path for path in root.rglob("*") if path.is_file()}
        elif root is not None and root.is_file():
            found.add(root)
    return found


def missing_paths(compose: dict[str, Any], base: Path) -> list[str]:
    """Every host path the Compose file names that does not exist: mount sources, secrets'
    and configs' files, env files, build contexts and their Dockerfiles."""
    missing = []
    for name, spec in compose["services"].items():
        for mount in mounts(compose, name, base):
            if not mount.source.exists():
                missing.append(f"{name}: {mount.source} (at {mount.target})")
        env_files = spec.get("env_file", [])
        for env_file in [env_files] if isinstance(env_files, str) else env_files:
            path = base / (env_file if isinstance(env_file, str) else env_file["path"])
            if not path.is_file():
                missing.append(f"{name}: env_file {path}")
        if "build" in spec:
            build = spec["build"] if isinstance(spec["build"], dict) else {"context": spec["build"]}
            context = base / build.get("context", ".")
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            if not dockerfile.is_file():
                missing.append(f"{name}: build {dockerfile}")
    return missing


def tool(name: str, package: str) -> str:
    """A Debian tool's path; a test that needs it fails, never skips, when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: it comes with Debian's {package} package "
            f"(apt-get install --no-install-recommends {package}); .ci/run installs it"
        )
    return path


def docker_compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("docker-compose", "docker-compose"), "-f", str(path), "config", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def clock_services(compose: dict[str, Any], command: list[str]) -> dict[str, dict[str, Any]]:
    """The services of the repository's image (those built from it) that run `command`."""
    return {
        name: spec
        for name, spec in compose["services"].items()
        if "build" in spec and spec.get("command") == command
    }


def settings_of(spec: dict[str, Any]) -> Settings:
    return Settings.from_env({key: str(value) for key, value in spec["environment"].items()})


def seconds(duration: str) -> float:
    """A Compose duration such as `30s`, `1m30s` or `1500ms` in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert "".join(number + unit for number, unit in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)


# --- the file as a whole -----------------------------------------------------------------------


def test_docker_compose_accepts_the_file() -> None:
    result = docker_compose_config(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_refuses_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        "services:\n  a:\n    image: busybox:1\n"
        "    depends_on:\n      b:\n        condition: service_completed_successfully\n"
    )
    result = docker_compose_config(broken)
    assert result.returncode != 0
    assert "undefined" in result.stdout + result.stderr


def test_every_path_the_compose_file_names_exists() -> None:
    compose = load_compose()
    sources = {m.source.resolve() for name in compose["services"]
               for m in mounts(compose, name, DEPLOY)}  # fmt: skip
    assert {PROMETHEUS_CONFIG, RULES, DASHBOARD} <= sources
    assert missing_paths(compose, DEPLOY) == []


RULES_IN_PROMETHEUS = "/etc/prometheus/rules/clock-alerts.yml"


def test_the_check_finds_a_wrong_path() -> None:
    compose = copy.deepcopy(load_compose())
    prometheus = compose["services"]["prometheus"]
    prometheus["volumes"] = [
        volume.replace("alerts.yml:", "alert.yml:", 1) for volume in prometheus["volumes"]
    ]
    compose["secrets"]["clock-tokens"]["file"] = "./example-secrets/clock-token"
    compose["services"]["clock-migrate"]["build"] = {"context": "..", "dockerfile": "Dockerfil"}
    assert missing_paths(compose, DEPLOY) == [
        f"clock-migrate: build {DEPLOY}/../Dockerfil",
        f"clock-1: {DEPLOY}/example-secrets/clock-token (at /run/secrets/clock-tokens)",
        f"clock-2: {DEPLOY}/example-secrets/clock-token (at /run/secrets/clock-tokens)",
        f"prometheus: {DEPLOY}/prometheus/clock-alert.yml (at {RULES_IN_PROMETHEUS})",
    ]


def test_mounts_reads_every_syntax_and_host_path_follows_them(tmp_path: Path) -> None:
    compose = {
        "services": {
            "s": {
                "volumes": [
                    "data:/var/lib/data",
                    "/cache",
                    "./conf:/etc/app:ro",
                    {"type": "bind", "source": "./one.yml", "target": "/etc/app/one.yml"},
                    {"type": "volume", "source": "logs", "target": "/logs"},
                ],
                "secrets": ["token", {"source": "key", "target": "app.key"}],
                "configs": [{"source": "extra", "target": "/etc/extra.yml"}],
            }
        },
        "secrets": {"token": {"file": "./token"}, "key": {"environment": "KEY"}},
        "configs": {"extra": {"file": "./extra.yml"}},
    }
    found = mounts(compose, "s", tmp_path)
    assert found == [
        Mount(tmp_path / "conf", "/etc/app"),
        Mount(tmp_path / "one.yml", "/etc/app/one.yml"),
        Mount(tmp_path / "token", "/run/secrets/token"),
        Mount(tmp_path / "extra.yml", "/etc/extra.yml"),
    ]
    assert host_path(found, "/etc/app/one.yml") == tmp_path / "one.yml"
    assert host_path(found, "/etc/app/sub/two.yml") == tmp_path / "conf" / "sub" / "two.yml"
    assert host_path(found, "/etc/application.yml") is None
    assert host_path(found, "/var/lib/data/x") is None
    assert missing_paths(compose, tmp_path) == [
        f"s: {tmp_path}/conf (at /etc/app)",
        f"s: {tmp_path}/one.yml (at /etc/app/one.yml)",
        f"s: {tmp_path}/token (at /run/secrets/token)",
        f"s: {tmp_path}/extra.yml (at /etc/extra.yml)",
    ]
    assert files_under(found, "/etc/app") == set()
    for name in ("conf/sub/two.yml", "one.yml", "token", "extra.yml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert missing_paths(compose, tmp_path) == []
    assert files_under(found, "/etc/app") == {tmp_path / "conf/sub/two.yml", tmp_path / "one.yml"}
    assert files_under(found, "/etc/app/sub") == {tmp_path / "conf/sub/two.yml"}
    assert files_under(found, "/etc/other") == set()


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("mysql://u:${P:-example}@db/x", "mysql://u:example@db/x"),
        ("${P-x}/${Q}/$R/$$HOME", "x///$HOME"),
        ("no variables", "no variables"),
    ],
)
def test_interpolate_reads_defaults(written: str, read: str) -> None:
    assert interpolate({"a": [written]}) == {"a": [read]}


def test_the_databases_and_the_broker_are_official_images_pinned() -> None:
    services = load_compose()["services"]
    for name in ("mariadb", "rabbitmq"):
        image, _, tag = services[name]["image"].partition(":")
        assert image == name, "an official image: no owner before its name"
        assert re.match(r"\d+(\.\d+)?(-|$)", tag), f"{name}: {tag!r} pins no major version"
        assert services[name]["healthcheck"]["test"]
    for name, spec in services.items():
        if "image" in spec and "build" not in spec:
            assert spec["image"].rpartition(":")[2] not in ("", "latest"), name


# --- the servers and their migration -----------------------------------------------------------


def test_the_servers_start_only_after_the_migration_and_never_migrate() -> None:
    compose = load_compose()
    servers = clock_services(compose, SERVE_COMMAND)
    (migrate_name, migrate), *more = clock_services(compose, MIGRATE_COMMAND).items()
    assert more == [] and len(servers) >= 2
    assert migrate.get("restart", "no") == "no"
    for name, spec in servers.items():
        assert spec["build"] == migrate["build"] and spec["image"] == migrate["image"], name
        assert settings_of(spec).migrate_on_start is False, name
        assert settings_of(spec).database_url == settings_of(migrate).database_url, name
        depends = spec["depends_on"]
        assert depends[migrate_name]["condition"] == "service_completed_successfully", name
        for service in ("mariadb", "rabbitmq"):
            assert depends[service]["condition"] == "service_healthy", name
            assert compose["services"][service]["healthcheck"]["test"]
        shutdown = settings_of(spec).shutdown_timeout_s
        assert seconds(spec["stop_grace_period"]) > shutdown + 1, name
    assert migrate["depends_on"]["mariadb"]["condition"] == "service_healthy"


def image_commands() -> list[list[str]]:
    """The commands the Compose file gives the repository's image, each once."""
    services = load_compose()["services"].values()
    found = [spec["command"] for spec in services if "build" in spec]
    return [command for i, command in enumerate(found) if command not in found[:i]]


@pytest.mark.process
@pytest.mark.parametrize("command", image_commands(), ids=" ".join)
def test_clock_server_knows_the_commands_the_compose_file_runs(command: list[str]) -> None:
    (entrypoint,) = [line for line in (ROOT / "Dockerfile").read_text().splitlines()
                     if line.startswith("ENTRYPOINT")]  # fmt: skip
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT")) == ["clock-server"]
    assert all("entrypoint" not in spec for spec in load_compose()["services"].values())
    result = subprocess.run(
        [sys.executable, "-m", "clock_server.runtime.cli", *command, "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_servers_reach_the_database_and_broker_with_their_credentials() -> None:
    compose = load_compose()
    mariadb = compose["services"]["mariadb"]["environment"]
    rabbitmq = compose["services"]["rabbitmq"]["environment"]
    for name, spec in clock_services(compose, SERVE_COMMAND).items():
        settings = settings_of(spec)
        database = urlsplit(settings.database_url)
        assert database.scheme == "mysql+pymysql" and database.hostname == "mariadb", name
        assert (database.username, database.password, database.path) == (
            mariadb["MARIADB_USER"], mariadb["MARIADB_PASSWORD"], f"/{mariadb['MARIADB_DATABASE']}"
        ), name  # fmt: skip
        broker = urlsplit(settings.amqp_url)
        assert broker.hostname == "rabbitmq", name
        assert (broker.username, broker.password) == (
            rabbitmq["RABBITMQ_DEFAULT_USER"], rabbitmq["RABBITMQ_DEFAULT_PASS"]
        ), name  # fmt: skip


def test_the_servers_read_the_example_tokens_and_prometheus_may_read_metrics() -> None:
    compose = load_compose()
    prometheus = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (job,) = prometheus["scrape_configs"]
    credentials = job["authorization"]["credentials_file"]
    token_file = host_path(mounts(compose, "prometheus", DEPLOY), credentials)
    assert token_file is not None, f"{credentials} is not mounted in prometheus"
    token = token_file.read_text().strip()
    for name, spec in clock_services(compose, SERVE_COMMAND).items():
        settings = settings_of(spec)
        tokens_file = host_path(mounts(compose, name, DEPLOY), settings.tokens_file)
        assert tokens_file is not None, f"{name}: {settings.tokens_file} is not mounted"
        tokens = parse_tokens(tokens_file.read_text(), "CLOCK_TOKENS_FILE")
        check_exposure(settings.host, tokens, settings.allow_unauthenticated)
        assert settings.metrics_token_required, name
        grant = tokens.lookup(token)
        assert grant is not None and grant.is_admin and grant.read_only, name


# --- Prometheus --------------------------------------------------------------------------------


def rewrite_files(config: Any, where: Any) -> Any:
    """`config` with every file it names (keys ending in `_file` or `_files`, and file service
    discovery's `files`) replaced by `where(path)`."""
    if isinstance(config, list):
        return [rewrite_files(item, where) for item in config]
    if not isinstance(config, dict):
        return config
    rewritten = {}
    for key, value in config.items():
        if key.endswith("_file") and isinstance(value, str):
            rewritten[key] = where(value)
        elif (key.endswith("_files") or key == "files") and isinstance(value, list):
            rewritten[key] = [where(item) for item in value]
        else:
            rewritten[key] = rewrite_files(value, where)
    return rewritten


def test_promtool_accepts_the_prometheus_config_as_mounted(tmp_path: Path) -> None:
    prometheus_mounts = mounts(load_compose(), "prometheus", DEPLOY)
    config_path = host_path(prometheus_mounts, PROMETHEUS_CONFIG_IN_IMAGE)
    assert config_path is not None and config_path.resolve() == PROMETHEUS_CONFIG

    def on_host(path: str) -> str:
        found = host_path(prometheus_mounts, path)
        assert found is not None, f"{path} is not mounted in prometheus"
        return str(found.resolve())

    config = rewrite_files(yaml.safe_load(config_path.read_text()), on_host)
    assert config["rule_files"] == [str(RULES)]
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [tool("promtool", "prometheus"), "check", "config", str(checked)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_scrapes_every_server_under_the_job_the_rules_select() -> None:
    servers = clock_services(load_compose(), SERVE_COMMAND)
    (job,) = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    assert job["job_name"] == "clock"
    assert 'job="clock"' in RULES.read_text()
    targets = {target for group in job["static_configs"] for target in group["targets"]}
    assert targets == {f"{name}:{settings_of(spec).port}" for name, spec in servers.items()}


def test_rewrite_files_maps_every_file_it_names() -> None:
    config = {
        "rule_files": ["/r/a.yml"],
        "scrape_configs": [
            {
                "job_name": "x",
                "authorization": {"credentials_file": "/s/t"},
                "file_sd_configs": [{"files": ["/sd/*.json"]}],
                "static_configs": [{"targets": ["a:1"]}],
            }
        ],
    }
    rewritten = rewrite_files(config, lambda path: "/host" + path)
    assert rewritten["rule_files"] == ["/host/r/a.yml"]
    (job,) = rewritten["scrape_configs"]
    assert job["authorization"]["credentials_file"] == "/host/s/t"
    assert job["file_sd_configs"] == [{"files": ["/host/sd/*.json"]}]
    assert job["static_configs"] == [{"targets": ["a:1"]}]


# --- Grafana -----------------------------------------------------------------------------------


def provisioning(grafana_mounts: list[Mount], folder: str) -> list[dict[str, Any]]:
    """The provisioning files Grafana reads in `folder` (inside the container)."""
    found = host_path(grafana_mounts, folder)
    assert found is not None and found.is_dir(), f"{folder} is not a folder mounted in grafana"
    files = sorted([*found.glob("*.yaml"), *found.glob("*.yml")])
    assert files, f"no provisioning file in {found}"
    return [yaml.safe_load(path.read_text()) for path in files]


def test_grafana_provisions_the_dashboard() -> None:
    compose = load_compose()
    grafana_mounts = mounts(compose, "grafana", DEPLOY)
    loaded = set()
    for document in provisioning(grafana_mounts, GRAFANA_DASHBOARD_PROVIDERS):
        for provider in document["providers"]:
            assert provider["type"] == "file"
            seen = files_under(grafana_mounts, provider["options"]["path"])
            loaded |= {path.resolve() for path in seen if path.suffix == ".json"}
    assert DASHBOARD in loaded
    grafana = compose["services"]["grafana"]["environment"]
    found = host_path(grafana_mounts, grafana["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert found is not None and found.resolve() == DASHBOARD


def test_grafana_provisions_the_prometheus_the_dashboard_asks_for() -> None:
    compose = load_compose()
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    (wanted,) = [v["query"] for v in variables if v["type"] == "datasource"]
    sources = [source for document in provisioning(mounts(compose, "grafana", DEPLOY),
               GRAFANA_DATASOURCES) for source in document["datasources"]]  # fmt: skip
    (default,) = [source for source in sources if source.get("isDefault")]
    assert default["type"] == wanted
    url = urlsplit(default["url"])
    prometheus = compose["services"][url.hostname]
    listening = {int(str(port).rsplit(":", 1)[-1]) for port in prometheus["ports"]}
    assert prometheus["image"].startswith("prom/prometheus:") and url.port in listening
