"""Serving under load without a server: the figures from the load generator's results, the break-even concurrency,
the settings refused before anything starts, the prompts as sent, server processes always stopped, the external
servers path, what each server ran at once, and where the figures are shown (report, card, registry column,
bake-off verdict, profile)."""

import http.server
import json
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from eval.config import EvalConfig, VLLMServeConfig
from eval.errors import EvalError
from eval.profile import conditional_rates, speculation_profile
from eval.run import check_settings
from eval.serving import load, process
from eval.serving.concurrency import running_now
from eval.serving.load_figures import break_even, level_figures
from eval.serving.process import free_port, running_server
from eval.serving.vllm import missing_reason as vllm_missing
from heads.card import render_model_card
from heads.load_card import break_even_short, load_section, load_table
from tests.eval.load_results import BASE, LOAD, SPEC
from train.bakeoff.verdicts import recommend
from train.registry.hub_columns import COLUMNS


def test_a_level_gives_both_sides_the_speedups_and_the_served_acceptance():
    level = level_figures(4, [SPEC], [BASE])
    assert (
        level["speculative"]["output_tokens_per_second"] == 22.0
        and level["no_speculation"]["output_tokens_per_second"] == 11.0
    )
    assert level["throughput_speedup"] == 2.0
    lo, hi = level["throughput_speedup_interval"]["low"], level["throughput_speedup_interval"]["high"]
    assert lo <= 2.0 <= hi and hi - lo < 0.2  # the interval is the throughput ratio's own, not a per-request median's
    # TPOT = (latency − TTFT) ÷ (tokens − 1): 50 and 100 ms with, 100 and 200 ms without; medians 75 and 150 ms
    assert level["speculative"]["tpot_ms"]["median"] == pytest.approx(75.0)
    assert level["no_speculation"]["tpot_ms"]["median"] == pytest.approx(150.0)
    assert level["tpot_speedup"] == pytest.approx(2.0) and level["pays"]
    lo, hi = level["tpot_speedup_interval"]["low"], level["tpot_speedup_interval"]["high"]
    assert lo <= 2.0 <= hi
    assert level["served_tau"] == 2.5 and level["served_per_position_acceptance"] == [0.75, 0.5, 0.25]


def test_served_acceptance_adds_the_counters_of_every_repeat():
    other = {**SPEC, "spec_decode_num_drafts": 12, "spec_decode_accepted_tokens": 6,
             "spec_decode_per_position_acceptance_rates": [0.25, 0.25, 0.0]}  # fmt: skip
    level = level_figures(1, [SPEC, other], [BASE, BASE])
    assert level["served_tau"] == 1 + 12 / 16
    assert level["served_per_position_acceptance"] == pytest.approx([(3 + 3) / 16, (2 + 3) / 16, 1 / 16])


def _level(c: int, pays: bool) -> dict:
    interval = {"low": 0.9, "high": 1.3, "level": 0.95}
    return {"concurrency": c, "pays": pays, "throughput_speedup": 1.1, "throughput_speedup_interval": interval,
            "tpot_speedup": 1.2, "tpot_speedup_interval": interval}  # fmt: skip


@pytest.mark.parametrize(
    "pays, concurrency, between, verdict",
    [
        ([True, True, False], 4, [4, 16], "pays up to 4 concurrent requests, not at 16"),
        ([True, True, True], 16, [16, None], "pays at every measured load (up to 16 concurrent requests)"),
        ([False, True, True], None, [0, 1], "never pays: slower already at 1 concurrent request(s)"),
        ([True, False, True], 1, [1, 4], "pays up to 1 concurrent requests, not at 4"),  # not past a level that lost
    ],
)
def test_break_even_is_the_highest_load_up_to_which_every_level_pays(pays, concurrency, between, verdict):
    be = break_even([_level(c, p) for c, p in zip([1, 4, 16], pays)])
    assert (be["concurrency"], be["between"], be["verdict"]) == (concurrency, between, verdict)
    assert break_even_short({"break_even": be}) == {4: "≤ 4", 16: "all (≤ 16)", None: "never", 1: "≤ 1"}[concurrency]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(serve_load=[4, 1]), "rising order"),
        (dict(serve_load=[0, 4]), "levels ≥ 1"),
        (dict(serve_load=[1], serve_url="http://h:8000"), "go together"),
        (dict(serve_load=[1], serve_url="h:8000", baseline_url="h:8001"), "base URLs such as http://host:8000"),
        (dict(serve_url="http://h:8000", baseline_url="http://h:8001"), "also set eval.serve_load"),
        (dict(serve_load=[1], vllm=VLLMServeConfig(load_repeats=0)), "load_repeats must be ≥ 1"),
    ],
)
def test_load_settings_are_refused_in_one_line_before_anything_runs(change, message):
    with pytest.raises(EvalError, match=message) as e:
        check_settings(replace(EvalConfig(), **change))
    assert "\n" not in str(e.value)


