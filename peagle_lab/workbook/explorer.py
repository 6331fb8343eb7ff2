"""An ipywidgets explorer for speculative decoding on the embedded target (CPU, offline).

Type a prompt, pick K, the head, the drafting mode (parallel = P-EAGLE, one drafter pass for K tokens;
sequential = EAGLE-3, K passes) and the temperature, press Generate: the text appears token by token, each token
coloured by where it came from (see ``viz.token_sources``), with the acceptance length and per-position acceptance
updated after every verification round, and the time beside plain decoding measured in the same run.

``run_generation`` is the same thing without widgets (for notebooks, tests and scripts), its settings a
:class:`GenerationSettings`.
"""

from __future__ import annotations

import html

import time
from dataclasses import dataclass, field
from typing import Callable

from . import viz
from ..decoding.divergence import first_divergence, is_lossless, lossless_regime
from ..decoding.draft_sources import HeadDrafter
from ..errors import PeagleError, require
from ..hardware import describe
from ..drafter.heads import fresh_head, head_for_target, SHIPPED
from ..models import load_target
from ..precision import dtype_name
from ..prompts import chat_ids
from ..decoding.sampling import make_generator, Sampling
from ..settings import pick
from ..decoding.speculative import iter_rounds, plain_generate, SpecStats
from ..decoding.target_runner import TargetRunner

FRESH = "fresh"
HEAD_LABELS = {
    "parallel": "P-EAGLE head (trained for parallel drafting)",
    "sequential": "EAGLE-3 head (trained for sequential drafting)",
    FRESH: "untrained head (fresh init from the target)",
}
DEFAULT_PROMPT = "Write a Python function that checks whether a number is prime."

_TARGET: tuple | None = None
_HEADS: dict = {}


# ------------------------------------------------------------------------------------------ models
def default_target():
    """The embedded target ``(model, tokenizer)`` on CPU, loaded once per process."""
    global _TARGET
    if _TARGET is None:
        _TARGET = load_target(device="cpu")
    return _TARGET


def target_words(model) -> tuple[str, str]:
    """How the explorer names ``model`` (the embedded target, or the target's own name) and says that it has no
    trained head."""
    from ..drafter.heads import target_slug
    from ..models import is_default_target

    name = getattr(model, "name_or_path", "") or ""
    if not name or is_default_target(name):
        return "the embedded target (SmolLM2-135M-Instruct)", "No shipped head in <code>data/heads/</code> yet"
    slug = html.escape(target_slug(name))
    return (f"the target <code>{slug}</code>", f"No trained head for <code>{slug}</code> (the shipped heads are "
            "SmolLM2-135M's), none trained here yet")


def available_heads(model=None) -> list[str]:
    """Head names to offer: each kind whose head for ``model`` is a trained one (:func:`heads.head_for_target`:
    shipped if it fits, else trained here for this target), then the untrained one."""
    if model is None:
        return [k for k, path in SHIPPED.items() if (path / "config.json").exists()] + [FRESH]
    kinds = []
    for kind in SHIPPED:
        try:
            get_head(kind, model)  # cached: the explorer's first run does not load it again
        except PeagleError:
            continue
        kinds.append(kind)
    return kinds + [FRESH]


def get_head(name, model, tokenizer=None):
    """``'parallel'`` / ``'sequential'`` (shipped), ``'fresh'`` (untrained; ``tokenizer`` picks its mask token) or
    a head directory; cached."""
    key = (id(model), str(name))
    if key not in _HEADS:
        _HEADS[key] = fresh_head(model, tokenizer=tokenizer, seed=0, num_speculative_tokens=10) if name == FRESH \
            else head_for_target(name, model, tokenizer=tokenizer, allow_fresh=False)[0]
    return _HEADS[key]


# ------------------------------------------------------------------------------------------ one run
@dataclass(frozen=True)
class GenerationSettings:
    """What one run asks for: the prompt, ``k`` drafts a round, the drafting ``mode`` (default: the one the head was
    trained for), the sampling ``temperature`` (0: greedy) and ``seed``, the token budget, and whether plain decoding
    of the same prompt is timed after it (``baseline``)."""

    prompt: str = DEFAULT_PROMPT
    k: int = 4
    mode: str | None = None
    temperature: float = 0.0
    max_new_tokens: int = 64
    seed: int = 0
    baseline: bool = True


