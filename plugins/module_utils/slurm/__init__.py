# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The Slurm layer: what a module or filter needs of a running Slurm cluster. ``slurm_jobs`` parses
`sbatch`, `squeue`, `sacct` and `scontrol` output into one answer per job; ``cluster_users`` checks the
cluster's user list, which feeds the directory and Slurm accounting, and gives the `sacctmgr` calls that bring
accounting to it. It may import the stack layer and the base layers (catalog, artifact, aws); never the
cluster, inventory, launch or image layers beside it, nor the plugins above.
"""
