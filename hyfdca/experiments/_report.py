"""Figures (the paper's Figure 3 style) and the verdict table of a set of comparisons."""

import numpy as np

from hyfdca.experiments._compare import (LAST_BY_ITERATION, LAST_BY_TIME, final_values,
                                         winners, with_defaults)
from hyfdca.experiments._metrics import evaluated, moving_average, smoothing_window

COLORS = {"HyFDCA": "#C44E52", "FedAvg": "#4C72B0", "HyFEM": "#55A868", "D3CA": "#8172B2",
          "ADMM": "#CCB974"}


_ACCURACY_SET = {"validation": "validation", "test": "held-out test"}


def plot_grid(comparisons, paths, *, axis="iteration", smooth=0.01, columns=3):
    """One panel pair per comparison, ``columns`` pairs per row (the paper's grid: one row
    per partition, one column per fraction): relative loss (log) above validation
    accuracy (%), against relative outer iteration (%) or simulated wall time (s); one line
    per method, smoothed by a trailing moving average over ``smooth`` of the points; by
    iterations, each method at its defaults dashed where the search chose otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(comparisons)
    cols = min(n, columns)
    rows = -(-n // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(3.6 * cols + 1, 5.2 * rows),
                             squeeze=False, constrained_layout=True)
    for index, comp in enumerate(comparisons):
        top, col = 2 * (index // cols), index % cols
        loss_ax, acc_ax = axes[top, col], axes[top + 1, col]
        runs = comp.by_iteration if axis == "iteration" else comp.by_time
        lines = [(method, history, method, "-") for method, history in runs.items()]
        if axis == "iteration":
            lines += [(method, history, f"{method} (defaults)", "--")
                      for method, history in comp.at_defaults.items()]
        for method, history, label, linestyle in lines:
            rounds, rel = evaluated(history, "relative_loss")
            _, acc = evaluated(history, "validation_accuracy")
            if axis == "iteration":
                x = 100.0 * rounds / max(1, rounds[-1])
            else:
                x = history.simulated_time(comp.latency)[rounds]
            window = smoothing_window(rel.size, smooth)
            style = dict(color=COLORS.get(method), label=label, linestyle=linestyle)
            keep = rel > 0
            loss_ax.semilogy(x[keep], moving_average(rel, window)[keep], **style)
            acc_ax.plot(x, 100 * moving_average(acc, window), **style)
        loss_ax.set_title(comp.name, fontsize=9)
        for ax in (loss_ax, acc_ax):
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("outer iteration (% of the run)" if axis == "iteration"
                          else f"simulated wall time (s, {comp.latency:g} s/RTC)")
        loss_ax.set_ylabel("relative loss (P - P*) / P*")
        acc_ax.set_ylabel(f"{_ACCURACY_SET[comp.accuracy_on]} accuracy (%)")
    for index in range(n, rows * cols):  # unused panels of a last, shorter row
        top, col = 2 * (index // cols), index % cols
        axes[top, col].set_visible(False)
        axes[top + 1, col].set_visible(False)
    legend = legend_entries(axes.flat)
    axes[0, 0].legend(list(legend.values()), list(legend), fontsize=8)
    for path in paths:  # one drawing, saved in each format
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return paths


def legend_entries(axes):
    """{label: handle} of every labelled line on ``axes``, each label once (the first
    panel may lack a line, e.g. a method's run at its defaults, that others have)."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return entries


def plot_time_breakdown(comparisons, paths):
    """The paper's Figure 4: mean seconds per outer iteration of each method, stacked as
    computation, encryption and communication (round trips x the comparisons' latency),
    and the certificates' encryption and round trips spread over the rounds (HyFDCA),
    averaged over the comparisons' equal-iteration runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = {"computation": "#4C72B0", "encryption": "#DD8452", "communication": "#55A868",
             "certificates": "#C44E52"}
    means = {}
    for comp in comparisons:
        for method, history in comp.by_iteration.items():
            rows = history.rows()[1:]
            sample = [np.mean([r[c] for r in rows]) for c in
                      ("compute_seconds", "encryption_seconds", "rtc")]
            sample[2] *= comp.latency
            sample.append(sum(c["encryption_seconds"] + comp.latency * c["rtc"]
                              for c in history.certificates.values()) / max(1, len(rows)))
            means.setdefault(method, []).append(sample)
    fig, ax = plt.subplots(figsize=(1.6 * len(means) + 2, 4), constrained_layout=True)
    for x, (method, samples) in enumerate(means.items()):
        bottom = 0.0
        for value, (part, color) in zip(np.mean(samples, axis=0), parts.items()):
            ax.bar(x, value, 0.6, bottom=bottom, color=color, label=part if x == 0 else None)
            bottom += value
    ax.set_xticks(range(len(means)))
    ax.set_xticklabels(list(means))
    ax.set_ylabel("seconds per outer iteration")
    latency = comparisons[0].latency if comparisons else 0.0
    ax.set_title(f"time per outer iteration ({latency:g} s per round trip)")
    ax.legend()
    for path in paths:  # one drawing, saved in each format
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return paths


def verdict_table(comparisons, reference=("36/36", "33/36")):
    """Markdown: per comparison the method with the lowest relative loss and the highest
    accuracy, by iterations (the mean of the last five evaluations) and by time (the last,
    at the horizon), and by iterations with every method at its defaults; HyFDCA's final
    values tuned and at its defaults; then HyFDCA's totals (two
    comparisons per row and mode: loss and accuracy) beside the paper's, and with every
    method at its defaults. Returns (table, wins by iterations, wins by time, total, wins
    by iterations at the defaults)."""
    lines = ["| setting | lowest loss (iter.) | highest acc. (iter.) | lowest loss (time) | "
             "highest acc. (time) | lowest loss / highest acc., all at their defaults "
             "(iter.) | HyFDCA final rel. loss / acc. (iter.) | at its defaults (iter.) |",
             "|---|---|---|---|---|---|---|---|"]
    wins_iter = wins_time = wins_defaults = total = 0
    for comp in comparisons:
        it = winners(comp.by_iteration) if comp.by_iteration else ("-", "-")
        tm = winners(comp.by_time, LAST_BY_TIME) if comp.by_time else ("-", "-")
        at_defaults = with_defaults(comp) if comp.by_iteration else {}
        df = winners(at_defaults) if at_defaults else ("-", "-")
        hy = comp.by_iteration.get("HyFDCA")
        tuning = comp.tunings.get("HyFDCA")
        own = ("{:.3g} / {:.3f}".format(*final_values(hy)) if hy is not None
               else "not run" if tuning is None
               else "none viable" if tuning.params is None else "diverged")
        if tuning is not None and tuning.params is None:
            defaults = "none viable"   # the defaults are its first candidate
        elif ("defaults", "HyFDCA") in comp.diverged:
            defaults = "diverged"
        elif tuning is None:
            defaults = "-"
        elif "HyFDCA" not in comp.at_defaults:
            defaults = "= tuned"
        else:
            defaults = "{:.3g} / {:.3f}".format(*final_values(comp.at_defaults["HyFDCA"]))
        lines.append(f"| {comp.name} | {it[0]} | {it[1]} | {tm[0]} | {tm[1]} | "
                     f"{df[0]} / {df[1]} | {own} | {defaults} |")
        wins_iter += sum(w == "HyFDCA" for w in it)
        wins_time += sum(w == "HyFDCA" for w in tm)
        wins_defaults += sum(w == "HyFDCA" for w in df)
        total += 2
    lines.append("")
    short = [f"{comp.name} ({_percent(share)})" for comp in comparisons
             if (share := 100 * _time_share(comp)) < 100]
    if short:
        lines.append("Compared by time short of HyFDCA's time for its rounds (every method "
                     "is read at the shortest time any reached: a method reached the cap on "
                     "rounds, or its rounds took longer than the mean it was sized by): "
                     + "; ".join(short) + ".")
        lines.append("")
    if any(comp.accuracy_on == "test" for comp in comparisons):
        lines.append("Accuracies are on a held-out test set (half of the held-out quarter, "
                     "stratified) that no search saw; the searches chose on the other half.")
        lines.append("")
    failed = [f"{comp.name}: {method} ({mode})" for comp in comparisons
              for mode, method in comp.diverged if mode != "cut"]
    if failed:
        lines.append("Long runs that diverged (left out of their mode): "
                     + "; ".join(failed) + ".")
        lines.append("")
    recut = [f"{comp.name}: {method}" for comp in comparisons
             for mode, method in comp.diverged if mode == "cut"]
    if recut:
        lines.append("Re-runs to the time horizon that diverged (not used: the method is "
                     "read by time at its last evaluation within the horizon): "
                     + "; ".join(recut) + ".")
        lines.append("")
    lines.append(f"HyFDCA wins {wins_iter}/{total} comparisons by outer iterations (paper: "
                 f"{reference[0]}) and {wins_time}/{total} by wall time (paper: "
                 f"{reference[1]}); with every method at its defaults instead of the "
                 f"searched parameters, {wins_defaults}/{total} by outer iterations.")
    return "\n".join(lines), wins_iter, wins_time, total, wins_defaults


def _percent(share):
    """A share under 100 in three digits, never rounded up to "100%"."""
    text = f"{share:.3g}"
    return ">99.9%" if float(text) >= 100 else f"{text}%"


def _time_share(comp):
    """The equal-time horizon over HyFDCA's simulated time for its rounds (1.0 where
    there is no equal-time comparison)."""
    rounds, timed = comp.by_iteration.get("HyFDCA"), comp.by_time.get("HyFDCA")
    if rounds is None or timed is None:
        return 1.0
    budget = rounds.simulated_time(comp.latency)[-1]
    return timed.simulated_time(comp.latency)[-1] / budget if budget > 0 else 1.0


def tuning_table(comparisons):
    """Markdown: per comparison and method the candidates tried and divergent, the chosen
    parameters, and the final relative loss by iterations of the chosen run and of the
    run at the defaults (what the search gained or lost)."""
    lines = ["| setting | method | tried | divergent | chosen parameters | final rel. loss "
             "(iter.): chosen / at the defaults |", "|---|---|---|---|---|---|"]
    for comp in comparisons:
        for method, t in comp.tunings.items():
            params = "none viable" if t.params is None else ", ".join(
                f"{k}={v:.3g}" for k, v in t.params.items()) or "defaults"
            finals = "-"
            if method in comp.by_iteration or ("iteration", method) in comp.diverged:
                history = comp.by_iteration.get(method)
                chosen = ("diverged" if history is None
                          else f"{final_values(history)[0]:.3g}")
                default = comp.at_defaults.get(method)
                finals = f"{chosen} / " + (
                    "diverged" if ("defaults", method) in comp.diverged
                    else "= chosen" if default is None else f"{final_values(default)[0]:.3g}")
            lines.append(f"| {comp.name} | {method} | {t.tried} | {t.divergent} | {params} "
                         f"| {finals} |")
    return "\n".join(lines)


def summary_rows(comparisons):
    """Plain rows for JSON export: setting, mode, method, final relative loss, accuracy
    (by iterations the mean of the last five evaluations, by time the last; a method at
    its defaults as method "<method> (defaults)", by iterations, where run) and the set
    it was taken on ("validation" or "test")."""
    rows = []
    for comp in comparisons:
        modes = [("iteration", comp.by_iteration, LAST_BY_ITERATION),
                 ("time", comp.by_time, LAST_BY_TIME),
                 ("iteration", {f"{m} (defaults)": h for m, h in comp.at_defaults.items()},
                  LAST_BY_ITERATION)]
        for mode, runs, last in modes:
            for method, history in runs.items():
                rel, acc = final_values(history, last)
                rows.append(dict(setting=comp.name, mode=mode, method=method, rounds=len(
                    history.rounds), final_relative_loss=rel, final_accuracy=acc,
                    accuracy_on=comp.accuracy_on,
                    simulated_seconds=float(history.simulated_time(comp.latency)[-1])))
    return rows