@dataclass
class ExploreRun:
    """One generation: the tokens, where each came from, the loop's statistics and the times."""

    prompt: str
    head: str
    mode: str
    k: int
    temperature: float
    tokens: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    stats: object = None  # SpecStats
    seconds: float = float("nan")
    plain_tokens: list | None = None
    plain_seconds: float | None = None
    divergence: object = None  # divergence.Divergence vs plain greedy, or None
    dtype: str = "float32"
    regime: str = "exact"  # divergence.lossless_regime of the target's dtype and device
    hardware: str = ""
    notes: list = field(default_factory=list)
    done: bool = False

    @property
    def lossless(self) -> bool | None:
        """Greedy only: :func:`~peagle_lab.decoding.divergence.is_lossless` of the output against plain greedy
        decoding's in the run's regime (None when not comparable)."""
        if self.temperature > 0 or self.plain_tokens is None:
            return None
        return is_lossless([None if self.tokens == self.plain_tokens else self.divergence], self.regime)

    @property
    def speedup(self) -> float | None:
        if not self.plain_seconds or not self.seconds or self.seconds != self.seconds:
            return None
        return self.plain_seconds / self.seconds

    def html(self, tokenizer) -> str:
        return viz.render_tokens(tokenizer, self.tokens, self.sources, self.k)

    def summary(self) -> str:
        """Plain-text readout (the widget shows the same facts as HTML)."""
        return _summary_lines(self, html=False)


# the two regimes of divergence.lossless_regime, in the words the course defines them with (notebook 00)
REGIME_WORDS = {"exact": "exact regime: fp32 on a CPU, token for token",
                "near-tie": "near-tie regime: identical, or a divergence at a near-tie whose margin is given"}


def _summary_lines(run: ExploreRun, html: bool = True) -> str:
    s = run.stats
    b = (lambda x: f"<b>{x}</b>") if html else (lambda x: x)
    lines = [
        f"acceptance length {b(f'{s.acceptance_length:.2f}')} (K={run.k}, {run.mode} drafting, "
        f"ceiling {run.k + 1})",
        f"{len(run.tokens)} tokens in {s.rounds + 1} target forwards, the prefill included "
        f"({len(run.tokens) / max(s.rounds + 1, 1):.2f} tokens per forward)",
    ]
    if run.done:
        lines.append(f"speculative: {run.seconds:.2f} s ({len(run.tokens) / run.seconds:.1f} tok/s, drawing excluded)")
        if run.plain_seconds is not None:
            lines.append(f"plain decoding, same run: {run.plain_seconds:.2f} s "
                         f"({len(run.plain_tokens) / run.plain_seconds:.1f} tok/s) -> speed-up "
                         f"{b(f'{run.speedup:.2f}x')}")
        if run.lossless is not None:
            lines.append(f"lossless check, {REGIME_WORDS[run.regime]} ({run.dtype}):")
        if run.lossless is not None and run.tokens == run.plain_tokens:
            lines.append(f"identical to plain greedy output: yes, all {len(run.tokens)} tokens")
        elif run.lossless is not None:
            d = run.divergence
            lines.append(f"identical to plain greedy output: no, from token {d.position} on" +
                         (f" - a bf16 near-tie (plain top-2 margin {d.margin:.3g} <= {d.bound:.3g}), not a bug"
                          if run.lossless else " - NOT a near-tie (a bug!)"))
        elif run.temperature > 0:
            lines.append("sampling: the text differs from plain decoding's run to run, its distribution does not")
        if run.hardware:
            lines.append(run.hardware)
    return ("<br>" if html else "\n").join(lines)


