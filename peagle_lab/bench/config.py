"""The settings of one benchmark run: :class:`BenchConfig` (checked when made; its fields' metadata makes the
``peagle-lab bench`` flags, through :mod:`peagle_lab.flags`), with the two sizes a run comes in: ``QUICK`` (CI) and
``FULL`` (the committed runs)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .. import validate
from ..validate import MAX_K
from ..errors import PeagleError
from ..flags import flag_field, flag_of
from .oracle import oracle_rates
from .suites import DEFAULT_SUITE, SUITES, suite_list

# The settings a run's size fixes, where the flag is not given. The oracle at the blog's K values (3, 5, 7) in the
# full size: what the paper's acceptance would give here.
QUICK = {"ks_parallel": [1, 2, 4], "ks_sequential": [1, 2], "draft_ks": [1, 2, 4, 8], "n_prompts": 2,
         "max_new_tokens": 24, "repeats": 1, "draft_repeats": 5, "pld_ks": [10], "oracle_ks": [4]}
FULL = {"ks_parallel": list(range(1, 9)), "ks_sequential": list(range(1, 6)), "draft_ks": list(range(1, 11)),
        "n_prompts": 24, "max_new_tokens": 96, "repeats": 1, "draft_repeats": 15, "pld_ks": [10],
        "oracle_ks": [3, 5, 7]}
K_LISTS = ("ks_parallel", "ks_sequential", "draft_ks", "pld_ks", "oracle_ks")


def parse_ks(text: str) -> list[int]:
    """``"1-8"``, ``"1,2,4"`` or ``"1-3,6"`` (:func:`peagle_lab.validate.int_list`) -> sorted unique ints."""
    out = sorted(set(validate.int_list(text, "the K list", "'1-8' or '1,2,4'")))
    if min(out) < 1 or max(out) > MAX_K:
        raise PeagleError(f"K list {text!r} must hold integers in 1..{MAX_K}. Fix: e.g. '1-8' or '1,2,4'.")
    return out


def parse_ks_or_none(text: str) -> list[int]:
    """:func:`parse_ks`, or ``[]`` for ``"none"``."""
    return [] if str(text).strip().lower() == "none" else parse_ks(text)


def _how_to_set(name: str) -> str:
    """What an error message tells to set field ``name`` with: its flag, or ``BenchConfig(name=...)``."""
    f = next(f for f in fields(BenchConfig) if f.name == name)
    return flag_of(BenchConfig, name) if f.metadata.get("cli", True) else f"BenchConfig({name}=...)"


@dataclass
class BenchConfig:
    """One field, one ``peagle-lab bench`` flag (``--field-name`` unless the metadata names another); fields with
    ``cli=False`` are set by the target options every command shares, or only from Python. A size field left at
    None takes the run's size's value (``QUICK`` with ``quick``, else ``FULL``) when the config is made."""

    parallel_head: str = flag_field(
        "parallel", "P-EAGLE head: 'parallel' (the head for this target: shipped if it fits, else the one trained "
        "here under $PEAGLE_RESULTS/heads/<target>/), a directory or hub id, or 'fresh' (untrained, timing only)")
    sequential_head: str = flag_field(
        "sequential", "EAGLE-3 head: 'sequential' (the head for this target, as above), a directory or hub id, 'fresh', or "
        "'none'")
    allow_fresh: bool = flag_field(False, "use an untrained head when no head fits the target (otherwise that is an "
                                          "error)")
    ks_parallel: tuple[int, ...] | None = flag_field(None, "K sweep for P-EAGLE (full: 1-8)", type=parse_ks)
    ks_sequential: tuple[int, ...] | None = flag_field(None, "K sweep for EAGLE-3 (full: 1-5)", type=parse_ks)
    draft_ks: tuple[int, ...] | None = flag_field(None, "K values for the drafting cost (full: 1-10)", type=parse_ks)
    pld_ks: tuple[int, ...] | None = flag_field(None, "prompt_lookup_num_tokens values (default: 10)", type=parse_ks)
    suite: str = flag_field(DEFAULT_SUITE, "prompt suite(s) end to end: code (HumanEval), chat (held-out split of the "
                                           "prompt mix), offmix (prompts written apart from the mix, in other "
                                           "styles), lists (held-out list requests, a narrow domain) or all (code "
                                           "and chat, results per suite; default code)",
                            choices=[*SUITES, "all"])
    n_prompts: int | None = flag_field(None, "prompts per suite (full: 24)", short="-n")
    oracle_ks: tuple[int, ...] | None = flag_field(
        None, "K values of the oracle drafter (true greedy continuation at set per-position acceptance, charged one "
        "parallel head pass per round; full: 3,5,7; 'none': no oracle)", type=parse_ks_or_none)
    oracle_accept: str | tuple[float, ...] = flag_field(
        "paper", "the oracle's conditional per-position acceptance: 'paper' (the P-EAGLE blog's acceptance length at "
        "K=7 for the suite: HumanEval 3.94, MT-Bench 3.70), a preset (blog-humaneval, blog-mtbench, vllm-pr32628) or "
        "a list such as 0.8,0.7,0.6 (the last rate repeats)", type=str)
    max_new_tokens: int | None = flag_field(None, "new tokens per prompt (full: 96)")
    repeats: int | None = flag_field(None, "passes over the prompts end to end (default 1)")
    draft_repeats: int | None = flag_field(None, "timed repeats per K for drafting cost (full: 15)")
    quick: bool = flag_field(False, "CI sizes (2 prompts, 24 tokens, few K)", aliases=("--ci",))
    skip_drafting: bool = flag_field(False, "no drafting-cost sweep")
    skip_e2e: bool = flag_field(False, "no end-to-end sweep")
    assistant: str | None = flag_field(None, "small draft LM (HF id/path) for transformers' assisted generation")
    out: str | None = flag_field(None, "results folder (default results/bench/<name>)")
    name: str | None = flag_field(None, "run name under results/bench/ (default: target-date-time)")
    no_plots: bool = flag_field(False)
    overwrite: bool = flag_field(False, "replace the results already in --out")
    # set by the target options every command shares (--target, --device, --threads, --dtype)
    target: str | None = flag_field(None, cli=False)
    device: str | None = flag_field(None, cli=False)
    threads: int | None = flag_field(None, cli=False)
    dtype: str | None = flag_field(None, cli=False)
    # only from Python (tests, notebooks, the GPU check)
    prompts: list | None = flag_field(None, "the prompts to measure (texts, or token id lists of 3 or more) instead "
                                            "of the suite's first n_prompts; the first is the drafting cost's",
                                      cli=False)
    eos_id: int | None = flag_field(None, "stop token (default: the tokenizer's)", cli=False)
    hf_greedy: bool = flag_field(True, "run transformers' greedy generate end to end", cli=False)
    warmup: bool = flag_field(True, "one short untimed run per method before the timed ones", cli=False)
    draft_warmup: int = flag_field(3, "untimed drafting rounds per K and mode before the timed ones", cli=False)
    new_slots: int = flag_field(2, "newly committed context slots a timed drafting round sees", cli=False)
    verify: bool = flag_field(True, "also time the target verifying K+1 tokens and one decode step", cli=False)

    def __post_init__(self):
        for name, value in (QUICK if self.quick else FULL).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        for name in K_LISTS:
            setattr(self, name, self._k_list(name))
        for name in ("n_prompts", "max_new_tokens", "repeats", "draft_repeats", "new_slots"):
            validate.positive_int(getattr(self, name), name, _how_to_set(name))
        validate.positive_int(self.draft_warmup, "draft_warmup", _how_to_set("draft_warmup"), 0)
        if not self.draft_ks:
            raise PeagleError("draft_ks must hold at least one K. Fix: --draft-ks 1-10 (or --skip-drafting).")
        suite_list(self.suite)
        if isinstance(self.oracle_accept, str):  # else: the conditional rates themselves
            oracle_rates(self.oracle_accept)
        if self.skip_drafting and self.skip_e2e:
            raise PeagleError("--skip-drafting and --skip-e2e together leave nothing to measure. Fix: drop one of "
                              "them.")
        if self.parallel_head == "none":
            raise PeagleError("The benchmark needs a parallel head (--parallel-head); 'none' is only for the "
                              "sequential one.")

    def _k_list(self, name: str) -> tuple[int, ...]:
        """Field ``name`` as a tuple of Ks, each an integer >= 1."""
        ks = tuple(getattr(self, name))
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise PeagleError(f"{name} must hold integers >= 1, got {list(ks)}. Fix: {_how_to_set(name)} 1-8 "
                              "(or 1,2,4).")
        return ks

    @property
    def suites(self) -> list[str]:
        """The suites end to end, in order (:func:`.suites.suite_list`)."""
        return suite_list(self.suite)
