"""Container image build time, cold vs warm, and image size per flavour (playbooks/build_container.yml).

Cold: none of the flavours' layers is built (their images are removed first, so every layer is built again;
the download caches and the cached Debian 12 root filesystem are the machine's, as in a rebuild after a change
to the stack). Warm: the same run again, nothing changed, so every layer is reused and nothing is pushed. Both
runs push to a fresh registry on the lab bridge (scripts/lab_registry.py), so the cold run's
time includes the push. Writes JSON (and a PNG when matplotlib is there) to bench/results/.

    python -m bench.container_build [--stack ts-2026.10] [--cold-seconds S]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from bench.support.lab import REPO
from bench.support.plotting import pyplot_or_reason
from scripts import lab_registry

FLAVOURS = ("base", "pytorch")


def playbook(stack: str, registry: str, out: Path) -> tuple[float, str]:
    """One run of the playbook as `make container-local` runs it: seconds and output."""
    env = {
        **os.environ,
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
        "BUILDAH_ISOLATION": "chroot",
    }
    cmd = [
        str(REPO / ".venv" / "bin" / "ansible-playbook"),
        "playbooks/build_container.yml",
        "-e",
        f"trainstack_stack={stack}",
        "-e",
        f"container_registry_url={registry}",
        "-e",
        "container_registry_allow_http=true",
        "-e",
        f"container_build_dir={out}",
        "-e",
        "container_host_ca_certs=true",
        "-e",
        f"pytorch_wheelhouse={REPO / '.cache' / 'wheelhouse'}",
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def changed(output: str) -> int:
    """Tasks the run changed, summed over its hosts (PLAY RECAP)."""
    return sum(int(n) for n in re.findall(r"changed=(\d+)", output.split("PLAY RECAP", 1)[-1]))


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True).stdout


UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def image_bytes(image: str) -> int:
    """Unpacked size of an image (all its layers) as buildah reports it, rounded: "1.59 GB"."""
    number, unit = json.loads(buildah("images", "--json", image))[0]["size"].split()
    return round(float(number) * UNITS[unit])


def image_sizes(out: Path) -> dict[str, dict]:
    """Per flavour: the image's size, its own layer's (the image less its parent) and its registry digest."""
    sizes: dict[str, dict] = {}
    parent = 0
    for flavour in FLAVOURS:
        record = json.loads((out / f"{flavour}.json").read_text())
        total = image_bytes(record["image"])
        sizes[flavour] = {
            "image": record["image"],
            "bytes": total,
            "layer_bytes": total - parent,
            "registry_digest": record["registry"]["digest"],
        }
        parent = total
    return sizes


def remove_images(out: Path) -> None:
    """Remove the flavours' images (both tags), children first, so that the next run builds every layer."""
    for flavour in reversed(FLAVOURS):
        record = json.loads((out / f"{flavour}.json").read_text())
        name = record["image"].rsplit(":", 1)[0]
        for tag in record["tags"]:
            subprocess.run(["buildah", "rmi", f"{name}:{tag}"], capture_output=True, check=False)


def plot(result: dict, path: Path) -> None:
    """Cold vs warm seconds and the image sizes, side by side (skipped without matplotlib)."""
    plt = pyplot_or_reason()[0]
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(["cold", "warm"], [result["cold"]["seconds"], result["warm"]["seconds"]], color=["#c44", "#4a4"])
    left.set_ylabel("seconds (both flavours, push included)")
    right.bar(list(FLAVOURS), [result["sizes"][f]["bytes"] / 1e6 for f in FLAVOURS], color="#48c")
    right.set_ylabel("image size (MB, unpacked)")
    fig.suptitle(f"container images of {result['stack']} (buildah, {result['storage_driver']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="ts-2026.10")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument(
        "--cold-seconds",
        type=float,
        default=None,
        help="skip the cold build and record this time of a cold run measured before (the JSON says so)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="container-bench.") as tmp:
        registry_dir, out = Path(tmp) / "registry", Path(tmp) / "out"
        registry = lab_registry.start(registry_dir)
        try:
            # A first run names the images (and builds what is missing); then they are removed: cold.
            first_s, first_out = playbook(args.stack, registry, out)
            if args.cold_seconds is None:
                remove_images(out)
                lab_registry.stop(registry_dir)
                registry = lab_registry.start(Path(tmp) / "registry-cold")
                cold_s, cold_out = playbook(args.stack, registry, out)
            else:
                cold_s, cold_out = args.cold_seconds, ""
            warm_s, warm_out = playbook(args.stack, registry, out)
            sizes = image_sizes(out)
        finally:
            lab_registry.stop(registry_dir)
            lab_registry.stop(Path(tmp) / "registry-cold")
    driver = json.loads(buildah("info"))["store"]["GraphDriverName"]
    result = {
        "stack": args.stack,
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "storage_driver": driver,
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "cold": {
            "seconds": round(cold_s, 1),
            "changed_tasks": changed(cold_out) if cold_out else None,
            "measured": "by this script" if cold_out else "an earlier playbook run (--cold-seconds), no push",
        },
        "warm": {"seconds": round(warm_s, 1), "changed_tasks": changed(warm_out)},
        "first_run": {"seconds": round(first_s, 1), "changed_tasks": changed(first_out)},
        "sizes": sizes,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    stamp = result["when"].replace("-", "").replace(":", "")
    path = args.results / f"container_build-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, path.with_suffix(".png"))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
