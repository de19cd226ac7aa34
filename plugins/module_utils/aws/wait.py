# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Waiting for AWS resources: one deadline for every wait of a module run, and one way of ending a wait.

Why not botocore's waiters: only EKS has them (PCS, HyperPod, Batch and FSx have none), each has its own delay
and attempt count per wait, and a waiter that gives up says neither the status it saw last nor how long it
waited. The modules promise something else: O(wait_timeout) bounds all the waits of one run together (a
cluster and then its node groups share it), O(poll_interval) is the pace, a resource that reaches a state it
never leaves (C(CREATE_FAILED)) ends the wait at once, and a wait that runs out says what it waited for, the
status it saw last and what to do. Throttled Describe calls are retried by botocore (client.py's retry
mode), never by this loop; the floor under the interval keeps a loop from adding to the throttling.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

# The status of a resource that is no longer there; also what a deletion waits for.
GONE = "gone"
# No two looks closer than this, whatever O(poll_interval) says: AWS meters Describe calls per account and
# region, shared with every other caller there, and a wait is never in a hurry by a second.
MIN_INTERVAL = 1.0
# What a Waiter reads the time with and sleeps with unless it is given others; looked up when a Waiter is
# made, so that a test of a whole module can replace them.
CLOCK: Callable[[], float] = time.monotonic
SLEEP: Callable[[float], None] = time.sleep


def argument_spec() -> dict[str, Any]:
    """The wait options (doc fragment trainstack.cluster.cluster_module.wait). A module sets its own
    default O(wait_timeout) where its service is quicker, and its own pace for O(poll_interval) left out."""
    return {
        "wait": {"type": "bool", "default": True},
        "wait_timeout": {"type": "int", "default": 3600},
        "poll_interval": {"type": "int"},
    }


def problems(params: dict[str, Any]) -> list[str]:
    """What is wrong with the wait options; a wait of 0 seconds would end before its first look."""
    return [
        f"{key}: must be more than 0 seconds (got {params[key]})"
        for key in ("wait_timeout", "poll_interval")
        if params.get(key) is not None and params[key] <= 0
    ]


class Look(NamedTuple):
    """One look at what is waited for: its status, whether that is the end, and why it failed if it did."""

    status: str
    done: bool = False
    failure: str | None = None


class WaitError(Exception):
    """A wait that ended without what it waited for; ``status`` is the last one seen."""

    def __init__(self, message: str, status: str, progress: list[str]) -> None:
        super().__init__(message)
        self.status = status
        self.progress = list(progress)

    def as_result(self) -> dict[str, Any]:
        """What the module fails with, the same in every module: the message, the status, the progress."""
        return {"msg": str(self), "status": self.status, "progress": self.progress}


class WaitFailedError(WaitError):
    """The resource reached a state it does not leave (a failed create or delete, or it went away)."""


class WaitTimeoutError(WaitError):
    """O(wait_timeout) ran out; the service goes on, so running the task again waits once more."""


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Waiter:
    """Polls until each resource of a run is ready or gone, within one deadline for the whole run.

    ``service`` starts every message (C(EKS), C(PCS)); ``hint`` ends a timeout's message with what the user
    can do (run the task again, the CLI command that watches the resource). ``progress`` keeps each change of
    status seen, as C(<seconds>s <what> <status>), for the module's result and for a failure.
    """

    def __init__(
        self,
        service: str,
        timeout: float,
        interval: float,
        *,
        hint: str = "",
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"wait_timeout: must be more than 0 seconds (got {timeout})")
        self.service, self.timeout, self.hint = service, timeout, hint
        self.interval = max(float(interval), MIN_INTERVAL)
        self._clock = clock or CLOCK
        self._sleep = sleep or SLEEP
        self.start = self._clock()
        self.deadline = self.start + timeout
        self.progress: list[str] = []

    @classmethod
    def of_module(cls, module: Any, service: str, pace: float, hint: str = "") -> Waiter:
        """The run's waiter, from the module's O(wait_timeout) and O(poll_interval) (left out: ``pace``,
        the module's own for its service)."""
        params = module.params
        return cls(service, params["wait_timeout"], params.get("poll_interval") or pace, hint=hint)

    def seen(self, what: str, status: str) -> None:
        """Keep a status unless it is the one kept last for the same resource."""
        line = f"{what} {status}" if what else status
        if not self.progress or self.progress[-1].split(" ", 1)[1] != line:
            self.progress.append(f"{int(self._clock() - self.start)}s {line}")

    def poll(
        self, what: str, wanted: str, look: Callable[[], Look], *, progress_as: str | None = None
    ) -> None:
        """Look until ``look`` says done, fails, or the deadline has passed; sleep between two looks.

        The sleep is the interval, shortened to land on the deadline (one last look then) but never below
        MIN_INTERVAL; so the deadline may be passed by less than MIN_INTERVAL, and a look is never wasted on
        a sleep of a few milliseconds.
        """
        while True:
            seen = look()
            self.seen(what if progress_as is None else progress_as, seen.status)
            if seen.failure is not None:
                raise WaitFailedError(seen.failure, seen.status, self.progress)
            if seen.done:
                return
            now = self._clock()
            if now >= self.deadline:
                raise WaitTimeoutError(
                    self.timeout_message(what, wanted, seen.status), seen.status, self.progress
                )
            self._sleep(max(MIN_INTERVAL, min(self.interval, self.deadline - now)))

    def timeout_message(self, what: str, wanted: str, status: str) -> str:
        """Says what was waited for, for how long, the last status seen, and what to do next."""
        target = "deleted" if wanted == GONE else wanted
        message = (
            f"{self.service} {what}: still {status} after {_seconds(self.timeout)} s (wait_timeout), "
            f"not {target}."
        )
        return f"{message} {self.hint}" if self.hint else message

    def until(
        self,
        what: str,
        look: Callable[[], T | None],
        wanted: str,
        *,
        status: Callable[[T], str] = lambda item: item["status"],
        failed: Collection[str] = (),
        reason: Callable[[T], str] | None = None,
        progress_as: str | None = None,
    ) -> T | None:
        """Wait until one resource has status ``wanted`` (or, with GONE, until ``look`` answers None).

        A status in ``failed`` ends the wait (with ``reason`` of the resource after it, where given), and so
        does a resource that goes away while it is waited for. Returns the resource as last seen.
        """
        last: list[T | None] = [None]

        def one() -> Look:
            item = last[0] = look()
            if item is None:
                gone = f"{self.service} {what}: gone while waiting for {wanted}"
                return Look(GONE, done=wanted == GONE, failure=None if wanted == GONE else gone)
            now = status(item)
            if now in failed:
                why = f": {reason(item)}" if reason is not None else ""
                return Look(now, failure=f"{self.service} {what} is {now}{why}")
            return Look(now, done=now == wanted)

        self.poll(what, wanted, one, progress_as=progress_as)
        return last[0]
