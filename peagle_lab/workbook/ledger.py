"""The acceptance ledger: one table of every acceptance length the course prints for the shipped heads.

Each row says what was measured (chapter, head, host, prompt set, number of prompts, new tokens per prompt, K,
dtype, rounds) beside the figure, so the spread between chapters can be read off the settings. Rows come from two
places, never from typed-in numbers:

* the committed results the chapters read: ``data/recipe/<host>/heldout_compare.json`` (05's held-out comparison),
  ``data/results/<host>/<dtype>/end_to_end[_<suite>].json`` (07's bench suites) and
  ``data/results/<host>/serving/serving_sweep.json`` (11's serving sweep);
* the live runs, which a chapter stores with :func:`record` in ``$PEAGLE_RESULTS/summary.json`` (the workbook
  summary, :mod:`peagle_lab.workbook.report`) under a key starting with ``ledger:``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..bench.files import committed_results, result_suites
from ..drafter.config import CONFIG, PEagleConfig
from ..serving.engine import engine_kwargs
from ..errors import PeagleError
from . import report
from .payoff import best

PREFIX = "ledger:"
COLUMNS = ["chapter", "what", "head", "host", "prompt_set", "prompts", "new_tokens", "k", "dtype", "rounds",
           "acceptance_length"]
FAMILY_HEAD = {"p-eagle": "P-EAGLE", "eagle3": "EAGLE-3"}


def row(**fields) -> dict:
    """One ledger row; every column of :data:`COLUMNS` must be given (``None`` where a source does not say)."""
    missing = [c for c in COLUMNS if c not in fields]
    unknown = [c for c in fields if c not in COLUMNS]
    if missing or unknown:
        raise PeagleError(f"ledger row: missing {missing}, unknown {unknown}. Fix: pass exactly {COLUMNS}")
    return {c: fields[c] for c in COLUMNS}


def record(**fields) -> dict:
    """Store a live run's row for the running notebook (``report.record`` under ``ledger:<what>``); returns it."""
    r = row(**fields)
    return report.record(f"{PREFIX}{r['head']}:{r['what']}:K={r['k']}", r)


class Logbook:
    """A chapter's pen for the ledger: the chapter, host and dtype are fixed once, so a teaching cell records a
    live run with :meth:`add` naming only what varies between its runs."""

    def __init__(self, chapter: str, host: str, dtype: str):
        self.chapter, self.host, self.dtype = chapter, host, dtype

    def add(self, what: str, head: str, **fields) -> dict:
        """Record one live run: ``prompt_set``, ``prompts``, ``new_tokens``, ``k``, ``rounds`` and
        ``acceptance_length`` as keywords; a ``stats`` keyword (anything with ``rounds`` and ``acceptance_length``,
        such as a loop's ``stats``) stands for the last two."""
        stats = fields.pop("stats", None)
        if stats is not None:
            fields.update(rounds=stats.rounds, acceptance_length=stats.acceptance_length)
        return record(chapter=self.chapter, what=what, head=head, host=self.host, dtype=self.dtype, **fields)


def recorded(through: str | None = None) -> list[dict]:
    """The rows the chapters recorded in this results folder (``summary.json``), in chapter order; with ``through``
    (a chapter number such as ``"06"``) only the chapters up to it, which run before it in the workbook's order,
    so rows a later chapter left in the folder from an earlier execution are not shown."""
    rows = [value for book in report.load().values() for key, value in book.items() if key.startswith(PREFIX)]
    rows = [r for r in rows if through is None or str(r["chapter"]) <= str(through)]
    return sorted(rows, key=lambda r: str(r["chapter"]))


def heldout_rows(compare_path: Path, shipped: dict[str, Path], repo_root: Path) -> list[dict]:
    """05's committed held-out comparison: the shipped heads' rows, one per K (rounds: not recorded there)."""
    if not Path(compare_path).is_file():
        return []
    compare = json.loads(Path(compare_path).read_text())
    rows = []
    for kind, path in shipped.items():
        rel = Path(path).relative_to(repo_root).as_posix()
        found = next((r for r in reversed(compare["rows"]) if r["path"] == rel), None)
        for k, al in (found or {}).get("acceptance_length", {}).items():
            rows.append(row(chapter="05", what="held-out comparison (committed)", head=Path(path).name,
                            host=compare.get("host"), prompt_set="held-out split of the prompt mix",
                            prompts=len(compare.get("prompts", [])), new_tokens=compare.get("max_new_tokens"),
                            k=int(k), dtype=compare.get("dtype"), rounds=None, acceptance_length=al))
    return rows


