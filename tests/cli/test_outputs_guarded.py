"""What every writing command owes its outputs on a shared, full or hostile file system, driven by one table:
:data:`WRITERS` declares each command's output argument (and its input, where it reads one), and every test here is
parametrized over it, so a new command gets them all by adding its row.

- an output inside a file, behind a symlink loop or in a read-only folder is refused in one line;
- an output that is a symlink is refused in one line (outputs are never written through links, everywhere alike);
- an output that is, contains or lies inside the command's input is refused in one line, the input untouched;
- a symlink, a hard link or a non-regular file at the output's lock path is refused in one line, the file it
  names untouched;
- a user's files that merely look temporary (``.NAME.mine.tmp``, ``.NAME.old/``, ``NAME/sub/.notes.txt.tmp``) are
  never swept; only this tool's marked leftovers of a dead run are.

"Refused" is observed before the long part (the loaders replaced, as in :mod:`test_checked_first`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from peagle_lab import lock

from conftest import ReachedLongWork
from cli_inputs import base, one_error_line, prompts_file, target  # noqa: F401


@dataclass(frozen=True)
class Writer:
    """A command that writes: ``argv(target, tmp_path)`` builds a valid command line; ``out`` is the position of
    its output path in that list (a flag's value, or a positional argument); ``source``, its input's, where the
    command reads one that an output could sit in or around; ``folder``: the output is a folder."""

    argv: Callable[[Path, Path], list[str]]
    out: Callable[[list[str]], int]
    source: Callable[[list[str]], int] | None
    folder: bool


def after(flag: str) -> Callable[[list[str]], int]:
    return lambda argv: argv.index(flag) + 1


def _distill(target, tmp_path):
    return base("distill", target, tmp_path) + ["--prompts-file", str(prompts_file(tmp_path / "p.jsonl", ["hi"]))]


def _export(target, tmp_path):
    from served_heads import make_head

    head = tmp_path / "head"
    if not head.exists():
        make_head(head, target)
    return ["export-vllm", str(head), str(tmp_path / "vllm-head")]


WRITERS = {
    "distill": Writer(_distill, after("--out"), None, folder=False),
    "train": Writer(lambda t, p: base("train", t, p), after("--out"), after("--data"), folder=True),
    "extract": Writer(lambda t, p: base("extract", t, p), after("--out"), after("--distilled"), folder=True),
    "export-vllm": Writer(_export, lambda argv: 2, lambda argv: 1, folder=True),
}
WITH_SOURCE = sorted(name for name, w in WRITERS.items() if w.source is not None)


def command(name, target, tmp_path) -> tuple[list[str], Path]:
    w = WRITERS[name]
    argv = w.argv(target, tmp_path)
    return argv, Path(argv[w.out(argv)])


def runs_to_long_work(argv, capsys) -> str:
    """The command passes its checks and takes its lock (the long part is reached); its stderr."""
    from peagle_lab.cli import main

    with pytest.raises(ReachedLongWork):
        main(argv)
    return capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ unwritable outputs
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_an_output_inside_a_file_or_a_symlink_loop_is_refused_first(no_long_work, capsys, target, tmp_path, name):
    argv, _ = command(name, target, tmp_path)
    i = WRITERS[name].out(argv)
    (tmp_path / "a-file").write_text("x")
    argv[i] = str(tmp_path / "a-file" / "out")
    assert "is a file" in one_error_line(capsys, argv)
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    argv[i] = str(tmp_path / "loop" / "out")
    assert "loop" in one_error_line(capsys, argv).lower()


def _read_only_folder(tmp_path):
    """A folder no file can be created in: a chmod'ed one for a normal user; for root (who writes anywhere a mode
    allows nothing) the kernel's /sys, which refuses new files."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        return ro
    try:
        fd, name = tempfile.mkstemp(dir="/sys")
    except OSError:
        return "/sys"
    os.close(fd)
    os.remove(name)
    pytest.skip("no read-only folder on this machine")


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_read_only_output_is_refused_before_the_long_part(no_long_work, capsys, target, tmp_path, name):
    ro = _read_only_folder(tmp_path)
    argv, _ = command(name, target, tmp_path)
    argv[WRITERS[name].out(argv)] = f"{ro}/out"
    assert "cannot write in" in one_error_line(capsys, argv)


