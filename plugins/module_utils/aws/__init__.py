# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The one base of the collection's AWS modules: clients, waits, missing resources and drift, each once.

Every module that calls AWS (batch_cluster, eks_cluster, hyperpod_cluster, pcs_cluster, fsx_lustre,
ecr_repositories) gets its clients from ``client`` (botocore's standard retry mode, so throttling is retried
with backoff by botocore and never by a loop of ours), waits with ``wait.Waiter`` (one deadline for every wait
of a run, a floor under the interval, a timeout that names what was waited for and the last state seen), tells
a missing resource from an error with ``errors.is_not_found`` (each service's own codes, in one table), and
reports what an existing resource has otherwise than the request asks with ``drift``. As amazon.aws keeps
its retries and waiters in module_utils/botocore.py and waiters.py, the modules here read alike because they
are built from the same parts; the options those parts read are documented once, in the doc fragment
trainstack.cluster.cluster_module. A base layer: nothing here imports the rest of module_utils, the
modules or the renderers; imports go one way.
"""
