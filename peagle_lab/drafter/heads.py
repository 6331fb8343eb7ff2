"""Heads for the target at hand: the shipped heads (trained for the embedded SmolLM2-135M), ``load_head`` (one
directory) and :func:`head_for_target`, the one rule every notebook, ``bench``, ``generate`` and the explorer use
to choose a head:

1. the shipped head of that kind, when it fits the target (vocabulary, hidden size, tap layers, and the target
   fingerprint it was trained on);
2. else, for ``parallel``, the P-EAGLE head published for this target (:data:`.hub.PUBLISHED_HEADS`: GPT-OSS-20B,
   GPT-OSS-120B, Qwen3-Coder-30B-A3B) when it is already in the Hugging Face cache (it is named, with the command
   that fetches it, when it is not);
3. else the head trained here for this target, ``$PEAGLE_RESULTS/heads/<target>/<kind>`` (notebooks 00-06 train
   a small one there on the spot when there is none: :func:`peagle_lab.training.quick.ensure_head`);
4. else, only where the caller allows it, a freshly initialised head (:func:`fresh_head`), labelled untrained
   (timing only).

A head is also given by directory or hub id (``--head``, :func:`.hub.head_path`), in vLLM's eagle3 layout
whatever wrote it (:mod:`.layouts`).

:func:`head_description` is what every result records of the head it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from .config import PEagleConfig, read_config_json, stored_dtype_name
from .hub import cached_head, card_trained_k, fetch_hint, head_path, published_head_for
from .network import PEagleDrafter
from .vocab import mask_token_id_for
from ..errors import PeagleError
from ..precision import dtype_name
from ..settings import DEFAULT_TARGET, data_dir

# kind -> directory name under <data>/heads
SHIPPED_NAMES = {
    "parallel": "smollm2-135m-peagle",  # P-EAGLE, trained for K=8
    "sequential": "smollm2-135m-eagle3",  # EAGLE-3 style, same data and budget
}
# the shipped heads continued on one narrow domain, the list prompts (scripts/list_heads.sh; notebook 06)
LIST_HEAD_NAMES = {"parallel": "smollm2-135m-lists-peagle", "sequential": "smollm2-135m-lists-eagle3"}
# a matched pair on the same domain: one seeded untrained start, the same answers, the same optimizer steps
# (PEAGLE_LIST_INIT=fresh scripts/list_heads.sh; notebook 06), and the same pair trained from seed 1
# (PEAGLE_LIST_SEED=1)
MATCHED_HEAD_NAMES = {"parallel": "smollm2-135m-lists-matched-peagle",
                      "sequential": "smollm2-135m-lists-matched-eagle3"}
MATCHED_SEED1_HEAD_NAMES = {"parallel": "smollm2-135m-lists-matched-seed1-peagle",
                            "sequential": "smollm2-135m-lists-matched-seed1-eagle3"}
# a matched pair on open text: the same recipe on the target's answers to the prompt mix (scripts/open_heads.sh;
# notebook 12)
OPEN_MATCHED_HEAD_NAMES = {"parallel": "smollm2-135m-open-matched-peagle",
                           "sequential": "smollm2-135m-open-matched-eagle3"}


class _ShippedHeads(Mapping):
    """The one way to a shipped head: ``{kind: head directory}`` under ``<data>/heads`` (``settings.data_dir()``:
    ``$PEAGLE_DATA`` or the checkout's ``data/``), resolved when read (so ``$PEAGLE_DATA`` is honoured and
    importing this module needs no data). Unknown keys raise ``KeyError`` before any data is looked up, so
    ``SHIPPED.get(some_path, Path(some_path))`` works without a data directory."""

    def __init__(self, names: dict[str, str], label: str):
        self.names, self.label = names, label

    def __getitem__(self, kind):
        if kind not in self.names:
            raise KeyError(kind)
        return data_dir() / "heads" / self.names[kind]

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)

    def __repr__(self):
        return f"{self.label}({ {k: str(v) for k, v in self.items()} })"


SHIPPED = _ShippedHeads(SHIPPED_NAMES, "SHIPPED")
LIST_HEADS = _ShippedHeads(LIST_HEAD_NAMES, "LIST_HEADS")
MATCHED_HEADS = _ShippedHeads(MATCHED_HEAD_NAMES, "MATCHED_HEADS")
MATCHED_SEED1_HEADS = _ShippedHeads(MATCHED_SEED1_HEAD_NAMES, "MATCHED_SEED1_HEADS")
OPEN_MATCHED_HEADS = _ShippedHeads(OPEN_MATCHED_HEAD_NAMES, "OPEN_MATCHED_HEADS")


KINDS = ("parallel", "sequential")
UNTRAINED_NOTE = "using an UNTRAINED head: timing only, acceptance near 1"


def target_slug(target) -> str:
    """A folder name for a target: the embedded default's name, else the last part of its id or path."""
    name = str(target or DEFAULT_TARGET)
    return DEFAULT_TARGET if name == "default" else (Path(name.rstrip("/")).name or DEFAULT_TARGET)


