"""One writer per checkpoint, locally: a second run of a query while the first still runs fails at once, naming it."""

import subprocess
import sys

import pytest

from sensorcep.pipeline import streaming
from sensorcep.settings import Settings

HOLDER = """
import sys
from sensorcep.pipeline.streaming import claim_checkpoint
from sensorcep.settings import Settings
claim_checkpoint(Settings(base_path=sys.argv[1]), "ingest")
print("claimed", flush=True)
sys.stdin.read()  # holds the claim until the test closes its stdin
"""


def test_a_second_writer_of_a_running_querys_checkpoint_fails_naming_the_first(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(streaming.ConcurrentWriterError, match=rf"ingest is already running: process {holder.pid} "):
            streaming.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    claim = streaming.claim_checkpoint(Settings(base_path=str(tmp_path)), "ingest")  # the first run ended: free
    claim.release()


def test_another_query_or_another_suffix_is_another_checkpoint(tmp_path):
    settings = Settings(base_path=str(tmp_path))
    first = streaming.claim_checkpoint(settings, "ingest")
    try:
        streaming.claim_checkpoint(settings, "sampling").release()
        streaming.claim_checkpoint(settings.replace(query_suffix="_b"), "ingest").release()
        with pytest.raises(streaming.ConcurrentWriterError, match="already running in this process"):
            streaming.claim_checkpoint(settings, "ingest")
    finally:
        first.release()
