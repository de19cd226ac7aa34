"""Llama-3 decoder in plain JAX, sharded over a (data, FSDP) device mesh: the ``jax/llama`` test case.

``config`` (options and rules, no jax), ``launch`` (the ranks from torchrun's environment, no jax), ``dist``
(``jax.distributed``, the mesh), ``model`` (parameters, forward, loss), ``data`` (rows as numpy arrays),
``train_step`` (optax AdamW and the jitted step), ``checkpoint`` (orbax) and ``loop`` (resume, steps,
pytorch/fsdp's metric lines and summary).
"""
