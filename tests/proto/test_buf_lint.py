"""``buf lint`` passes on proto/ with the rules in buf.yaml."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from cdcflow.pb.generate import repo_root

ROOT = repo_root()


def _buf() -> str | None:
    local = ROOT / ".ci" / ".tools" / "node_modules" / ".bin" / "buf"
    return str(local) if local.exists() else shutil.which("buf")


def test_buf_lint_passes() -> None:
    buf = _buf()
    if buf is None:
        pytest.skip("buf not installed: run `npm install --no-save --prefix .ci/.tools @bufbuild/buf` (.ci/setup does)")
    proc = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_buf_lint_catches_a_violation(tmp_path) -> None:
    """The lint run is real: a file breaking a STANDARD rule fails it."""
    buf = _buf()
    if buf is None:
        pytest.skip("buf not installed")
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    (tmp_path / "proto" / "bad" / "v1").mkdir(parents=True)
    (tmp_path / "proto" / "bad" / "v1" / "bad.proto").write_text(
        'syntax = "proto3";\npackage bad.v1;\nmessage bad_name { string FieldName = 1; }\n'
    )
    proc = subprocess.run([buf, "lint"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "bad_name" in proc.stdout + proc.stderr
