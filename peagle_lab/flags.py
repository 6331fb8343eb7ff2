"""Settings dataclasses whose fields are command-line flags (:class:`peagle_lab.training.TrainConfig`,
:class:`peagle_lab.bench.config.BenchConfig`, :class:`peagle_lab.features.writer.ExtractionSettings`): a field
made with :func:`flag_field` carries its flag's help and names; :func:`add_config_flags` makes the flags of a
dataclass, :func:`given_config_flags` reads back the ones given. A new field is a new flag, with no second edit."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from .errors import PeagleError


def flag_field(default, help=None, **cli):
    """A settings field and its flag: ``help``; ``flag`` (default ``--field-name``), ``short``, ``aliases`` (more
    names of the same flag), ``choices``, ``metavar``, ``type`` (a parser of the flag's text, instead of the one
    the annotation names); ``cli=False``: no flag (another option, or only the Python API, sets it)."""
    return dataclasses.field(default=default, metadata=dict(help=help, **cli))


def flag_names(f: dataclasses.Field) -> list[str]:
    """The option strings of a field's flag: its ``short``, its ``flag`` (``--field-name``), its ``aliases``."""
    names = [f.metadata["short"]] if "short" in f.metadata else []
    names.append(f.metadata.get("flag", "--" + f.name.replace("_", "-")))
    return names + list(f.metadata.get("aliases", ()))


def flag_of(cls, name: str) -> str:
    """How an error message names the flag of field ``name`` of ``cls``: its option strings joined by ``/``."""
    return "/".join(flag_names(next(f for f in dataclasses.fields(cls) if f.name == name)))


def _flag_kwargs(f: dataclasses.Field, hint) -> dict:
    """argparse keywords for one dataclass field, from its type and metadata. Every flag defaults to None ("not
    given"): the dataclass default applies then (:func:`given_config_flags`)."""
    meta = f.metadata
    kw = dict(dest=f.name, default=None, help=meta.get("help"))
    if (f.default is not dataclasses.MISSING and f.default not in (None, "") and hint is not bool
            and "default" not in (kw["help"] or "")):
        kw["help"] = f"{kw['help'] or ''} (default: {_show(f.default)})".lstrip()
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint
    if "type" in meta:
        kw["type"] = _flag_type(meta["type"])
    elif base is bool:
        return kw | dict(action="store_true")
    elif typing.get_origin(base) is tuple:
        items = typing.get_args(base)
        nargs = "+" if len(items) == 2 and items[1] is Ellipsis else len(items)
        kw |= dict(type=items[0], nargs=nargs)
    elif base in (int, float, str):
        kw["type"] = base
    else:
        raise TypeError(f"{f.name}: no command-line type for {hint!r}")
    for key in ("choices", "metavar"):
        if key in meta:
            kw[key] = meta[key]
    return kw


def _flag_type(parse):
    """``parse`` for argparse: its PeagleError's message (the range, the fix) becomes argparse's error line."""
    def typed(text):
        try:
            return parse(text)
        except PeagleError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = getattr(parse, "__name__", "value")
    return typed


def _show(v):
    return " ".join(map(str, v)) if isinstance(v, tuple) else v


def add_config_flags(p, cls) -> None:
    """One flag per field of the dataclass ``cls`` (:func:`flag_names`), typed from its annotation (bool: a
    switch; tuple: several values) unless its metadata names a ``type``, with its help and choices; fields with
    ``cli=False`` in their metadata get none."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("cli", True):
            p.add_argument(*flag_names(f), **_flag_kwargs(f, hints[f.name]))


def given_config_flags(args, cls) -> dict:
    """The fields of ``cls`` whose flags were given on the command line."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if f.metadata.get("cli", True) and getattr(args, f.name, None) is not None}
