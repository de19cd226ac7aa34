"""Prove that the installed torch works, not only that it imports: a matrix product, a one-rank gloo
all_reduce (the collective path every launcher uses), and, where a GPU is expected, the same product on it.

Prints one JSON object; exits non-zero with the reason when a check fails.
"""

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def matmul_ok(device: str) -> bool:
    """A product against the identity must give the input back."""
    x = torch.randn(128, 128, device=device)
    return bool(torch.allclose(x @ torch.eye(128, device=device), x, atol=1e-5))


def gloo_all_reduce() -> float:
    """World size 1 through a file store: needs no free port and no network."""
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            t = torch.full((4,), 2.0)
            dist.all_reduce(t)
            return float(t.sum())
        finally:
            dist.destroy_process_group()


def main() -> int:
    want_gpu = len(sys.argv) > 1 and sys.argv[1] == "gpu"
    report = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "matmul_cpu": matmul_ok("cpu"),
        "gloo_all_reduce_sum": gloo_all_reduce(),
    }
    if want_gpu:
        report["matmul_gpu"] = report["cuda_available"] and matmul_ok("cuda")
    print(json.dumps(report))
    failed = [k for k in ("matmul_cpu", "matmul_gpu") if report.get(k) is False]
    if report["gloo_all_reduce_sum"] != 8.0:
        failed.append("gloo_all_reduce_sum")
    if failed:
        print(f"verify_torch: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
