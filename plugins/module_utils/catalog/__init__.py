# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The instance catalog layer: the one table of instance types (stacks/instance_types.yml) as Python, checked,
merged per family and type, and looked up (GPUs, EFA interfaces, NCCL environment, health floors, peaks).
``instance_catalog_data`` is generated from the YAML by `make instance-catalog` because module_utils reach a
host as Python only. A base layer: of module_utils it imports only ``files`` (to read that YAML), and
everything that needs a fact of an instance type (the stack rules, the cluster spec and renderers, the
inventory) reads it here.
"""
