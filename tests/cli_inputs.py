"""What the command-line tests feed the CLI: a tiny target saved with a byte-level tokenizer (vocabulary 259,
context 64 positions), distilled rows and prompt files, each command's good base arguments, and the two
observations: one error line with its fix, or the long part reached."""

from __future__ import annotations

import json

import pytest

from peagle_lab.cli import main
from peagle_lab.distill.data import FORMAT

from conftest import CHATML_TEMPLATE, ReachedLongWork, make_byte_tokenizer, make_tiny_llama

CONTEXT = 64


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("target")
    tok = make_byte_tokenizer(CHATML_TEMPLATE)
    make_tiny_llama(hidden=32, layers=4, vocab=len(tok), max_positions=CONTEXT).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def one_error_line(capsys, argv) -> str:
    """Run the CLI; it must exit 2 with exactly one stderr line, the project's error with its fix."""
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert len(err) == 1 and err[0].startswith("peagle-lab: error: ") and "Fix:" in err[0], err
    return err[0]


def reaches_long_work(capsys, argv) -> None:
    with pytest.raises(ReachedLongWork):
        main(argv)
    capsys.readouterr()


def distilled(path, records, meta_extra=None):
    meta = {"format": FORMAT, "version": 1, "target": "tiny", "max_new_tokens": 8, "system": None,
            **(meta_extra or {})}
    path.write_text("\n".join(json.dumps(x) for x in [{"meta": meta}, *records]) + "\n")
    return path


def good_record(i=0, ids=(40, 41, 42, 43, 44, 45)):
    return {"index": i, "prompt_sha": f"{i:016x}", "prompt_len": 3, "input_ids": list(ids), "finished": True}


def prompts_file(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def base(cmd, target, tmp_path):
    common = ["--target", str(target), "--device", "cpu", "--dtype", "float32"]
    if cmd == "distill":
        return ["distill", "--out", str(tmp_path / "d.jsonl"), "--engine", "transformers",
                "--max-new-tokens", "8", *common]
    if cmd == "train":
        data = distilled(tmp_path / "data.jsonl", [good_record(0), good_record(1)])
        return ["train", "--data", str(data), "--out", str(tmp_path / "head"), "--steps", "2", "--split", "all",
                "--mask-token-id", "3", "--draft-vocab-size", "0", *common]
    if cmd == "extract":
        data = distilled(tmp_path / "data.jsonl", [good_record(0)])
        return ["extract", "--distilled", str(data), "--out", str(tmp_path / "feats"), *common]
    raise ValueError(cmd)
