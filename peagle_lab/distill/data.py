"""Training data for drafter heads: self-distillation (``peagle-lab distill``).

* :func:`distill` -- the target regenerates the responses to the training prompts (greedy, chat template via
  :func:`peagle_lab.prompts.chat_ids`, batched left-padded generation with a KV cache). A drafter must predict
  what THE TARGET would say next, so its training text should be the target's own text: with responses written
  by someone else, depth >= 1 slots are almost never accepted. Results go to a JSONL file that is
  rewritten atomically after every batch; a restarted run skips the prompts already done. The file only grows:
  records of prompts not in this run stay, and only ``overwrite`` (``--overwrite``) drops records, saying how many.

File format (``*.jsonl``): line 1 ``{"meta": {...}}`` (target, fingerprint, max_new_tokens, ...), then one record
per prompt ``{"index", "prompt_sha", "prompt_len", "input_ids", "finished"}``; ``input_ids`` = prompt + response,
``prompt_len`` = number of prompt tokens, ``finished`` = the response ended with EOS (else it hit the limit).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import lock, validate
from ..atomic import atomic_write
from ..errors import PeagleError
from ..features.identity import holds_float32, identity_problem, recorded_target_problem, \
    target_identities
from ..prompts import chat_ids, load_scale_records, load_train_prompts, record_messages
from ..settings import data_path, results_dir

FORMAT = "peagle-lab-distill"
VERSION = 1
MAX_SEQ_LEN = 1024  # training reads at most this many tokens of a sequence (prompt + response)
# the target's identity (target_identity, or in a file without it the exact target_fingerprint), plus these
_RESUME_KEYS = ("max_new_tokens", "system")


def prompt_sha(prompt) -> str:
    """Identity of a prompt: its text, or for a multi-turn record its history and text."""

    text, history = record_messages(prompt)
    key = text if not history else json.dumps({"history": history, "prompt": text}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ file I/O
@contextlib.contextmanager
def _open_text(file, mode: str, gz: bool):
    """A distilled file for reading (``"r"``) or writing (``"w"``): plain JSONL, or gzip-compressed when ``gz``
    (``*.jsonl.gz``; written with no name or timestamp in its header, so the same records give the same bytes)."""
    if not gz:
        with open(file, mode, encoding="utf-8") as fh:
            yield fh
        return
    with open(file, mode + "b") as raw, gzip.GzipFile(filename="", mode=mode + "b", fileobj=raw, mtime=0) as z, \
            io.TextIOWrapper(z, encoding="utf-8") as fh:
        yield fh


def _write_atomic(path: Path, meta: dict, records: list[dict]) -> None:
    def write(tmp):
        with _open_text(tmp, "w", gz=path.suffix == ".gz") as fh:
            fh.write(json.dumps({"meta": meta}) + "\n")
            for rec in sorted(records, key=lambda r: r["index"]):
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")

    atomic_write(path, write)


def _lines(path: Path):
    with _open_text(path, "r", gz=path.suffix == ".gz") as fh:
        yield from enumerate(fh, 1)


def record_problem(obj, vocab_size: int | None = None) -> str | None:
    """Why ``obj`` is not a distilled record (None when it is one): ``index`` an int >= 0, ``prompt_sha`` a string,
    ``input_ids`` a list of ints in ``[0, vocab_size)`` (when the vocabulary is known), ``prompt_len`` an int in
    ``[1, len(input_ids)]``."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    if not isinstance(obj, dict):
        return "not an object"
    ids = obj.get("input_ids")
    if not is_int(obj.get("index")) or obj["index"] < 0:
        return f"index {obj.get('index')!r} is not an int >= 0"
    if not isinstance(obj.get("prompt_sha"), str):
        return "it has no prompt_sha string"
    if not isinstance(ids, list) or not ids:
        return "input_ids is not a non-empty list"
    bad = next((t for t in ids if not is_int(t) or t < 0 or (vocab_size is not None and t >= vocab_size)), None)
    if bad is not None:
        where = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
        return f"input_ids holds {bad!r}, not a token id {where}"
    if not is_int(obj.get("prompt_len")) or not 1 <= obj["prompt_len"] <= len(ids):
        return f"prompt_len {obj.get('prompt_len')!r} is not an int in [1, {len(ids)}] (the number of input_ids)"
    return None


