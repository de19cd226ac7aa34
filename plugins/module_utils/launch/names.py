# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Close-match suggestions for a misspelt name (a role variable, an entrypoint option).

Likeness is the Dice coefficient of letter pairs, 0.5 or more counting as close. It is computed without a
shared prefix such as ``training_job_``: every variable of a role has it, and with it all names look alike.
"""

from __future__ import annotations

from collections.abc import Iterable

CLOSE = 0.5
KEEP = 3


def _pairs(text: str) -> set[str]:
    return {text[i : i + 2] for i in range(len(text) - 1)}


def _stem(name: str, prefix: str) -> str:
    lowered = str(name).lower()
    return lowered[len(prefix) :] if prefix and lowered.startswith(prefix) else lowered


def likeness(first: str, second: str) -> float:
    """Dice coefficient of the names' distinct letter pairs (1 for equal names too short to have pairs)."""
    a, b = _pairs(first), _pairs(second)
    total = len(a) + len(b)
    if not total:
        return 1.0 if first == second else 0.0
    return 2 * len(a & b) / total


def suggestions(name: str, known: Iterable[str], prefix: str = "") -> list[str]:
    """Up to three known names that look like ``name``, best first (ties in name order)."""
    stem = _stem(name, prefix)
    scored = [
        (likeness(stem, _stem(candidate, prefix)), candidate) for candidate in sorted(set(map(str, known)))
    ]
    close = [item for item in scored if item[0] >= CLOSE]
    close.sort(key=lambda item: -item[0])
    return [candidate for _score, candidate in close[:KEEP]]


def close_matches(unknown: Iterable[str], known: Iterable[str], prefix: str = "") -> str:
    """One line naming each unknown name and what it may have meant, entries joined by '; '."""
    known = list(known)
    entries = []
    for name in unknown:
        best = suggestions(str(name), known, prefix)
        entries.append(f"{name} (close: {', '.join(best)})" if best else f"{name} (no close match)")
    return "; ".join(entries)
