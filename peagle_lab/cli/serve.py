"""``peagle-lab export-vllm``, ``peagle-lab serve`` and ``peagle-lab serve-sweep``."""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from pathlib import Path

from ..environment import environment
from ..precision import host_slug
from ..prompts import chat_messages, humaneval_prompts
from ..settings import data_dir, display_path
from .. import lock, validate
from ..drafter.hub import head_path
from ..serving.export import check_export_paths, export_target, export_vllm
from ..serving.engine import Speculation, _on_gpu, speculative_config
from ..serving.server import check_port_free, client_snippet, serve, server_command
from ..serving.sweep import PLOT, Load, plot_sweep, server_settings, sweep


def register_cli(sub):
    p = sub.add_parser("export-vllm", help="convert a head directory into a vLLM eagle3 drafter directory")
    p.add_argument("head", help="head directory (PEagleDrafter.save_pretrained / `peagle-lab train`, or any head in "
                   "vLLM's eagle3 layout) or hub id")
    p.add_argument("out", help="output directory (config.json + model.safetensors for vLLM)")
    p.add_argument("--target", default=None, help="target name/dir/HF id (default: the head's own)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="weights dtype of the export (default: the target's, which vLLM runs the drafter in)")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of a non-empty output directory")
    p.set_defaults(func=_cli_export)

    s = sub.add_parser("serve", help="OpenAI-compatible vLLM server on 127.0.0.1 with a P-EAGLE head")
    s.add_argument("--head", default=None, help="a head in vLLM's layout: an EXPORTED head dir (export-vllm) or a "
                   "published head's hub id; none: plain decoding")
    s.add_argument("--target", default=None, help="target dir or HF id (default: $PEAGLE_TARGET / embedded)")
    s.add_argument("-k", "--num-speculative-tokens", type=int, default=None, dest="k")
    s.add_argument("--sequential", action="store_true", default=None,
                   help="EAGLE-3 sequential drafting (default: the head's own mode)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--max-model-len", type=int, default=2048)
    s.add_argument("--print-command", action="store_true", help="print the server command line and exit")
    s.set_defaults(func=_cli_serve)

    w = sub.add_parser("serve-sweep", help="vLLM server with and without the P-EAGLE head at 1/4/16 concurrent "
                                           "requests: tokens/s, latency, acceptance length")
    w.add_argument("--head", default="parallel",
                   help="'parallel' / 'sequential': the head for the served target (drafter.heads.head_for_target: "
                        "the shipped one for the embedded SmolLM2, else the one trained for it here), or a head "
                        "directory or hub id (it must fit the target)")
    w.add_argument("--target", default=None, help="target dir or HF id (default: $PEAGLE_TARGET / embedded)")
    w.add_argument("-K", type=int, default=7)
    w.add_argument("--concurrency", default="1,4,16")
    w.add_argument("--requests", type=int, default=None, help="requests per level (default max(2c, 8))")
    w.add_argument("--max-tokens", type=int, default=64)
    w.add_argument("--repeats", type=int, default=2)
    w.add_argument("--prompts", type=int, default=16, help="HumanEval prompts sent in turn")
    w.add_argument("--out", default=None, help="results directory (default data/results/<host>/serving)")
    w.add_argument("--port", type=int, default=None, help="first port (the second server takes the next)")
    w.set_defaults(func=_cli_sweep)


def _cli_export(args):
    check_export_paths(args.head, args.out, args.overwrite)
    with lock.hold(args.out):
        out = export_vllm(head_path(args.head), args.out, target=args.target, dtype=args.dtype, overwrite=args.overwrite)
    print(f"vLLM drafter written to {out}")
    print(json.dumps(speculative_config(out), indent=2))


def check_serve_args(args) -> None:
    """serve's numbers, before anything starts: K, the port (and that nothing answers there), the model length."""
    if args.k is not None:
        validate.num_speculative_tokens(args.k)
    validate.positive_int(args.port, "port", "--port", 1, 65535)
    validate.positive_int(args.max_model_len, "max_model_len", "--max-model-len", 16, 1 << 20)
    if not args.print_command:
        check_port_free(args.port)


def check_sweep_args(args) -> list[int]:
    """serve-sweep's numbers, before anything starts: K, the concurrencies (1..1024 each), requests, tokens,
    repeats, prompts, and the two ports (free); returns the concurrencies."""
    validate.num_speculative_tokens(args.K)
    conc = validate.int_list(args.concurrency, "--concurrency", "1,4,16")
    for c in conc:
        validate.positive_int(c, "concurrency", "--concurrency", 1, 1024)
    if args.requests is not None:
        validate.positive_int(args.requests, "requests", "--requests")
    for name in ("max_tokens", "repeats", "prompts"):
        validate.positive_int(getattr(args, name), name, "--" + name.replace("_", "-"))
    if args.port is not None:
        validate.positive_int(args.port, "port", "--port", 1, 65534)
        check_port_free(args.port)
        check_port_free(args.port + 1)
    return conc


def _cli_serve(args):
    check_serve_args(args)
    target = export_target(target=args.target)
    head = None if args.head is None else head_path(args.head)  # a hub id: its copy in the Hugging Face cache
    spec = None if head is None else Speculation(str(head), args.k, None if args.sequential is None else False)
    if args.print_command:
        cmd = server_command(target, spec, args.port, "peagle-target", max_model_len=args.max_model_len)
        print(" ".join(_shell_quote(c) for c in cmd))
        return 0
    srv = serve(target, spec, port=args.port, max_model_len=args.max_model_len)
    print(f"serving {target} at {srv.url} (ready in {srv.started_s:.0f} s; log {srv.log_path}); Ctrl-C stops it")
    print(client_snippet(srv.url, srv.model))
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


def _shell_quote(s: str) -> str:
    return shlex.quote(s)


def _cli_sweep(args):
    conc = check_sweep_args(args)
    head = sweep_head(args.head, args.target)
    out = Path(args.out) if args.out else data_dir() / "results" / host_slug("cuda" if _on_gpu() else "cpu") / "serving"
    with lock.hold(out):
        _sweep_locked(args, conc, head, out)


def sweep_head(kind_or_dir: str, target=None) -> Path:
    """The native head directory serve-sweep exports for ``target``: what
    :func:`~peagle_lab.drafter.heads.head_for_target` picks for it (never an untrained head), or the directory
    given when it fits. No head, or one that does not fit: one line with the fix, before any server starts. The
    target is read on the CPU in bf16 for the check (its vocabulary, shapes and fingerprint), then freed."""
    import torch

    from ..drafter.heads import head_for_target
    from ..memory import release
    from ..models import load_target, target_name

    model, tok = load_target(target, device="cpu", dtype=torch.bfloat16)
    try:
        _, info = head_for_target(kind_or_dir, model, tok, target=target or target_name(), allow_fresh=False)
    finally:
        del model
        release()
    return Path(info["path"])


def _sweep_locked(args, conc, head, out):
    tdir = export_target(target=args.target)
    tmp = Path(tempfile.mkdtemp(prefix="peagle-sweep-head-"))
    servers = {}
    try:
        hdir = tmp / "head"
        export_vllm(head, hdir, target=tdir)
        prompts = [chat_messages(p) for p in humaneval_prompts(args.prompts)]
        shared = server_settings(_on_gpu())  # on a GPU: half of vLLM's memory share each
        servers["plain"] = serve(tdir, port=args.port, **shared)
        servers["peagle"] = serve(tdir, Speculation(hdir, args.K), port=args.port + 1 if args.port else None, **shared)
        load = Load(tuple(conc), args.requests, args.max_tokens, args.repeats)
        doc = sweep(servers, prompts, out, load,
                    meta=dict(host=host_slug("cuda" if _on_gpu() else "cpu"), head=head.name, k=args.K,
                              environment=environment("cuda" if _on_gpu() else "cpu"), engine=shared))
    finally:
        for s in servers.values():
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    plot_sweep(doc, out / PLOT)
    for s in doc["speedups"]:
        print(f"concurrency {s['concurrency']:>3}: plain {s['plain_tokens_per_s']} tok/s, P-EAGLE "
              f"{s['peagle_tokens_per_s']} tok/s, throughput x{s['throughput_speedup']}, latency "
              f"x{s['latency_speedup']}, AL {s['acceptance_length']}")
    print(f"results in {display_path(out)}")
