# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The cluster layer: an AWS training cluster from its spec to the requests that make it. ``cluster_spec``
holds the spec's schema, rules and defaults, ``cluster_inputs`` the foundation record's rules and the AMI's
choice, ``spec_module`` the first steps every cluster module shares; the renderers (``pcluster_render``,
``pcs_render``, ``hyperpod_render``, ``eks_render``, ``batch_render``, with ``launch_template`` for EKS and
Batch) turn a checked spec into requests, pure functions that send nothing, and ``botocore_model`` holds each
request to botocore's model of its API. It may import the stack layer and the base layers (catalog,
artifact, aws); never the inventory, launch, image or slurm layers beside it, nor the plugins above.
"""
