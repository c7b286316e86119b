"""Every benchmark at least starts: a layout change that breaks one's imports fails here, not months later. And every
one shares the harness (benchmarks/harness.py) instead of importing another, and records what it printed with it."""

import ast
import importlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

FOLDER = Path(__file__).parents[2] / "benchmarks"
#: the benchmark scripts: every module of the folder but the harness they share
BENCHMARKS = sorted(p for p in FOLDER.glob("*.py") if p.stem != "harness")


def test_the_benchmarks_are_found():
    assert {b.stem for b in BENCHMARKS} >= {
        "alert_latency",
        "cost_model",
        "ingest",
        "sampling",
        "soak",
        "state_tuning",
        "stateful_rules",
    }


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_each_benchmark_imports_and_explains_its_options(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: "), done.stdout[:200]


def _imported_modules(tree: ast.Module) -> set[str]:
    """The top-level names of every module a file imports (absolute imports, wherever they are in the file)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("script", [*BENCHMARKS, FOLDER / "harness.py"], ids=lambda p: p.stem)
def test_no_script_imports_another_only_the_harness(script):
    """What two scripts need lives in the harness; no script imports a sibling, none reaches one through sys.path."""
    tree = ast.parse(script.read_text())
    assert not _imported_modules(tree) & {b.stem for b in BENCHMARKS}
    assert not [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys"
    ]


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_each_script_records_its_results_with_the_harness(script):
    """Each script ends by calling the harness's record() under its own name: benchmarks/results/<script>.json|md."""
    tree = ast.parse(script.read_text())
    from_harness = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "harness"
        for alias in node.names
    }
    assert "record" in from_harness
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "record"
    ]
    assert [_name_of(call.args[0]) for call in calls] == [script.stem]


def _name_of(node: ast.expr) -> str:
    """A results name as the script writes it: a literal, or an f-string led by a literal (``f"soak{suffix}"``)."""
    if isinstance(node, ast.JoinedStr):
        return ast.literal_eval(node.values[0])
    return ast.literal_eval(node)


@pytest.fixture
def harness(monkeypatch):
    """benchmarks/harness.py, imported as the scripts import it: with benchmarks/ on sys.path."""
    monkeypatch.syspath_prepend(str(FOLDER))
    return importlib.import_module("harness")


def test_record_writes_the_figures_the_command_the_date_and_the_machine(harness, tmp_path, monkeypatch):
    """record() writes <script>.json and <script>.md into $SENSORCEP_BENCH_RESULTS: the figures, the command line, the
    date, the machine's cores and each figure's ratio to the baseline of its group and unit."""
    monkeypatch.setenv(harness.RESULTS_ENV, str(tmp_path))
    monkeypatch.setattr(sys, "argv", [str(FOLDER / "ingest.py"), "--events", "1000", "--batch", "250000"])
    figures = {
        "events": 1000,
        "raw consume (events/s)": 300.0,
        "Spark noop (events/s)": 200.0,
        "ingest (events/s)": 100.0,
        "ingest (s)": 10.0,  # another unit: no ratio
        "full batches: Spark noop (events/s)": 250.0,
        "full batches: ingest (events/s)": 125.0,
        "full batches: floor parse -> append (foreachBatch) (events/s)": 200.0,
        "nothing measured (p50 ms)": float("nan"),
        "outputs identical": True,
    }
    table = [{"query": "ingest", "batch": 0, "batch ms": 1_500}, {"query": "ingest", "batch": 1, "batch ms": 900}]
    json_path, md_path = harness.record("demo", figures, table, baseline="Spark noop")

    assert (json_path, md_path) == (tmp_path / "demo.json", tmp_path / "demo.md")
    result = json.loads(json_path.read_text())
    assert result.keys() == {"script", "command", "date", "machine", "figures", "baseline", "ratios", "table"}
    assert result["script"] == "demo" and result["baseline"] == "Spark noop"
    assert result["machine"]["cores"] == os.cpu_count()
    assert result["command"].endswith("python benchmarks/ingest.py --events 1000 --batch 250000")
    assert result["date"].endswith("+00:00")
    assert result["figures"] == {**figures, "nothing measured (p50 ms)": None}  # NaN is no JSON: null
    assert result["ratios"] == pytest.approx(
        {
            "raw consume (events/s)": 1.5,
            "ingest (events/s)": 0.5,
            "full batches: ingest (events/s)": 0.5,
            "full batches: floor parse -> append (foreachBatch) (events/s)": 0.8,
        }
    )
    assert result["table"] == table

    markdown = md_path.read_text()
    assert f"`{result['command']}` on {result['date']}, {os.cpu_count()} cores" in markdown
    assert "| figure | value | / Spark noop |" in markdown
    assert "| ingest (events/s) | 100 | 0.5x |" in markdown
    assert "| outputs identical | yes |  |" in markdown
    assert "| query | batch | batch ms |" in markdown and "| ingest | 0 | 1,500 |" in markdown


