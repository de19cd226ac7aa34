"""One ``torch.compile`` wrapper per plain function and options, for the whole process.

Why: a compiled function keeps its graphs in its wrapper, so making the wrapper again (one per model, per
optimizer) would compile the same code again. The loss kernel and the optimizer update both go through here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def compile_once(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(fn, **options)``, made the first time and reused after (options must be hashable)."""
    return torch.compile(fn, **options)