def bench_rows(e2e: dict, chapter: str, what: str, host: str | None = None, every_k: bool = False,
               vocab_now: dict[str, int] | None = None) -> list[dict]:
    """One end-to-end bench result: per head, the row at the K of its best speed-up (what the tables print), or
    with ``every_k`` one row per K it ran (the best one marked). ``vocab_now``: a head folder's name -> its draft
    vocabulary today; a run recorded with another size ran an earlier version of that head, named so."""
    cfg, env = e2e.get("config", {}), e2e.get("env", {})
    rows = []
    for family, name in FAMILY_HEAD.items():
        top = best(e2e, family)
        if top is None:
            continue
        info = cfg.get(f"{'parallel' if family == 'p-eagle' else 'sequential'}_head") or {}
        head = Path(info.get("source") or name).name
        then = earlier_vocab(info, vocab_now)
        if then:
            head = f"{head} (earlier version, {then:,} draft ids)"
        ms = [m for m in e2e["methods"] if m["family"] == family] if every_k else [top]
        for m in ms:
            rows.append(row(chapter=chapter, what=f"{what}, {'best speed-up' if m is top else 'K sweep'}",
                            head=head, host=host or env.get("host"), prompt_set=f"{cfg.get('suite') or 'code'}: "
                            f"{cfg.get('prompts') or 'HumanEval'}", prompts=cfg.get("n_prompts"),
                            new_tokens=cfg.get("max_new_tokens"), k=m["k"], dtype=env.get("dtype"),
                            rounds=m.get("rounds"), acceptance_length=m["acceptance_length"]))
    return rows


def committed_bench_rows(results_root: Path, vocab_now: dict[str, int] | None = None) -> list[dict]:
    """07's committed bench runs, every host, dtype and suite (``vocab_now``: as in :func:`bench_rows`)."""
    rows = []
    for c in committed_results(results_root):
        for suite, e2e in result_suites(c["results"]).items():
            rows += bench_rows(e2e, "07", f"bench `{suite}` suite, {c['dir']} (committed)", host=c["host"],
                               vocab_now=vocab_now)
    return rows


def serving_rows(results_root: Path) -> list[dict]:
    """11's committed serving sweeps: vLLM's acceptance length per concurrency, pooled over the repeats."""
    rows = []
    for path in sorted(Path(results_root).glob("*/serving/serving_sweep.json")):
        sweep = json.loads(path.read_text())
        meta = sweep["meta"]
        for conc in meta["concurrencies"]:
            runs = [r for r in sweep["rows"] if r["concurrency"] == conc and r.get("acceptance_length")]
            if runs:
                rows.append(row(chapter="11", what=f"vLLM serving sweep, {conc} concurrent (committed)",
                                head=meta["head"], host=meta["host"], prompt_set="serving sweep requests",
                                prompts=sum(r.get("ok", 0) for r in runs), new_tokens=meta.get("max_tokens"), k=meta["k"],
                                dtype=serving_dtype(meta), rounds=None,
                                acceptance_length=round(sum(r["acceptance_length"] for r in runs) / len(runs), 4)))
    return rows


def serving_dtype(meta: dict) -> str:
    """The dtype a serving sweep's engines ran in (its results file's ``meta``): recorded, else serve-sweep's
    setting for the sweep's device, with that said."""
    env = meta.get("environment") or {}
    recorded_dtype = (meta.get("engine") or {}).get("dtype") or meta.get("dtype") or env.get("dtype")
    if recorded_dtype:
        return str(recorded_dtype)
    on_gpu = env.get("device") == "cuda"
    dtype = engine_kwargs(on_gpu=on_gpu).get("dtype", "auto")
    return f"{dtype} (serve-sweep's {'GPU' if on_gpu else 'CPU'} setting; the file predates recording it)"


def course_rows(data_dir: Path, shipped: dict[str, Path], repo_root: Path, through: str | None = None) -> list[dict]:
    """The ledger: the committed rows (05's held-out comparisons of every host, 07's bench suites, 11's serving
    sweeps) and the rows the chapters recorded (only chapters up to ``through`` when given), in chapter order."""
    return sorted(committed_rows(data_dir, shipped, repo_root) + recorded(through), key=lambda r: str(r["chapter"]))


def committed_rows(data_dir: Path, shipped: dict[str, Path], repo_root: Path) -> list[dict]:
    """The ledger's committed rows: 05's held-out comparisons of every host, 07's bench suites, 11's serving sweeps."""
    data_dir = Path(data_dir)
    rows = [r for path in sorted(data_dir.glob("recipe/*/heldout_compare.json"))
            for r in heldout_rows(path, shipped, repo_root)]
    results = data_dir / "results"
    return rows + committed_bench_rows(results, shipped_vocab(shipped)) + serving_rows(results)


def shipped_vocab(shipped: dict[str, Path]) -> dict[str, int]:
    """A shipped head folder's name -> its draft vocabulary today (heads not on disk left out)."""
    return {Path(p).name: PEagleConfig.from_dir(p).draft_vocab_size
            for p in shipped.values() if (Path(p) / CONFIG).is_file()}


def earlier_vocab(head_info: dict, vocab_now: dict[str, int] | None) -> int | None:
    """The draft vocabulary a bench run recorded for its head (``config["parallel_head"]`` or the sequential one)
    when it differs from that head's today (:func:`shipped_vocab`): the run drafted with an earlier version of the
    head. ``None``: the head as it is now, or nothing to compare."""
    then = head_info.get("draft_vocab_size")
    now = (vocab_now or {}).get(Path(head_info.get("source") or "").name)
    return then if then and now and then != now else None