# ------------------------------------------------------------------------------------------------ symlinked outputs
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_an_output_given_as_a_symlink_is_refused_and_its_target_untouched(no_long_work, capsys, target, tmp_path,
                                                                          name):
    argv, out = command(name, target, tmp_path)
    real = tmp_path / "real"
    if WRITERS[name].folder:
        real.mkdir()
        (real / "keep.txt").write_text("keep")
    else:
        real.write_text("keep\n")
    os.symlink(real, out)
    assert "is a symlink" in one_error_line(capsys, argv)
    assert out.is_symlink()
    assert ((real / "keep.txt") if real.is_dir() else real).read_text().startswith("keep")


# ------------------------------------------------------------------------------------------------ output vs input
@pytest.mark.parametrize("where", ["the input itself", "above the input", "inside the input"])
@pytest.mark.parametrize("name", WITH_SOURCE)
def test_an_output_that_is_contains_or_lies_in_the_input_is_refused(no_long_work, capsys, target, tmp_path, name,
                                                                   where):
    w = WRITERS[name]
    argv, _ = command(name, target, tmp_path)
    source = Path(argv[w.source(argv)])
    if source.is_file():  # a file input: move it into a folder, so that there is something above it to name
        (tmp_path / "in").mkdir()
        source = source.rename(tmp_path / "in" / source.name)
        argv[w.source(argv)] = str(source)
    before = {p: p.read_bytes() for p in source.parent.rglob("*") if p.is_file()}
    argv[w.out(argv)] = str({"the input itself": source, "above the input": source.parent,
                             "inside the input": source / "out"}[where])
    if where == "the input itself" and not w.folder:
        pytest.skip("a file output over a file input is the same path")
    line = one_error_line(capsys, argv + (["--overwrite"] if name == "export-vllm" else []))
    # a file input cannot hold an output folder ("is a file"); anything else is named as the input
    assert ("is a file" if source.is_file() and where != "above the input" else "input") in line
    assert {p: p.read_bytes() for p in source.parent.rglob("*") if p.is_file()} == before


# ------------------------------------------------------------------------------------------------ the lock path
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_symlink_at_the_lock_path_is_refused_and_its_target_untouched(no_long_work, capsys, target, tmp_path,
                                                                        name):
    argv, out = command(name, target, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, lock.lock_path(out))
    assert "is a symlink" in one_error_line(capsys, argv)
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_fifo_or_a_hard_link_at_the_lock_path_is_refused(no_long_work, capsys, target, tmp_path, name):
    argv, out = command(name, target, tmp_path)
    os.mkfifo(lock.lock_path(out))
    assert "not a regular file" in one_error_line(capsys, argv)
    lock.lock_path(out).unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.link(victim, lock.lock_path(out))
    assert "hard link" in one_error_line(capsys, argv)
    assert victim.read_text() == "precious\n"


# ------------------------------------------------------------------------------------------------ the sweep
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_the_sweep_removes_only_this_tools_leftovers_of_a_dead_run(no_long_work, capsys, target, tmp_path, name):
    argv, out = command(name, target, tmp_path)
    users = [out.parent / f".{out.name}.mine.tmp", out.parent / f".{out.name}.old"]
    users[0].write_text("a user's note")
    users[1].mkdir()
    (users[1] / "backup.bin").write_text("a user's backup")
    ours = out.parent / (lock.temp_prefix(out).rsplit("-", 2)[0] + f"-{_dead_pid()}-x1.tmp")
    ours.write_text("half a file")
    if WRITERS[name].folder:
        (out / "sub").mkdir(parents=True)
        users.append(out / "sub" / ".notes.txt.tmp")
        users[-1].write_text("a user's file in a subfolder")
        deep = out / "sub" / (lock.temp_prefix("x").rsplit("-", 2)[0] + f"-{_dead_pid()}-y2.tmp")
        deep.write_text("marked, but deeper than the output folder")
        users.append(deep)
        if name == "export-vllm":
            argv.append("--overwrite")
    err = runs_to_long_work(argv, capsys)
    assert not ours.exists()
    assert all(p.exists() for p in users), [p for p in users if not p.exists()]
    assert "removed 1 temporary file(s)" in err
