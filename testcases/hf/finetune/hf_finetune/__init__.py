"""Hugging Face fine-tuning: a transformers Llama model, PEFT LoRA adapters, accelerate with FSDP2.

The ``hf/finetune`` test case. The model comes from a local directory in transformers' format
(``--model-path``), or is made with random weights from one of the shared named shapes (``--init-config``);
nothing is downloaded. What is trainstack's comes from the shared library ``trainstack_train`` (staged
beside this package, see the manifest's ``include``): the shapes, the process group, the FLOP formula, the
metric line and the summary. ``config`` (CLI and rules, no torch), ``data`` (instruction records, tokenizer,
packed windows), ``model`` (transformers and PEFT), ``loop`` (accelerate, steps, checkpoints, evaluation,
summary).
"""
