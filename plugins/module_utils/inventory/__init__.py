# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The inventory layer: the trainstack.cluster.ec2_cluster inventory's Python. ``ec2_cluster_model`` decides
what the inventory holds (which instance is which cluster, role and queue; groups and host variables) from
plain records, without AWS; ``ec2_cluster_aws`` reads EC2 and SageMaker, regions in parallel, and turns every
AWS failure into one sentence. It may import the stack layer and the base layers (catalog, artifact, aws);
never the cluster, launch, image or slurm layers beside it, nor the plugins above.
"""
