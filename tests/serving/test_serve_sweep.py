"""The serving sweep's load generator and files, against a stand-in OpenAI-compatible server on 127.0.0.1
(the real vLLM sweep runs in tests/serving/test_serving.py): bounded levels, refusals recorded without stopping the
level, ratios, an interrupted sweep keeping its finished levels, a port in use named."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from peagle_lab.serving import sweep as serve_sweep
from peagle_lab.errors import PeagleError


class FakeServer:
    """Completions of ``max_tokens`` tokens after ``delay`` s; prompts over 200 characters are refused (400) like
    vLLM refuses one longer than the model length; /metrics counts drafts as a speculating server would."""

    def __init__(self, delay=0.01, accept=2.0):
        outer = self
        self.drafts = self.accepted = 0
        self.accept, self.lock = accept, threading.Lock()

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                text = (f"vllm:spec_decode_num_drafts_total {outer.drafts}\n"
                        f"vllm:spec_decode_num_draft_tokens_total {outer.drafts * 7}\n"
                        f"vllm:spec_decode_num_accepted_tokens_total {outer.accepted}\n")
                self.send_response(200)
                self.end_headers()
                self.wfile.write(text.encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if len(body["messages"][-1]["content"]) > 200:
                    self.send_response(400)
                    self.end_headers()
                    self.wfile.write(b'{"error": "maximum context length exceeded"}')
                    return
                time.sleep(delay)
                with outer.lock:
                    outer.drafts += 10
                    outer.accepted += int(10 * (outer.accept - 1))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(json.dumps({"usage": {"completion_tokens": body["max_tokens"]}}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.url, self.model = f"http://127.0.0.1:{self.port}/v1", "fake"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def metrics(self):
        from peagle_lab.serving import spec_metrics_from_prometheus

        with __import__("urllib.request").request.urlopen(f"http://127.0.0.1:{self.port}/metrics") as r:
            return spec_metrics_from_prometheus(r.read().decode())

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def servers():
    s = {"plain": FakeServer(delay=0.05), "peagle": FakeServer(delay=0.005, accept=2.5)}  # 10x apart: load cannot swap them
    yield s
    for x in s.values():
        x.close()


PROMPTS = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "x" * 300}]]


def test_a_level_is_bounded_and_records_refusals_without_stopping(servers):
    row = serve_sweep.run_level(servers["plain"].url, "fake", PROMPTS, concurrency=4, requests=10, max_tokens=5)
    assert row["requests"] == 10 and row["ok"] == 5 and row["refused"] == 5
    assert row["output_tokens"] == 25 and row["tokens_per_s"] > 0
    assert any("HTTP 400" in e and "context length" in e for e in row["errors"])
    assert row["latency_median_s"] <= row["latency_p90_s"]


def test_sweep_alternates_configs_writes_files_and_reports_ratios(servers, tmp_path):
    load = serve_sweep.Load(concurrencies=(1, 4), requests_per_level=8, max_tokens=4, repeats=2)
    doc = serve_sweep.sweep(servers, PROMPTS[:1], tmp_path, load, progress=False, meta=dict(host="test"))
    names = [(r["repeat"], r["concurrency"], r["config"]) for r in doc["rows"]]
    assert names == [(0, 1, "plain"), (0, 1, "peagle"), (0, 4, "plain"), (0, 4, "peagle"),
                     (1, 1, "plain"), (1, 1, "peagle"), (1, 4, "plain"), (1, 4, "peagle")]
    assert doc["meta"]["complete"] is True
    for s in doc["speedups"]:
        assert s["acceptance_length"] == pytest.approx(2.5) and s["throughput_speedup"] > 1.0
    on_disk = json.loads((tmp_path / serve_sweep.RESULTS_JSON).read_text())
    assert on_disk["rows"] == doc["rows"]
    assert (tmp_path / serve_sweep.RESULTS_CSV).read_text().count("\n") == 9
    serve_sweep.plot_sweep(doc, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_an_interrupted_sweep_keeps_the_levels_it_finished(servers, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = serve_sweep.run_level

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(serve_sweep, "run_level", flaky)
    with pytest.raises(KeyboardInterrupt):
        serve_sweep.sweep(servers, PROMPTS[:1], tmp_path, serve_sweep.Load(
            concurrencies=(1, 4), requests_per_level=4, max_tokens=3, repeats=1), progress=False)
    doc = json.loads((tmp_path / serve_sweep.RESULTS_JSON).read_text())
    assert len(doc["rows"]) == 2 and doc["meta"]["complete"] is False


def test_a_port_in_use_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PeagleError, match=f"port {port} on 127.0.0.1 is already in use"):
            serve_sweep.check_port_free(port)


# ------------------------------------------------------------------------------------------------ the sweep's head
@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    from peagle_lab.tiny_target import make_tiny_target

    return make_tiny_target(tmp_path_factory.mktemp("tiny") / "tiny-qwen3")


def test_the_sweep_refuses_a_target_without_a_head_in_one_line(tiny_qwen3, tmp_path, monkeypatch):
    from peagle_lab.cli.serve import sweep_head

    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path))  # no head trained here for it
    with pytest.raises(PeagleError) as err:
        sweep_head("parallel", str(tiny_qwen3))
    assert "\n" not in str(err.value) and "No parallel head for the target tiny-qwen3" in str(err.value)


def test_the_sweep_refuses_the_shipped_smollm2_head_for_another_target(tiny_qwen3):
    from peagle_lab.drafter.heads import SHIPPED
    from peagle_lab.cli.serve import sweep_head

    with pytest.raises(PeagleError, match="cannot serve the target tiny-qwen3: vocabulary"):
        sweep_head(str(SHIPPED["parallel"]), str(tiny_qwen3))


def test_the_sweep_command_stops_before_any_server_starts(tiny_qwen3, tmp_path, monkeypatch, capsys):
    from peagle_lab.cli import main
    from peagle_lab.cli import serve as serving_cli

    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path))
    monkeypatch.setattr(serving_cli, "serve", lambda *a, **k: pytest.fail("a server started"))
    assert main(["serve-sweep", "--target", str(tiny_qwen3), "--out", str(tmp_path / "out")]) == 2
    assert "No parallel head for the target tiny-qwen3" in capsys.readouterr().err


@pytest.mark.real_model
def test_the_sweep_takes_the_shipped_head_for_the_embedded_target():
    from peagle_lab.drafter.heads import SHIPPED
    from peagle_lab.cli.serve import sweep_head

    assert sweep_head("parallel") == SHIPPED["parallel"]
    assert sweep_head("sequential") == SHIPPED["sequential"]


def test_the_sweep_plot_says_which_way_each_ratio_runs():
    import matplotlib

    matplotlib.use("Agg")
    doc = {"meta": {"host": "h"}, "speedups": [
        {"concurrency": 1, "plain_tokens_per_s": 10.0, "peagle_tokens_per_s": 10.0, "throughput_speedup": 1.0,
         "latency_speedup": 0.97, "acceptance_length": 1.3},
        {"concurrency": 16, "plain_tokens_per_s": 40.0, "peagle_tokens_per_s": 11.2, "throughput_speedup": 0.28,
         "latency_speedup": 0.29, "acceptance_length": 1.3}]}
    ratios = serve_sweep.plot_sweep(doc).axes[1]
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ratios.get_lines() if not ln.get_label().startswith("_")}
    # latency_speedup is plain's latency over P-EAGLE's: below 1, P-EAGLE is slower, as the axis says
    assert lines == {"throughput: P-EAGLE's / plain's": [1.0, 0.28],
                     "median latency: plain's / P-EAGLE's": [0.97, 0.29]}
    assert ratios.get_ylabel() == "ratio (above 1: P-EAGLE pays)"
