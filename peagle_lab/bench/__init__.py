"""Measure it: drafting cost (parallel vs sequential) and end-to-end speed of speculative decoding.

Conventions: greedy, batch 1, the same prompts and output length for every method; warm-up first; medians and
the interquartile range over repeats, never a single run; methods interleaved (per prompt, per repeat, in a
rotating order), so drift in the machine's speed hits all of them alike, and every speed-up is a ratio to plain
decoding measured in the same run; every speculative output compared with plain greedy token for token; every
result carries its environment record (``record``). Timers: :mod:`peagle_lab.timer`.

One concept per module: ``config`` (:class:`BenchConfig`, the settings of a run, its flags and sizes),
``inputs`` (prompts, heads), ``suites`` (the prompt suites: code, chat), ``drafting``
(drafting cost), ``methods``, ``oracle`` (the engine at a published acceptance) and ``e2e`` (end to end),
``lossless``, ``summary``, ``files``, ``readme``, ``plots``, ``suite``
(all of it), ``cli`` (``peagle-lab bench``).
"""

from ..jsonsafe import json_safe
from .config import FULL, QUICK, BenchConfig
from ..timer import summarize, synchronize, time_once, time_repeated
from .drafting import drafting_cost
from .e2e import ASSISTED_NOT_RUN, end_to_end
from .files import check_results_dir, committed_results, e2e_stem, load_results, result_suites, write_results
from ..drafter.heads import fresh_head, head_description
from .inputs import load_head_or_fresh
from ..decoding.divergence import lossless_regime
from .lossless import lossless_note
from .methods import Method, MethodRun, head_method, hf_method, plain_method, spec_stats_dict
from .oracle import (PRESETS, budget_acceptance_length, conditional_from_unconditional, constant_rate_acceptance_length,
                     constant_rate_for, oracle_method, oracle_rates)
from .suites import SUITES, chat_records, suite_list, suite_of, suite_prompts
from .plots import (draw_plots, plot_acceptance, plot_break_even, plot_drafting_cost, plot_round_profile,
                    plot_speedup)
from .readme import format_table, results_readme
from ..environment import environment
from .record import SCHEMA, finish_environment, load_line
from .suite import run_benchmark
from .summary import aggregate, break_even_inputs, headline, hosts_table, speedup_model, verify_and_draft_ratio
