"""The fabric mirror's former path, kept for the molecule scenarios that still run it (fabric, fabric_build,
pcs_agent: prepare and cleanup/destroy). The mirror is scripts/fabric_mirror.py; this runs it with the same
arguments. Remove this file once those scenarios name scripts/fabric_mirror.py.
"""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(
        str(Path(__file__).resolve().parents[3] / "scripts" / "fabric_mirror.py"), run_name="__main__"
    )