def trained_head_dir(target, kind: str) -> Path:
    """Where a head trained here for ``target`` lives: ``$PEAGLE_RESULTS/heads/<target>/<kind>``."""
    from ..settings import results_dir

    return results_dir() / "heads" / target_slug(target) / kind


def head_fit_problems(path, model) -> list[str]:
    """Why the head in ``path`` cannot read ``model`` (empty: it fits): vocabulary, hidden size, tap layers, and
    the target the head records (:meth:`PEagleConfig.target_record`, :func:`identity.recorded_target_problem`)."""
    from ..features.identity import recorded_target_problem

    try:
        cfg = PEagleConfig.from_dir(path)
    except PeagleError as exc:
        return [f"no usable config.json ({str(exc).split('. Fix:')[0]})"]
    problems = cfg.target_problems(model.config)
    other = None if problems else recorded_target_problem(cfg.target_record(), model)
    if other:
        problems.append(f"trained on another target ({other})")
    return problems


def check_head_spec(spec, target_config=None) -> Path:
    """Before the target loads: the head given as a kind, a directory or a hub id, resolved (a hub id fetched,
    :func:`.hub.head_path`), its checkpoint checked (:func:`.checkpoint.check_head_dir`) and, for a head given by
    directory or hub id and a ``target_config``, its fit to the target (:meth:`PEagleConfig.target_problems`:
    vocabulary, hidden size, taps, naming both sides). A path that does not exist is returned as it is (the loader
    names it)."""
    from .checkpoint import check_head_dir

    given = str(spec) not in SHIPPED_NAMES
    path = head_path(spec) if given else SHIPPED[str(spec)]
    if not path.exists():
        return path
    cfg = check_head_dir(path)
    problems = cfg.target_problems(target_config) if given and target_config is not None else []
    if problems:
        raise PeagleError(f"The head {spec} cannot serve this target: " + "; ".join(problems) + ". Fix: pass a head "
                          "trained for this target (or the target this head was trained for, --target).")
    return path


def head_description(head, source: str) -> dict:
    """What a result records of a head: where it came from, its mode, shape, trained K, taps and mask token."""
    c = head.config
    return {"source": source, "mode": c.mode, "num_hidden_layers": c.num_hidden_layers,
            "trained_k": c.num_speculative_tokens, "draft_vocab_size": c.draft_vocab_size,
            "taps": list(c.aux_hidden_state_layer_ids), "mask_token_id": c.mask_token_id,
            "params": sum(p.numel() for p in head.parameters())}


def fresh_head(model, mode: str = "parallel", mask_token_id: int | None = None, num_hidden_layers: int = 1,
               tokenizer=None, seed: int | None = None, num_speculative_tokens: int = 8):
    """The one factory of an UNTRAINED head shaped for ``model`` (target embeddings, norm and lm_head; random
    layers), on the target's device. Its drafting cost is that of a trained head of the same shape; its acceptance
    is not.

    ``mask_token_id``: default :func:`peagle_lab.drafter.vocab.mask_token_id_for` (picked from ``tokenizer``, or
    from the tokenizer saved beside the model), as training picks it. ``seed``: the random layers drawn from
    ``torch.manual_seed(seed)`` without touching the caller's random state (None: from the current state)."""
    if mask_token_id is None:
        mask_token_id = mask_token_id_for(model, tokenizer, untrained=True)
    cfg = PEagleConfig.from_target(model.config, mask_token_id=mask_token_id, mode=mode,
                                   num_hidden_layers=num_hidden_layers, num_speculative_tokens=num_speculative_tokens)
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        head = PEagleDrafter(cfg).init_from_target(model)
    return head.to(device).eval()


def head_for_target(kind, model, tokenizer=None, target=None, allow_fresh: bool = True, mode: str | None = None,
                    announce: bool = False):
    """``(head, info)``: THE head for this target (the rule in this module's docstring).

    ``kind``: ``'parallel'`` / ``'sequential'`` (shipped head if it fits, else the published one in the local
    cache, else the one trained here, else fresh when ``allow_fresh``), ``'fresh'`` (an untrained head, asked
    for), or a head directory or hub id (it must fit: a head that does not is one clear error naming both sides
    and the fix). ``info`` is what results record (:func:`head_description`) plus ``origin`` (``shipped`` /
    ``published`` / ``trained here`` / ``given`` / ``fresh``), ``path`` and ``note``: one line saying why the
    shipped head was not used (or ""). ``mode``: a fresh head's drafting mode (default: ``kind`` when it is one,
    else parallel). A loaded head runs on the target's device in its dtype (:func:`load_head`); ``announce``: say
    so on stderr when that converts it."""
    target = target or getattr(model, "name_or_path", "") or "this target"
    if str(kind) not in (*KINDS, "fresh"):
        return _given_head(kind, model, target, announce)
    mode = mode or (kind if kind in KINDS else "parallel")
    note = ""
    if kind in KINDS:
        found, note = _head_of_kind(kind, model, target, announce)
        if found is not None:
            return found
        if not allow_fresh:
            here = _display(trained_head_dir(target, kind))
            raise PeagleError(f"No {kind} head for the target {target_slug(target)}: {note}, and none was trained "
                              f"here ({here}). Fix: train one (`peagle-lab train --target ... --mode {kind} --out "
                              f"{here}`, or run notebook 03), or pass --{kind}-head DIR.")
    head = fresh_head(model, mode=mode, tokenizer=tokenizer)
    if kind == "fresh":
        why = "requested"
    else:
        why = "no trained head for this target"
        note += "; " + UNTRAINED_NOTE
    return head, dict(head_description(head, f"fresh-init (untrained; {why})"), origin="fresh", path=None, note=note)


