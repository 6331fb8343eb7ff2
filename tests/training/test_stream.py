"""Training from streamed feature shards: every epoch visits every sequence once, shards in a new order each epoch,
only a bounded window is decoded, a resumed stream reads the same rows as an uninterrupted one, and a training run
on the stream is the in-memory run's up to the order of the rows."""

import pytest
import torch

from peagle_lab import features as F
from peagle_lab.errors import PeagleError
from peagle_lab.training import TrainConfig, Trainer, TrainerOptions, prepare_sequences
from peagle_lab.training.stream import shard_sequences

TAPS = (0, 2, 3)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from conftest import make_tiny_llama

    model = make_tiny_llama(hidden=32, layers=4)
    gen = torch.Generator().manual_seed(0)
    records = [{"input_ids": torch.randint(4, 96, (int(torch.randint(6, 30, (1,), generator=gen)),),
                                           generator=gen).tolist(), "prompt_len": 3} for _ in range(40)]
    root = tmp_path_factory.mktemp("features")
    settings = F.ExtractionSettings(tap_layers=TAPS, shard_size=6, taps_dtype=torch.float32)
    F.extract_features(model, [r["input_ids"] for r in records[:25]], root / "part-a", settings, progress=False,
                       verbose=False)
    F.extract_features(model, [r["input_ids"] for r in records[25:]], root / "part-b", settings, progress=False,
                       verbose=False)
    return model, records, root


def _ids(row):
    return [tuple(s["input_ids"].tolist()) for s in row]


def test_every_epoch_visits_every_sequence_once_with_shards_in_a_new_order(setup):
    _, records, root = setup
    seqs = shard_sequences(root, records, window=8)
    assert len(seqs) == 40 and seqs.num_tokens == sum(len(r["input_ids"]) for r in records)
    rows = seqs.rows(row_tokens=1, seed=3)  # one sequence per row
    epochs = [[_ids(rows._next_row())[0] for _ in range(40)] for _ in range(2)]
    want = sorted(tuple(r["input_ids"]) for r in records)
    assert sorted(epochs[0]) == want and sorted(epochs[1]) == want
    assert epochs[0] != epochs[1]
    assert rows.decoded_max <= 8, "only one window of sequences is ever decoded"


def test_a_resumed_stream_reads_the_same_rows_as_an_uninterrupted_one(setup):
    _, records, root = setup
    seqs = shard_sequences(root, records, window=7)
    whole = seqs.rows(row_tokens=40, seed=1)
    straight = [_ids(r) for _ in range(30) for r in whole.next_rows(60)]  # past the end of the first epoch
    first = seqs.rows(row_tokens=40, seed=1)
    got = [_ids(r) for _ in range(11) for r in first.next_rows(60)]
    state = first.state_dict()
    assert {"epoch", "pos", "shard", "row"} <= set(state) and state["shard"].startswith("part-")
    again = shard_sequences(root, records, window=7).rows(row_tokens=40, seed=1)
    again.load_state_dict(state)
    got += [_ids(r) for _ in range(19) for r in again.next_rows(60)]
    assert got == straight


def test_streamed_sequences_carry_what_training_reads(setup):
    model, records, root = setup
    from peagle_lab.drafter.vocab import count_tokens

    mem = prepare_sequences(model, records, TAPS, progress=False)
    stream = shard_sequences(root, records)
    streamed = {tuple(s["input_ids"].tolist()): s for s in stream}
    # the draft vocabulary is counted from the labels alone, read without the taps
    assert torch.equal(count_tokens(stream.anchor_labels(), 96),
                       count_tokens([m["labels"][m["prompt_len"] - 1:] for m in mem], 96))
    for m in mem:
        s = streamed[tuple(m["input_ids"].tolist())]
        assert torch.equal(s["labels"], m["labels"]) and s["prompt_len"] == m["prompt_len"]
        torch.testing.assert_close(s["taps"], m["taps"])


def test_training_on_the_stream_resumes_to_the_uninterrupted_state(setup, tmp_path):
    model, records, root = setup
    cfg = TrainConfig(num_depths=3, layers=1, draft_vocab_size=None, steps=6, lr=3e-3, warmup_steps=2,
                      batch_tokens=48, row_tokens=48, mask_token_id=3, save_every=0, seed=0, autocast="float32",
                      tap_layers=TAPS)

    def trainer(out, resume=False):
        return Trainer(cfg, model, shard_sequences(root, records, tap_layers=TAPS, window=9),
                       options=TrainerOptions(out_dir=out, resume=resume, progress=False, verbose=False))

    straight = trainer(tmp_path / "a").train()
    trainer(tmp_path / "b").train(stop_after=3)
    resumed = trainer(tmp_path / "b", resume=True).train()
    assert resumed.steps_done == straight.steps_done == 6
    for (k, a), (_, b) in zip(straight.head.state_dict().items(), resumed.head.state_dict().items()):
        torch.testing.assert_close(a, b, msg=k)


