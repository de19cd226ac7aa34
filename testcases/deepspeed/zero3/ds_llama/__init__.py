"""pytorch/fsdp's Llama-3 trained by DeepSpeed's ZeRO engine: the ``deepspeed/zero3`` test case.

The engine, its ZeRO stages (1 optimizer state, 2 gradients, 3 parameters), CPU offload, bf16 with fp32 master
weights, gradient clipping, its warm-up and cosine schedule and its checkpoints are DeepSpeed's own; the
network, the named shapes, the data, the FLOP formula, the metric line and the summary are those of
``pytorch/fsdp``, from the shared library ``trainstack_train`` (staged beside this package, see the manifest's
``include``), so both cases train the same networks and report alike. ``config`` (CLI, the rules and
DeepSpeed's config, no torch), ``build`` (model and engine), ``checkpoint`` (publish and find the latest tag)
and ``loop`` (steps, summary).
"""
