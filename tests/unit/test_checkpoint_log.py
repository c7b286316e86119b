"""Reading a query's checkpoint as Spark writes it: offset log entries (watermark, end offsets) and commits."""

import json

from sensorcep.pipeline import checkpoint_log


def _checkpoint(tmp_path, planned: dict[int, dict], committed: list[int], watermark_ms: int = 0):
    for batch, offsets in planned.items():
        (tmp_path / "offsets").mkdir(parents=True, exist_ok=True)
        meta = {"batchWatermarkMs": watermark_ms + batch, "batchTimestampMs": 0, "conf": {}}
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    for batch in committed:
        (tmp_path / "commits").mkdir(parents=True, exist_ok=True)
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(tmp_path)


def test_the_committed_offsets_are_those_of_the_last_committed_batch_not_the_last_planned(tmp_path):
    checkpoint = _checkpoint(
        tmp_path,
        {0: {"ev": {"0": 10, "1": 5}}, 1: {"ev": {"0": 20, "1": 9}}, 2: {"ev": {"0": 30, "1": 9}}},
        committed=[0, 1],
        watermark_ms=1000,
    )
    assert checkpoint_log.batches(checkpoint, "offsets") == [0, 1, 2]
    assert checkpoint_log.last_committed(checkpoint) == 1
    assert checkpoint_log.committed_offsets(None, checkpoint) == {"ev": {"0": 20, "1": 9}}
    assert checkpoint_log.watermark_ms(None, checkpoint, 2) == 1002


def test_no_checkpoint_or_nothing_committed_has_no_offsets(tmp_path):
    assert checkpoint_log.committed_offsets(None, str(tmp_path / "missing")) is None
    assert checkpoint_log.committed_offsets(None, _checkpoint(tmp_path, {0: {"ev": {"0": 1}}}, [])) is None


def test_ahead_means_past_in_some_partition():
    mine = {"ev": {"0": 20, "1": 9}}
    assert checkpoint_log.is_ahead({"ev": {"0": 21, "1": 9}}, mine)
    assert checkpoint_log.is_ahead({"ev": {"0": 20, "1": 9, "2": 1}}, mine)  # a partition it never read
    assert not checkpoint_log.is_ahead({"ev": {"0": 20, "1": 9}}, mine)
    assert not checkpoint_log.is_ahead({"ev": {"0": 3, "1": 2}}, mine)
    assert checkpoint_log.is_ahead({"ev": {"0": 0}}, None)


def _leftover(tmp_path, name: str) -> None:
    (tmp_path / "offsets").mkdir(parents=True, exist_ok=True)
    (tmp_path / "offsets" / name).write_text("v1\n")


def test_a_run_killed_while_writing_its_first_offsets_is_cleared_so_spark_starts_it_as_new(tmp_path):
    _leftover(tmp_path, ".0.3f2a.tmp")  # the temporary file of an interrupted write
    (tmp_path / "metadata").write_text('{"id":"q"}')
    assert checkpoint_log.clear_unstarted(str(tmp_path), realtime=False) == [str(tmp_path / "offsets")]
    assert not (tmp_path / "offsets").exists()
    assert (tmp_path / "metadata").exists()  # the query keeps its id


def test_an_uncommitted_real_time_batch_is_cleared_but_an_uncommitted_micro_batch_is_rerun(tmp_path):
    micro = _checkpoint(tmp_path / "micro", {0: {"ev": {"0": 10}}}, [])
    assert checkpoint_log.clear_unstarted(micro, realtime=False) == []
    assert checkpoint_log.batches(micro, "offsets") == [0]  # Spark re-runs batch 0 with these offsets
    realtime = _checkpoint(tmp_path / "rt", {0: {"ev": {"0": 10}}}, [])
    _leftover(tmp_path / "rt", ".0.crc")
    assert checkpoint_log.clear_unstarted(realtime, realtime=True) == [f"{realtime}/offsets"]


def test_a_checkpoint_with_a_commit_or_none_at_all_is_left_alone(tmp_path):
    assert checkpoint_log.clear_unstarted(str(tmp_path / "missing"), realtime=True) == []
    done = _checkpoint(tmp_path / "done", {0: {"ev": {"0": 10}}, 1: {"ev": {"0": 20}}}, [0])
    assert checkpoint_log.clear_unstarted(done, realtime=True) == []
    assert checkpoint_log.batches(done, "offsets") == [0, 1]
