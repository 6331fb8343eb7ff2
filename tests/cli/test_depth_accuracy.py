"""`peagle-lab depth-accuracy`: held-out per-depth accuracy of trained heads, from the command line."""

from __future__ import annotations

import json

from peagle_lab.cli import main


def test_depth_accuracy_scores_each_head_on_the_split_and_writes_the_host(tmp_path, tiny_distilled, capsys):
    data, target = tiny_distilled(5, 12, 2)
    heads = []
    for layers in (1, 2):
        heads.append(str(tmp_path / f"h{layers}"))
        assert main(["train", "--data", str(data), "--out", heads[-1], "--layers", str(layers), "-K", "3",
                     "--steps", "1", "--batch-tokens", "32", "--row-tokens", "32", "--mask-token-id", "3",
                     "--draft-vocab-size", "0", *target]) == 0, capsys.readouterr().err
    out = tmp_path / "depth.json"
    assert main(["depth-accuracy", *heads, "--data", str(data), "--split", "all", "--sequences", "4",
                 "--out", str(out), *target]) == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert res["sequences"] == 4 and [h["layers"] for h in res["heads"]] == [1, 2]
    for h in res["heads"]:
        assert len(h["accuracy"]) == 3 and all(0.0 <= a <= 1.0 for a in h["accuracy"])
        # depth d scores every anchor a with a + d + 1 inside the sequence: fewer elements at each deeper depth
        assert h["elements"][0] > h["elements"][1] > h["elements"][2] > 0
    assert res["machine"]["host"]
    assert main(["depth-accuracy", heads[0], "--data", str(data), "--sequences", "0", *target]) == 2
    assert "--sequences" in capsys.readouterr().err
