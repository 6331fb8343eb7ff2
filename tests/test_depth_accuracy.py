"""`peagle-lab depth-accuracy`: held-out per-depth accuracy of trained heads, from the command line."""

from __future__ import annotations

import json

import torch

from peagle_lab.cli import main


def test_depth_accuracy_scores_each_head_on_the_split_and_writes_the_host(tmp_path, tiny_llama, byte_tokenizer,
                                                                          capsys):
    model = tiny_llama(hidden=32, layers=4, vocab=len(byte_tokenizer))
    model.save_pretrained(tmp_path / "target")
    byte_tokenizer.save_pretrained(tmp_path / "target")
    data = tmp_path / "distilled.jsonl"
    meta = {"format": "peagle-lab-distill", "version": 1, "target": "tiny", "max_new_tokens": 8, "system": None,
            "decoding": "greedy"}
    gen = torch.Generator().manual_seed(2)
    lines = [json.dumps({"meta": meta})] + [json.dumps(
        {"index": i, "prompt_sha": f"p{i}", "prompt_len": 3, "finished": True,
         "input_ids": torch.randint(4, 200, (12 + i,), generator=gen).tolist()}) for i in range(5)]
    data.write_text("\n".join(lines) + "\n")
    target = ["--target", str(tmp_path / "target"), "--device", "cpu", "--dtype", "float32"]
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
