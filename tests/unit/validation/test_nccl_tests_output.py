"""The nccl-tests / nccl/collectives output parser on output laid out as the tools and launchers print it.

Fixtures: fixtures/nccl-tests-all_reduce.*.txt follow nccl-tests 2.19.6's printf formats (src/util.cu) for a
16-rank all_reduce_perf run, plain and as each launcher delivers it; collectives.cpu-2ranks.txt is a real run
of the nccl/collectives test case (2 ranks, gloo on CPU). See fixtures/README.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from .conftest import ROOT, load

out = load(ROOT / "roles/node_health/files/nccl_tests_output.py", "nccl_tests_output")

# The last row of every nccl-tests-all_reduce fixture with a clean run (1 GiB).
LAST_OOP = {"time_us": 5782.59, "algbw_gbps": 185.69, "busbw_gbps": 348.16, "wrong": 0}
LAST_IP = {"time_us": 5854.15, "algbw_gbps": 183.42, "busbw_gbps": 343.90, "wrong": 0}


@pytest.mark.parametrize(
    ("name", "prefix", "rank", "debug_lines"),
    [
        ("nccl-tests-all_reduce.txt", "plain", None, 0),
        ("nccl-tests-all_reduce.mpi-tag-output.txt", "mpi-tag-output", 0, 21),
        ("nccl-tests-all_reduce.srun-label.txt", "srun-label", 0, 17),
        ("nccl-tests-all_reduce.nccl-info.txt", "plain", None, 8),
    ],
)
def test_every_launcher_style_reads_the_same_table(fixture_text, name, prefix, rank, debug_lines):
    parsed = out.parse_output(fixture_text(name))
    assert parsed.unparsable == "" and parsed.ok
    assert (parsed.tool, parsed.op, parsed.prefix, parsed.rank) == ("nccl-tests", "all_reduce", prefix, rank)
    assert parsed.nccl_debug_lines == debug_lines
    assert [row.size_bytes for row in parsed.rows] == [2**k for k in range(20, 31)]
    last = parsed.rows[-1]
    fixed = (last.size_bytes, last.count, last.type, last.redop, last.root)
    assert fixed == (2**30, 2**28, "float", "sum", -1)
    assert asdict(last.out_of_place) == LAST_OOP and asdict(last.in_place) == LAST_IP
    assert parsed.busbw_gbps == 348.16 and parsed.avg_busbw_gbps == 164.42 and parsed.out_of_bounds == 0


def test_a_row_split_by_nccl_info_is_joined_back(fixture_text):
    """NCCL connects during the first call: its INFO lines land after the size was printed, and mid-row."""
    parsed = out.parse_output(fixture_text("nccl-tests-all_reduce.nccl-info.txt"))
    first, sixth = parsed.rows[0], parsed.rows[5]
    assert (first.size_bytes, first.root, first.out_of_place.time_us, first.in_place.busbw_gbps) == (
        1048576,
        -1,
        254.50,
        7.69,
    )
    assert (sixth.out_of_place.busbw_gbps, sixth.in_place.time_us, sixth.in_place.wrong) == (148.3, 425.43, 0)


def test_the_json_result_holds_both_columns_and_the_footer(fixture_text):
    result = json.loads(json.dumps(asdict(out.parse_output(fixture_text("nccl-tests-all_reduce.txt")))))
    assert result["rows"][-1]["out_of_place"] == LAST_OOP and result["rows"][-1]["in_place"] == LAST_IP
    assert result["avg_busbw_gbps"] == 164.42 and result["out_of_bounds"] == 0 and result["wrong_total"] == 0
    assert set(result["rows"][0]) == {
        "op",
        "size_bytes",
        "count",
        "type",
        "redop",
        "root",
        "out_of_place",
        "in_place",
    }


def test_sizes_out_of_order_take_the_largest(fixture_text):
    assert out.parse_output(fixture_text("all_reduce_perf.txt")).busbw_gbps == 334.07


@pytest.mark.parametrize("name", ["collectives.cpu-2ranks.txt", "collectives.srun-label.txt"])
def test_the_collectives_test_case_table_is_read(fixture_text, name):
    """One result group, a banner per op, TRAINSTACK_METRIC lines between rows, no nccl-tests footer."""
    parsed = out.parse_output(fixture_text(name))
    assert parsed.ok and (parsed.tool, parsed.op) == ("collectives", "all_reduce")
    assert len(parsed.rows) == 11 and all(row.in_place is None for row in parsed.rows)
    assert parsed.rows[-1].size_bytes == 1048576 and parsed.busbw_gbps == 0.25
    assert parsed.avg_busbw_gbps is None
    gather = out.parse_output(fixture_text(name), op="all_gather")
    assert gather.ok and gather.rows[-1].redop == "none" and gather.busbw_gbps == 0.13


def test_wrong_elements_fail_the_check(fixture_text):
    parsed = out.parse_output(fixture_text("nccl-tests-all_reduce.wrong.txt"))
    assert parsed.unparsable == "" and not parsed.ok and not parsed.unchecked
    assert "134217728 B out-of-place: 1048580 wrong elements" in parsed.problems
    assert "nccl-tests counted 1 out-of-bounds values" in parsed.problems
    assert parsed.wrong_total == 2 * 1048580


def test_a_single_wrong_in_place_element_fails(fixture_text):
    text = fixture_text("nccl-tests-all_reduce.txt").replace("330.95       0", "330.95       1")
    parsed = out.parse_output(text)
    assert parsed.problems == ["536870912 B in-place: 1 wrong elements"] and not parsed.ok


def test_na_where_a_count_belongs_fails(fixture_text):
    parsed = out.parse_output(fixture_text("nccl-tests-all_reduce.no-check.txt"))
    assert parsed.unparsable == "" and parsed.unchecked and not parsed.ok
    assert len(parsed.problems) == 22 and "#wrong is N/A" in parsed.problems[0]
    assert parsed.rows[0].out_of_place.wrong is None


def test_na_in_place_is_expected_where_nccl_tests_never_checks_it(fixture_text):
    text = fixture_text("nccl-tests-all_reduce.txt").replace("all_reduce_perf", "alltoall_perf")
    lines = text.splitlines()
    rows = [line[: line.rindex(" 0")] + "N/A" if line.startswith("  ") else line for line in lines]
    parsed = out.parse_output("\n".join(rows), op="alltoall")
    assert parsed.ok and parsed.rows[-1].in_place.wrong is None and parsed.rows[-1].out_of_place.wrong == 0
    assert out.parse_output("\n".join(rows), op="all_reduce").unparsable.startswith("no all_reduce rows")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("nccl-tests-all_reduce.truncated.txt", "truncated run: the output ends inside a row: '268435456"),
        ("nccl-tests-all_reduce.nccl-failure.txt", "error text in the output: "),
        ("nccl-tests-all_reduce.separate-runs.txt", "tables from 2 ranks (0, 1): each task ran its own test"),
    ],
)
def test_unparsable_output_says_why(fixture_text, name, reason):
    parsed = out.parse_output(fixture_text(name))
    assert parsed.unparsable.startswith(reason) and parsed.busbw_gbps is None and not parsed.ok


def test_the_failure_reason_quotes_the_tool(fixture_text):
    parsed = out.parse_output(fixture_text("nccl-tests-all_reduce.nccl-failure.txt"))
    assert "Test NCCL failure common.cu:1050" in parsed.unparsable


def test_a_run_that_stops_between_rows_is_truncated(fixture_text):
    text = fixture_text("nccl-tests-all_reduce.txt").split("# Out of bounds")[0]
    assert out.parse_output(text).unparsable == "truncated run: 11 rows but no '# Avg bus bandwidth' line"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no result rows in the output"),
        ("srun: error: Unable to allocate resources", "error text in the output: srun: error: Unable"),
        ("bash: line 1: all_reduce_perf: command not found", "no result rows in the output: 'bash: line 1"),
    ],
)
def test_output_without_a_table_is_unparsable(text, reason):
    assert out.parse_output(text).unparsable.startswith(reason)


def test_a_garbled_value_is_unparsable_not_zero(fixture_text):
    text = fixture_text("nccl-tests-all_reduce.txt").replace("348.16", "348.1x")
    assert out.parse_output(text).unparsable.startswith("row not readable (busbw '348.1x' is not a number)")


def test_a_python_traceback_after_the_table_spoils_the_run(fixture_text):
    text = fixture_text("collectives.srun-label.txt") + "0: Traceback (most recent call last):\n"
    assert out.parse_output(text).unparsable.startswith("error text in the output: Traceback")
