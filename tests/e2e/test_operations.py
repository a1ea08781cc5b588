"""Operations: several models, lazy loading, idle unload, the memory budget,
reload, drain, readiness, metrics and the launchd plist, against real
gateway and worker processes (tiny model)."""

from __future__ import annotations

import concurrent.futures as cf
import os
import plistlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics.registry import FINISHED_REASONS
from tests.conftest import API_KEY, ROOT, TINY, free_port, settled_stats, start_server, write_config

MSG = [{"role": "user", "content": "hi"}]


def client(srv, **kw):
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=API_KEY, max_retries=0, **{"timeout": 120, **kw})


def ask(srv, model, max_tokens=3, **kw):
    return client(srv).chat.completions.create(model=model, messages=MSG, max_tokens=max_tokens, **kw)


def wait_for(predicate, timeout=30.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met")


def wait_configured(srv, name, timeout=120):
    """Wait until model ``name`` is in the gateway's config: a reload
    asked for by a signal is applied some time after the signal."""
    wait_for(lambda: name in srv.health()["models"], timeout=timeout)


def gone(pid):
    """Whether process ``pid`` has exited (a zombie counts); ``pid`` must
    be a number (psutil reads None as this test process itself)."""
    assert isinstance(pid, int), pid
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def model(tiny_model_dir, name, **kw):
    return {"name": name, "source": str(tiny_model_dir), **kw}


def test_two_models_two_workers(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, "a"), model(tiny_model_dir, "b")])
    try:
        with cf.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda m: ask(srv, m, 20), ["a", "b", "a", "b"]))
        assert [r.model for r in results] == ["a", "b", "a", "b"]
        pids = {srv.worker("a")["pid"], srv.worker("b")["pid"]}
        assert len(pids) == 2 and None not in pids
        listed = httpx.get(f"{srv.url}/v1/models", headers=srv.headers, timeout=30).json()["data"]
        assert [m["id"] for m in listed] == ["a", "b"]
    finally:
        srv.stop()


def test_lazy_single_load_and_idle_unload(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, "lazy", preload=False, ttl="1500ms")])
    try:
        assert srv.worker("lazy")["state"] == "unloaded"
        assert httpx.get(f"{srv.url}/ready", timeout=30).status_code == 200  # nothing preloaded
        with cf.ThreadPoolExecutor(10) as pool:
            results = list(pool.map(lambda _: ask(srv, "lazy"), range(10), timeout=600))
        assert all(r.usage.completion_tokens == 3 for r in results)
        status = srv.worker("lazy")
        assert status["incarnation"] == 1 and status["restarts"] == 0  # one load for all ten
        # the idle unload may already have begun (its pid then None): take the pid from the start line
        started = re.findall(r"started worker for lazy \(pid (\d+)\)", srv.log_path.read_text())
        assert len(started) == 1, started
        pid = int(started[0])
        wait_for(lambda: srv.worker("lazy")["state"] == "unloaded", timeout=60)
        wait_for(lambda: gone(pid), timeout=60)
        assert ask(srv, "lazy").usage.completion_tokens == 3  # loads again on demand
        assert srv.worker("lazy")["incarnation"] == 2
    finally:
        srv.stop()


