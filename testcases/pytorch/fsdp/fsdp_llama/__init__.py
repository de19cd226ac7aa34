"""Llama-family decoder trained with FSDP2: the ``pytorch/fsdp`` test case of trainstack.

Split the way torchtitan splits it so each part can be read and tested on its own: ``config`` (dataclasses
and CLI), ``model`` (the network only), ``loss`` (fused linear cross-entropy), ``parallel`` (process group,
FSDP2, compile, activation checkpointing), ``data`` (tokenizer, token files, batches), ``checkpoint``
(torch.distributed.checkpoint with auto-resume), ``metrics`` (FLOPs, MFU, the per-step line and summary) and
``loop`` (the training step and its schedule).
"""
