"""Acceptance items that need parts not runnable when this suite was written (kept visible, not faked)."""

import pytest


@pytest.mark.skip(reason="needs `cdcflow run --until-idle` (Spark engine, helper H2): `cdcflow run "
                         "examples/quickstart.yaml --until-idle` did not finish in 5 min when tested; restart "
                         "resumption is covered in-process by test_restart_at_every_position_continues_exactly "
                         "and test_restart_and_second_writer_continue_numbering_without_overwrite")
def test_sigkill_of_cdcflow_run_mid_write_resumes_without_loss_or_overwrite():
    raise AssertionError("not written")


@pytest.mark.skip(reason="needs builtin:kafka (helper K) and the engine; not ready when this suite was written")
def test_kafka_canal_json_to_storage_advances_checkpoint():
    raise AssertionError("not written")