def test_memory_budget_evicts_least_recently_used(tiny_model_dir, tmp_path):
    mib = 1 << 20
    models = [model(tiny_model_dir, n, preload=False, memory_estimate=400 * mib) for n in ("a", "b", "c")]
    srv = start_server(tmp_path, models, memory_budget=900 * mib)
    try:
        ask(srv, "a")
        ask(srv, "b")
        assert {srv.worker(n)["state"] for n in "ab"} == {"ready"}
        ask(srv, "a")  # a is now the most recently used
        ask(srv, "c")  # no room for three: b goes
        assert srv.worker("b")["state"] == "unloaded"
        assert srv.worker("a")["state"] == "ready" and srv.worker("c")["state"] == "ready"

        # while a and c are busy, nothing can be evicted for b: a clean 503
        body = {"messages": MSG, "max_tokens": 1500, "ignore_eos": True, "stream": True}
        streams = []
        with httpx.Client(timeout=60, headers=srv.headers) as http:
            for name in ("a", "c"):
                ctx = http.stream("POST", f"{srv.url}/v1/chat/completions", json=body | {"model": name})
                lines = ctx.__enter__().iter_lines()
                next(lines)
                streams.append((ctx, lines))  # keep the iterator: dropping it closes the stream
            r = http.post(f"{srv.url}/v1/chat/completions", json={"model": "b", "messages": MSG, "max_tokens": 2})
            assert r.status_code == 503 and r.headers["retry-after"]
            assert "memory" in r.json()["error"]["message"]
            for ctx, _ in streams:
                ctx.__exit__(None, None, None)
    finally:
        srv.stop()


def test_reload_adds_and_removes_models_while_streaming(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, "keep"), model(tiny_model_dir, "old")])
    try:
        config = tmp_path / "mlxd.toml"
        port = int(srv.url.rsplit(":", 1)[1])
        result: dict = {}
        streaming = threading.Event()

        def long_stream():
            chunks = []
            for chunk in client(srv).chat.completions.create(
                model="keep",
                messages=MSG,
                max_tokens=600,
                stream=True,
                extra_body={"ignore_eos": True},
                stream_options={"include_usage": True},
            ):
                streaming.set()
                chunks.append(chunk)
            result["tokens"] = chunks[-1].usage.completion_tokens

        thread = threading.Thread(target=long_stream, daemon=True)
        thread.start()
        assert streaming.wait(60)  # the stream runs on "keep" before the reload
        old_pid = srv.worker("old")["pid"]
        write_config(
            config,
            port,
            [model(tiny_model_dir, "keep", preload=True), model(tiny_model_dir, "new", preload=True)],
            [API_KEY, "sk-second-key"],
        )
        srv.proc.send_signal(signal.SIGHUP)
        wait_configured(srv, "new")
        srv.wait_ready("new", timeout=180)
        assert ask(srv, "new").usage.completion_tokens == 3
        with pytest.raises(openai.NotFoundError):
            ask(srv, "old")
        wait_for(lambda: gone(old_pid), timeout=60)
        # the new key works at once
        other = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-second-key", max_retries=0, timeout=120)
        assert other.models.list().data
        thread.join(300)
        assert not thread.is_alive(), "the stream on the kept model never ended"
        assert result["tokens"] == 600  # the stream on the kept model was not disturbed
        assert srv.worker("keep")["incarnation"] == 1

        # a broken config is refused and the running one stays
        config.write_text("[server]\nport = 'oops'\n")
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in srv.log_path.read_text(), timeout=60)
        assert ask(srv, "new").usage.completion_tokens == 3
    finally:
        srv.stop()


def test_changed_model_restarts_after_its_requests(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY, max_batch_size=4)])
    try:
        port = int(srv.url.rsplit(":", 1)[1])
        first_pid = srv.worker(TINY)["pid"]
        result: dict = {}
        streaming = threading.Event()

        def stream():
            chunks = []
            for chunk in client(srv).chat.completions.create(
                model=TINY,
                messages=MSG,
                max_tokens=400,
                stream=True,
                extra_body={"ignore_eos": True},
                stream_options={"include_usage": True},
            ):
                streaming.set()
                chunks.append(chunk)
            result["tokens"] = chunks[-1].usage.completion_tokens

        thread = threading.Thread(target=stream, daemon=True)
        thread.start()
        assert streaming.wait(60)  # running on the old worker before the reload
        write_config(
            tmp_path / "mlxd.toml", port, [model(tiny_model_dir, TINY, max_batch_size=8, preload=True)], [API_KEY]
        )
        srv.proc.send_signal(signal.SIGHUP)
        thread.join(300)
        assert not thread.is_alive(), "the stream never ended"
        assert result["tokens"] == 400  # finished on the old worker
        new = wait_for(lambda: (w := srv.worker(TINY))["state"] == "ready" and w["pid"] != first_pid and w, timeout=180)
        assert new["incarnation"] == 2
    finally:
        srv.stop()