def test_sequences_missing_from_the_shards_are_named_with_the_fix(setup):
    _, records, root = setup
    extra = records + [{"input_ids": [5, 6, 7, 8], "prompt_len": 2}]
    with pytest.raises(PeagleError, match="1 of 41 .*peagle-lab extract"):
        shard_sequences(root, extra)
    with pytest.raises(PeagleError, match="top-4"):
        shard_sequences(root, records, topk=4)


def test_the_train_command_streams_extracted_shards_with_soft_targets(tmp_path, tiny_distilled, capsys):
    import json

    from peagle_lab.cli import main

    data, target = tiny_distilled(6, 12, 0)
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "h0"), "--stream", *target]) == 2
    assert "--features" in capsys.readouterr().err
    feats = tmp_path / "feats"
    assert main(["extract", "--distilled", str(data), "--split", "train", "--out", str(feats / "part-train"),
                 "--topk-logits", "4", "--shard-size", "2", "--batch-tokens", "2048", *target]) == 0
    man = json.loads((feats / "part-train" / "manifest.json").read_text())
    assert man["topk"] == 4 and man["topk_bytes_per_token"] == 32 and man["batch_tokens"] == 2048
    rc = main(["train", "--data", str(data), "--out", str(tmp_path / "h"), "--features", str(feats), "--stream",
               "--loss", "kl", "--topk-logits", "4", "--steps", "2", "--batch-tokens", "32", "--row-tokens", "32",
               "--mask-token-id", "3", "--draft-vocab-size", "0", *target])
    assert rc == 0, capsys.readouterr().err
    record = json.loads((tmp_path / "h" / "training.json").read_text())
    assert record["config"]["loss"] == "kl" and "streamed" in record["features"]["source"]
    assert record["data"]["sequences"] == 6 and record["steps_done"] == 2


def test_a_distilled_file_extracted_in_record_slices_trains_on_any_slice(tmp_path, tiny_distilled, capsys):
    import json

    from peagle_lab.cli import main

    data, target = tiny_distilled(7, 10, 1)
    feats = tmp_path / "feats"
    for rows, name in (("0:4", "part-a"), ("4:", "part-b")):
        assert main(["extract", "--distilled", str(data), "--records", rows, "--out", str(feats / name),
                     *target]) == 0, capsys.readouterr().err
    assert json.loads((feats / "part-a" / "manifest.json").read_text())["num_sequences"] == 4
    assert json.loads((feats / "part-b" / "manifest.json").read_text())["num_sequences"] == 3
    for bad, message in (("4", "not a range"), ("5:2", "empty"), ("9:", "below 7")):
        assert main(["extract", "--distilled", str(data), "--records", bad, "--out", str(tmp_path / "x"),
                     *target]) == 2
        assert message in capsys.readouterr().err
    rc = main(["train", "--data", str(data), "--records", "2:6", "--out", str(tmp_path / "h"), "--features",
               str(feats), "--stream", "--steps", "1", "--batch-tokens", "32", "--row-tokens", "32",
               "--mask-token-id", "3", "--draft-vocab-size", "0", *target])
    assert rc == 0, capsys.readouterr().err
    record = json.loads((tmp_path / "h" / "training.json").read_text())
    assert record["data"]["sequences"] == 4 and record["data"]["records"] == "2:6"


def test_streamed_training_extracts_what_no_part_holds_then_streams(tmp_path, tiny_distilled, capsys):
    import json

    from peagle_lab.cli import main

    data, target = tiny_distilled(6, 10, 3)
    feats = tmp_path / "feats"
    assert main(["extract", "--distilled", str(data), "--records", "0:4", "--out", str(feats / "part-a"),
                 *target]) == 0, capsys.readouterr().err
    rc = main(["train", "--data", str(data), "--out", str(tmp_path / "h"), "--features", str(feats), "--stream",
               "--steps", "1", "--batch-tokens", "32", "--row-tokens", "32", "--mask-token-id", "3",
               "--draft-vocab-size", "0", *target])
    assert rc == 0, capsys.readouterr().err
    new = [p for p in feats.glob("part-*") if p.name != "part-a"]
    assert len(new) == 1 and json.loads((new[0] / "manifest.json").read_text())["num_sequences"] == 2
    assert json.loads((tmp_path / "h" / "training.json").read_text())["data"]["sequences"] == 6
