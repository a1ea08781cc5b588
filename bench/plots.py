"""``make bench`` (last step): PNG plots of the results in ``bench/results/``.

Reads every result file the bench scripts wrote (``bench/record.py``: one
JSON envelope per script, the latest run) and draws, with matplotlib:

- ``compare-throughput.png``: aggregate tokens/s against concurrent streams,
  one line per contender, one panel per model (``bench/compare.py``);
- ``compare-ttft.png``: time to first token p50 (solid) and p95 (dashed)
  against concurrent streams, same layout;
- ``speculative.png``: tokens/s per case without speculation, with the
  default config (and mlx_lm.server where measured);
- ``agent_session.png``: time to first token per turn of the agent session,
  per contender;
- ``embeddings.png``: inputs/s per shape, mlxd against the in-process encoder.
- ``rerank.png``: pairs/s per shape, mlxd against the cross-encoder in-process
  (mlxd's model code and mlx-vlm's classes).

Every plot carries, under its title, the date of the run, the machine and
where the numbers come from (a seed transcribed from ``bench/NOTES.md`` says
so). A result file a plot does not know is skipped with a note. Usage::

    .venv/bin/python bench/plots.py [--results bench/results] [--out bench/results/plots]

Exit status 1 (and why) when a result file is malformed.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import RESULTS, read_all  # noqa: E402

COLORS = {
    "mlxd": "#2f6fdd",
    "mlx_lm.server": "#d9822b",
    "vllm-mlx": "#1e7f4f",
    "in-process": "#7f8c8d",
    "mlx-vlm in-process": "#8e44ad",
}
"""A fixed colour per contender, the same in every plot."""

MODEL_TITLES = {"real": "default model (SmolLM2-135M, float32)", "tiny": "tiny model (random weights)"}
"""Panel titles of ``bench/compare.py``'s two models."""

DPI = 110


def caption(envelope: dict[str, Any], width: int = 120) -> str:
    """The lines under every title: date, machine, and the source of the
    numbers, wrapped at ``width`` characters."""
    text = f"{envelope['date'][:10]} · {envelope['machine']} · {envelope['source']}"
    return "\n".join(textwrap.wrap(text, width))


def _figure(envelope: dict[str, Any], title: str, panels: int = 1) -> tuple[Any, list[Any]]:
    width = 6.2 * panels + 0.6 if panels > 1 else 9.0
    fig, axes = plt.subplots(1, panels, figsize=(width, 4.6), squeeze=False)
    fig.suptitle(title, fontsize=13, fontweight="bold", y=0.985)
    fig.text(0.5, 0.915, caption(envelope, int(width * 15)), ha="center", va="top", fontsize=7.5, color="#555555")
    return fig, list(axes[0])


def _save(fig: Any, out: Path, name: str) -> Path:
    fig.tight_layout(rect=(0, 0, 1, 0.84))
    path = out / name
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _color(name: str) -> str:
    return COLORS.get(name, "#8e44ad")


def _points(streams: list[int], values: list[float | None], scale: float = 1.0) -> tuple[list[int], list[float]]:
    pairs = [(s, v * scale) for s, v in zip(streams, values) if v is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def plot_compare(envelope: dict[str, Any], out: Path) -> list[Path]:
    """Throughput and TTFT against concurrent streams, per model and contender."""
    models = envelope["results"]["models"]
    labels = [m for m in ("real", "tiny") if m in models] + [m for m in models if m not in ("real", "tiny")]
    written = []
    fig, axes = _figure(envelope, "Aggregate tokens/s against concurrent streams", len(labels))
    for ax, label in zip(axes, labels):
        model = models[label]
        for name, series in model["contenders"].items():
            x, y = _points(series["streams"], series["aggregate_tok_s"])
            if x:
                ax.plot(x, y, marker="o", color=_color(name), label=name)
        ax.set_title(f"{MODEL_TITLES.get(label, label)}, {model['tokens_per_request']} tokens/request", fontsize=10)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("tokens/s (all streams)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    written.append(_save(fig, out, "compare-throughput.png"))

    fig, axes = _figure(envelope, "Time to first token against concurrent streams (p50 solid, p95 dashed)", len(labels))
    for ax, label in zip(axes, labels):
        model = models[label]
        drawn = False
        for name, series in model["contenders"].items():
            for key, style in (("ttft_p50_s", "-"), ("ttft_p95_s", "--")):
                x, y = _points(series["streams"], series.get(key) or [], 1000.0)
                if x:
                    drawn = True
                    ax.plot(x, y, style, marker="o", color=_color(name), label=f"{name} {key[5:8]}")
        ax.set_title(MODEL_TITLES.get(label, label), fontsize=10)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel("TTFT (ms)")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
        if drawn:
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, ncol=2)
        else:
            ax.text(0.5, 0.5, "TTFT not recorded in this run", ha="center", va="center", transform=ax.transAxes)
    written.append(_save(fig, out, "compare-ttft.png"))
    return written


def _grouped_bars(ax: Any, groups: list[str], series: dict[str, list[float | None]], colors: dict[str, str]) -> None:
    """Bars of each series side by side per group (a missing value leaves a gap)."""
    count = max(1, len(series))
    width = 0.8 / count
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (count - 1) / 2) * width for g in range(len(groups))]
        pairs = [(x, v) for x, v in zip(xs, values) if v is not None]
        bars = ax.bar([p[0] for p in pairs], [p[1] for p in pairs], width, label=name, color=colors.get(name))
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def plot_speculative(envelope: dict[str, Any], out: Path) -> list[Path]:
    """Tokens/s per case with and without speculative decoding."""
    results = envelope["results"]
    rows = results["cases"]
    names = {
        "none_tok_s": "mlxd, no speculation",
        "default_tok_s": "mlxd, default (auto: suffix drafting)",
        "mlx_lm_server_tok_s": "mlx_lm.server",
    }
    series = {
        label: [row.get(key) for row in rows]
        for key, label in names.items()
        if any(row.get(key) is not None for row in rows)
    }
    colors = dict(zip(names.values(), ("#9bb7ea", COLORS["mlxd"], COLORS["mlx_lm.server"])))
    fig, (ax,) = _figure(envelope, f"Speculative decoding: tokens/s ({results['model']})")
    _grouped_bars(ax, [row["case"] for row in rows], series, colors)
    ax.set_ylabel("tokens/s")
    drafted, accepted = results.get("drafted_tokens"), results.get("accepted_tokens")
    if drafted:
        ax.set_xlabel(f"default config: {accepted} of {drafted} drafted tokens accepted ({accepted / drafted:.0%})")
    return [_save(fig, out, "speculative.png")]


