"""The end-to-end figures as one PNG: records/s per workload and system, and latency per system."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"frazil": "#1f6feb", "spark-ss": "#e36209", "plain-python": "#6e7781", "kafka-connect": "#bf3989",
          "ceiling-consume": "#2da44e", "ceiling-parquet": "#8250df"}


def draw(rows: list[dict[str, Any]], path: Path) -> None:
    through = [r for r in rows if "latency_p50_ms" not in r]
    latency = [r for r in rows if "latency_p50_ms" in r]
    workloads = list(dict.fromkeys(r["workload"] for r in through))
    systems = [s for s in COLORS if any(r["system"] == s for r in through)]
    fig, axes = plt.subplots(1, 2 if latency else 1, figsize=(13 if latency else 8, 5), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1] if latency else [1]})
    ax = axes[0][0]
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        xs, ys = [], []
        for j, w in enumerate(workloads):
            hit = [r for r in through if r["system"] == system and r["workload"] == w]
            if hit:
                xs.append(j + (i - (len(systems) - 1) / 2) * width)
                ys.append(hit[0]["records_per_s"])
        bars = ax.bar(xs, ys, width, label=system, color=COLORS[system])
        ax.bar_label(bars, labels=[f"{y / 1000:,.0f}k" for y in ys], fontsize=7, rotation=90, padding=2)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 4)  # room for the labels above the tallest bar
    ax.set_ylabel("records/s, launch to every record queryable (log)")
    ax.set_title("Throughput, pre-filled 12-partition topic")
    ax.legend(fontsize=8)
    if latency:
        ax = axes[0][1]
        names = [r["system"] for r in latency]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [r["latency_p50_ms"] / 1000 for r in latency], 0.4, label="p50",
               color=[COLORS[n] for n in names], alpha=0.55)
        ax.bar([x + 0.2 for x in xs], [r["latency_p99_ms"] / 1000 for r in latency], 0.4, label="p99",
               color=[COLORS[n] for n in names])
        ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
        ax.set_ylabel("produce to queryable, s")
        ax.set_title(f"Latency at {latency[0]['rate_per_s']:,} records/s (p50 light, p99 dark)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":  # redraw from the last results: python benches/_chart.py
    import json

    results = Path(__file__).parent / "results" / "e2e.json"
    draw(json.loads(results.read_text())["rows"], results.with_suffix(".png"))
