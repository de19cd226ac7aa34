#!/usr/bin/env python3
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Check rendered ParallelCluster 3 configurations with ParallelCluster's own schema and offline validators.

Why: our renderer could drift from what ParallelCluster accepts (a renamed key, a rule it enforces). This
loads each file with the `pcluster` package's ClusterSchema (the code `pcluster create-cluster` runs first),
then runs every validator the configuration registers. AWS is out of reach by design: every AWS API call is
refused before it leaves the process, and a validator that needed one is listed as not run, with the call it
wanted, instead of counting as a failure. Runs inside the ParallelCluster virtualenv (`make pcluster-venv`),
never the controller's: pcluster pins its own boto3 and marshmallow.

Usage: pcluster_validate.py [--json] CONFIG.yaml...   exit 0: every file passes; 1: a failure; 2: usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

NEEDS_AWS = "needs AWS"


def _refuse_aws() -> None:
    """Make any boto3 API call fail at once, in-process (no endpoint, no credentials, no retries).

    The refusal is a botocore error, so ParallelCluster handles it as it handles any failed AWS call (it turns
    it into its AWSClientError; where it tolerates one, e.g. while caching capacity reservations, it goes on).
    """
    import botocore.client
    from botocore.exceptions import BotoCoreError

    class AwsRefusedError(BotoCoreError):
        fmt = NEEDS_AWS + ": {operation}"

    def refused(self: Any, operation: str, params: Any) -> Any:
        raise AwsRefusedError(operation=f"{self.meta.service_model.service_name}.{operation}")

    botocore.client.BaseClient._make_api_call = refused


def check(path: Path) -> dict[str, Any]:
    """One file's result: schema errors, validator errors and warnings, and the validators that need AWS."""
    import yaml
    from marshmallow import ValidationError
    from pcluster.schemas.cluster_schema import ClusterSchema

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    os.environ["AWS_DEFAULT_REGION"] = str((data or {}).get("Region") or "us-east-1")
    result: dict[str, Any] = {
        "file": str(path),
        "schema_errors": [],
        "errors": [],
        "warnings": [],
        "not_run": [],
    }
    try:
        config = ClusterSchema(cluster_name=path.stem).load(data)
    except ValidationError as exc:
        result["schema_errors"] = _flatten(exc.messages)
        return result
    except Exception as exc:
        if NEEDS_AWS not in str(exc):
            raise
        result["not_run"].append(f"ClusterSchema.load: {exc}")
        return result
    _validate_tree(config, result, asyncio.new_event_loop())
    result["not_run"] = sorted(set(result["not_run"]))
    return result


def _validate_tree(resource: Any, result: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """Run each validator of each resource on its own, so one that needs AWS cannot stop the others.

    ParallelCluster's own Resource.validate() registers a resource's validators in one go and awaits them
    together: the first AWS call there would abort the lot. A resource whose registration itself needs AWS
    (the compute resources look up their instance type) still has the validators it registered before that.
    """
    from pcluster.validators.common import AsyncValidator

    for nested in resource._nested_resources():
        _validate_tree(nested, result, loop)
    resource._validators.clear()
    try:
        resource._register_validators(None)
    except Exception as exc:
        if NEEDS_AWS not in str(exc):
            raise
        result["not_run"].append(f"{type(resource).__name__} (the rest of its validators): {exc}")
    for validator_class, arguments in list(resource._validators):
        validator = validator_class()
        name = validator_class.__name__
        try:
            if issubclass(validator_class, AsyncValidator):
                failures = loop.run_until_complete(validator.execute_async(**arguments))
            else:
                failures = validator.execute(**arguments)
        except Exception as exc:  # a validator's own crash is a finding, as in Resource._validator_execute
            key = "not_run" if NEEDS_AWS in str(exc) else "errors"
            result[key].append(f"{name}: {exc}")
            continue
        for failure in failures:
            _record(result, name, failure)


def _record(result: dict[str, Any], name: str, failure: Any) -> None:
    message = str(failure.message)
    if NEEDS_AWS in message:
        result["not_run"].append(f"{name}: {message}")
    elif failure.level.name in ("ERROR", "CRITICAL"):
        result["errors"].append(f"{name}: {message}")
    else:
        result["warnings"].append(f"{name}: {message}")


def _flatten(messages: Any, prefix: str = "") -> list[str]:
    """marshmallow's nested error dict as 'Dotted.Path: message' lines."""
    if isinstance(messages, dict):
        lines = []
        for key, value in messages.items():
            lines += _flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return lines
    if isinstance(messages, list) and all(isinstance(item, str) for item in messages):
        return [f"{prefix or '(top)'}: {item}" for item in messages]
    if isinstance(messages, list):
        return [line for item in messages for line in _flatten(item, prefix)]
    return [f"{prefix or '(top)'}: {messages}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="print one JSON document with every result")
    args = parser.parse_args(argv)
    _refuse_aws()
    # ParallelCluster logs each refused call at ERROR; the result lists them, so print only the result.
    logging.disable(logging.CRITICAL)
    results = [check(path) for path in args.configs]
    failed = any(r["schema_errors"] or r["errors"] for r in results)
    if args.json:
        print(json.dumps({"ok": not failed, "results": results}, indent=2))
        return 1 if failed else 0
    for r in results:
        status = "FAIL" if r["schema_errors"] or r["errors"] else "ok"
        print(f"{status}  {r['file']}")
        for key in ("schema_errors", "errors", "warnings", "not_run"):
            for line in r[key]:
                print(f"  {key}: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
