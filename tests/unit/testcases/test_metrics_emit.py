"""Metric lines from ranks that share one pipe stay whole (trainstack_train.metrics.emit).

torchrun hands every local rank the same stdout; data/prepare prints a line per shard from every rank.
Unbuffered, ``print`` writes text and newline separately, and two ranks' records then share a line.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from tests.unit.testcases.case_runs import LIBRARY

WRITERS, RECORDS = 4, 1500
PREFIX = "TRAINSTACK_METRIC "

# Each writer runs unbuffered (as under torchrun with PYTHONUNBUFFERED), as its own process.
WRITER = """
import sys
from trainstack_train.metrics import emit
writer = int(sys.argv[1])
for step in range({records}):
    print("log line before a record of", writer)
    emit({{"writer": writer, "step": step, "pad": "x" * 200}})
"""


def test_records_of_processes_sharing_a_pipe_stay_one_per_line() -> None:
    env = os.environ | {"PYTHONPATH": str(LIBRARY), "PYTHONUNBUFFERED": "1"}
    read, write = os.pipe()
    code = WRITER.format(records=RECORDS)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(n)], stdout=write, env=env) for n in range(WRITERS)
    ]
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as stream:
        lines = stream.read().splitlines()
    assert [proc.wait() for proc in procs] == [0] * WRITERS
    records = [json.loads(line.split(PREFIX, 1)[1]) for line in lines if PREFIX in line]
    assert sorted((r["writer"], r["step"]) for r in records) == [
        (w, s) for w in range(WRITERS) for s in range(RECORDS)
    ]


def test_a_stream_without_a_descriptor_gets_the_whole_line(monkeypatch) -> None:
    """pytest's capture and a StringIO have no file descriptor: the record goes through the stream itself."""
    from trainstack_train.metrics import emit

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    emit({"step": 1, "loss": 2.5})
    assert stream.getvalue() == PREFIX + '{"loss": 2.5, "step": 1}\n'
