"""Pure parsers: the sampler's JSONL, BigGAN-PyTorch's logs, and the seed's `sar` and `nvidia-smi` text.

Every parser takes text and returns frozen dataclasses; none opens a file (callers read),
so each is tested on recorded samples under tests/unit/data/. A value a tool printed as
unavailable (`[N/A]`, `[Not Supported]`) or a block the sampler marked not measured comes
back as None with the reason where there is one, never as 0.

One module per format: `sampler_jsonl.py`, `biggan_logs.py` (metrics, losses, metalog),
`console_log.py` (a step's console output in CRI's format, BigGAN's progress lines in it),
`sar.py`, `nvidia_smi.py`. All of them raise this package's `ParseError`.
"""

from __future__ import annotations

MIB = 1 << 20
KIB = 1 << 10


class ParseError(ValueError):
    """Text that is not in the format the parser reads; the message says where."""
