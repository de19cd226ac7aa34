"""Options of ``data/prepare`` and the rules a launch checks before it queues the job.

Why two steps: :func:`parse_args` reads the options only (the launcher reads ``--help``, and the catalog's
tests parse the manifest's defaults, which name no corpus); :func:`problems` then checks them against the
filesystem the job will see, with :func:`trainstack_train.prepare.check`, the same checks the job runs before
it writes. ``--validate-only true`` runs both on the submit host (the manifest's ``validate_option``), so a
missing tokenizer, an empty corpus, an S3 input whose bucket or objects do not exist, or an output holding
another preparation's shards is refused before anything is submitted, naming the input. No torch here: the
check must answer in a moment.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# --tokenizer's word for "train a byte-level BPE on the corpus" (nothing downloaded).
TRAIN = "train"
# Object-store URLs the options refuse by name: the job writes the shared filesystem only, and reads it or,
# for --input alone, an S3 prefix (trainstack_train.storage's URI rules and client).
REMOTE_SCHEMES = ("s3://", "gs://", "az://", "http://", "https://")
INPUT_SCHEMES = ("s3://",)
BOOL_WORDS = {"true": "true", "1": "true", "yes": "true", "false": "false", "0": "false", "no": "false"}
# What a training case's checkpoint options would mean here: nothing, a preparation resumes per shard.
CHECKPOINT_OPTIONS = ("checkpoint_dir", "checkpoint_every")


@dataclass(frozen=True)
class PrepareConfig:
    """One preparation: where the corpus is, which tokenizer, where the shards go and how many."""

    input: str = ""
    output: str = ""
    tokenizer: str = TRAIN
    vocab_size: int = 8192
    num_shards: int = 8
    text_field: str = "text"
    eos_token: str = ""
    summary_json: str = ""
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    validate_only: str = "false"

    @property
    def trains_tokenizer(self) -> bool:
        """``--tokenizer train``: rank 0 trains one on the corpus before any shard is written."""
        return self.tokenizer == TRAIN


def _bool_word(value: str) -> str:
    word = BOOL_WORDS.get(value.strip().lower())
    if word is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not true or false")
    return word


def build_parser() -> argparse.ArgumentParser:
    """The options as the launcher passes them (``--key value``)."""
    parser = argparse.ArgumentParser(
        prog="prepare.py",
        description="trainstack data/prepare: a corpus into Megatron-Core indexed shards and manifest.json",
    )
    parser.add_argument(
        "--input", default="", help="a directory (searched recursively), a corpus file, or s3://bucket/prefix"
    )
    parser.add_argument("--output", default="", help="directory for the shards, tokenizer.json, manifest")
    parser.add_argument(
        "--tokenizer", default=TRAIN, help=f"a Hugging Face tokenizer.json, or {TRAIN!r}: a BPE on the corpus"
    )
    parser.add_argument("--vocab-size", type=int, default=8192, help=f"of the tokenizer --tokenizer {TRAIN}")
    parser.add_argument("--num-shards", type=int, default=8, help="shards of the corpus (fixed once chosen)")
    parser.add_argument("--text-field", default="text", help="JSONL key or Parquet column holding the text")
    parser.add_argument("--eos-token", default="", help="end-of-document token (default: the tokenizer's)")
    parser.add_argument("--summary-json", default="", help="rank 0 writes the job's summary there")
    parser.add_argument("--checkpoint-dir", default="", help="refused: a preparation resumes per shard")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="refused: see --checkpoint-dir")
    parser.add_argument("--validate-only", type=_bool_word, default="false", help="check and exit")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> PrepareConfig:
    """The options, each of its type; an unknown one exits with status 2 (argparse's way)."""
    return PrepareConfig(**vars(build_parser().parse_args(argv)))


def _remote(value: str) -> bool:
    return value.lower().startswith(REMOTE_SCHEMES)


def option_problems(cfg: PrepareConfig) -> list[str]:
    """The rules that read the options alone, one sentence each naming the option."""
    found = []
    if _remote(cfg.input) and not cfg.input.lower().startswith(INPUT_SCHEMES):
        found.append(
            f"--input {cfg.input}: only s3:// object storage is read; copy the corpus to S3 or to the shared "
            "filesystem first and name that"
        )
    for name in ("output", "tokenizer"):
        value = getattr(cfg, name)
        if _remote(value):
            found.append(
                f"--{name} {value}: writing or reading object storage is not supported here; name a path on "
                "the shared filesystem"
            )
    if not cfg.input:
        found.append(
            "--input is required: a directory or file of the corpus on the shared filesystem, "
            "or an s3:// prefix"
        )
    if not cfg.output:
        found.append("--output is required: the directory the shards and manifest.json are written to")
    if cfg.num_shards < 1:
        found.append(f"--num-shards {cfg.num_shards}: at least 1")
    if cfg.trains_tokenizer and cfg.vocab_size < 258:
        found.append(f"--vocab-size {cfg.vocab_size}: at least 258 (256 bytes, the EOS, one merge)")
    if cfg.checkpoint_dir or cfg.checkpoint_every:
        found.append(
            "--checkpoint-dir/--checkpoint-every: a preparation keeps no checkpoint, it resumes per shard in "
            "--output when launched again with the same arguments (leave training_job_checkpoint_every at 0)"
        )
    return found


def problems(cfg: PrepareConfig, environ: Mapping[str, str]) -> list[str]:
    """Every rule, the filesystem's included: what the job itself would refuse before it writes.

    The tokenizer, the corpus and its first document, and the output directory are read through
    :func:`trainstack_train.prepare.check`, so the launch and the job cannot disagree. With ``--tokenizer
    train`` the tokenizer does not exist yet: the corpus is checked on its own. ``environ`` gives an S3
    input's region and endpoint (``AWS_REGION``, ``AWS_ENDPOINT_URL_S3``); the rules do not depend on the
    world size, as any number of ranks shares the shards.
    """
    found = option_problems(cfg)
    if found:
        return found
    from trainstack_train import prepare  # tokenizers is imported only when a tokenizer is read

    inputs, output = [cfg.input], Path(cfg.output)
    try:
        if cfg.trains_tokenizer:
            files = prepare.corpus_files(inputs, environ)
            if next(prepare.documents(files, cfg.text_field), None) is None:
                raise prepare.PrepareError(f"input {cfg.input}: no documents (every text is empty)")
            if output.exists() and not output.is_dir():
                raise prepare.PrepareError(f"--output {output}: exists and is not a directory")
        else:
            prepare.check(
                inputs,
                output,
                Path(cfg.tokenizer),
                num_shards=cfg.num_shards,
                text_field=cfg.text_field,
                eos_token=cfg.eos_token or None,
                environ=environ,
            )
    except prepare.PrepareError as err:
        return [str(err)]
    return []
