"""Argument checks at the CLI and API boundary, before any model loads. Each raises ``PeagleError`` with the
allowed range and the flag that fixes it."""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path

import torch

from .errors import PeagleError

MAX_K = 64  # the loop's limit on K (checked once, by num_speculative_tokens)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(value, name: str, flag: str | None = None, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer in ``[minimum, maximum]``."""
    flag = flag or f"--{name.replace('_', '-')}"
    if not _is_int(value) or value < minimum or (maximum is not None and value > maximum):
        rng = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise PeagleError(f"{name} must be an integer {rng}, got {value!r}. Fix: pass {flag} in {rng}.")
    return value


SEED_MAX = 2**32 - 1  # numpy's limit (torch takes 64 bits; a seed must work for both)


def seed(value, flag: str = "--seed") -> int:
    """A random seed: an integer in ``[0, 2**32 - 1]``."""
    return positive_int(value, "seed", flag, 0, SEED_MAX)


def record_range(text, flag: str = "--records") -> slice:
    """``A:B`` (either end may be left out, as in Python): a slice of the records, in prompt order."""
    try:
        a, b = (int(x) if x.strip() else None for x in str(text).split(":"))
    except ValueError:
        raise PeagleError(f"{flag} {text!r} is not a range of records. Fix: {flag} START:END, e.g. "
                          f"{flag} 0:4000 (the first 4,000 records) or {flag} 4000: (the rest).") from None
    if (a is not None and a < 0) or (b is not None and b < 0) or (a is not None and b is not None and b <= a):
        raise PeagleError(f"{flag} {text!r} is empty or negative. Fix: {flag} START:END with 0 <= START < END.")
    return slice(a, b)


