"""nccl-tests' conventions, so our rows compare one to one with ``all_reduce_perf`` and friends.

``size`` is the bytes nccl-tests prints: the whole buffer of all_reduce and broadcast, the gathered output of
all_gather, the input of reduce_scatter, each rank's send buffer of all_to_all. ``algbw = size / time`` and
``busbw = algbw * factor(n)`` with the factors of nccl-tests' PERFORMANCE.md: all_reduce ``2(n-1)/n``;
all_gather, reduce_scatter and all_to_all ``(n-1)/n``; broadcast 1. busbw is then comparable with the
hardware's link bandwidth whatever the rank count. GB/s are 1e9 bytes per second, as there.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
NCCL_TYPE = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}


def bus_factor(op: str, ranks: int) -> float:
    """Multiplier from algorithm bandwidth to bus bandwidth."""
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def sweep(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Geometric sizes from ``min_bytes`` up to and including ``max_bytes`` where it is on the grid."""
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def element_count(op: str, size: int, ranks: int, elem_bytes: int) -> int:
    """Elements of the nccl-tests ``size`` buffer, rounded down so every rank gets an equal share."""
    count = max(1, size // elem_bytes)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(ranks, count - count % ranks)
    return count


@dataclass(frozen=True)
class Row:
    """One measured line."""

    op: str
    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int

    @classmethod
    def measured(cls, op: str, count: int, dtype: str, seconds: float, ranks: int, wrong: int) -> Row:
        """Bandwidths from one average op time."""
        size = count * DTYPE_BYTES[dtype]
        algbw = size / seconds / 1e9
        return cls(op, size, count, dtype, seconds * 1e6, algbw, algbw * bus_factor(op, ranks), wrong)

    def format(self) -> str:
        """A line laid out like nccl-tests' out-of-place columns."""
        redop = "sum" if self.op in ("all_reduce", "reduce_scatter") else "none"
        root = "0" if self.op == "broadcast" else "-1"
        return (
            f"{self.size_bytes:>12} {self.count:>12} {NCCL_TYPE[self.dtype]:>8} {redop:>6} {root:>6} "
            f"{self.time_us:>10.2f} {self.algbw_gbps:>7.2f} {self.busbw_gbps:>7.2f} {self.wrong:>6}"
        )


HEADER = (
    "#\n#        size        count     type  redop   root       time   algbw   busbw #wrong\n"
    "#         (B)   (elements)                               (us)  (GB/s)  (GB/s)"
)