def test_record_takes_a_dataframe_and_a_folder_and_no_baseline(harness, tmp_path):
    """A pandas table and numpy numbers become plain JSON; without a baseline there are no ratios."""
    table = pd.DataFrame({"preset": ["rocksdb", "hdfs"], "commit_p95_ms": [12.5, math.nan]})
    json_path, md_path = harness.record(
        "tuning", {"rocksdb (commit p95 ms)": table["commit_p95_ms"].iloc[0]}, table, folder=tmp_path
    )
    result = json.loads(json_path.read_text())
    assert result["figures"] == {"rocksdb (commit p95 ms)": 12.5}
    assert result["baseline"] is None and result["ratios"] == {}
    assert result["table"] == [{"preset": "rocksdb", "commit_p95_ms": 12.5}, {"preset": "hdfs", "commit_p95_ms": None}]
    assert "| figure | value |\n|---|---:|\n| rocksdb (commit p95 ms) | 12.5 |" in md_path.read_text()


def _benchmark(stem: str):
    """A benchmark script, imported as a module of its own (in ``sys.modules`` while in use: a dataclass looks its
    module up there)."""
    spec = importlib.util.spec_from_file_location(f"{stem}_benchmark", FOLDER / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture
def ingest_benchmark(harness):
    yield from _benchmark("ingest")


def test_ingest_steps_attribute_each_spark_job_to_its_batch_and_step(ingest_benchmark, tmp_path):
    """--steps' second table: Spark's event log, with the batch and step each job was started in (local properties);
    a job of no step counts for the ranking, and jobs of other queries (no batch property) do not count."""
    bench = ingest_benchmark

    def job(job_id, start_ms, end_ms, **properties):
        return [
            {"Event": "SparkListenerJobStart", "Job ID": job_id, "Submission Time": start_ms, "Properties": properties},
            {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": end_ms},
        ]

    batch = {bench.BATCH_PROPERTY: "0"}
    events = [
        *job(1, 1_000, 3_000, **batch, **{bench.STEP_PROPERTY: "read+parse+cache"}),
        *job(2, 3_100, 3_400, **batch, **{bench.STEP_PROPERTY: "append bronze_events"}),
        *job(3, 3_500, 3_750, **batch, **{bench.STEP_PROPERTY: "append bronze_events"}),
        *job(4, 3_800, 4_300, **batch),  # no step: the ranking
        *job(5, 0, 900),  # the noop query's job: no batch
        *job(6, 5_000, 5_500, **{bench.BATCH_PROPERTY: "1", bench.STEP_PROPERTY: "append quarantine_events"}),
        {"Event": "SparkListenerStageCompleted"},
    ]
    (tmp_path / "local-1.inprogress").write_text("\n".join(json.dumps(e) for e in events))

    spent = bench.job_seconds(tmp_path)
    assert spent.keys() == {0, 1}
    assert spent[0] == pytest.approx({"read+parse+cache": 2.0, "append bronze_events": 0.55, "ranking+other": 0.5})
    assert spent[1] == pytest.approx({"append quarantine_events": 0.5})


def test_full_batch_rate_leaves_out_the_first_batch_and_the_short_last_one(ingest_benchmark):
    """Both queries' steady rate: records from each batch's offsets over its duration, full batches after the first."""
    bench = ingest_benchmark

    def batch(start: int, end: int, ms: int) -> dict:
        offsets = lambda n: {"t": {"0": n // 2, "1": n // 2}}  # noqa: E731
        return {
            "batchDuration": ms,
            "sources": [{"startOffset": offsets(start) if start else None, "endOffset": offsets(end)}],
        }

    batches = [batch(0, 100, 9_000), batch(100, 200, 1_000), batch(200, 300, 3_000), batch(300, 310, 10)]
    assert bench.full_batch_rate(batches, 100) == pytest.approx(200 / 4.0)
    assert bench.full_batch_rate(batches[:1], 100) is None


def test_a_first_batch_that_starts_at_none_is_counted_from_the_earliest_offsets(ingest_benchmark):
    """A query's first progress may name its start offsets ``None`` (a Python repr, not JSON)."""
    bench = ingest_benchmark
    progress = {"sources": [{"startOffset": "None", "endOffset": "{'t': {'0': 5, '1': 7}}"}]}
    assert bench.records_of(progress) == 12


@pytest.fixture
def cost_model(harness):
    yield from _benchmark("cost_model")


def test_devices_per_round_is_the_expected_distinct_devices(cost_model):
    """Few events a round touch about as many devices; many touch nearly the whole fleet, never more."""
    per_round = cost_model.devices_per_round
    assert per_round(0, 10, 1_000) == 0
    assert per_round(1, 10, 1_000) == pytest.approx(10, rel=0.01)
    assert per_round(200, 10, 1_000) == pytest.approx(1_000 * (1 - math.exp(-2)))
    assert 999 < per_round(2_000, 10, 1_000) <= 1_000
    assert per_round(100, 10, 0) == 0


def test_the_model_fitted_to_three_windows_gives_back_the_costs_they_were_made_of(cost_model):
    """Three always-on windows priced by known costs (per event, per round, per device reporting): a trickle, a busy
    window and a high rate at a long trigger. The fit recovers the costs, and predicts another rate and trigger as
    those costs say; a price that noise would make negative is 0, the others fitted without it."""
    Model = cost_model.Model
    truth = Model(per_event=200e-6, per_round=10.0, per_device=2e-3, devices=1_000)
    windows = [(20, 10, truth.cores(20, 10)), (200, 10, truth.cores(200, 10)), (4_000, 60, truth.cores(4_000, 60))]
    fitted = Model.fit(1_000, windows)
    assert fitted.per_event == pytest.approx(200e-6)
    assert fitted.per_round == pytest.approx(10.0)
    assert fitted.per_device == pytest.approx(2e-3)
    # 2,000 events/s at 60 s: 0.4 cores of events, and every device in every round: (10 + 2) / 60 = 0.2
    assert fitted.cores(2_000, 60) == pytest.approx(0.6, rel=1e-6)
    # a busy window no dearer than its extra events: no per-device cost, never a negative one
    flat = Model.fit(1_000, [(20, 10, 1.0), (200, 10, 1.0 + 180 * 200e-6), (4_000, 60, 1.0 / 6 + 4_000 * 200e-6)])
    assert flat.per_device == 0 and min(flat.per_event, flat.per_round) > 0


def test_a_minutes_batches_are_those_that_ended_in_it_when_asked(harness):
    """A soak's minute counts a batch longer than the minute once, in the minute it ends (counted by its start, a
    query whose batches straddle each minute's start showed none in any minute)."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    def report(start: str, ms: int) -> SimpleNamespace:
        return SimpleNamespace(json=json.dumps({"timestamp": start, "batchDuration": ms}))

    query = SimpleNamespace(
        recentProgress=[report("2026-11-29T10:00:50.000Z", 40_000), report("2026-11-29T10:01:05.000Z", 1_000)]
    )
    minute = datetime(2026, 11, 29, 10, 1, tzinfo=timezone.utc)
    assert [p["batchDuration"] for p in harness.progress(query, minute)] == [1_000]
    assert [p["batchDuration"] for p in harness.progress(query, minute, ended=True)] == [40_000, 1_000]


@pytest.fixture
def soak(harness):
    yield from _benchmark("soak")


def test_a_delta_reader_has_read_the_versions_before_its_offset(soak):
    """A query reading a Delta table has read the rows of the versions before the one its last offset names, whatever
    input rows it counted (the notifier's filter skips most versions' files), and not its heartbeat's offsets."""
    from types import SimpleNamespace

    readers = object.__new__(soak.DeltaReaders)
    readers.tables = {"notifier": "alert_events", "sampling": "bronze_events"}
    progress = {
        "sources": [
            {"description": "DeltaSource[file:/x/alert_events]", "numInputRows": 0,
             "endOffset": {"sourceVersion": 1, "reservoirVersion": 3, "index": -1}},
            {"description": "RateStreamV2[rowsPerSecond=1]", "numInputRows": 10, "endOffset": 34},
        ]
    }  # fmt: skip
    query = SimpleNamespace(name="notifier", lastProgress=SimpleNamespace(json=json.dumps(progress)))
    snapshot = {"alert_events": {0: 0, 1: 10, 2: 5, 3: 7}, "bronze_events": {0: 0, 1: 4}}
    assert readers.read(query, snapshot) == 15
    assert readers.ends(snapshot) == {"notifier": 22, "sampling": 4}
    assert "notifier" in readers and "alerts" not in readers


def test_a_query_may_fall_behind_by_two_of_its_own_triggers(soak):
    """The verdict lets a query's median lag grow by a quarter and by two of its own trigger intervals: a table-only
    query at a minute's trigger is up to a minute behind between batches, and a batch takes up to one more; at ten
    seconds, the same growth is falling behind."""
    from types import SimpleNamespace

    rows = [{"query": "sampling", "minute": m, "state_rows": 1, "lag_s": 5.0 if m <= 4 else 50.0} for m in range(1, 7)]
    args = SimpleNamespace(minutes=6, trigger="10 seconds")
    assert soak.verdict(rows, [], 0.0, args, {"sampling": 60_000})["sampling: kept up"]
    assert not soak.verdict(rows, [], 0.0, args, {"sampling": 10_000})["sampling: kept up"]


def test_a_reader_of_bursts_keeps_up_while_its_median_lag_does_not_grow(soak):
    """A reader of the alerts topic sees its writers' batches in bursts: the group rules' lag at each minute's end in
    the first 4,000 events/s soak (0074) had a mean of 5.7 s, then 18.9 s, and ended 0.5 s behind; its median, 4.9 s
    then 21.1 s, grew by less than 1.25 x 4.9 + 20. One caught-up sample (0 s) does not make the next half's typical
    lag a growth, as a lowest-sample rule would. A lag that climbs every minute is falling behind (median 25 s, then
    65 s)."""
    from types import SimpleNamespace

    args = SimpleNamespace(minutes=10, trigger="10 seconds")
    bursts = [9.0, 94.2, 1.0, 0.8, 12.2, 8.8, 33.1, 31.0, 11.2, 0.5]  # minutes 1-10; minutes 1-2 are warm-up
    rows = [{"query": "group_rules", "minute": m, "state_rows": 1, "lag_s": lag} for m, lag in enumerate(bursts, 1)]
    figures = soak.verdict(rows, [], 0.0, args, {"group_rules": 10_000})
    assert figures["group_rules: mean lag, minutes 7-10 (s)"] > 3 * figures["group_rules: mean lag, minutes 3-6 (s)"]
    assert figures["group_rules: kept up"]
    caught_once = [33.2, 21.4, 21.2, 0.0, 20.3, 28.0, 40.3, 21.4]  # the stateful rules, second 4,000 events/s soak
    lucky = [{**r, "lag_s": lag} for r, lag in zip(rows[2:], caught_once, strict=True)]
    assert soak.verdict(rows[:2] + lucky, [], 0.0, args, {"group_rules": 10_000})["group_rules: kept up"]
    climbing = [{**r, "lag_s": 10.0 * r["minute"] - 20} for r in rows]  # 10, 20, ... 80 s in minutes 3-10
    assert not soak.verdict(climbing, [], 0.0, args, {"group_rules": 10_000})["group_rules: kept up"]


def test_a_rate_is_held_when_each_query_catches_up_within_two_triggers_of_its_sources(soak):
    """Issue 43's measure: a query downstream of another is judged from when its sources caught up (two of its own
    triggers: its next batch, and that batch); a query that fell behind, or one that never caught up, is not held."""
    figures = {"ingest: kept up": True, "stateful_rules: kept up": True, "live JVM heap flat": True}
    upstream = {"stateful_rules": ["ingest"], "alert_lifecycle": ["stateful_rules"], "sampling": ["ingest"]}
    intervals = {"ingest": 10_000, "stateful_rules": 10_000, "alert_lifecycle": 10_000, "sampling": 60_000}
    caught_up = {"ingest": 15.0, "stateful_rules": 34.0, "alert_lifecycle": 50.0, "sampling": 100.0}
    found = soak.held(figures, caught_up, upstream, "10 seconds", intervals)
    assert found["held (issue 43's measure)"]  # sampling, 85 s after ingest, runs every minute: two of them allowed
    assert found["drain beyond its sources: stateful_rules (s)"] == 19.0
    assert found["drain beyond its sources: alert_lifecycle (s)"] == 16.0
    late = soak.held(figures, {**caught_up, "sampling": 140.0}, upstream, "10 seconds", intervals)
    assert not late["held (issue 43's measure)"]  # 125 s: more than two minutes

    slow = soak.held(figures, {**caught_up, "stateful_rules": 36.0}, upstream, "10 seconds", intervals)
    assert not slow["held (issue 43's measure)"]  # 21 s after ingest: more than two 10-second triggers
    behind = soak.held({**figures, "stateful_rules: kept up": False}, caught_up, upstream, "10 seconds", intervals)
    assert not behind["held (issue 43's measure)"]
    never = soak.held({**figures, "drain: alert_lifecycle (s)": None}, caught_up, upstream, "10 seconds", intervals)
    assert not never["held (issue 43's measure)"]


def test_the_drain_judges_a_query_only_once_the_queries_writing_its_source_have_caught_up(soak):
    """A reader of the alerts topic that has read the topic's end while the stateful rules still write to it has not
    caught up: its drain starts counting once they have."""
    from types import SimpleNamespace

    def query(name: str, done: int):
        progress = {"sources": [{"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": done}}}]}
        return SimpleNamespace(name=name, lastProgress=SimpleNamespace(json=json.dumps(progress)), isActive=True)

    class NoDeltaReaders:
        def __contains__(self, name):
            return False

    def drained(rules_done: int) -> dict[str, float]:
        ends = {"stateful_rules": 10, "alert_lifecycle": 5}  # the lifecycle has read what the topic holds now
        queries = [query("stateful_rules", rules_done), query("alert_lifecycle", 5)]
        return soak.drain(
            queries, lambda name, _: ends[name], "10 seconds", NoDeltaReaders(), time.monotonic(), timeout_s=2.0,
            upstream={"alert_lifecycle": ["stateful_rules"]},
        )[1]  # fmt: skip

    assert drained(rules_done=4) == {}  # the rules still write its source: the lifecycle has not caught up
    assert set(drained(rules_done=10)) == {"stateful_rules", "alert_lifecycle"}


#: a parent that ignores SIGCHLD (as PySpark's worker daemon does) or waits for its child; the child burns CPU, then
#: both wait for the test: "counted" once the child has burned, "gone" once it has exited and been reaped
FORKING_PARENT = """
import os, signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ready, release = os.pipe(), os.pipe()
pid = os.fork()
if pid == 0:
    started = time.process_time()
    while time.process_time() - started < 0.3:
        pass
    os.write(ready[1], b"x")
    os.read(release[0], 1)
    os._exit(0)
os.read(ready[0], 1)
print("counted", flush=True)
sys.stdin.readline()
os.write(release[1], b"x")
if sys.argv[1] == "ignore":
    while True:  # polling until the kernel has reaped it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
else:
    os.waitpid(pid, 0)
print("gone", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("sigchld", ["ignore", "wait"])
def test_the_cpu_meter_counts_a_child_that_ended_once(harness, sigchld):
    """A child counted at one reading and reaped before the next is not taken back twice: a parent that ignores
    SIGCHLD gets none of its time (the meter read -0.7 cores for the Python workers in a soak), one that waits gets
    all of it."""
    import psutil

    parent = subprocess.Popen(
        [sys.executable, "-c", FORKING_PARENT, sigchld], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:

        class Meter(harness.CpuMeter):
            def parts(self):
                process = psutil.Process(parent.pid)
                return {"workers": [process, *process.children()]}

        meter = Meter()
        assert parent.stdout.readline() == "counted\n"
        burned = meter.read()["workers"]
        parent.stdin.write("\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "gone\n"
        after = meter.read()["workers"]
        assert burned >= 0.25
        assert -0.05 <= after <= 0.1
    finally:
        parent.stdin.write("\n")
        parent.stdin.flush()
        parent.wait(timeout=10)


def test_the_cpu_meter_tells_the_jit_compilers_share_of_the_spark_jvm_by_thread_name(harness):
    """A thread named as HotSpot names its JIT compilers is counted as one; the process's other threads are not."""
    import threading

    import psutil

    class Meter(harness.CpuMeter):
        def parts(self):
            return {"spark JVM": [psutil.Process()]}

    burned, read = threading.Barrier(3), threading.Event()

    def burn(name: str) -> None:
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        burned.wait()
        read.wait()  # a thread that ended before the reading is not there to be counted

    meter = Meter()
    # the kernel keeps 15 characters of a name: HotSpot's "C2 CompilerThread0" is "C2 CompilerThre"
    threads = [threading.Thread(target=burn, args=(name,)) for name in ("C2 CompilerThread0", "Executor task")]
    for thread in threads:
        thread.start()
    burned.wait()
    meter.read()
    read.set()
    for thread in threads:
        thread.join()
    assert set(meter.spark_jvm_thread_cores()) == {"JIT compilers", "GC"}
    assert 0.25 <= meter.spark_jvm_threads["JIT compilers"] <= 0.5
    assert meter.spark_jvm_threads["GC"] == 0


def test_make_bench_runs_every_script():
    """``make bench`` is "every benchmark" (README, docs/benchmarks.md): its recipe names each script once."""
    recipe = (FOLDER.parent / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    named = [line.split("benchmarks/")[1].split()[0] for line in recipe.splitlines() if "benchmarks/" in line]
    assert sorted(named) == sorted(f"{b.stem}.py" for b in BENCHMARKS)