def _display(path) -> str:
    from ..settings import display_path

    return display_path(path)


def _given_head(spec, model, target, announce: bool):
    """A head given by directory or hub id, refused (naming the head's side and the target's) when it does not
    fit the target."""
    path = head_path(spec)
    if not path.exists():
        raise PeagleError(f"No drafter head at {path}. Fix: pass the directory (or hub id) of a head trained for "
                          f"{target_slug(target)}, or 'parallel' / 'sequential' (the head for this target).")
    problems = head_fit_problems(path, model)
    if problems:
        raise PeagleError(f"The head {spec if path != Path(str(spec)) else _display(path)} cannot serve the target "
                          f"{target_slug(target)}: " + "; ".join(problems) + ". Fix: train a head for this target "
                          "(`peagle-lab train --target ...`), or pass 'parallel' / 'sequential' to use the head for "
                          "this target.")
    head = load_head(path, model, announce=announce)
    source = str(spec) if path != Path(str(spec)) else _display(path)  # a hub id is recorded as the id
    return head, dict(head_description(head, source), origin="given", path=str(path), note="")


def _head_of_kind(kind: str, model, target, announce: bool):
    """``((head, info) or None, note)``: the shipped head of ``kind`` when it fits, else the published P-EAGLE
    head of this target when it is cached here, else the head trained here; ``note`` says why each was passed
    over (and names the published head and how to fetch it)."""
    shipped = SHIPPED[kind]
    problems = head_fit_problems(shipped, model) if (shipped / "config.json").exists() else ["not installed"]
    if not problems:
        head = load_head(shipped, model, announce=announce)
        return (head, dict(head_description(head, _display(shipped)), origin="shipped", path=str(shipped),
                           note="")), ""
    note = f"the shipped {kind} head ({shipped.name}) does not fit {target_slug(target)}: " + "; ".join(problems)
    published = published_head_for(target) if kind == "parallel" else None
    if published:
        local = cached_head(published)
        if local is not None and not head_fit_problems(local, model):
            head = load_head(local, model, announce=announce)
            return (head, dict(head_description(head, published), origin="published", path=str(local),
                               note=note + f"; using the published head {published}")), note
        note += f"; the P-EAGLE head published for it is {published} (fetch it: {fetch_hint(published)})"
    here = trained_head_dir(target, kind)
    if (here / "config.json").exists() and not head_fit_problems(here, model):
        head = load_head(here, model, announce=announce)
        return (head, dict(head_description(head, f"trained here ({_display(here)})"), origin="trained here",
                           path=str(here), note=note + f"; using the head trained here, {_display(here)}")), note
    return None, note


def load_head(name_or_path, target, device=None, dtype=None, announce: bool = False) -> PEagleDrafter:
    """``'parallel'`` / ``'sequential'`` (shipped heads for the embedded target), a head directory or a hub id
    (:func:`.hub.head_path`), in vLLM's eagle3 layout whatever wrote it.

    The head runs in ``dtype`` (default: the target's). A head stored in another dtype (the shipped heads are
    stored in bf16) is converted; ``head.stored_dtype`` keeps what was on disk, and with ``announce`` (the CLI) a
    line on stderr says so.
    """
    path = SHIPPED[str(name_or_path)] if str(name_or_path) in SHIPPED_NAMES else head_path(name_or_path)
    if not path.exists():
        raise PeagleError(
            f"No drafter head at {path}. Fix: train one (`peagle-lab train --help`, notebook 03) or pass the "
            f"directory of a head trained for this target.")
    device = device or next(target.parameters()).device
    dtype = dtype or next(target.parameters()).dtype
    head = PEagleDrafter.from_pretrained(path, target=target, device=device, dtype=dtype)
    stored = stored_dtype_name(path)  # the head has loaded: its config.json reads
    raw = read_config_json(path)
    if "peagle" not in raw and "speculators_config" not in raw and card_trained_k(path):
        head.config.num_speculative_tokens = card_trained_k(path)  # a published head: its card says it
    run = dtype_name(dtype)
    if stored and stored != run and announce:
        import sys

        print(f"[peagle-lab] head {path.name}: stored in {stored}, converted to {run} to match the target",
              file=sys.stderr)
    head.stored_dtype = stored or run
    return head
