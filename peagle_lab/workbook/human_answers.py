"""Answers written by people, for the self-distillation question ("should the target regenerate the training
answers?"): tasks made from the Python standard library's own functions.

Each task asks for one function, by its name, signature and the first paragraph of its docstring; the human
answer is that function's source as its authors wrote it. The same prompts answered by the target
(:func:`peagle_lab.distill.data.distill`) give the self-distilled arm, so the two training sets differ only in
who wrote the answers. The tasks are read from the interpreter that runs them (nothing is downloaded or stored); the Python
version is part of every result (its environment record). Split ``val`` (about 8%, by a hash of the task id) is held out from training.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import textwrap
import warnings

from ..errors import PeagleError

# pure-Python modules with many short, documented functions
MODULES = ("bisect", "heapq", "textwrap", "string", "shlex", "fnmatch", "posixpath", "genericpath", "statistics",
           "fractions", "colorsys", "calendar", "difflib", "html", "ipaddress", "base64", "quopri", "urllib.parse",
           "email.utils", "random", "functools", "csv", "json.decoder", "json.encoder", "copy", "pprint",
           "tokenize", "ast", "dataclasses", "inspect", "glob", "shutil", "tempfile", "locale", "gettext",
           "mimetypes", "uu", "zipfile", "tarfile", "configparser", "argparse", "optparse", "logging", "enum",
           "operator", "numbers", "decimal", "datetime", "zoneinfo._common", "email.header", "email.quoprimime",
           "email.base64mime", "http.cookies", "http.client", "urllib.request", "wsgiref.util", "xml.dom.minidom",
           "xml.sax.saxutils", "plistlib", "netrc", "ntpath", "pathlib", "reprlib", "sched", "selectors",
           "subprocess", "sysconfig", "timeit", "trace", "traceback", "typing", "warnings", "weakref",
           "pydoc", "pickletools", "dis", "code", "codeop", "cmd", "contextlib", "asyncio.tasks", "collections")
VAL_PERCENT = 8


def _split(task_id: str) -> str:
    return "val" if int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 100 < VAL_PERCENT else "train"


def stdlib_tasks(max_source_chars: int = 900, min_source_chars: int = 120, modules=MODULES) -> list[dict]:
    """``[{"id", "prompt", "answer", "split"}]``, one per documented public function or class method of
    ``modules`` whose source is ``min_source_chars``..``max_source_chars`` long; in a fixed order (module, then
    name)."""

    tasks, seen = [], set()
    for mod_name in modules:
        try:
            with warnings.catch_warnings():  # some of them are deprecated (uu): their source is still the answer
                warnings.simplefilter("ignore", DeprecationWarning)
                mod = importlib.import_module(mod_name)
        except ImportError:  # a module this interpreter lacks: its tasks are simply absent
            continue
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isfunction(obj):
                members = [(name, obj, "function", "")]
            elif inspect.isclass(obj):
                members = [(m, f, "method", f" of class `{name}`") for m, f in sorted(vars(obj).items())
                           if inspect.isfunction(f) and not m.startswith("_")]
            else:
                continue
            for fname, fn, kind, owner in members:
                doc = inspect.getdoc(fn)
                try:
                    source = textwrap.dedent(inspect.getsource(fn))
                    sig = str(inspect.signature(fn))
                except (OSError, TypeError, ValueError):
                    continue
                if not doc or not (min_source_chars <= len(source) <= max_source_chars) or source in seen:
                    continue
                seen.add(source)
                summary = " ".join(doc.split("\n\n")[0].split())
                task_id = f"{mod.__name__}.{name}" + (f".{fname}" if kind == "method" else "")
                tasks.append(dict(id=task_id, split=_split(task_id),
                                  prompt=f"Write the Python {kind} `{fname}{sig}`{owner} ({mod.__name__} module): "
                                         f"{summary}",
                                  answer=f"```python\n{source.rstrip()}\n```"))
    if not tasks:
        raise PeagleError("No standard-library functions found for the human-answer tasks. Fix: run with a full "
                          "CPython installation (its .py sources present).")
    return tasks


def human_records(tokenizer, tasks: list[dict], max_answer_tokens: int | None = None) -> list[dict]:
    """Training records in the distilled format (``input_ids`` = chat-template prompt + the human answer + EOS,
    ``prompt_len``), so that the trainer treats both arms alike. ``max_answer_tokens`` cuts an answer as the
    distillation's ``max_new_tokens`` cuts the target's."""
    from ..prompts import chat_ids

    eos = tokenizer.eos_token_id
    eos = eos if isinstance(eos, int) else eos[0]
    out = []
    for i, t in enumerate(tasks):
        prompt = chat_ids(tokenizer, t["prompt"])
        answer = list(tokenizer(t["answer"], add_special_tokens=False)["input_ids"]) + [eos]
        if max_answer_tokens is not None:
            answer = answer[:max_answer_tokens]
        out.append(dict(index=i, prompt_len=len(prompt), input_ids=prompt + answer, finished=answer[-1] == eos))
    return out