def read_distilled(path, vocab_size: int | None = None) -> tuple[dict, list[dict]]:
    """``(meta, records)`` of a distilled-sequences file (records sorted by prompt index). Every record is checked
    (:func:`record_problem`; token ids against ``vocab_size`` when given), so damaged data is refused here, before
    any model loads, with its line number."""
    path = Path(path)
    if not path.is_file():
        raise PeagleError(f"No distilled sequences at {path}. Fix: run `peagle-lab distill --out {path}` first "
                          "(or data.distill(model, tokenizer, prompts, path)).")
    meta, records, seen = None, [], {}
    try:
        lines = list(_lines(path))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise PeagleError(f"{path} cannot be read ({exc}): the file is damaged. Fix: restore it (git, a copy), or "
                          "distill again into a new --out.") from None
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            exc = exc if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise PeagleError(f"{path}:{lineno} is not JSON ({exc}): the file is damaged. Fix: repair or remove that "
                              "line, or distill again into a new --out.") from None
        if isinstance(obj, dict) and "meta" in obj:
            meta = obj["meta"]
            continue
        problem = record_problem(obj, vocab_size)
        if problem is None and obj["index"] in seen:
            problem = f"index {obj['index']} repeats line {seen[obj['index']]}"
        if problem:
            raise PeagleError(f"{path}:{lineno} is not a distilled record ({problem}): the file is damaged or was "
                              "made for another target. Fix: repair or remove that line, or distill again into a "
                              "new --out.")
        seen[obj["index"]] = lineno
        records.append(obj)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PeagleError(f"{path} is not a {FORMAT} file (no meta line). Fix: write it with `peagle-lab distill`.")
    return meta, sorted(records, key=lambda r: r["index"])


def select_split(records: list[dict], split: str) -> tuple[list[dict], int]:
    """The records whose prompt belongs to ``split`` of the scale mix (``data/prompts/scale.jsonl``):
    ``"train"`` drops the held-out ``val`` prompts (records of prompts outside the mix count as train),
    ``"val"`` keeps only them, ``"all"`` keeps everything. Returns ``(records, dropped)``; prompts are matched
    by their ``prompt_sha`` (text and history), not by index, so any distilled file can be split."""

    if split not in ("train", "val", "all"):
        raise PeagleError(f"split must be 'train', 'val' or 'all', got {split!r}. Fix: --split train, val or all.")
    if split == "all":
        return list(records), 0
    val = {prompt_sha(r) for r in load_scale_records("val")}
    kept = [r for r in records if (r["prompt_sha"] in val) == (split == "val")]
    return kept, len(records) - len(kept)


# ------------------------------------------------------------------------------------------ distillation
def encode_prompts(tokenizer, prompts: list, indices, system, max_new_tokens: int, context: int | None
                   ) -> dict[int, list[int]]:
    """The chat-template token ids of ``prompts[i]`` for ``i`` in ``indices``, each checked: text present and valid
    UTF-8 (the system message too), and room in the target's ``context`` for ``max_new_tokens`` after it."""
    if system is not None:
        validate.text(system, "The system message (--system)", "pass a non-empty --system or leave it out")
    encoded = {}
    for i in indices:
        text, history = record_messages(prompts[i])
        validate.text(text, f"Prompt {i}", "remove empty prompts from the prompts file")
        for turn in history or []:
            validate.text(turn.get("content") if isinstance(turn, dict) else None,
                          f"A history turn of prompt {i}", "give every turn a non-empty 'content'")
        encoded[i] = chat_ids(tokenizer, text, system, history)
        try:
            validate.prompt_length(len(encoded[i]), max_new_tokens, context)
        except PeagleError as exc:
            raise PeagleError(f"Prompt {i}: {exc}") from None
    return encoded


def _resume(out_path: Path, meta: dict, prompts: list, overwrite: bool,
            float32: bool) -> tuple[dict[int, dict], list[dict]]:
    """What ``out_path`` already holds: ``(done, kept)``, ``done`` = prompt position -> its record (matched by
    prompt, not by position: another prompts file or order finds them), ``kept`` = the records of other prompts,
    which stay in the file. Anything that would drop records (other settings, a damaged file) is refused unless
    ``overwrite``, which drops them all and says how many."""
    if not out_path.exists():
        return {}, []
    try:
        old_meta, old = read_distilled(out_path)
    except PeagleError:
        if not overwrite:
            raise
        print(f"peagle-lab: --overwrite: replacing the unreadable {out_path}", file=sys.stderr)
        return {}, []
    if overwrite:
        if old:
            print(f"peagle-lab: --overwrite: dropping the {len(old)} records in {out_path} and distilling afresh",
                  file=sys.stderr)
        return {}, []
    diff = {k: (old_meta.get(k), meta[k]) for k in _RESUME_KEYS if old_meta.get(k) != meta[k]}
    other = identity_problem(old_meta, meta, float32)
    if other:
        diff["target"] = other
    if diff:
        raise PeagleError(f"{out_path} holds {len(old)} sequences made with other settings {diff}. Fix: write to "
                          f"another --out, or --overwrite to drop those {len(old)} records and start over.")
    by_sha: dict[str, list[dict]] = {}
    for r in old:
        by_sha.setdefault(r["prompt_sha"], []).append(r)
    done = {}
    for i, p in enumerate(prompts):
        found = by_sha.get(prompt_sha(p))
        if found:
            done[i] = found.pop(0)
    return done, [r for rs in by_sha.values() for r in rs]