def socket_dir_of(srv, name):
    """The private socket directory of ``name``'s worker, from its command line."""
    cmdline = psutil.Process(srv.worker(name)["pid"]).cmdline()
    return Path(cmdline[cmdline.index("--outputs") + 1].removeprefix("ipc://")).parent


def test_sigterm_drains_streams_in_flight(tiny_model_dir, tmp_path):
    # the worker is held stopped below for at most ~2 minutes (the bounds of the checks made meanwhile):
    # far inside both the heartbeat timeout and the drain timeout
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY)], drain_timeout=600.0, heartbeat_timeout=600.0)
    try:
        pid = srv.worker(TINY)["pid"]
        sockets = socket_dir_of(srv, TINY)
        results: list = []
        streaming = [threading.Event() for _ in range(2)]

        def stream(i):
            chunks = []
            for chunk in client(srv).chat.completions.create(
                model=TINY,
                messages=MSG,
                max_tokens=1200,  # long enough to be running while the refusals are checked
                stream=True,
                extra_body={"ignore_eos": True},
                stream_options={"include_usage": True},
            ):
                streaming[i].set()
                chunks.append(chunk)
            results.append(chunks[-1].usage.completion_tokens)

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        assert all(e.wait(60) for e in streaming)  # both admitted before the signal
        os.kill(pid, signal.SIGSTOP)  # the streams stay in flight, however slow the checks below are
        try:
            srv.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: srv.health()["status"] == "draining", timeout=60)  # the gateway took the signal
            refused = httpx.post(
                f"{srv.url}/v1/chat/completions", json={"model": TINY, "messages": MSG}, headers=srv.headers, timeout=30
            )
            assert refused.status_code == 503
            assert httpx.get(f"{srv.url}/ready", timeout=30).status_code == 503
            assert not results  # still streaming
        finally:
            os.kill(pid, signal.SIGCONT)
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "a stream never ended"
        assert results == [1200, 1200]
        assert srv.proc.wait(120) == 0
        assert gone(pid)
        assert not sockets.exists()
    finally:
        srv.stop()


def test_sigkill_of_gateway_leaves_no_socket_files(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY)])
    try:
        pid = srv.worker(TINY)["pid"]
        sockets = socket_dir_of(srv, TINY)
        assert sockets.exists()
        srv.proc.kill()
        srv.proc.wait(timeout=30)
        wait_for(lambda: gone(pid), timeout=60)
        wait_for(lambda: not sockets.exists(), timeout=60)
    finally:
        srv.stop()


