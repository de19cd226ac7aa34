# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""AWS clients of the modules, and how an AWS error or a wait that ends badly fails a module.

Why botocore's standard retry mode: a throttled call (C(ThrottlingException), C(TooManyRequestsException),
C(RequestLimitExceeded), ...) or a transient one (a 5xx, a request timeout, a dropped connection) is retried
by botocore, with exponential backoff and full jitter capped at 20 s and a retry quota that stops retrying a
service that keeps failing, for every call of the client; the legacy mode botocore uses otherwise has neither
the cap nor the quota. Waits therefore never retry throttling themselves (wait.py). 10 attempts ride out
a burst of throttling shared with other callers of the account. Adaptive mode adds a client-side rate limiter
that learns within one process only, and a module run is one process making a few calls, so it would add
nothing. A user's O(aws_config) is merged after this and wins.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:
    import botocore.config
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover - AnsibleAWSModule reports a missing botocore itself
    BotoCoreError = ClientError = None

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.wait import WaitError

# total_max_attempts counts the first call too (botocore's max_attempts counts only the retries).
RETRIES: dict[str, Any] = {"mode": "standard", "total_max_attempts": 10}


def client(module: Any, service: str, region: str | None = None, attempts: int | None = None) -> Any:
    """A client of ``service`` (in ``region``, else the module's O(region)) that retries as RETRIES says;
    ``attempts`` lowers the total for a read whose failure is only a warning (a quota), which should not
    hold the run for minutes of backoff first."""
    where = {"region": region} if region else {}
    # A copy: botocore rewrites the retries mapping it is given (max_attempts into total_max_attempts).
    retries = {**RETRIES, "total_max_attempts": attempts} if attempts else dict(RETRIES)
    return module.client(service, config=botocore.config.Config(retries=retries), **where)


@contextmanager
def reported(module: Any, what: str) -> Iterator[None]:
    """Fail the module the same way in every module: an AWS error with amazon.aws's details under ``what``,
    a wait that ends badly with its message, the last status seen and the progress."""
    try:
        yield
    except WaitError as exc:
        module.fail_json(**exc.as_result())
    except (BotoCoreError, ClientError) as error:
        module.fail_json_aws(error, msg=what)
