"""megatron-core's GPTModel trained on trainstack's data and metrics: the ``megatron/gpt`` test case.

The model (``GPTModel`` with megatron-core's local layer spec: Llama-style RMSNorm, SwiGLU, RoPE,
grouped-query attention), its tensor, pipeline and data parallelism, activation recomputation, the
optimizer (optionally Megatron's distributed optimizer) and its learning-rate schedule are megatron-core's
own; what is trainstack's comes from the shared library ``trainstack_train`` (staged beside this package, see
the manifest's ``include``), as in ``pytorch/fsdp``: the named shapes, the data, the FLOP formula, the
metric line and the summary.
``config`` (CLI and the parallelism rules, no torch), ``build`` (megatron-core objects), ``checkpoint``
(save and automatic resume) and ``loop`` (steps and summary).
"""
