"""The SDK's own distribution, clock-alarm-client: the wheel built from clock_client/ asks for
requests and the urllib3 it uses beside it (and one package per extra), every package it
imports, ships py.typed, and installed alone in a fresh environment, beside requests only,
imports and names the extra each optional part needs."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import textwrap
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from clock_server import __version__

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "clock-alarm-client"
# What requests needs at run time: a fresh environment is given these and nothing else.
REQUESTS_AND_ITS_NEEDS = ("requests", "urllib3", "idna", "certifi", "charset_normalizer")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel --no-deps ./clock_client` builds, from a copy of the folder so
    that the build leaves nothing in the checkout."""
    work = tmp_path_factory.mktemp("client-wheel")
    source = work / "clock_client"
    shutil.copytree(
        ROOT / "clock_client", source, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [found] = work.glob("*.whl")
    return found


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode())


def test_the_wheel_is_the_sdk_at_the_server_s_version(wheel: Path) -> None:
    """Both distributions are released from one tree, under one tag."""
    found = metadata(wheel)
    assert (found["Name"], found["Version"]) == (DISTRIBUTION, __version__)


def test_the_wheel_asks_for_requests_alone_and_one_package_per_extra(wheel: Path) -> None:
    found = metadata(wheel)
    by_extra: dict[str, set[str]] = {}
    for line in found.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        extra = ""
        for candidate in ("amqp", "async", "webhooks"):
            if requirement.marker is not None and requirement.marker.evaluate({"extra": candidate}):
                extra = candidate
        by_extra.setdefault(extra, set()).add(requirement.name)
    assert by_extra == {
        "": {"requests", "urllib3"},
        "amqp": {"pika"},
        "async": {"httpx"},
        "webhooks": {"standardwebhooks"},
    }
    assert sorted(found.get_all("Provides-Extra") or []) == ["amqp", "async", "webhooks"]


def test_every_package_the_sdk_imports_is_one_it_asks_for(wheel: Path) -> None:
    """Each module outside the standard library that clock_client imports is a requirement
    of its own, or of an extra: none arrives only because another package brings it."""
    asked = {Requirement(line).name for line in metadata(wheel).get_all("Requires-Dist") or []}
    imported: set[str] = set()
    for source in (ROOT / "clock_client" / "src" / "clock_client").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    outside = imported - set(sys.stdlib_module_names) - {"clock_client", "__future__"}
    assert outside == asked


def test_the_wheel_ships_py_typed_and_the_client_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "clock_client/py.typed" in names
    assert "clock_client/__init__.py" in names
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith("-info")}
    assert packages == {"clock_client"}


def test_the_wheel_ships_the_repository_s_mit_license(wheel: Path) -> None:
    found = metadata(wheel)
    assert found["License-Expression"] == "MIT"
    assert found.get_all("License-File") == ["LICENSE"]
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(name).decode() == (ROOT / "LICENSE").read_text()


def test_installed_alone_beside_requests_it_imports(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
               "--no-deps", "--no-index", str(wheel)]  # fmt: skip
    installed = subprocess.run(install, capture_output=True, text=True, timeout=60)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    _lend_requests(python, tmp_path / "lent")
    code = textwrap.dedent(
        f"""
        import importlib.metadata, importlib.resources
        import clock_client
        from clock_client import ClockClient
        assert importlib.metadata.version({DISTRIBUTION!r})
        assert importlib.resources.files("clock_client").joinpath("py.typed").is_file()
        ClockClient("http://127.0.0.1:1").close()
        for name in ("Consumer", "AsyncClockClient", "verify_webhook"):
            try:
                getattr(clock_client, name)
            except ImportError as error:
                print(error)
        """
    )
    result = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=60, env={}
    )
    assert result.returncode == 0, result.stderr
    for extra in ("amqp", "async", "webhooks"):
        assert f"clock-alarm-client[{extra}]" in result.stdout


def _lend_requests(python: Path, folder: Path) -> None:
    """Make requests, and what it needs, importable by `python` from this environment's
    copies (no index is reached): links in `folder`, named by a .pth file."""
    folder.mkdir()
    for name in REQUESTS_AND_ITS_NEEDS:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        (folder / name).symlink_to(spec.submodule_search_locations[0])
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "lent.pth").write_text(f"{folder}\n")
