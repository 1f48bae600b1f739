"""The loss curve of a run, from the metrics file ``TpuMetricsProcessor`` writes."""

from __future__ import annotations

import json


def read_metrics(path: str) -> list[dict]:
    """The records of a metrics file, in order (one dict per logged step)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_loss_curve(metrics_path: str, png_path: str, title: str = "") -> None:
    """Training loss (and validation loss, where logged) against the step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    train = [(r["step"], r["loss_metrics/global_avg_loss"]) for r in records
             if "loss_metrics/global_avg_loss" in r]
    val = [(r["step"], r["validation_metrics/loss"]) for r in records
           if "validation_metrics/loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if train:
        ax.plot(*zip(*train), label="train loss", color="tab:blue")
    if val:
        ax.plot(*zip(*val), "o-", label="validation loss", color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)
