"""Collective bandwidth benchmark through torch.distributed: the ``nccl/collectives`` test case.

``config`` parses the options, ``busbw`` holds nccl-tests' size and bandwidth conventions and its row
format, ``runner`` allocates, times and checks each collective.
"""