def run_generation(model, tokenizer, head, settings: GenerationSettings = GenerationSettings(), head_name: str = "",
                   on_update: Callable[[ExploreRun], None] | None = None) -> ExploreRun:
    """Speculative generation with ``head`` (a PEagleDrafter) on ``model`` as ``settings`` say; ``on_update(run)``
    after each round.

    It watches the loop through its :class:`~peagle_lab.decoding.speculative.Round` records (``iter_rounds``). With
    ``settings.baseline``, plain decoding of the same prompt is timed right after, in the same process.
    """
    prompt, k, max_new_tokens, seed = settings.prompt, int(settings.k), int(settings.max_new_tokens), settings.seed
    if not prompt or not prompt.strip():
        raise PeagleError("The prompt is empty. Fix: type a question or an instruction.")
    mode = settings.mode or head.config.mode
    ids = chat_ids(tokenizer, prompt)
    sampling = Sampling(temperature=float(settings.temperature))
    runner = TargetRunner(model, tap_layers=head.config.aux_hidden_state_layer_ids)
    run = ExploreRun(prompt=prompt, head=head_name or head.config.mode, mode=mode, k=k,
                     temperature=float(settings.temperature), stats=SpecStats(k=k))
    accepted: list[int] = []
    display_s = 0.0  # time spent drawing between rounds: taken out of the speculative time
    gen = None if sampling.greedy else make_generator(runner.device, seed)
    drafter = HeadDrafter(head, mode)
    run.notes += drafter.notes(k)  # K above the head's trained K
    rounds = iter_rounds(runner, drafter, ids, k=k, max_new_tokens=max_new_tokens,
                         eos_ids=tokenizer.eos_token_id, sampling=sampling, gen=gen)
    t0 = time.perf_counter()
    for rnd in rounds:
        run.stats.add(rnd)
        run.tokens += rnd.tokens
        if rnd.is_prefill:
            continue
        accepted.append(rnd.accepted)
        run.sources = viz.token_sources(accepted, len(run.tokens))
        run.seconds = time.perf_counter() - t0 - display_s
        if on_update is not None:
            t = time.perf_counter()
            on_update(run)
            display_s += time.perf_counter() - t
    run.seconds = time.perf_counter() - t0 - display_s
    run.sources = viz.token_sources(accepted, len(run.tokens))
    if settings.baseline:
        gen = None if sampling.greedy else make_generator(runner.device, seed)
        plain = plain_generate(runner, ids, max_new_tokens, eos_ids=tokenizer.eos_token_id, sampling=sampling,
                               gen=gen)
        run.plain_tokens, run.plain_seconds = list(plain.tokens), plain.seconds
        if sampling.greedy:
            param = next(model.parameters())
            run.divergence = first_divergence(run.tokens, plain, param.dtype, param.device)
    run.dtype = dtype_name(next(model.parameters()).dtype)
    run.regime = lossless_regime(next(model.parameters()).dtype, next(model.parameters()).device)
    run.hardware = describe(next(model.parameters()).device)
    run.done = True
    if on_update is not None:
        on_update(run)
    return run


