"""The ``hyfdca`` command: ``hyfdca datasets``, ``hyfdca demo``."""

import argparse
import sys

import numpy as np

from hyfdca import datasets


def cmd_datasets(args):
    """List the catalogued data sets, whether this machine has them and from where."""
    rows = []
    for name, entry in datasets.CATALOG.items():
        where = datasets.locate_dataset(name)
        rows.append((name, "yes" if where else "no", entry.shape,
                     where or "not found (see `hyfdca datasets --help`)", entry.description))
    widths = [max(len(r[c]) for r in rows + [("name", "here", "shape", "from", "")])
              for c in range(4)]
    header = ("name", "here", "shape", "from")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  description")
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row[:4], widths)) + "  " + row[4])
    print("\nData files are searched in: "
          + ", ".join(str(p) for p in datasets.data_search_path())
          + " (set HYFDCA_DATA to add folders).")
    return 0


def cmd_demo(args):
    """Centralized SDCA on the embedded default, checked against scikit-learn."""
    from sklearn.model_selection import train_test_split

    from solvers import reference_optimum, sdca

    ds = datasets.load_dataset(args.dataset)
    X_tr, X_te, y_tr, y_te = train_test_split(ds.X, ds.y, test_size=0.25,
                                              random_state=args.seed, stratify=ds.y)
    print(f"{ds}\ntrain {X_tr.shape[0]} / test {X_te.shape[0]} samples; loss={args.loss}, "
          f"lam={args.lam:g}, seed={args.seed}")
    result = sdca(X_tr, y_tr, loss=args.loss, lam=args.lam, tol=args.tol,
                  max_epochs=args.max_epochs, random_state=args.seed)
    p_star, w_ref = reference_optimum(X_tr, y_tr, loss=args.loss, lam=args.lam)
    h = result.history
    print(f"\n{'epoch':>6} {'primal':>12} {'dual':>12} {'gap':>10} {'(P-P*)/P*':>10}")
    shown = sorted(set(np.geomspace(1, len(h["gap"]), 12).astype(int) - 1))
    for k in shown:
        e, p, d, g = h["epoch"][k], h["primal"][k], h["dual"][k], h["gap"][k]
        print(f"{e:>6} {p:>12.8f} {d:>12.8f} {g:>10.2e} {(p - p_star) / p_star:>10.2e}")
    accuracy = lambda w: float(np.mean(np.sign(X_te @ w) == y_te))
    print(f"\nSDCA: {result.n_epochs} epochs, gap {result.gap:.2e} "
          f"({'converged' if result.converged else 'NOT converged'} at tol={args.tol:g})")
    print(f"P(w) = {h['primal'][-1]:.10f}   scikit-learn reference P* = {p_star:.10f}")
    print(f"test accuracy: SDCA {accuracy(result.coef):.4f}, scikit-learn "
          f"{accuracy(w_ref):.4f}")
    return 0 if result.converged else 1


def build_parser():
    parser = argparse.ArgumentParser(prog="hyfdca", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("datasets", help="list the data sets and where they come from",
                       description=cmd_datasets.__doc__)
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("demo", help="run the main job on the embedded default data",
                       description=cmd_demo.__doc__)
    p.add_argument("--dataset", default="breast_cancer", choices=["breast_cancer", "digits"])
    p.add_argument("--loss", default="hinge",
                   choices=["hinge", "squared_hinge", "logistic"])
    p.add_argument("--lam", type=float, default=1e-2, help="L2 weight lambda")
    p.add_argument("--tol", type=float, default=1e-6, help="duality-gap tolerance")
    p.add_argument("--max-epochs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
