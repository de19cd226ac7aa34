"""The acceptance parser on real output: nccl-tests 2.19.6 built from its release source and the
nccl/collectives test case, both run on one NVIDIA H200 (bench/results/nccl_tests_h200_raw, made by
bench/nccl_tests_device.sh; docs/fabric.md tells the run).

The hand-written fixtures beside this file follow the tool's printf formats; these files are what the tool
really printed, with its quirks: sizes below 16 bytes rounded to 0, ``%g`` bandwidths such as ``9e+06`` in
the in-place group, ``N/A`` in alltoall's in-place ``#wrong``, a bare ``0`` average bus bandwidth.
"""

from __future__ import annotations

import json
import re

import pytest

from bench import nccl_tests_compare as compare

from .conftest import ROOT, load

out = load(ROOT / "roles/node_health/files/nccl_tests_output.py", "nccl_tests_output")

RAW = ROOT / "bench/results/nccl_tests_h200_raw"
COMPARISON = ROOT / "bench/results/nccl_tests_vs_collectives_1xh200.json"
# -b 8 -e 8G -f 2: 31 sizes; nccl-tests rounds the first (8 bytes) down to 0 where it splits by 16 bytes.
SIZES = [2**k for k in range(4, 34)]
# program: (op, first size, 8 GiB out-of-place (time, algbw), 8 GiB in-place (time, algbw, #wrong)).
LARGEST = {
    "all_reduce_perf": ("all_reduce", 8, (3995.96, 2149.7), (0.94, 9e6, 0)),
    "all_gather_perf": ("all_gather", 0, (3997.34, 2148.9), (1.25, 7e6, 0)),
    "reduce_scatter_perf": ("reduce_scatter", 0, (3996.86, 2149.2), (1.09, 8e6, 0)),
    "alltoall_perf": ("alltoall", 0, (3996.85, 2149.2), (0.94, 9e6, None)),
}


def _text(name: str) -> str:
    return (RAW / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("program", sorted(LARGEST))
def test_every_real_nccl_tests_table_is_read_whole(program):
    op, first, (time_us, algbw), (ip_time, ip_algbw, ip_wrong) = LARGEST[program]
    text = _text(f"{program}.txt")
    parsed = out.parse_output(text, op)
    assert parsed.unparsable == "" and parsed.ok and parsed.problems == []
    assert (parsed.tool, parsed.op, parsed.prefix, parsed.nccl_debug_lines) == ("nccl-tests", op, "plain", 0)
    assert [row.size_bytes for row in parsed.rows] == [first, *SIZES]
    assert all(row.out_of_place.wrong == 0 for row in parsed.rows)
    assert all(row.in_place.wrong == ip_wrong for row in parsed.rows)
    assert parsed.wrong_total == 0 and parsed.out_of_bounds == 0
    last = parsed.rows[-1]
    oop, ip = last.out_of_place, last.in_place
    assert (last.count, last.type, last.root) == (2**31, "float", -1)
    assert (oop.time_us, oop.algbw_gbps, oop.busbw_gbps) == (time_us, algbw, 0.0)
    assert (ip.time_us, ip.algbw_gbps, ip.busbw_gbps) == (ip_time, ip_algbw, 0.0)
    footer = re.search(r"^# Avg bus bandwidth\s*: (\S+)", text, re.M)
    assert parsed.avg_busbw_gbps == float(footer.group(1)) and parsed.busbw_gbps == 0.0


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_the_real_test_case_table_matches_its_own_summary(op):
    """The printed table, read back, gives the figures the test case wrote into its summary JSON."""
    parsed = out.parse_output(_text("collectives.txt"), op)
    summary = [row for row in json.loads(_text("collectives.json"))["results"] if row["op"] == op]
    assert parsed.ok and parsed.tool == "collectives" and len(parsed.rows) == len(summary) == 31
    assert [row.size_bytes for row in parsed.rows] == [8, *SIZES]
    for row, expected in zip(parsed.rows, summary, strict=True):
        assert row.in_place is None and row.out_of_place.wrong == expected["wrong"] == 0
        assert row.out_of_place.time_us == pytest.approx(expected["time_us"], abs=0.005)
        assert row.out_of_place.algbw_gbps == pytest.approx(expected["algbw_gbps"], abs=0.005)
        assert row.out_of_place.busbw_gbps == pytest.approx(expected["busbw_gbps"], abs=0.005)


def test_the_committed_comparison_is_what_the_parser_reads_now():
    """bench/results' JSON holds the parser's reading of the raw files, not figures copied by hand."""
    committed = json.loads(COMPARISON.read_text(encoding="utf-8"))
    assert json.loads(json.dumps(compare.build(RAW))) == committed
    assert committed["nccl_tests"]["all_to_all"]["avg_busbw_line"] == "# Avg bus bandwidth    : 0"
    assert committed["pairs"]["all_gather"][-1]["collectives_algbw_gbps"] == 2136.72