def plot_agent_session(envelope: dict[str, Any], out: Path) -> list[Path]:
    """TTFT per turn of the agent session, per contender (prompt tokens on top)."""
    results = envelope["results"]
    turns = results["turns"]
    fig, (ax,) = _figure(envelope, "Agent session: time to first token per turn")
    ax.set_title(results["model"], fontsize=10)
    names = sorted({name for t in turns for name in t["ttft_s"]}, key=lambda n: n != "mlxd")
    for name in names:
        pairs = [(t["turn"], t["ttft_s"][name] * 1000) for t in turns if t["ttft_s"].get(name) is not None]
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", color=_color(name), label=name)
    resumed = results.get("resumed")
    if resumed:
        last = turns[-1]["turn"] if turns else 1
        ax.scatter(
            [last],
            [resumed["ttft_s"] * 1000],
            marker="*",
            s=140,
            color=_color("mlxd"),
            zorder=3,
            label=f"mlxd after a restart (disk tier), cold {resumed['cold_ttft_s'] * 1000:,.0f} ms",
        )
    ax.set_xlabel("turn (prompt tokens in brackets)")
    ax.set_xticks([t["turn"] for t in turns], [f"{t['turn']}\n({t['prompt_tokens']})" for t in turns], fontsize=8)
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, out, "agent_session.png")]


def plot_embeddings(envelope: dict[str, Any], out: Path) -> list[Path]:
    """Inputs/s per shape, mlxd against the same encoder in-process."""
    results = envelope["results"]
    shapes = results["shapes"]
    series = {
        "mlxd": [s["mlxd_inputs_s"] for s in shapes],
        "in-process": [s["in_process_inputs_s"] for s in shapes],
    }
    fig, (ax,) = _figure(envelope, "Embeddings throughput")
    ax.set_title(results["model"], fontsize=10)
    _grouped_bars(ax, [textwrap.fill(s["shape"], 22) for s in shapes], series, COLORS)
    ax.set_ylabel("inputs/s")
    return [_save(fig, out, "embeddings.png")]


def plot_rerank(envelope: dict[str, Any], out: Path) -> list[Path]:
    """Pairs/s per shape, mlxd against the cross-encoder in-process (mlxd's
    model code, and mlx-vlm's classes; a side that did not run leaves a gap)."""
    results = envelope["results"]
    shapes = results["shapes"]
    series = {
        "mlxd": [s["mlxd_pairs_s"] for s in shapes],
        "in-process": [s["in_process_pairs_s"] for s in shapes],
        "mlx-vlm in-process": [s["mlx_vlm_pairs_s"] for s in shapes],
    }
    fig, (ax,) = _figure(envelope, "Rerank throughput")
    ax.set_title(results["model"], fontsize=10)
    _grouped_bars(ax, [textwrap.fill(s["shape"], 22) for s in shapes], series, COLORS)
    ax.set_ylabel("pairs/s")
    return [_save(fig, out, "rerank.png")]


PLOTTERS: dict[str, Callable[[dict[str, Any], Path], list[Path]]] = {
    "compare": plot_compare,
    "speculative": plot_speculative,
    "agent_session": plot_agent_session,
    "embeddings": plot_embeddings,
    "rerank": plot_rerank,
}
"""Bench name -> the function drawing its plots (each returns the files it wrote)."""


def main(argv: list[str] | None = None) -> int:
    """Draw every plot the result files allow; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="directory of the result files")
    parser.add_argument("--out", type=Path, help="where the PNGs go (default: RESULTS/plots)")
    args = parser.parse_args(argv)
    out = args.out or args.results / "plots"
    try:
        found = read_all(args.results)
    except (ValueError, OSError) as exc:
        print(f"plots: {exc}", file=sys.stderr)
        return 1
    if not found:
        print(f"plots: no result files in {args.results}; run the bench scripts first", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for bench, envelope in found.items():
        plotter = PLOTTERS.get(bench)
        if plotter is None:
            print(f"plots: nothing to draw for {bench} (its numbers are in {args.results / bench}.json)")
            continue
        try:
            paths = plotter(envelope, out)
        except (KeyError, TypeError, ValueError) as exc:
            print(
                f"plots: {args.results / bench}.json does not have the shape bench/{bench}.py writes: {exc!r}",
                file=sys.stderr,
            )
            return 1
        for path in paths:
            print(f"plots: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