def _free_index(i: int, taken: set[int]) -> int:
    """A record index for prompt position ``i``: ``i`` itself unless a record in the file has it, else the next
    free one after every index in use (records of other prompt files keep theirs)."""
    index = i if i not in taken else max(taken) + 1
    taken.add(index)
    return index


@dataclass(frozen=True)
class DistillSettings:
    """How :func:`distill` asks the target: ``max_new_tokens`` per answer, after the chat template with ``system``
    as its system message (``None``: the template's own), ``batch_size`` prompts per engine call and per atomic
    rewrite of the file; ``target``: the name recorded in the file (default: the model's own)."""

    max_new_tokens: int = 160
    batch_size: int = 16
    system: str | None = None
    target: str = ""


@dataclass(frozen=True)
class TargetFiles:
    """The target as :func:`distill` needs it when an engine writes the answers, without its weights: its
    ``config`` and its identities read from its checkpoint (:func:`~peagle_lab.features.identity.checkpoint_identities`)."""

    config: object
    fingerprint: str
    identity: str
    float32: bool = False


def _identities(model) -> dict:
    """``target_fingerprint`` and ``target_identity`` of a loaded target or a :class:`TargetFiles`."""
    if isinstance(model, TargetFiles):
        return dict(target_fingerprint=model.fingerprint, target_identity=model.identity)
    return target_identities(model)


def _holds_float32(model) -> bool:
    """Whether the target's weights (loaded, or as a :class:`TargetFiles` would load them) are float32."""
    return model.float32 if isinstance(model, TargetFiles) else holds_float32(model)


