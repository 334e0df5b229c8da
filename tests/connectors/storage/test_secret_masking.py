"""Secrets inside sink URIs never reach output: a ``cdcflow run`` journey on the moto S3 server.

The storage URI carries ``access-key`` and ``secret-access-key`` in its query (TiCDC's form),
a second pipeline's Kafka URI carries ``sasl-password``; the run is a subprocess with JSON
logs at debug level. Neither secret may appear in stdout, stderr or any file of the state
directory, while the summary still names the outputs (with ``***`` in place of the secrets).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cdcflow.connectors.ticdc.events import to_record
from cdcflow.convert.jsonform import dumps_lines
from cdcflow.schemas import SchemaStore
from helpers.storage import input_records

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]

PIPELINE = """\
version: "2.2"
engine:
  error-recovery.max-retries: "1"
  error-recovery.min-delay: 100ms
pipelines:
  - id: to-lake
    connectors:
      - id: src
        type: source
        plugin: builtin:file
        settings:
          path: "{input}"
          format: opencdc/json
      - id: lake
        type: destination
        plugin: builtin:storage
        settings:
          uri: "{lake_uri}"
  - id: to-kafka
    connectors:
      - id: src
        type: source
        plugin: builtin:file
        settings:
          path: "{input}"
          format: opencdc/json
      - id: bus
        type: destination
        plugin: builtin:kafka
        settings:
          uri: "{kafka_uri}"
          delivery-timeout: 3s
"""


def _every_file_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


@pytest.mark.timeout(600)
def test_uri_secrets_never_printed_logged_or_stored(tmp_path, moto_server, kafka_broker):
    import s3fs

    s3_secret = "S3cret" + uuid.uuid4().hex  # moto accepts any credentials
    s3_key = "AKID" + uuid.uuid4().hex[:16].upper()
    sasl_secret = "Sasl" + uuid.uuid4().hex
    bucket = "b" + uuid.uuid4().hex[:12]
    s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto_server},
                      skip_instance_cache=True).mkdir(bucket)
    state = tmp_path / "state"
    state.mkdir()
    store = SchemaStore(str(state / "schemas.sqlite"))
    events, _ = input_records(40, 0)
    records = [to_record(e, str(i).encode(), store) for i, e in enumerate(events)]
    (tmp_path / "in.jsonl").write_bytes(dumps_lines(records))
    lake_uri = (f"s3://{bucket}/lake?protocol=csv&endpoint={moto_server}&region=us-east-1"
                f"&access-key={s3_key}&secret-access-key={s3_secret}")
    # Tansu speaks no SASL: this destination fails, so its error path is covered too
    kafka_uri = (f"kafka://{kafka_broker}/secrets-{uuid.uuid4().hex[:6]}?protocol=canal-json"
                 f"&sasl-mechanism=PLAIN&sasl-user=cdc&sasl-password={sasl_secret}")
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.format(input=tmp_path / "in.jsonl", lake_uri=lake_uri, kafka_uri=kafka_uri))

    proc = subprocess.run([sys.executable, "-m", "cdcflow.cli", "--log-format", "json", "--log-level", "debug",
                           "run", str(path), "--until-idle", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=540, cwd=REPO, env=dict(os.environ))
    out, err = proc.stdout, proc.stderr
    seen = out + err + _every_file_text(state)
    for secret in (s3_secret, sasl_secret, s3_key):
        assert secret not in seen, f"{secret[:6]}... leaked"
    # the run did its work and says where: the lake written, the kafka failure named, secrets masked
    assert f"s3://{bucket}/lake?" in out and "secret-access-key=***" in out and "access-key=***" in out
    assert "sasl-password=***" in out
    assert proc.returncode == 1, err[-3000:]
    assert "to-kafka" in err
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": moto_server},
                           skip_instance_cache=True)
    assert any(p.endswith(".csv") for p in fs.find(f"{bucket}/lake"))
    json_lines = [line for line in err.splitlines() if line.startswith("{")]
    assert json_lines and all(isinstance(json.loads(line), dict) for line in json_lines)
