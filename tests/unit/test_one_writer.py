"""One writer per checkpoint and per query and tables, locally: a second run of a query while the first still runs
fails at once, naming it, also through another checkpoint (another query_suffix) over the same tables."""

import subprocess
import sys
import threading

import pytest

from sensorcep.pipeline import claims
from sensorcep.settings import Settings

HOLDER = """
import sys
from sensorcep.pipeline.claims import claim_checkpoint
from sensorcep.settings import Settings
claim_checkpoint(Settings(base_path=sys.argv[1], query_suffix=sys.argv[2]), "ingest")
print("claimed", flush=True)
sys.stdin.read()  # holds the claim until the test closes its stdin
"""


def _holder(tmp_path, suffix: str = "") -> subprocess.Popen:
    """Another process running ingest (its claims held until its stdin closes)."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), suffix], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_second_writer_of_a_running_querys_checkpoint_fails_naming_the_first(tmp_path):
    holder = _holder(tmp_path)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(claims.ConcurrentWriterError, match=rf"ingest is already running: process {holder.pid} "):
            claims.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    claim = claims.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest")  # the first run ended: free
    claim.release()


def test_a_second_writer_through_another_checkpoint_of_the_same_tables_fails_naming_the_first(tmp_path):
    holder = _holder(tmp_path, suffix="_hourly")  # e.g. the hourly job's run beside the always-on one
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(
            claims.ConcurrentWriterError,
            match=rf"query ingest would write the tables process {holder.pid} .* query ingest_hourly on checkpoint",
        ):
            claims.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest")
        assert not claims._claims, "the refused run holds nothing, not even its own checkpoint"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    claims.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest").release()  # the first run ended: free


def test_another_query_or_other_tables_are_another_writer(tmp_path):
    settings = Settings(base_path=str(tmp_path))
    first = claims.claim_checkpoint(settings, "ingest")
    try:
        claims.claim_checkpoint(settings, "sampling").release()
        claims.claim_checkpoint(settings.replace(query_suffix="_b", schema="other"), "ingest").release()
        with pytest.raises(claims.ConcurrentWriterError, match="already running in this process"):
            claims.claim_checkpoint(settings, "ingest")
        with pytest.raises(claims.ConcurrentWriterError, match="would write the tables"):
            claims.claim_checkpoint(settings.replace(query_suffix="_b"), "ingest")
    finally:
        first.release()


class _Query:
    """A started query as the claims see it: active or not, and how it ended."""

    def __init__(self, failed: bool):
        self.isActive, self.failed = False, failed

    def exception(self):
        return RuntimeError("a Python worker did not start in time") if self.failed else None


def test_a_failed_query_keeps_its_claim_until_its_restart_takes_it_and_a_stopped_one_lets_go(tmp_path):
    settings = Settings(base_path=str(tmp_path))
    failed = claims.claim_checkpoint(settings, "ingest")
    failed.query = _Query(failed=True)  # waits for the task's retry
    claims.claim_checkpoint(settings, "sampling").release()  # another query's start releases what was stopped
    refused = _holder(tmp_path)  # another run, meanwhile
    refused.stdin.close()
    assert refused.stdout.read() == "" and refused.wait(timeout=30) == 1, "another run took a failed query's claim"
    restarted = claims.claim_checkpoint(settings, "ingest")  # the retry: the same claim, never let go
    assert restarted is failed and restarted.query is None
    restarted.query = _Query(failed=False)  # stopped cleanly: the next claim in this process lets it go
    claims.claim_checkpoint(settings, "sampling").release()
    holder = _holder(tmp_path)
    try:
        assert holder.stdout.readline().strip() == "claimed"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_claim_released_by_two_threads_at_once_is_let_go_once_and_neither_fails(tmp_path):
    """The always-on job's loop and a task restarted from another thread both release a stopped query's claim (seen in
    the fault test: the second unlocked a file the first had closed, and the restart never happened)."""
    settings = Settings(base_path=str(tmp_path))
    claim = claims.claim_checkpoint(settings, "alerts")
    start, failed = threading.Barrier(8), []

    def release() -> None:
        start.wait()
        try:
            claim.release()
        except Exception as error:  # noqa: BLE001 - what the test looks for
            failed.append(error)

    threads = [threading.Thread(target=release) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed
    assert claim.released and claim.handle.closed
    claims.claim_checkpoint(settings, "alerts").release()  # free again