def _context(model) -> int | None:
    """The target's context length (``max_position_embeddings``; ``None`` when its config has none)."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


def distill(model, tokenizer, prompts: list, out_path, settings: DistillSettings | None = None, engine=None,
            overwrite: bool = False, progress: bool = True) -> list[dict]:
    """Let the target answer every prompt (greedy) and save prompt + response token ids to ``out_path``, as
    ``settings`` say (:class:`DistillSettings`; its defaults when ``None``).

    ``prompts``: strings, or records with ``prompt`` and an optional ``history`` of earlier turns.
    ``engine``: what writes the answers (:mod:`.engines`; default: transformers' generate on
    ``model``); ``model`` is still what the file's target identity is taken from (a :class:`TargetFiles` when the
    engine is given and the weights need not load). ``settings.batch_size`` prompts go
    to the engine at a time, and the file is rewritten atomically after each batch (``*.jsonl.gz`` is stored
    compressed). Resumable and append-only: records already in ``out_path`` (same prompt, same target and settings)
    are kept and skipped, so an interrupted run loses at most one batch; records of other prompts stay in the file;
    ``overwrite=True`` starts over (it says how many records it drops). The file is locked for the run
    (:mod:`peagle_lab.lock`: one writer per file). Returns the records of ``prompts``, in prompt order.
    """
    settings = settings or DistillSettings()
    validate.positive_int(settings.batch_size, "batch_size", "--batch-size")
    validate.max_new_tokens(settings.max_new_tokens, _context(model))
    if not prompts:
        raise PeagleError("No prompts to distill. Fix: pass at least one prompt (--prompts N with N >= 1, or a "
                          "prompts file with records).")
    if engine is None and isinstance(model, TargetFiles):
        raise PeagleError("distill got the target's files but no engine to answer with. Fix: pass engine=... "
                          "(e.g. a VllmEngine), or the loaded target as model.")
    out_path = Path(out_path)
    with lock.hold(out_path):
        return _distill(model, tokenizer, prompts, out_path, settings, engine, overwrite, progress)


def _distill(model, tokenizer, prompts, out_path: Path, s: DistillSettings, engine, overwrite: bool,
             progress: bool) -> list[dict]:
    from .engines import TransformersEngine

    from tqdm.auto import tqdm

    out_path.parent.mkdir(parents=True, exist_ok=True)
    eos = tokenizer.eos_token_id
    eos_ids = {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    engine = engine or TransformersEngine(model, pad_id, eos_ids)
    meta = dict(format=FORMAT, version=VERSION, target=s.target or str(getattr(model.config, "_name_or_path", "")),
                **_identities(model),
                max_new_tokens=s.max_new_tokens, system=s.system,
                decoding="greedy", chat_template=True)
    done, kept = _resume(out_path, meta, prompts, overwrite, _holds_float32(model))
    taken = {r["index"] for r in [*kept, *done.values()]}
    todo = [i for i in range(len(prompts)) if i not in done]
    encoded = encode_prompts(tokenizer, prompts, todo, s.system, s.max_new_tokens, _context(model))
    todo.sort(key=lambda i: len(encoded[i]))  # similar lengths together: little padding
    bar = tqdm(total=len(prompts), initial=len(done), desc="distill", unit="prompt", disable=not progress)
    t0, new_tokens = time.perf_counter(), 0
    try:
        for start in range(0, len(todo), s.batch_size):
            batch = todo[start:start + s.batch_size]
            responses = engine.generate([encoded[i] for i in batch], s.max_new_tokens)
            for i, resp in zip(batch, responses):
                done[i] = dict(index=_free_index(i, taken), prompt_sha=prompt_sha(prompts[i]), prompt_len=len(encoded[i]),
                               input_ids=encoded[i] + resp, finished=bool(resp and resp[-1] in eos_ids))
                new_tokens += len(resp)
            _write_atomic(out_path, meta, [*kept, *done.values()])
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{new_tokens / (time.perf_counter() - t0):.0f}")
    finally:
        bar.close()
    if not todo:  # nothing new: make sure the file exists with its meta line
        _write_atomic(out_path, meta, [*kept, *done.values()])
    return [done[i] for i in sorted(done)]


def shipped_distilled_path(target: str) -> Path:
    """Where the shipped self-distilled sequences of a target live (``data/distill/<target>.jsonl``, under
    ``settings.data_dir()``)."""

    return data_path("distill", f"{Path(target).name}.jsonl")


def distilled_data(model, tokenizer, n: int | None, target: str, max_new_tokens: int = 160,
                   progress: bool = True) -> tuple[Path, dict, list[dict], bool]:
    """``(path, meta, records, shipped)``: the first ``n`` self-distilled sequences for ``target``: from the shipped
    file when this very model made it (the embedded default; ``shipped`` True), else distilled now into
    ``$PEAGLE_RESULTS/distill/<target>.jsonl`` (resumable)."""

    shipped = shipped_distilled_path(target)
    if shipped.is_file():
        meta, records = read_distilled(shipped)
        if recorded_target_problem(meta, model) is None and (n is None or len(records) >= n):
            return shipped, meta, records[:n], True
    out = results_dir() / "distill" / f"{Path(str(target)).name}.jsonl"
    prompts = load_train_prompts(n)
    distill(model, tokenizer, prompts, out, DistillSettings(max_new_tokens=max_new_tokens, target=target),
            progress=progress)
    meta, records = read_distilled(out)
    return out, meta, records[:n], False


def distilled_records(model, tokenizer, n: int | None, target: str, max_new_tokens: int = 160,
                      progress: bool = True) -> list[dict]:
    """The records of :func:`distilled_data`."""
    return distilled_data(model, tokenizer, n, target, max_new_tokens, progress)[2]


# ------------------------------------------------------------------------------------------ prompt sets
def check_prompt_set(prompts: list, where) -> None:
    """Refuse a prompt set with duplicates (same text and history) or with prompts that overlap HumanEval, which
    is for evaluation only."""
    from ..prompts import humaneval_overlap

    seen: dict[str, int] = {}
    for i, p in enumerate(prompts):
        j = seen.setdefault(prompt_sha(p), i)
        if j != i:
            raise PeagleError(f"{where}: prompt {i} repeats prompt {j}. Fix: remove the duplicate (each prompt once; "
                              "several answers to one prompt teach nothing more).")
    texts = ["\n".join([m["content"] for m in (record_messages(p)[1] or [])] + [record_messages(p)[0]])
             for p in prompts]
    hits = humaneval_overlap(texts)
    if hits:
        i, why = hits[0]
        raise PeagleError(f"{where}: prompt {i} {why} ({len(hits)} such prompts). Fix: remove them: HumanEval is "
                          "the evaluation set and must not be trained on.")
