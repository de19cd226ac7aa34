"""Turn one ``bench/nccl_tests_device.sh`` output directory into the nccl-tests vs ``nccl/collectives`` JSON
and plot.

Why through the acceptance parser (``roles/node_health/files/nccl_tests_output.py``) and not a reader of its
own: the figures committed here are then exactly what the acceptance check would read from the same output,
and the unit tests that parse this real output guard that parser against the tool's true layout.

Usage: ``python3 -m bench.nccl_tests_compare RAW_DIR OUT.json [OUT.png]`` (the plot needs matplotlib).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

# nccl-tests program -> the test case's name of the same collective.
PROGRAMS = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
}
VERSION_LINE = re.compile(r"^# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", re.M)
AVG_LINE = re.compile(r"^# Avg bus bandwidth.*$", re.M)


def _parser() -> ModuleType:
    """The acceptance parser, loaded from the role's file under the plain name its callers on the nodes import
    it by (registered first: dataclasses look their module up), so one copy serves every reader here."""
    name = "nccl_tests_output"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "roles/node_health/files" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _parsed(text: str, op: str, source: Path) -> dict[str, object]:
    """One table read by the acceptance parser; an unreadable one stops the run with the parser's reason."""
    parsed = _parser().parse_output(text, op)
    if parsed.unparsable:
        raise SystemExit(f"{source}: {op}: {parsed.unparsable}")
    result = asdict(parsed)
    result["ok"] = parsed.ok
    for row in result["rows"]:
        del row["op"]
    return result


def _nccl_tests(raw: Path, program: str) -> dict[str, object]:
    path = raw / f"{program}.txt"
    text = path.read_text(encoding="utf-8")
    result = _parsed(text, program.removesuffix("_perf"), path)
    avg = AVG_LINE.search(text)
    version = VERSION_LINE.search(text)
    result.update(
        program=program,
        raw=_shown(path),
        avg_busbw_line=avg.group(0).rstrip() if avg else None,
        version=version.group(1) if version else None,
        nccl_headers=int(version.group(2)) if version else None,
        nccl_library=int(version.group(3)) if version else None,
    )
    return result


def _shown(path: Path) -> str:
    """A path as the document records it: relative to the repository when inside it, so reruns compare."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def _lines(path: Path) -> list[str]:
    return [line.rstrip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _pairs(tests: dict[str, object], case: dict[str, object]) -> list[dict[str, object]]:
    """Size by size, what each tool measured for one collective (sizes nccl-tests rounded are kept)."""
    ours = {row["size_bytes"]: row["out_of_place"] for row in case["rows"]}
    pairs = []
    for row in tests["rows"]:
        other = ours.get(row["size_bytes"])
        pairs.append(
            {
                "size_bytes": row["size_bytes"],
                "nccl_tests_out_of_place_algbw_gbps": row["out_of_place"]["algbw_gbps"],
                "nccl_tests_in_place_algbw_gbps": (row["in_place"] or {}).get("algbw_gbps"),
                "nccl_tests_out_of_place_time_us": row["out_of_place"]["time_us"],
                "collectives_algbw_gbps": other["algbw_gbps"] if other else None,
                "collectives_time_us": other["time_us"] if other else None,
            }
        )
    return pairs


def build(raw: Path) -> dict[str, object]:
    """The comparison document: both tools' tables as parsed, the pairs, versions and the commands run."""
    case_text = (raw / "collectives.txt").read_text(encoding="utf-8")
    summary = json.loads((raw / "collectives.json").read_text(encoding="utf-8"))
    tests, case = {}, {}
    for program, op in PROGRAMS.items():
        tests[op] = _nccl_tests(raw, program)
        case[op] = _parsed(case_text, op, raw / "collectives.txt")
        case[op]["max_busbw_gbps"] = summary["max_busbw_gbps"][op]
    return {
        "description": (
            "nccl-tests built from its release source against the NCCL PyTorch loads, beside the "
            "nccl/collectives test case on the same sizes, both read by the acceptance parser"
        ),
        "raw": _shown(raw),
        "gpus": summary["world_size"],
        "gpu_model": summary["gpu_model"],
        "nccl_version": summary["nccl_version"],
        "versions": _lines(raw / "versions.txt"),
        "nvidia_smi_q": _lines(raw / "nvidia-smi-q.txt"),
        "commands": _lines(raw / "commands.txt"),
        "nccl_tests": tests,
        "collectives": case,
        "collectives_elapsed_s": summary["elapsed_s"],
        "pairs": {op: _pairs(tests[op], case[op]) for op in PROGRAMS.values()},
    }


def main(argv: list[str]) -> int:
    """Write the JSON, and the plot when a PNG path is given."""
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    document = build(Path(argv[0]).resolve())
    Path(argv[1]).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    if len(argv) == 3:
        from bench.nccl_plot import plot_comparison

        plot_comparison(document, Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
