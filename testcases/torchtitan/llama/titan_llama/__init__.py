"""torchtitan's Llama-3 trained on trainstack's data and metrics: the ``torchtitan/llama`` test case.

The model, its parallelisation (FSDP2, tensor and pipeline parallelism, activation checkpointing, per-block
compile, float8), the optimizer, the learning-rate schedule and checkpointing are torchtitan's own; what is
trainstack's comes from the shared library ``trainstack_train`` (staged beside this package, see the
manifest's ``include``), as in ``pytorch/fsdp``: the named shapes, the data, the FLOP formula, the metric line
and the summary. ``config`` (CLI and the parallelism rules, no torch), ``build`` (torchtitan objects from the
config), ``loop`` (steps, checkpoints, summary) and ``resume`` (which checkpoint a relaunch loads and
which of the case's states it lacks; torch only).
"""
