# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The artifact layer: what a host fetches, verified before it is used. ``artifact_fetch`` downloads every
artifact a stack names with its sha256 (from the stack or its lock file), from upstream or a mirror, and
records lock entries; ``openpgp_key`` computes the fingerprints of a package repository's signing key, which
pin that key as a checksum pins a download. A base layer: it imports nothing else of module_utils; the stack
layer above it reads lock entries through it.
"""
