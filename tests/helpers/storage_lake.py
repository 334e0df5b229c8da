"""Storage-lake helpers shared by the storage tests: versioned S3 buckets, checkpoint history, `cdcflow run` subprocesses."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]


def versioned_lake(endpoint: str) -> tuple[str, dict, object]:
    """(uri, credentials settings, boto3 client) of a fresh versioned bucket."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    bucket = "v" + uuid.uuid4().hex[:12]
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return f"s3://{bucket}/lake", {"s3.endpoint": endpoint, "s3.access-key": "testing",
                                   "s3.secret-access-key": "testing", "s3.region": "us-east-1"}, client


def versions_per_key(client, uri: str) -> Counter:
    bucket = uri[len("s3://"):].split("/", 1)[0]
    counts: Counter = Counter()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", []):
            counts[v["Key"]] += 1
    return counts


def checkpoint_history(client, uri: str) -> list[int]:
    """Every value the root ``metadata`` held, oldest first (versions are listed newest first)."""
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    key = f"{prefix}/metadata"
    versions = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=key):
        versions += [v for v in page.get("Versions", []) if v["Key"] == key]
    return [orjson.loads(client.get_object(Bucket=bucket, Key=key, VersionId=v["VersionId"])["Body"].read())
            ["checkpoint-ts"] for v in reversed(versions)]


def assert_no_overwrite(client, uri: str) -> None:
    """No data or schema object written twice; ``metadata`` (replaced by design) only ever rose."""
    counts = versions_per_key(client, uri)
    written_twice = {k: n for k, n in counts.items() if n > 1 and not k.endswith(("/CDC.index", "/metadata"))}
    assert not written_twice, f"objects written more than once: {sorted(written_twice)[:5]}"
    assert any(k.endswith(".csv") for k in counts)
    history = checkpoint_history(client, uri)
    downs = [(a, b) for a, b in zip(history, history[1:]) if b <= a]
    assert not downs, f"metadata moved backwards (or was rewritten with its value): {downs[:5]} of {len(history)}"


def cdcflow_run(path: str, state: Path, master: str = "local[2]") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cdcflow.cli", "run", path, "--until-idle", "--master", master,
                             "--state-dir", str(state)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (out + err)[-3000:]
    return out + err
