"""Getting third-party Python plugins onto Spark executors.

The workers run the driver's Python executable (``spark.pyspark.python``), so
everything installed in that environment — cdcflow and the plugins installed
beside it — is importable there. Plugins found anywhere else (``PYTHONPATH``,
``--target`` directories, user site) may not exist on a worker: each such
distribution is zipped — its top-level packages *and* its ``.dist-info`` so its
``cdcflow`` entry points resolve from the zip — and added with
``SparkContext.addPyFile``. For clusters whose workers lack the environment
altogether, ship a packed venv with ``spark.archives`` (see docs/engine.md).
"""

from __future__ import annotations

import hashlib
import logging
import site
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

log = logging.getLogger("cdcflow.engine.spark.ship")

ENTRY_POINT_GROUP = "cdcflow"


def _environment_dirs() -> list[Path]:
    """Directories the worker's interpreter (the same executable) imports from anyway."""
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - some virtualenv flavours
        pass
    return [Path(d).resolve() for d in dirs if d]


def plugin_distributions() -> list[metadata.Distribution]:
    """Distributions that register ``cdcflow`` entry points from outside this environment."""
    env_dirs = _environment_dirs()
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        if not eps:
            continue
        name = dist.metadata["Name"] or ""
        if name.lower() == "cdcflow" or name in found:
            continue
        location = Path(str(dist.locate_file(""))).resolve()
        if any(location == d for d in env_dirs):
            continue
        found[name] = dist
    return list(found.values())


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip()}
    names: set[str] = set()
    for f in dist.files or ():
        first = f.parts[0]
        if first.endswith((".dist-info", ".egg-info")) or first in ("..", "__pycache__") or first.startswith("."):
            continue
        names.add(first[:-3] if len(f.parts) == 1 and first.endswith(".py") else first)
    return names


def zip_distribution(dist: metadata.Distribution, out_dir: Path) -> Path:
    """Zip ``dist``'s modules and metadata (paths relative to its install directory)."""
    root = Path(str(dist.locate_file(""))).resolve()
    tops = _top_level_names(dist)
    members: list[Path] = []
    for f in dist.files or ():
        parts = f.parts
        if not parts or parts[0] == ".." or "__pycache__" in parts:
            continue
        first = parts[0]
        module = first[:-3] if len(parts) == 1 and first.endswith(".py") else first
        if module in tops or first.endswith(".dist-info"):
            members.append(Path(*parts))
    if not members:
        raise FileNotFoundError(f"distribution {dist.metadata['Name']} at {root} lists no files to ship")
    digest = hashlib.sha256()
    for m in sorted(members):
        p = root / m
        digest.update(str(m).encode())
        if p.is_file():
            digest.update(str(p.stat().st_mtime_ns).encode())
    name = (dist.metadata["Name"] or "plugin").replace("-", "_")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{dist.version}-{digest.hexdigest()[:12]}.zip"
    if not target.exists():
        tmp = target.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for m in sorted(members):
                p = root / m
                if p.is_file():
                    zf.write(p, m.as_posix())
        tmp.replace(target)
    return target


def ship_plugins(spark_context, out_dir: Path) -> list[Path]:
    """Zip and add every plugin distribution the workers may lack; returns the zips."""
    shipped: list[Path] = []
    for dist in plugin_distributions():
        path = zip_distribution(dist, out_dir)
        spark_context.addPyFile(str(path))
        log.info("shipping plugin distribution %s %s to executors (%s)", dist.metadata["Name"], dist.version, path)
        shipped.append(path)
    return shipped


def worker_python() -> str:
    return sys.executable