def int_list(text, flag: str, example: str) -> list[int]:
    """The one reading of a comma-separated list of integers a flag takes (``"2,15,27"``; ``"1-3,6"``: a range
    is both ends and what lies between, at most 4,096 values), in the order written. Anything else, or nothing, is
    one line naming ``flag`` and a valid ``example``."""
    out: list[int] = []
    try:
        for part in str(text).split(","):
            span = re.fullmatch(r"\s*(-?\d+)\s*-\s*(-?\d+)\s*", part)
            if span:
                a, b = int(span[1]), int(span[2])
                out.extend(range(a, min(b, a + 4095) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError:
        out = []
    if not out:
        raise PeagleError(f"{flag} {text!r} is not a list of integers. Fix: {flag} {example}.")
    return out


def num_speculative_tokens(k, limit: int = MAX_K) -> int:
    """The user's K: 1..limit (a round near the end of a generation may draft fewer; that is not an error)."""
    return positive_int(k, "K (num_speculative_tokens)", "-k/--num-speculative-tokens", 1, limit)


def max_new_tokens(n, context: int | None = None) -> int:
    """At least 1, and (when the target's ``context`` is known) fewer than the context holds."""
    positive_int(n, "max_new_tokens", "--max-new-tokens", 1)
    if context and n >= context:
        raise PeagleError(f"--max-new-tokens {n} does not fit the target's context of {context} positions (the "
                          f"prompt needs some). Fix: --max-new-tokens {context // 2} or less.")
    return n


def finite(value, name: str, flag: str, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> float:
    """A finite number in the interval ``low..high`` (``*_open``: the bound itself excluded)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        bounds = ([f"{'>' if low_open else '>='} {low}"] if low is not None else []) + \
            ([f"{'<' if high_open else '<='} {high}"] if high is not None else [])
        rng = " and ".join(bounds)
        raise PeagleError(f"{name} must be a finite number {rng}, got {value!r}. Fix: pass {flag} {rng}.")
    return float(value)


def token_id(value, vocab_size: int, name: str, flag: str) -> int:
    """An id of the target's vocabulary ``[0, vocab_size)``."""
    return positive_int(value, name, flag, 0, vocab_size - 1)


def text(value, what: str, fix: str) -> str:
    """Text that is not empty or blank and is valid Unicode (encodable as UTF-8: no undecodable bytes)."""
    if not isinstance(value, str) or not value.strip():
        raise PeagleError(f"{what} is empty. Fix: {fix}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PeagleError(f"{what} is not valid UTF-8 text (byte {exc.object[exc.start:exc.end]!r} at "
                          f"{exc.start}). Fix: pass UTF-8 text (save files as UTF-8).") from None
    return value


def temperature(t) -> float:
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
        raise PeagleError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}. "
                          "Fix: pass --temperature 0 for greedy decoding or a positive value to sample.")
    return float(t)


def top_p(p) -> float:
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not (0 < p <= 1):
        raise PeagleError(f"top_p must lie in (0, 1], got {p!r}. Fix: pass --top-p 1.0 (no nucleus filtering) "
                          "or a value such as 0.9.")
    return float(p)


def threads(n) -> int | None:
    if n is None:
        return None
    return positive_int(n, "threads", "--threads", 1)


def device(name, source: str = "--device") -> torch.device:
    """A torch device that exists on this machine (``source``: where the name came from, for the message)."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    given = f"{source} {name}" if source.startswith("-") else f"{source}={name}"
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise PeagleError(f"Unknown device in {given}. Fix: {source} cpu, cuda or cuda:N.") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise PeagleError(f"{given}: this machine has no CUDA GPU (torch {torch.__version__}). "
                              f"Fix: {source} cpu, or install a CUDA build of torch on a GPU machine.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise PeagleError(f"{given}: only {torch.cuda.device_count()} CUDA device(s) here. "
                              f"Fix: {source} cuda:0..cuda:{torch.cuda.device_count() - 1}.")
    elif dev.type in ("mps", "xpu"):
        backend = getattr(torch.backends, "mps", None) if dev.type == "mps" else getattr(torch, "xpu", None)
        if backend is None or not backend.is_available():
            raise PeagleError(f"{given}: this machine (torch {torch.__version__}) has no {dev.type} device. "
                              f"Fix: {source} cpu (or cuda on a GPU machine).")
    elif dev.type != "cpu":
        raise PeagleError(f"Device type {dev.type!r} ({given}) is not supported. Fix: {source} cpu or cuda.")
    return dev


def writable(path, flag: str, folder: bool) -> Path:
    """``path`` can be written: not a symlink itself (refused everywhere alike), no symlink loop, no file where a folder must be, and its folder (or the nearest
    existing one above it) accepts a new file (tried, not guessed from the mode bits). ``folder``: ``path`` is a
    folder the run writes into (else a file)."""
    path = Path(path)
    try:
        path.resolve(strict=False)
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13, OSError after)
        raise PeagleError(f"{flag} {path}: {exc}. Fix: remove the symlink loop or choose another path.") from None
    if path.is_symlink():
        raise PeagleError(f"{flag} {path} is a symlink (to {os.readlink(path)}); outputs are never written through "
                          "a link. Fix: give the real path.")
    if path.exists() and path.is_dir() != folder:
        kind = "a folder" if path.is_dir() else "a file"
        raise PeagleError(f"{flag} {path} is {kind}, a {'folder' if folder else 'file'} is needed. Fix: choose "
                          "another path.")
    probe = path if folder and path.is_dir() else path.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise PeagleError(f"{flag} {path}: {probe} is a file, not a folder. Fix: choose another path.")
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".peagle-write-check.")
        os.close(fd)
        os.remove(tmp)
    except OSError as exc:
        raise PeagleError(f"{flag} {path}: cannot write in {probe} ({exc.strerror or exc}). Fix: choose a "
                          "writable folder.") from None
    if path.exists() and not folder and not os.access(path, os.W_OK):
        raise PeagleError(f"{flag} {path} is read-only. Fix: make it writable or choose another path.")
    return path


def prompt_length(n_prompt: int, n_new: int, context: int | None) -> None:
    """A prompt (plus the tokens to generate) must fit the target's context window."""
    if context and n_prompt >= context:
        raise PeagleError(f"The prompt has {n_prompt} tokens; the target's context holds {context}. Fix: shorten "
                          "the prompt.")
    if context and n_prompt + n_new > context:
        raise PeagleError(f"The prompt ({n_prompt} tokens) plus --max-new-tokens {n_new} exceeds the target's "
                          f"context of {context} positions. Fix: --max-new-tokens {context - n_prompt} or less.")


def disjoint(source, output, source_flag: str, output_flag: str) -> None:
    """``output`` neither is, nor contains, nor lies inside ``source`` (links resolved): writing it (and, with
    ``--overwrite``, clearing it) must never touch the input. A source that is no path (a hub id, a shipped
    head's name) is never in the way."""
    if not Path(source).exists():
        return
    src, out = Path(source).resolve(), Path(output).resolve()
    if src == out or src.is_relative_to(out) or out.is_relative_to(src):
        how = "is" if src == out else "contains" if src.is_relative_to(out) else "lies inside"
        raise PeagleError(f"{output_flag} {output} {how} the input {source_flag} {source}: writing it could destroy "
                          f"the input. Fix: give {output_flag} a path outside {source_flag}, and not above it.")
