"""Fabric area fixtures: the collection importable from this checkout (as in the unit conftest)."""

import sys

from tests.support import REPO

COLLECTIONS = str(REPO / ".cache" / "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
