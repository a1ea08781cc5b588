"""``bench/plots.py`` on small data: the result files the bench scripts write
(through their own writers: ``compare.results_data``,
``agent_session.turn_rows``, ``bench/record.py``) become PNG plots, each
labelled with its date and machine; a malformed file is refused with a
clear line. Nothing is measured here: the numbers are made up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install -e '.[bench]')")

import record  # noqa: E402  (bench/record.py)

PNG = b"\x89PNG\r\n\x1a\n"


def run_plots(results: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "plots.py"), "--results", str(results), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG, path
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def small_results(directory: Path) -> None:
    """One result file per plotted bench, written by the scripts' own code."""
    from agent_session import turn_rows
    from compare import Row, Section, SpreadPlan, results_data
    from harness import Result

    sections = {}
    for contender, scale in (("mlxd", 1.2), ("mlx_lm.server", 1.0), ("in-process", 1.1)):
        section = Section(contender, "tiny")
        for streams in (1, 4):
            rate = 100 * streams**0.8 * scale
            section.rounds[streams] = [Row(streams, rate, rate / streams, 0.05 * streams, 0.08 * streams, 64)]
        if contender != "in-process":
            section.spread = [Row(4, 150 * scale, 40.0, 0.1, 0.3, 256)]
        sections[(contender, "tiny")] = section
    sections[("vllm-mlx", "tiny")] = Section("vllm-mlx", "tiny", skipped="its venv is missing")
    record.write(
        "compare", results_data(sections, [1, 4], {"real": 64, "tiny": 16}, SpreadPlan(4, 0.2, 16)), directory=directory
    )

    def result(ttft: float, cached: int, prompt: int) -> Result:
        return Result(ttft=ttft, total=ttft + 0.1, tokens=8, cached=cached, prompt_tokens=prompt)

    columns = {
        "mlxd": [result(0.9, 0, 600), result(0.2, 600, 900), result(0.25, 900, 1200)],
        "mlx_lm.server": [result(0.8, 0, 600), result(0.3, 0, 900), result(0.5, 0, 1200)],
    }
    record.write(
        "agent_session",
        {
            "model": "tiny",
            "turns": turn_rows(columns),
            "resumed": {"ttft_s": 0.1, "cached_tokens": 1199, "cold_ttft_s": 2.0},
        },
        directory=directory,
    )
    record.write(
        "speculative",
        {
            "model": "tiny",
            "cases": [
                {"case": "copy, 1 stream", "none_tok_s": 10.0, "default_tok_s": 18.0, "mlx_lm_server_tok_s": 9.5},
                {"case": "short, 16 streams", "none_tok_s": 60.0, "default_tok_s": 59.0},
            ],
            "drafted_tokens": 100,
            "accepted_tokens": 44,
        },
        directory=directory,
    )
    record.write(
        "embeddings",
        {
            "model": "emb",
            "seconds": 1.0,
            "shapes": [{"shape": "batch 1", "mlxd_inputs_s": 20.0, "in_process_inputs_s": 21.0}],
        },
        directory=directory,
    )
    record.write("tensor_parallel", {"one_process_tok_s": 10.0, "group_tok_s": 7.0}, directory=directory)


def test_every_plot_from_the_scripts_own_data(tmp_path):
    results = tmp_path / "results"
    small_results(results)
    done = run_plots(results, tmp_path / "plots")
    assert done.returncode == 0, done.stderr
    names = {"compare-throughput.png", "compare-ttft.png", "agent_session.png", "speculative.png", "embeddings.png"}
    assert {p.name for p in (tmp_path / "plots").iterdir()} == names
    for name in names:
        width, height = png_size(tmp_path / "plots" / name)
        assert width >= 900 and height >= 400, (name, width, height)
    assert "nothing to draw for tensor_parallel" in done.stdout
    envelope = json.loads((results / "compare.json").read_text())
    assert envelope["machine"] == record.machine() and envelope["date"][:4].isdigit()
    tiny = envelope["results"]["models"]["tiny"]
    assert set(tiny["contenders"]) == {"mlxd", "mlx_lm.server", "in-process"}  # the skipped one is left out
    assert tiny["contenders"]["mlxd"]["ttft_p95_s"] == [0.08, 0.32] and set(tiny["spread"]) >= {"mlxd", "mlx_lm.server"}


def test_the_caption_names_date_machine_and_source():
    sys.path.insert(0, str(BENCH))
    from plots import caption

    text = caption({"date": "2026-12-02T10:00:00Z", "machine": "Linux x86_64, 2 cores", "source": "SEED: notes"})
    assert text.startswith("2026-12-02 · Linux x86_64, 2 cores · SEED: notes")


def test_the_committed_results_plot(tmp_path):
    """The results in the repository (a seed until ``make bench`` runs)
    draw every plot README shows."""
    done = run_plots(BENCH / "results", tmp_path)
    assert done.returncode == 0, done.stderr
    readme = (ROOT / "README.md").read_text()
    for png in sorted(tmp_path.glob("*.png")):
        assert f"bench/results/plots/{png.name}" in readme, png.name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "is not a bench result"),
        ('{"bench": "compare", "date": "x", "machine": "m", "source": "s", "results": {}}', "does not have the shape"),
    ],
)
def test_a_malformed_file_is_refused(tmp_path, content, message):
    (tmp_path / "compare.json").write_text(content)
    done = run_plots(tmp_path, tmp_path / "plots")
    assert done.returncode == 1 and message in done.stderr, done.stderr


def _writers() -> list[str]:
    """The bench scripts that write a result file (they import ``record.write``)."""
    return sorted(
        path.stem
        for path in BENCH.glob("*.py")
        if "import write as write_results" in path.read_text() and path.stem != "record"
    )


def test_bench_scripts_write_results_only_when_asked():
    """A bench script run by hand (README's smoke runs) only prints: each
    write of ``bench/results/NAME.json`` sits under ``if args.write``, the
    flag is off by default, and ``make bench`` passes it to every writer."""
    import argparse
    import ast

    writers = _writers()
    assert len(writers) >= 9, writers
    makefile = (ROOT / "Makefile").read_text()
    for name in writers:
        tree = ast.parse((BENCH / f"{name}.py").read_text())
        guards = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and ast.unparse(node.test) == "args.write"
            and any(
                isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "write_results"
                for inner in ast.walk(node)
            )
        ]
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("write_results", "add_write_flag")
        ]
        assert len(guards) == 1 and len(calls) == 2, name
        assert f"$(PY) bench/{name}.py --write\n" in makefile, name
    parser = argparse.ArgumentParser()
    record.add_write_flag(parser)
    assert parser.parse_args([]).write is False and parser.parse_args(["--write"]).write is True
