"""moto, the AWS stand-in: tests that talk to AWS talk to a real moto HTTP server in a child process (one per
test module or session), started by start_moto. The server's helpers are product code, shared with the
benchmarks (bench/support/moto.py); this module adds the environment that points ansible-* commands at it.
"""

from __future__ import annotations

from bench.support.moto import MOTO_KEYS, MotoServer, free_port, start_moto

from .collection import ansible_env

__all__ = ["MOTO_KEYS", "MotoServer", "free_port", "moto_aws_env", "start_moto"]


def moto_aws_env(url: str, **extra: str) -> dict[str, str]:
    """Environment for ansible-* commands whose AWS calls go to moto at ``url``: no host AWS config or
    instance metadata, test keys, and AWS_ENDPOINT_URL (botocore sends every service there)."""
    env = {k: v for k, v in ansible_env().items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent/aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=url,
        **MOTO_KEYS,
    )
    env.update(extra)
    return env
