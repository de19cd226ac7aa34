# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The image layer: an image built by this collection, planned and read back where it is published.
``container_flavours`` plans a container build's layers from its flavour table, ``container_stack`` gives its
CUDA layers the stack's GPU line, and ``oci_image`` reads a container image's manifest and stack record from
its registry and judges the record against a host's NVIDIA driver with the version matrix's own rule;
``stages`` keys the local image build's stages by their inputs and ``stage_cache`` keeps their snapshots and
chooses the one a build resumes from. It may
import the stack layer and the base layers (catalog, artifact, aws); never the cluster, inventory, launch or
slurm layers beside it, nor the plugins above.
"""
