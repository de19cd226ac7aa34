# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""YAML loading that refuses duplicate keys, for every file the product reads as configuration.

A repeated key raises yaml.constructor.ConstructorError (a yaml.YAMLError) whose message names the key, both
lines and the file, so callers that already turn YAML errors into their own need nothing new.

PyYAML is imported inside the functions: module_utils must import on any target Python (ansible-test's import
check), and only the controller, which has PyYAML, reads these files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _loader_class() -> type:
    """A SafeLoader whose mappings refuse a key they already hold (built on first use: PyYAML is lazy)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader with duplicate keys refused at every depth."""

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict:
        # Checked before merge keys (<<) are flattened in: a key written here may override a merged one.
        seen: dict[Any, int] = {}
        for key_node, _value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.setdefault(key, line)
            except TypeError:  # an unhashable key: SafeLoader's own error says it better
                continue
            if first != line:
                # A YAMLError, so that every caller's "not YAML" handling reports it with the file and line.
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key '{key}' is given twice (first on line {first}, again on line {line}); YAML would "
                    "keep only the last one",
                    key_node.start_mark,
                )
        loader.flatten_mapping(node)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


def loads(text: str, name: str = "<string>") -> Any:
    """One YAML document from text; ``name`` is the file name its errors give."""
    loader = _loader_class()(text)
    loader.name = name
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def loads_all(text: str, name: str = "<string>") -> list[Any]:
    """Every YAML document from text (a cluster spec may hold several)."""
    loader = _loader_class()(text)
    loader.name = name
    try:
        documents = []
        while loader.check_data():
            documents.append(loader.get_data())
        return documents
    finally:
        loader.dispose()


def load(path: str | Path) -> Any:
    """One YAML document from a file, duplicate keys refused."""
    return loads(Path(path).read_text(encoding="utf-8"), str(path))
