# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The stack layer: the files of stacks/ read and checked. ``stack_schema`` is the stack file's schema and the
JSON Schema validator the cluster spec uses too; ``stack_matrix`` resolves a stack per OS, architecture and
instance family and evaluates the rules of stacks/rules.yml; ``stack_resolver`` finds a stack by id and
gives its pins for one host with the lock file's checksums. It may import the base layers (catalog, artifact,
aws) and nothing above them: the cluster, inventory, launch, image and slurm layers read stacks through it.
"""
