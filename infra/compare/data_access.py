"""Data access: how long staging took and what it moved, and what the measured step read from storage."""

from __future__ import annotations

import numpy as np

from infra.compare.records import EnvironmentRecords, Missing
from infra.compare.report_model import DataAccess, Value, missing


def data_access(records: EnvironmentRecords) -> DataAccess:
    staging = records.staging
    if isinstance(staging, Missing) or not staging:
        reason = staging.reason if isinstance(staging, Missing) else "nothing was staged"
        staging_time = missing("s", reason)
        staged = missing("bytes", reason)
    else:
        starts = [s.started_at for s in staging if s.started_at is not None]
        ends = [s.finished_at for s in staging if s.finished_at is not None]
        simulated = any(s.simulated for s in staging)
        sources = "; ".join(s.source for s in staging)
        staging_time = (
            Value(max(ends) - min(starts), "s", sources, "", "computed", simulated)
            if starts and ends
            else missing("s", "no staging times recorded", sources)
        )
        sizes = [s.bytes_moved for s in staging if s.bytes_moved is not None]
        staged = (
            Value(float(sum(sizes)), "bytes", sources, "", "measured", simulated)
            if sizes
            else missing(
                "bytes",
                "not measured: simulated node, no container ran" if simulated else "the staging records carry no sizes",
                sources,
            )
        )
    read = missing("bytes", f"not measured: no telemetry for the {records.measured_step} step")
    throughput = missing("bytes/s", read.note)
    telemetry = records.telemetry.get(records.measured_step)
    if isinstance(telemetry, Missing):
        read = missing("bytes", telemetry.reason)
        throughput = missing("bytes/s", telemetry.reason)
    elif telemetry is not None and telemetry.rows >= 2:
        values = telemetry.tree_read_bytes[~np.isnan(telemetry.tree_read_bytes)]
        times = telemetry.t[~np.isnan(telemetry.tree_read_bytes)]
        if values.size >= 2 and times[-1] > times[0]:
            moved = float(values[-1] - values[0])
            read = Value(
                moved,
                "bytes",
                telemetry.source,
                "the step's processes, /proc/<pid>/io read_bytes (storage reads; page-cache hits are not counted)",
                "computed",
            )
            throughput = Value(
                moved / float(times[-1] - times[0]),
                "bytes/s",
                telemetry.source,
                "bytes read / time between first and last sample",
                "computed",
            )
    return DataAccess(staging_time, staged, read, throughput)
