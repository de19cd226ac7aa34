# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The launch layer: from a request to train a test case to the plan the training_job role carries out.

The role's tasks stage files, submit jobs and collect results; every decision before that (which checks a
request breaks, where the payload and virtualenv go, which arguments and environment the ranks get, how a
container image is imported) is made here, in plain functions that unit tests call directly. The layer may
import the stack layer and the base layers (catalog, artifact, aws) below it; never the cluster, inventory,
image or slurm layers beside it, nor the plugins above.
"""
