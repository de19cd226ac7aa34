"""A small DistributedDataParallel case: a neural n-gram language model (``pytorch/ddp`` test case).

Small on purpose: it checks that a cluster's processes find each other and all-reduce gradients (gloo on
CPU, NCCL on GPU) in seconds, before anyone spends GPU hours on the FSDP case. ``config`` parses the
options, ``model`` is the network, ``data`` makes batches, ``loop`` trains, logs and checkpoints.
"""
