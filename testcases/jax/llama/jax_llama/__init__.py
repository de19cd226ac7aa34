"""Llama-3 decoder in plain JAX, sharded over a (data, FSDP) device mesh: the ``jax/llama`` test case.

``config`` (options and rules, no jax), ``dist`` (``jax.distributed`` from torchrun's environment, the mesh),
``model`` (parameters, forward, loss), ``data`` (batches as numpy rows), ``train_step`` (optax AdamW and the
jitted step), ``checkpoint`` (orbax) and ``loop`` (resume, steps, pytorch/fsdp's metric lines and summary).
"""
