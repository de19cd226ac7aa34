"""Make `ansible_collections.trainstack.cluster` importable here (make collection-link sets it up)."""

import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[4] / ".cache" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
