"""What one pass of the sampling processor's timer costs in Python: the events of the windows the watermark closed
read back from their Arrow chunks, ordered, deduplicated, and their samples picked (``WindowSampler``'s
``handleExpiredTimer``: ``decode_chunks`` then ``window_samples``).

    .venv/bin/python benchmarks/sampling_pass.py [--events 2400000] [--devices 1000] [--passes 5]

At 20,000 events/s and a `1 minute` records trigger, sampling's one key (``sample_scope = window``) holds about 2.4
million events when its timer fires: two minutes of events, as the 60-second windows sliding by 30 seconds need
them. The events here are synthetic (uniform over two minutes of event time, 2% re-sent with the same key, 7%
anomalous) and held as the processor holds them: one Arrow chunk per 200,000 events.

Two ways, alternately, ``--passes`` times each: the baseline is the pandas pass the processor ran until 2026-12
(the chunks read into pandas, ``sort_values`` of the three ordering columns, ``drop_duplicates``), against the
package's (``sensorcep.pipeline.sampling``: the chunks stay Arrow, Arrow sorts them, only the samples become pandas
rows). Both must pick the same samples (checked every pass). Wall and CPU seconds of a pass, medians. Pure Python:
no JVM, no broker. Nothing else should run meanwhile.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
from harness import argument_parser, record

from sensorcep.pipeline import sampling

BASELINE = "pandas pass"
WAYS = (BASELINE, "Arrow pass")
WINDOW_MS, SLIDE_MS = 60_000, 30_000
CHUNK_EVENTS = 200_000


def fleet_chunks(events: int, devices: int, seed: int = 1) -> tuple[list[bytes], int, range]:
    """Two minutes of a fleet's events as the processor's Arrow chunks, how many rows they hold (re-sent copies
    included), and the window ends a pass emits."""
    rng = np.random.default_rng(seed)
    start_ms = 1_780_000_000_000 - 1_780_000_000_000 % SLIDE_MS
    times_us = (start_ms + np.sort(rng.integers(0, 2 * WINDOW_MS, events))) * 1000
    frame = pd.DataFrame(
        {
            "device_id": np.array([f"dev-{d:05d}" for d in range(devices)], dtype=object)[
                rng.integers(0, devices, events)
            ],
            "sensor_freq": np.where(rng.random(events) < 0.07, -rng.random(events), rng.random(events) * 100),
            "event_time_us": times_us,
        }
    )
    resent = frame.sample(frac=0.02, random_state=seed)  # the same event again (another reading of it)
    frame = pd.concat([frame, resent.assign(sensor_freq=resent.sensor_freq + 1)], ignore_index=True)
    chunks = [sampling.encode_chunk(frame.iloc[i : i + CHUNK_EVENTS]) for i in range(0, len(frame), CHUNK_EVENTS)]
    return chunks, len(frame), range(start_ms + WINDOW_MS, start_ms + 2 * WINDOW_MS + 1, SLIDE_MS)


def pandas_pass(chunks: list[bytes], ends: range, anomaly_threshold: float = 0.0) -> pd.DataFrame:
    """The baseline: the processor's pass before 2026-12, every event a pandas row."""
    events = sampling.decode_chunks(iter(chunks)).to_pandas()
    ordered = (
        events[sampling.ORDER]
        .sort_values(sampling.ORDER, kind="mergesort")
        .drop_duplicates(["device_id", "event_time_us"], keep="first")
        .reset_index(drop=True)
    )
    times, anomalous = ordered.event_time_us.to_numpy(), ordered.sensor_freq.to_numpy() < anomaly_threshold
    frames = []
    for end in ends:
        lo, hi = np.searchsorted(times, [(end - WINDOW_MS) * 1000, end * 1000]).tolist()
        n = hi - lo
        if not n:
            continue
        positions = {"first": lo, "middle": lo + n // 2, "last": hi - 1}
        chosen = np.union1d(list(positions.values()), lo + np.flatnonzero(anomalous[lo:hi]))
        roles = [[r for r, at in positions.items() if at == i] + (["anomaly"] if anomalous[i] else []) for i in chosen]
        samples = ordered.iloc[chosen].reset_index(drop=True)
        frames.append(samples.assign(roles=roles, window_start_ms=end - WINDOW_MS, window_end_ms=end))
    return pd.concat(frames, ignore_index=True)


def arrow_pass(chunks: list[bytes], ends: range) -> pd.DataFrame:
    """The package's pass, as ``WindowSampler.handleExpiredTimer`` runs it."""
    return sampling.window_samples(sampling.decode_chunks(iter(chunks)), ends, WINDOW_MS)


def picked(samples: pd.DataFrame) -> list[tuple]:
    """What a pass picked, comparable across the two ways."""
    columns = ["window_end_ms", "event_time_us", "device_id", "sensor_freq"]
    return sorted(zip(*(samples[c] for c in columns), samples.roles.map(tuple), strict=True))


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=2_400_000)
    parser.add_argument("--devices", type=int, default=1_000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    chunks, held, ends = fleet_chunks(args.events, args.devices)
    runs = {way: {"wall": [], "cpu": []} for way in WAYS}
    rows = []
    for n in range(1, args.passes + 1):
        results = {}
        for way, run in (
            (BASELINE, lambda: pandas_pass(chunks, ends)),
            ("Arrow pass", lambda: arrow_pass(chunks, ends)),
        ):
            wall, cpu = time.perf_counter(), time.process_time()
            results[way] = run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            runs[way]["wall"].append(wall)
            runs[way]["cpu"].append(cpu)
            rows.append({"pass": n, "way": way, "wall s": wall, "cpu s": cpu, "samples": len(results[way])})
            print(
                f"pass {n}/{args.passes} {way:<11}: {wall:6.2f} s wall, {cpu:6.2f} s CPU, {len(results[way]):,} samples"
            )
        if picked(results[BASELINE]) != picked(results["Arrow pass"]):
            raise SystemExit(f"pass {n}: the two ways picked different samples")
    figures: dict[str, object] = {
        "events": args.events,
        "rows held (with re-sent copies)": held,
        "devices": args.devices,
        "windows a pass emits": len(ends),
    }
    for way in WAYS:
        figures[f"a pass, wall: {way} (s)"] = statistics.median(runs[way]["wall"])
        figures[f"a pass, CPU: {way} (s)"] = statistics.median(runs[way]["cpu"])
    for name, value in figures.items():
        print(f"{name:<40} {value:>12,.3f}" if isinstance(value, float) else f"{name:<40} {value:>12,}")
    record("sampling_pass", figures, table=rows, baseline=BASELINE)


if __name__ == "__main__":
    main()
