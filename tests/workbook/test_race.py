"""06's live race: plain decoding and each contender on every request, rotated, lossless, read by the paired rule
(workbook.race's ``Race``). The race is the one notebook 06 writes in view: these tests run that cell."""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

from peagle_lab.decoding.draft_sources import HeadDrafter, OracleDrafter
from peagle_lab.decoding.target_runner import TargetRunner
from tests.conftest import make_random_head

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_parallel_vs_sequential.py"


@pytest.fixture(scope="module")
def race():
    """Notebook 06's ``race``: the code cell that writes it, run on its own (it imports what it uses)."""
    cells = [c.source for c in jupytext.read(NOTEBOOK).cells if c.cell_type == "code" and "def race(" in c.source]
    assert len(cells) == 1, "notebook 06 should write race in one code cell"
    names: dict = {}
    exec(compile(cells[0], str(NOTEBOOK), "exec"), names)
    return names["race"]


@pytest.fixture
def target(tiny_llama):
    return tiny_llama(layers=4)


def requests(random_ids, n=3):
    return [(f"request {i}", random_ids(length=6, seed=i)[0].tolist()) for i in range(n)]


def oracle(ids, plain):
    return OracleDrafter(ids + plain.tokens, 96)  # the request's plain output: every draft accepted


def test_a_race_counts_every_round_and_reads_the_oracle_ahead_of_a_random_head(race, target, random_ids):
    head = make_random_head(target)
    runner = TargetRunner(target, head.config.aux_hidden_state_layer_ids)
    res = race(runner, {"oracle": (oracle, 3), "head": (lambda ids, plain: HeadDrafter(head, "parallel"), 3)},
               requests(random_ids), new_tokens=12, plain_first=True)
    assert len(res.rows) == 3 and res.regime == "exact"
    assert all(d is None for d in res.divergences)  # fp32 on a CPU: every output equals plain greedy
    accepted, rounds = res.tally["oracle"]
    assert rounds == 3 * 3 and accepted == 3 * rounds  # 12 tokens a request at 4 a round, every draft accepted
    assert res.acceptance_length("oracle") == 4.0 > res.acceptance_length("head")
    assert all(row["oracle AL"] >= row["head AL"] for row in res.rows)
    lines = res.lines()
    assert lines[0].startswith("live (float32), oracle K=3, head K=3: 3 requests x 12 new tokens; 0 of 6 outputs")
    assert any(line.startswith("oracle minus head:") for line in lines)
    assert res.table().splitlines()[0].startswith("| held-out request | answer tokens | oracle AL |")


def test_without_plain_first_a_contender_gets_no_plain_run_on_some_requests(race, target, random_ids):
    seen = []

    def spy(ids, plain):
        seen.append(plain is not None)
        return OracleDrafter(ids, 96) if plain is None else oracle(ids, plain)

    runner = TargetRunner(target, make_random_head(target).config.aux_hidden_state_layer_ids)
    race(runner, {"spy": (spy, 2)}, requests(random_ids), new_tokens=6)
    assert seen == [True, False, True]  # plain, then the contender first on the second request: the order rotates
