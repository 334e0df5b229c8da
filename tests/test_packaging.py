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
