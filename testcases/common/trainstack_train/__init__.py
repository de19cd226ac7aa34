"""trainstack's training library: the one Llama model and training loop that the test cases share.

Why one library: the test cases train the same networks with different frameworks (FSDP2, DeepSpeed,
Megatron-core, torchtitan, Hugging Face, JAX), and their numbers compare only when everything around the
framework is the same code: the shapes (``config.MODEL_CONFIGS``) and the run options every case takes, the
synthetic and tokenized data, the FLOP count, the ``TRAINSTACK_METRIC`` line and the summary JSON
(``metrics``), distributed initialisation (``parallel``) and the checkpoint layout. ``pytorch/fsdp`` is the
reference trainer built from it (``model``, ``loss``, ``optim``, ``loop``), which the others are measured
against and ``bench/`` times. ``entry`` holds what every ``train.py`` does around its loop.

The name says what it is for (training code that runs on the cluster's nodes, beside a test case's
``train.py``) and keeps it apart from the Ansible collection ``trainstack.cluster``, which never imports it.
A test case names ``common/trainstack_train`` in its manifest's ``include``, and staging copies the package
beside its entrypoint; in the repository it is installed (editable) from ``testcases/common``.

Split the way torchtitan splits its components so each part can be read and tested on its own: ``config``
(dataclasses and CLI), ``model`` (the network only), ``loss`` (fused linear cross-entropy), ``parallel``
(process group, FSDP2, compile, activation checkpointing), ``data`` and ``tokens`` (tokenizer, token files,
batches), ``indexed``, ``prepare`` and ``corpus`` (Megatron's indexed format, preparing a corpus, the
resumable sampler; torch-free), ``checkpoint`` (torch.distributed.checkpoint with auto-resume),
``storage`` (where checkpoints live: a shared directory or an S3 prefix; torch-free),
``metrics`` (FLOPs, MFU, the per-step line and summary), ``loop`` (the training step and its schedule) and
``entry`` (an entrypoint's start and exit).
"""
