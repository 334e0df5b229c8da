"""The committed generated protobuf code is exactly what ``python -m cdcflow.pb.generate`` writes."""

from __future__ import annotations

from pathlib import Path

from cdcflow.pb.generate import generate, repo_root

PB_DIR = repo_root() / "runtime" / "pb"


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    written = generate(repo_root() / "proto", tmp_path)
    assert written, "protoc produced nothing"
    stale = [
        str(rel) for rel in written
        if not (PB_DIR / rel).exists() or (PB_DIR / rel).read_bytes() != (tmp_path / rel).read_bytes()
    ]
    assert not stale, f"generated code is stale, run `python -m cdcflow.pb.generate`: {stale}"
    fresh = _generated(tmp_path)
    committed = _generated(PB_DIR)
    assert committed == fresh, f"generated files without a .proto: {sorted(map(str, committed - fresh))}"


def _generated(root: Path) -> set[Path]:
    """Generated sources under ``root`` (bytecode caches are the interpreter's, not generated code)."""
    return {p.relative_to(root) for p in root.rglob("*_pb2*.py*") if "__pycache__" not in p.parts}