def test_prompts_are_sent_as_templated_text_without_a_second_bos(standin):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(standin("llama3").path)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True,
                                  return_dict=True)["input_ids"]  # fmt: skip
    assert ids[0] == tok.bos_token_id
    (text,) = load.prompt_texts(tok, [ids])
    assert tok(text).input_ids == ids  # the server's own tokenization adds the BOS back: once
    qwen = AutoTokenizer.from_pretrained(standin("qwen3").path)  # no BOS: the text is the ids as they are
    ids = qwen.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]  # fmt: skip
    assert qwen(load.prompt_texts(qwen, [ids])[0]).input_ids == ids


FORKING_SERVER = textwrap.dedent(
    """
    import http.server, os, sys, time
    if len(sys.argv) > 3:
        open(sys.argv[3], "w").write(str(os.getpid()))  # its process group, for the test to look up
    if os.fork() == 0:  # a worker, as vLLM's API server forks its engine
        time.sleep(600)
        sys.exit()
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if sys.argv[2] == "healthy" else 503)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group pgid still runs (a zombie waiting to be reaped does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _server(tmp_path, mode: str, timeout_s: float = 30):
    script = tmp_path / "server.py"
    script.write_text(FORKING_SERVER)
    return running_server(
        lambda port: [sys.executable, str(script), str(port), mode],
        name="test server",
        healthy=load._healthy,
        log=tmp_path / "server.log",
        timeout_s=timeout_s,
    )


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_server_and_its_workers_are_stopped_on_success_failure_and_ctrl_c(tmp_path, monkeypatch):
    groups = []
    real_popen = process.subprocess.Popen

    def recording_popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        groups.append(proc.pid)  # start_new_session: the server's pid is its process group
        return proc

    monkeypatch.setattr(process.subprocess, "Popen", recording_popen)
    with _server(tmp_path, "healthy") as url:
        assert url.startswith("http://127.0.0.1:") and _group_alive(groups[-1])
    for raised in (RuntimeError("a failed sweep"), KeyboardInterrupt()):
        with pytest.raises(type(raised)):
            with _server(tmp_path, "healthy"):
                raise raised
    with pytest.raises(EvalError, match="did not become ready in 2 s"):
        with _server(tmp_path, "unhealthy", timeout_s=2):
            pass
    time.sleep(0.2)
    assert len(groups) == 4 and not any(_group_alive(g) for g in groups)  # the forked workers too


def test_servers_started_together_are_all_stopped_when_one_fails_to_start(tmp_path, monkeypatch):
    """running_servers launches every server before waiting for any (their start-ups overlap); when one never becomes
    ready, the one that did is stopped too, workers included, and the error names the one that failed."""
    from eval.serving.process import running_servers

    (tmp_path / "server.py").write_text(FORKING_SERVER)
    events, groups = [], []
    real_launched, real_wait = process._launched, process._wait_ready

    def launched(argv, *, name, **kwargs):
        proc, url = real_launched(argv, name=name, **kwargs)
        events.append(f"launch {name}"), groups.append(proc.pid)
        return proc, url

    def wait_ready(proc, url, deadline, server):
        events.append(f"wait {server['name']}")
        return real_wait(proc, url, deadline, server)

    monkeypatch.setattr(process, "_launched", launched)
    monkeypatch.setattr(process, "_wait_ready", wait_ready)
    server = {"healthy": load._healthy, "timeout_s": 20}
    argv = {mode: (lambda port, m=mode: [sys.executable, str(tmp_path / "server.py"), str(port), m])
            for mode in ("healthy", "unhealthy")}  # fmt: skip
    with running_servers([{**server, "argv": argv["healthy"], "name": n, "log": tmp_path / n} for n in "ab"]) as urls:
        assert len(set(urls)) == 2 and all(map(_group_alive, groups))
    assert events == ["launch a", "launch b", "wait a", "wait b"]  # b starts while a is starting, not after
    unready = {**server, "argv": argv["unhealthy"], "name": "vllm serve (no_speculation)", "log": tmp_path / "c"}
    with pytest.raises(EvalError, match=r"vllm serve \(no_speculation\) did not become ready in 2 s"):
        with running_servers([{**server, "argv": argv["healthy"], "name": "d", "log": tmp_path / "d"},
                              {**unready, "timeout_s": 2}]):  # fmt: skip
            pass
    time.sleep(0.2)
    assert len(groups) == 4 and not any(map(_group_alive, groups))  # the ready one and every forked worker too


HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from eval.serving.process import http_get, running_server
    script, pid_file, log = sys.argv[1:4]
    argv = lambda port: [sys.executable, script, str(port), "healthy", pid_file]
    with running_server(argv, name="s", healthy=lambda url: http_get(url) is not None, log=Path(log), timeout_s=30):
        print("ready", flush=True)
        time.sleep(600)
    """
)