class HeldFile:
    """A model file replaced by a named pipe that serves its contents only
    once :meth:`release` is called: a worker loading the model blocks on it,
    as on a very slow disk, for as long as the test wants. After release a
    thread serves the contents to every reader until :meth:`close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        path.unlink()
        os.mkfifo(path)
        self.released = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.released.wait()
        while not self.closed.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet
                time.sleep(0.02)
                continue
            os.set_blocking(fd, True)
            try:
                os.write(fd, self.data)
            except BrokenPipeError:
                pass
            finally:
                os.close(fd)

    def release(self) -> None:
        """Let readers have the file from now on."""
        self.released.set()

    def close(self) -> None:
        """Stop serving (and unblock a reader still waiting, if any)."""
        self.released.set()
        self.closed.set()
        self.thread.join(5)


def test_ready_waits_for_preloaded_models(tiny_model_dir, tmp_path):
    held_model = tmp_path / "held"
    shutil.copytree(tiny_model_dir, held_model)
    held = HeldFile(held_model / "generation_config.json")
    port = free_port()
    config = write_config(tmp_path / "mlxd.toml", port, [model(held_model, TINY, preload=True)])
    log = open(tmp_path / "log", "w")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    except BaseException:
        log.close()
        held.close()
        raise
    try:
        url = f"http://127.0.0.1:{port}"
        first = wait_for(lambda: _get(f"{url}/ready"), timeout=120)
        assert first.status_code == 503, first.text
        assert first.json()["models"][TINY] != "ready"
        # while the model cannot load, /ready keeps answering 503 (and /health 200)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert _get(f"{url}/ready").status_code == 503
            assert _get(f"{url}/health").status_code == 200
            time.sleep(0.1)
        held.release()
        final = wait_for(lambda: (r := _get(f"{url}/ready")) and r.status_code == 200 and r, timeout=180)
        assert final.json()["models"][TINY] == "ready"
    finally:
        try:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        finally:
            held.close()
            log.close()


def _get(url):
    try:
        return httpx.get(url, timeout=10)
    except httpx.HTTPError:
        return None


def scrape(srv):
    text = httpx.get(f"{srv.url}/metrics", timeout=30).text  # no key needed
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            samples[key] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_move_with_traffic(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY)])
    try:
        before = scrape(srv)
        for _ in range(3):
            ask(srv, TINY, max_tokens=5)
        list(client(srv).chat.completions.create(model=TINY, messages=MSG, max_tokens=5, stream=True))
        settled_stats(srv)  # a heartbeat sent after the requests ended
        after = scrape(srv)
        m = {"model": TINY}
        assert (
            value(after, "mlxd:request_success_total", model=TINY, finished_reason="length")
            - value(before, "mlxd:request_success_total", model=TINY, finished_reason="length")
            == 4
        )
        assert (
            value(after, "mlxd:generation_tokens_total", **m) - value(before, "mlxd:generation_tokens_total", **m) == 20
        )
        assert value(after, "mlxd:prompt_tokens_total", **m) > value(before, "mlxd:prompt_tokens_total", **m)
        assert (
            value(after, "mlxd:time_to_first_token_seconds_count", **m)
            - value(before, "mlxd:time_to_first_token_seconds_count", **m)
            == 4
        )
        assert value(after, "mlxd:e2e_request_latency_seconds_count", **m) == 4
        assert value(after, "mlxd:inter_token_latency_seconds_count", **m) >= 12
        assert value(after, "mlxd:request_queue_time_seconds_count", **m) == 4
        assert value(after, "mlxd:prefix_cache_queries_total", **m) >= 4
        assert value(after, "mlxd:worker_memory_bytes", **m) > 10 * (1 << 20)
        assert value(after, "mlxd:model_state", model=TINY, state="ready") == 1
        assert value(after, "mlxd:num_requests_running", **m) == 0
        assert value(after, "mlxd:model_load_time_seconds", **m) > 0
    finally:
        srv.stop()


def test_metrics_count_aborted_and_failed_requests(tiny_model_dir, tmp_path):
    """Through the production path (a real gateway, worker and client): a
    stream whose client walks away is counted once as ``abort``, a request
    that runs past its deadline once as ``error`` (its model's), each with
    its end-to-end latency, and nothing else is counted for them."""
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY), model(tiny_model_dir, "deadline", request_timeout=0.5)])
    try:
        before = scrape(srv)
        body = {"model": TINY, "messages": MSG, "max_tokens": 1500, "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=60, headers=srv.headers) as http:
            with http.stream("POST", f"{srv.url}/v1/chat/completions", json=body) as response:
                lines = response.iter_lines()
                next(line for line in lines if line.startswith("data: {"))  # streaming; then the client leaves
        long = {"model": "deadline", "messages": MSG, "max_tokens": 2000, "ignore_eos": True}
        failed = httpx.post(f"{srv.url}/v1/chat/completions", json=long, headers=srv.headers, timeout=60)
        assert failed.status_code == 504 and failed.json()["error"]["code"] == "timeout"

        def counted(samples, name, reason):
            return value(samples, "mlxd:request_success_total", model=name, finished_reason=reason) - value(
                before, "mlxd:request_success_total", model=name, finished_reason=reason
            )

        # the abort is metered once the worker has ended it (its own count): wait for that event
        settled_stats(srv, TINY, until=lambda s: s["requests_aborted"] == 1)
        after = wait_for(lambda: (s := scrape(srv)) and counted(s, TINY, "abort") >= 1 and s, timeout=120)
        for name, reason in ((TINY, "abort"), ("deadline", "error")):
            others = [r for r in FINISHED_REASONS if r != reason]
            assert counted(after, name, reason) == 1, (name, reason)
            assert all(counted(after, name, r) == 0 for r in others), (name, reason)
            latency = "mlxd:e2e_request_latency_seconds_count"
            assert value(after, latency, model=name) - value(before, latency, model=name) == 1, name
    finally:
        srv.stop()


def test_models_root_confines_local_sources(tiny_model_dir, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    (root / "inside").symlink_to(tiny_model_dir)  # a link that leaves the root
    srv = start_server(
        tmp_path,
        [
            model(tiny_model_dir, "escape", preload=False),
            {"name": "dots", "source": str(root / ".." / "x"), "preload": False},
            {"name": "link", "source": str(root / "inside"), "preload": False},
        ],
        models_root=str(root),
    )
    try:
        for name in ("escape", "dots", "link"):
            r = httpx.post(
                f"{srv.url}/v1/chat/completions", json={"model": name, "messages": MSG}, headers=srv.headers, timeout=60
            )
            assert r.status_code == 503 and "models_root" in r.json()["error"]["message"]
            assert srv.worker(name)["state"] == "unloaded"
    finally:
        srv.stop()


def test_log_file_rotates_by_size(tiny_model_dir, tmp_path):
    log = tmp_path / "logs" / "mlxd.log"
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY)], log_file=str(log), log_max_bytes=2500, log_backups=2)
    try:
        for _ in range(40):  # one request line each
            ask(srv, TINY, max_tokens=1)
        names = sorted(p.name for p in log.parent.iterdir())
        assert names == ["mlxd.log", "mlxd.log.1", "mlxd.log.2"]
        assert all(p.stat().st_size < 2500 + 400 for p in log.parent.iterdir())
        text = "".join(p.read_text() for p in log.parent.iterdir())
        assert text.count("mlxd.requests: request ") >= 8  # the newest requests survive rotation
    finally:
        srv.stop()


def test_install_dry_run_prints_a_valid_plist(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLXD_", "HF_"))}
    env |= {"HF_HOME": "/data/hf", "MLXD_HOST_SAMPLING": "0", "HF_TOKEN": "hf_secret"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "install",
            "--dry-run",
            "--config",
            str(ROOT / "configs" / "mlxd.toml"),
            "--env",
            "HF_HUB_CACHE=/data/hub",
            "--env",
            "MLXD_HOST_SAMPLING=1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    plist = plistlib.loads(out)
    assert plist["Label"] == "com.mlxd.server"
    assert plist["ProgramArguments"][1:4] == ["-m", "gateway", "serve"]
    assert plist["ProgramArguments"][-2:] == [str((ROOT / "configs" / "mlxd.toml").resolve()), "--service"]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"]
    assert plist["ExitTimeOut"] > 30
    assert plist["SoftResourceLimits"]["NumberOfFiles"] >= 1024
    captured = {k: v for k, v in plist["EnvironmentVariables"].items() if k not in ("PATH", "PYTHONUNBUFFERED")}
    assert captured == {"HF_HOME": "/data/hf", "HF_HUB_CACHE": "/data/hub", "MLXD_HOST_SAMPLING": "1"}  # no token
    assert plist["StandardErrorPath"].endswith("Library/Logs/mlxd/mlxd.err.log")


def test_mlxd_reload_command_signals_the_server(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, "first")], pid_file=str(tmp_path / "mlxd.pid"))
    try:
        port = int(srv.url.rsplit(":", 1)[1])
        assert (tmp_path / "mlxd.pid").read_text().strip() == str(srv.proc.pid)
        write_config(
            tmp_path / "mlxd.toml",
            port,
            [model(tiny_model_dir, "first", preload=True), model(tiny_model_dir, "second", preload=True)],
            [API_KEY],
            pid_file=str(tmp_path / "mlxd.pid"),
        )
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "reload", "--config", str(tmp_path / "mlxd.toml")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        wait_configured(srv, "second")
        srv.wait_ready("second", timeout=180)
        models = httpx.get(f"{srv.url}/v1/models", headers=srv.headers, timeout=30).json()["data"]
        assert [(m["id"], m["state"]) for m in models] == [("first", "ready"), ("second", "ready")]
    finally:
        srv.stop()
    assert not (tmp_path / "mlxd.pid").exists()


def test_drain_timeout_ends_the_requests_still_running(tiny_model_dir, tmp_path):
    """Past ``drain_timeout`` what is still running or queued ends with an
    error (an SSE error frame, or an error status), then mlxd exits 0."""
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY, max_batch_size=1)], drain_timeout=1.0)
    try:
        pid = srv.worker(TINY)["pid"]
        outcomes: dict[int, object] = {}
        streaming = threading.Event()

        def stream(i):
            try:
                for chunk in client(srv).chat.completions.create(
                    model=TINY,
                    messages=MSG,
                    max_tokens=1900,
                    stream=True,
                    # one token a step: still running at the drain
                    extra_body={"ignore_eos": True, "speculative": False},
                ):
                    if chunk.choices and chunk.choices[0].delta.content:
                        streaming.set()
                outcomes[i] = "finished"
            except openai.APIError as exc:
                outcomes[i] = exc

        def whole(i):
            r = httpx.post(
                f"{srv.url}/v1/chat/completions",
                json={"model": TINY, "messages": MSG, "max_tokens": 1900, "ignore_eos": True, "speculative": False},
                headers=srv.headers,
                timeout=120,
            )
            outcomes[i] = r

        threads = [threading.Thread(target=stream, args=(0,), daemon=True)]
        threads += [threading.Thread(target=f, args=(i,), daemon=True) for i, f in ((1, stream), (2, whole))]
        threads[0].start()
        assert streaming.wait(60)
        for t in threads[1:]:
            t.start()
        # both admitted, waiting behind the first (one batch slot)
        wait_for(lambda: srv.worker(TINY)["stats"]["waiting"] >= 2, timeout=60)
        began = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a request outlived the drain"
        assert srv.proc.wait(120) == 0
        # a bound, not the proof: the drain's own error on the requests (below) shows what ended them
        assert time.monotonic() - began < 60
        assert sorted(outcomes) == [0, 1, 2]
        ended = "the server is shutting down (drain_timeout of 1s passed)"
        # one batch slot and 1900 tokens each: at most one request can complete
        # within the drain second; every other one ends with the drain's error:
        # an error frame once streaming, an error status before anything was sent
        cut = 0
        for i in (0, 1):
            if outcomes[i] != "finished":
                assert isinstance(outcomes[i], openai.APIError), outcomes
                assert outcomes[i].message.endswith(ended), outcomes
                cut += 1
        if outcomes[2].status_code != 200:
            assert outcomes[2].status_code == 503, outcomes[2].text
            assert outcomes[2].json()["error"]["message"] == ended
            cut += 1
        assert cut >= 2, outcomes
        assert "drain timeout: ending the requests still running" in srv.log_path.read_text()
        wait_for(lambda: gone(pid), timeout=60)
    finally:
        srv.stop()


def test_ttl_zero_unloads_after_each_request(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [model(tiny_model_dir, "once", preload=False, ttl=0)])
    try:
        for incarnation in (1, 2):
            assert ask(srv, "once").usage.completion_tokens == 3
            # the unload can finish before /health is read (its pid is then
            # None): take the worker's pid from the gateway's start line
            wait_for(lambda: srv.worker("once")["state"] == "unloaded", timeout=60)
            assert srv.worker("once")["incarnation"] == incarnation
            started = re.findall(r"started worker for once \(pid (\d+)\)", srv.log_path.read_text())
            assert len(started) == incarnation, started
            wait_for(lambda pid=int(started[-1]): gone(pid), timeout=30)  # a busy machine slows the exit
    finally:
        srv.stop()


def test_log_file_holds_request_lines_but_no_prompt_or_key(tiny_model_dir, tmp_path):
    """``log_file`` gets the gateway's and the workers' logs; no line carries
    prompt text, generated text or an API key, also for refused requests."""
    log_file = tmp_path / "mlxd-file.log"
    key = "sk-secret-7f3a9c"
    marker = "zebra-quartz-5521"
    srv = start_server(tmp_path, [model(tiny_model_dir, TINY)], api_key=key, log_file=str(log_file), log_level="debug")
    try:
        oai = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=key, max_retries=0, timeout=120)
        said = oai.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": f"remember {marker}"}], max_tokens=8
        )
        answer = said.choices[0].message.content
        list(
            oai.chat.completions.create(
                model=TINY, messages=[{"role": "system", "content": marker}] + MSG, stream=True, max_tokens=4
            )
        )
        r = httpx.post(
            f"{srv.url}/v1/messages",
            json={"model": TINY, "max_tokens": 4, "messages": [{"role": "user", "content": marker}]},
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        bad_key = f"sk-wrong-{marker}"
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            json={"model": TINY, "messages": [{"role": "user", "content": marker}]},
            headers={"Authorization": f"Bearer {bad_key}"},
            timeout=30,
        )
        assert r.status_code == 401
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            json={"model": TINY, "messages": [{"role": "user", "content": marker}], "max_tokens": -1},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert r.status_code == 400
    finally:
        srv.stop()
    text = log_file.read_text()
    assert text.count("mlxd.requests: request ") >= 3, text[-2000:]
    assert "[worker:" in text  # the worker logs there too
    assert marker not in text
    assert key not in text and "7f3a9c" not in text
    assert len(answer) > 8 and answer not in text
    assert srv.log_path.read_text().strip() == "" or "Traceback" not in srv.log_path.read_text()


def test_memory_budget_as_size_or_share_of_ram_evicts(tiny_model_dir, tmp_path):
    """``memory_budget = "0.9GiB"``: room for two 400 MiB models, not three.
    Then reloaded as the percentage of this machine's RAM that makes
    ~600 MiB: room for one, so loading another evicts both idle ones."""
    mib = 1 << 20
    models = [model(tiny_model_dir, n, preload=False, memory_estimate=400 * mib) for n in ("a", "b", "c")]
    srv = start_server(tmp_path, models, memory_budget="0.9GiB")
    try:
        ask(srv, "a")
        ask(srv, "b")
        assert {srv.worker(n)["state"] for n in "ab"} == {"ready"}
        ask(srv, "a")
        ask(srv, "c")  # no room for three: b, the least recently used, goes
        assert [srv.worker(n)["state"] for n in "abc"] == ["ready", "unloaded", "ready"]
        assert "evicting b to make room for c" in srv.log_path.read_text()

        share = f"{600 * mib * 100 / psutil.virtual_memory().total:.6f}%"
        port = int(srv.url.rsplit(":", 1)[1])
        write_config(tmp_path / "mlxd.toml", port, models, [API_KEY], memory_budget=share)
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in srv.log_path.read_text(), timeout=60)
        ask(srv, "b")
        assert [srv.worker(n)["state"] for n in "abc"] == ["unloaded", "ready", "unloaded"]
    finally:
        srv.stop()
