"""Metric names referenced by a PromQL expression, for checking dashboards against real exporters.

Not a PromQL parser: it removes what cannot be a metric name (strings, label matchers, range selectors,
grouping clauses, Grafana variables, numbers) and keeps identifiers that are not functions or keywords.
"""

from __future__ import annotations

import re

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "inf", "nan",
}  # fmt: skip
_STRIP = [
    r'"(?:\\.|[^"\\])*"',  # strings
    r"\{[^}]*\}",  # label matchers
    r"\[[^\]]*\]",  # range selectors and subqueries
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",  # grouping clauses and their labels
    r"\$\{[^}]*\}|\$\w+",  # Grafana variables
]


def metric_names(expr: str) -> set[str]:
    """Identifiers of ``expr`` that are metric names."""
    text = expr
    for pattern in _STRIP:
        text = re.sub(pattern, " ", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if following.startswith("(") or match.group(0).lower() in KEYWORDS:
            continue
        names.add(match.group(0))
    return names