def test_sigterm_to_the_measuring_process_stops_its_server_too(tmp_path):
    import subprocess

    (tmp_path / "server.py").write_text(FORKING_SERVER)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "server.py"), str(tmp_path / "pid"), str(tmp_path / "log")],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "ready"
    group = int((tmp_path / "pid").read_text())
    assert _group_alive(group)
    holder.terminate()  # SIGTERM, as a scheduler stops a job
    assert holder.wait(timeout=60) == 128 + 15
    assert not _group_alive(group)


def test_a_server_that_exits_while_starting_is_one_line_naming_its_log(tmp_path):
    with pytest.raises(EvalError, match=r"exited \(3\) while starting: no model here \(log: .*bad.log\)"):
        with running_server(
            lambda port: [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"],
            name="vllm serve (speculative)", healthy=load._healthy, log=tmp_path / "bad.log", timeout_s=30,
        ):  # fmt: skip
            pass


@pytest.mark.needs_vllm  # its load client is vLLM's own (vllm bench serve)
@pytest.mark.skipif(vllm_missing() is not None, reason=f"{vllm_missing()} — CI installs it and runs this for real")
def test_external_servers_are_measured_as_they_are_and_nothing_is_started(tmp_path, monkeypatch, micro_world):
    swept = {}

    def fake_sweep(spec_url, base_url, tokenizer_name, texts, cfg, trust, limit):
        swept.update(spec=spec_url, base=base_url, tokenizer=tokenizer_name, prompts=len(texts), limit=limit)
        return {"levels": [], "break_even": {}}

    monkeypatch.setattr(load, "sweep", fake_sweep)
    monkeypatch.setattr(load, "running_servers", lambda *a, **k: pytest.fail("started a server for an external URL"))
    spec, base = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"  # nobody listens: not started
    cfg = EvalConfig(serve_load=[1, 4], serve_url=spec + "/", baseline_url=base)
    out = load.load_check(str(micro_world.target_dir), tmp_path / "no-export-needed", [[1, 2, 3]], cfg, dtype="float32")
    assert swept == {"spec": spec, "base": base, "tokenizer": str(micro_world.target_dir), "prompts": 1, "limit": None}
    assert out["server"] == "external" and out["speculative_config"] is None and out["concurrency"] == [1, 4]
    assert out["engine_version"] == "unknown"  # the deployed server's /version, where it answers


def test_a_missing_vllm_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(load.vllm, "missing_reason", lambda: "vLLM is not installed; pip install 'drafthub[vllm]'")
    with pytest.raises(EvalError, match=r"^eval.serve_load: vLLM is not installed; pip install"):
        load.load_check("t", tmp_path, [[1]], EvalConfig(serve_load=[1]), dtype="float32")


def test_the_load_section_names_the_break_even_and_every_level():
    text = load_section(LOAD)
    assert "**Break-even: pays up to 1 concurrent requests, not at 4.**" in text
    assert "| 1 | 22.0 / 11.0 | 2.00× (" in text and "| 4 | 11.0 / 22.0 | 0.50× (" in text
    assert "`vllm bench serve 0.32.0`" in text and "![throughput vs per-request speed" in text
    assert "serving_load.png" not in load_section(LOAD, plot=False)


def test_the_card_the_registry_and_the_bakeoff_show_the_break_even():
    provenance = {
        "kind": "draft_lm",
        "model_name": "d",
        "target": {"name_or_path": "t"},
        "eval": {"serving_load": LOAD},
    }
    card = render_model_card(provenance, library="transformers", usage="", details="", gamma=3)
    assert "## Serving under load" in card and "pays up to 1 concurrent requests, not at 4" in card
    (column,) = [c for c in COLUMNS if c.name == "break-even load"]
    assert column.text({"serving_load": {"break_even": LOAD["break_even"]}}) == "≤ 1"
    assert column.text({}) == "–" and column.key({}) is None
    row = {"recipe": "r", "kind": "draft_lm", "lossless": True, "served_verdict": "ok", "speedup": 1.5, "tau": 3.0}
    assert (
        "served under load it pays up to 1 concurrent requests, not at 4"
        in recommend([{**row, "break_even": LOAD["break_even"]}])["reason"]
    )
    assert "measured one request at a time (eval.serve_load" in recommend([row])["reason"]


def _report(per_position: list[float], sweep: list[dict], tree=None) -> dict:
    return {
        "kind": "eagle3", "export_sha256": "e" * 64, "target": "meta-llama/Llama-3.1-8B-Instruct",
        "per_position_acceptance": per_position, "gamma_sweep": sweep, "categories": {},
        "settings": {"num_speculative_tokens": len(per_position), "tree": tree, "num_prompts": 2,
                     "max_new_tokens": 8, "temperature": 0.0},
        "timing": {"device_name": "CPU"}, "serving_load": LOAD,
    }  # fmt: skip


def test_the_profile_has_the_modelopt_shape_and_both_acceptance_vectors():
    sweep = [{"num_speculative_tokens": 2, "per_position_acceptance": [0.8, 0.6]},
             {"num_speculative_tokens": 3, "per_position_acceptance": [0.8, 0.6, 0.3]}]  # fmt: skip
    profile = speculation_profile(_report([0.8, 0.6, 0.3], sweep), [[1, 2], [3]])
    assert profile["schema_version"] == "1.0" and profile["measured"] is True
    assert profile["marginal_accept_rates"] == [0.8, 0.6, 0.3]
    assert profile["conditional_accept_rates"] == pytest.approx([0.8, 0.75, 0.5])
    assert profile["mean_accept_length"] == pytest.approx(2.7)
    assert profile["accept_length_by_k"] == {"2": 2.4, "3": 2.7}
    assert (
        profile["validation"]["mean_consistency"]["passed"] and profile["validation"]["marginal_monotonicity"]["passed"]
    )
    assert profile["num_speculative_tokens"] == 3 and profile["verification_method"] == "longest_prefix"
    other = speculation_profile(_report([0.8, 0.6, 0.3], sweep), [[1, 2], [4]])
    assert other["measurement_conditions"]["prompts_sha256"] != profile["measurement_conditions"]["prompts_sha256"]
    assert profile["served_by_concurrency"]["4"]["mean_accept_length"] == LOAD["levels"][1]["served_tau"]
    json.dumps(profile)  # it is a file: plain JSON
    tree = speculation_profile(_report([0.9, 0.5], [], tree=[3, 2]), [[1]])
    assert tree["marginal_accept_rates"] is None and "tree" in tree["vectors_unavailable_reason"]
    assert conditional_rates([0.5, 0.0, 0.0]) == [0.5, 0.0, 0.0]


def test_the_started_servers_admit_every_request_of_the_highest_level():
    """vLLM queues what exceeds its max_num_seqs (128 or 256 by default): a level of 1000 would time its queue."""
    cfg = EvalConfig(serve_load=[1, 16, 1000])
    for spec in ({"method": "ngram", "num_speculative_tokens": 3}, None):
        argv = load.server_argv("t", spec, cfg, max_model_len=64, dtype="float32", trust=False)(8000)
        assert argv[argv.index("--max-num-seqs") + 1] == "1000"


METRICS_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="my model"} 3.0
vllm:num_requests_running{engine="1",model_name="my model"} 2.0
vllm:num_requests_waiting{engine="0",model_name="my model"} 7.0
"""


def test_the_running_gauge_is_summed_over_engines_and_absent_from_other_servers():
    assert running_now(METRICS_PAGE) == 5
    assert running_now("# an SGLang page\nsglang:num_running_reqs 4.0\n") is None


def _metrics_server(running: int | None):
    """A deployed server's /metrics stand-in: the gauge at `running`, or no /metrics at all (None)."""

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f'vllm:num_requests_running{{engine="0"}} {running}.0\n'.encode()
            self.send_response(200 if running is not None else 404)
            self.end_headers()
            self.wfile.write(body if running is not None else b"")

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_level_above_what_the_server_runs_at_once_is_reported_at_its_peak_and_not_judged(monkeypatch):
    """A deployed server's own max_num_seqs (here 2) caps a level of 4: the level timed the queue, so it is shown at
    the peak the server's gauge reached and left out of the break-even verdict; level 1 is judged as before."""
    capped, spec_url = _metrics_server(2)
    plain, base_url = _metrics_server(None)  # no gauge: its peak is unknown, which caps nothing
    monkeypatch.setattr(load, "bench_args", lambda url, tok, prompts, c, cfg, trust: (url, c))

    def drive(args):
        time.sleep(0.5)  # a level runs while the watch polls
        url, c = args
        return SPEC if url == spec_url else BASE

    monkeypatch.setattr(load, "drive", drive)
    try:
        cfg = EvalConfig(serve_load=[1, 4], vllm=VLLMServeConfig(load_repeats=1))
        out = load.sweep(spec_url, base_url, "tok", ["a prompt"], cfg, trust=False)
    finally:
        capped.shutdown(), plain.shutdown()
    one, four = out["levels"]
    assert one["peak_running"] == {"speculative": 2, "no_speculation": None} and one["capped_at"] is None
    assert four["capped_at"] == 2
    verdict = out["break_even"]["verdict"]
    assert verdict.startswith("pays at every measured load (up to 1 concurrent requests)")
    assert "not judged (the server ran fewer at once, so they timed its queue): 4 (ran ≤ 2)" in verdict
    table = load_table({**LOAD, **out})
    assert "| 4 (the server ran ≤ 2 at once) |" in table and "| not judged (timed the queue) |" in table
    only_capped = break_even([four])
    assert only_capped["verdict"].startswith("no level judged") and break_even_short({"break_even": only_capped}) == (
        "not judged"
    )


def test_a_started_servers_level_is_never_capped_by_a_peak_its_polls_missed():
    """drafthub starts both servers with --max-num-seqs at the highest level: a polled peak below a level (its short
    requests finished between polls; seen on CI, 1 of 2) caps nothing; a deployed server's is still read as a cap."""
    missed = [{**SPEC, "peak_running": 1}]
    started = level_figures(2, missed, [{**BASE, "peak_running": 1}], limit=2)
    assert started["capped_at"] is None and started["peak_running"] == {"speculative": 1, "no_speculation": 1}
    deployed = level_figures(2, missed, [{**BASE, "peak_running": 1}])
    assert deployed["capped_at"] == 1
