"""Figures of a run: relative loss and validation accuracy per round."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_history(history, path, *, title="HyFDCA", reference_accuracy=None):
    """Two panels against the outer iteration: (P - P*)/P* (log scale; the duality gap
    when P* is unknown) and validation accuracy. Saved as PNG (or by ``path``'s suffix)."""
    rounds = history.column("round")
    rel, gap, acc = (history.column(c) for c in ("relative_loss", "gap", "validation_accuracy"))
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    has_rel = np.isfinite(rel).any()
    values, label = (rel, "relative loss (P - P*) / P*") if has_rel else (gap, "duality gap")
    keep = np.isfinite(values) & (values > 0)
    ax_loss.semilogy(rounds[keep], values[keep], marker=".", label=label)
    if has_rel:
        gap = gap / history.p_star
        keep_gap = np.isfinite(gap) & (gap > 0)
        ax_loss.semilogy(rounds[keep_gap], gap[keep_gap], ls="--",
                         label="duality gap / P* (an upper bound)")
    ax_loss.set_xlabel("outer iteration (round)")
    ax_loss.set_ylabel("objective sub-optimality")
    ax_loss.set_title(f"{title}: convergence")
    ax_loss.grid(True, which="both", alpha=0.3)
    ax_loss.legend()
    keep = np.isfinite(acc)
    ax_acc.plot(rounds[keep], 100 * acc[keep], marker=".", label="HyFDCA")
    if reference_accuracy is not None:
        ax_acc.axhline(100 * reference_accuracy, color="k", ls=":", label="centralized")
    ax_acc.set_xlabel("outer iteration (round)")
    ax_acc.set_ylabel("validation accuracy (%)")
    ax_acc.set_title(f"{title}: validation accuracy")
    ax_acc.grid(True, alpha=0.3)
    ax_acc.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
