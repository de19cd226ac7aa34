#!/usr/bin/env python3
"""STAND-IN for Nsight Systems' `nsys profile [--option ...] --output=PATH CMD [ARGS...]` (no GPU tools here).

It writes PATH.nsys-rep as JSON holding CMD, ARGS and the environment exactly as this process received them,
then becomes CMD. Launched by training_job's wrapper in place of the training process, it shows what the
training process itself is given.
"""

import json
import os
import sys


def main() -> None:
    """Record, then exec the command so the run goes on as under nsys."""
    args = sys.argv[1:]
    if not args or args[0] != "profile":
        sys.exit("stand-in nsys: only 'profile' is implemented")
    options = []
    rest = args[1:]
    while rest and rest[0].startswith("-"):
        options.append(rest.pop(0))
    output = next(o.split("=", 1)[1] for o in options if o.startswith("--output="))
    with open(output + ".nsys-rep", "w", encoding="utf-8") as handle:
        json.dump({"tool": "stand-in nsys", "command": rest, "env": dict(os.environ)}, handle)
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main()