# ------------------------------------------------------------------------------------------ the widget
class Explorer:
    """The widget. Display it (it is the last expression of a cell), or call ``generate()`` from code."""

    def __init__(self, model=None, tokenizer=None, heads=None, prompt: str = DEFAULT_PROMPT, k: int = 4,
                 max_new_tokens: int | None = None, figure: str | None = "explorer_per_position"):
        w = require("ipywidgets", "pip install ipywidgets")
        if model is None or tokenizer is None:
            model, tokenizer = default_target()
        self.model, self.tokenizer, self.figure = model, tokenizer, figure
        self.heads = list(heads) if heads is not None else available_heads(model)
        self.last_run: ExploreRun | None = None
        self._last_draw = 0.0
        max_new_tokens = max_new_tokens or pick(64, 12)

        wide = w.Layout(width="100%")
        half = w.Layout(width="48%")
        style = {"description_width": "110px"}
        self.prompt = w.Textarea(value=prompt, description="Prompt", rows=3, layout=wide, style=style)
        self.k = w.IntSlider(value=k, min=1, max=10, description="K (drafts)", layout=half, style=style)
        self.max_new = w.IntSlider(value=max_new_tokens, min=4, max=256, step=4, description="max tokens",
                                   layout=half, style=style)
        self.head = w.Dropdown(options=[(HEAD_LABELS.get(h, str(h)), h) for h in self.heads], value=self.heads[0],
                               description="head", layout=half, style=style)
        self.mode = w.ToggleButtons(options=[("parallel (P-EAGLE)", "parallel"),
                                             ("sequential (EAGLE-3)", "sequential")],
                                    value="parallel", description="drafting",
                                    tooltips=["all K drafts in one drafter pass", "K drafter passes, one per draft"],
                                    style={**style, "button_width": "160px"})
        self.temperature = w.FloatSlider(value=0.0, min=0.0, max=1.5, step=0.1, description="temperature",
                                         readout_format=".1f", layout=half, style=style)
        self.baseline = w.Checkbox(value=True, description="also time plain decoding (same run)", indent=False,
                                   layout=half)
        self.button = w.Button(description="Generate", button_style="primary", icon="play",
                               tooltip="Run speculative decoding with these settings")
        self.status = w.HTML(value="")
        self.text = w.HTML(value="")
        self.bars = w.HTML(value="", layout=w.Layout(width="48%"))
        self.readout = w.HTML(value="", layout=w.Layout(width="50%"))
        self.readout.add_class("peagle-readout")
        self.head.observe(self._on_head, names="value")
        self.button.on_click(lambda _: self.generate())

        fresh_only = self.heads == [FRESH]
        target, missing = target_words(model)
        note = ("<div style='background:#fff4d6; border:1px solid #e8c66a; padding:4px 8px; border-radius:4px;'>"
                f"{missing}: this uses a <b>freshly initialised (untrained) head</b>, so almost no draft is accepted "
                "(acceptance length close to 1). Make one on a GPU (<code>PEAGLE_TARGET=... bash "
                "scripts/gpu_heads.sh</code>), a small one in notebook 04, or pass <code>heads=[path]</code>.</div>"
                ) if fresh_only else ""
        title = w.HTML("<h3 style='margin:4px 0;'>P-EAGLE explorer: speculative decoding, token by token</h3>"
                       "<div style='font-size:12px; color:#555;'>Each token is coloured by where it came from: a "
                       "draft accepted at slot j, or the token the target adds after each verification (bonus). "
                       f"Runs on {next(model.parameters()).device} with {target}.</div>" + note)
        self.widget = w.VBox([
            title, self.prompt,
            w.HBox([self.k, self.max_new]), w.HBox([self.head, self.temperature]),
            self.mode, self.baseline,
            w.HBox([self.button, self.status], layout=w.Layout(align_items="center")),
            self.text, w.HBox([self.bars, self.readout]),
        ])
        self.widget.add_class("peagle-explorer")
        self._on_head({"new": self.head.value})

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):  # a static copy (no widget state) shows this sentence instead of the repr
            bundle["text/plain"] = "[the P-EAGLE explorer widget: it draws in a live notebook]"
        return bundle

    def _on_head(self, change):
        name = change["new"]
        if name in ("parallel", "sequential"):
            self.mode.value = name  # default to the mode the head was trained for (any mode runs any head)

    def _draw(self, run: ExploreRun, force: bool = False):
        now = time.perf_counter()
        if not (force or run.done) and now - self._last_draw < 0.2:
            return  # keep the browser traffic down on fast rounds
        self._last_draw = now
        self.text.value = run.html(self.tokenizer)
        self.bars.value = viz.acceptance_bars_html(run.stats.conditional_acceptance, run.stats.attempted_at)
        self.readout.value = ("<div style='font-size:12px;'>" + _summary_lines(run) +
                              "".join(f"<div style='color:#a15c00;'>{n}</div>" for n in run.notes) + "</div>")
        state = "done" if run.done else f"round {run.stats.rounds}"
        self.status.value = f"<span class='peagle-status'>{state} &middot; {run.seconds:.1f} s</span>"

    def generate(self, **overrides) -> ExploreRun:
        """Run with the widget's settings (``overrides``: prompt, k, mode, temperature, max_new_tokens, head)."""
        opts = dict(prompt=self.prompt.value, k=self.k.value, mode=self.mode.value,
                    temperature=self.temperature.value, max_new_tokens=self.max_new.value, head=self.head.value,
                    baseline=self.baseline.value)
        opts.update(overrides)
        self.button.disabled = True
        self.status.value = "<span class='peagle-status'>loading the head&hellip;</span>"
        try:
            head = get_head(opts.pop("head"), self.model, self.tokenizer)
            self.status.value = "<span class='peagle-status'>generating&hellip;</span>"
            run = run_generation(self.model, self.tokenizer, head, GenerationSettings(**opts),
                                 head_name=self.head.value, on_update=self._draw)
            self.last_run = run
            if self.figure:
                self._save_figure(run)
            return run
        except Exception as exc:
            self.status.value = f"<span class='peagle-status' style='color:#b00020;'>error: {exc}</span>"
            raise
        finally:
            self.button.disabled = False

    def _save_figure(self, run: ExploreRun):
        """Per-position acceptance of the last run, beside the results (``viz.save_figure``)."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 3.2))
        viz.plot_per_position_acceptance(run.stats.conditional_acceptance, ax=fig.subplots(),
                                         counts=list(zip(run.stats.accepted_at, run.stats.attempted_at)),
                                         title=f"{run.mode} drafting, K={run.k}: acceptance length "
                                               f"{run.stats.acceptance_length:.2f}")
        path = viz.save_figure(fig, self.figure)
        self.readout.value += f"<div style='font-size:11px; color:#777;'>figure: {path}</div>"


def explorer(model=None, tokenizer=None, **kwargs) -> Explorer:
    """The interactive explorer (needs ipywidgets: ``pip install ipywidgets``). Loads the embedded target when
    ``model``/``tokenizer`` are not given; see ``Explorer`` for the options."""
    require("ipywidgets", "pip install ipywidgets")
    return Explorer(model, tokenizer, **kwargs)
