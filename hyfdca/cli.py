"""The ``hyfdca`` command: ``datasets``, ``demo``, ``run``, ``profile``, ``keys``, ``split``,
``app``, ``experiment``."""

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np

from crypto import BACKENDS
from feddata import PARTICIPATION_KINDS, datasets, federated_problem
from feddata.partition import SPEC_HELP
from hyfdca._checkpoint import latest_checkpoint
from hyfdca._encoding_range import packing_options
from hyfdca._run import ENGINES, Diverged, run_hyfdca
from hyfdca._settings import DEFAULT_VARIANT, VARIANT_NAMES, HyFDCASettings
from hyfdca._signals import GracefulStop, Terminated, raise_terminated
from solvers import LOSS_CODES, centralized_solution, sign_labels


def cmd_datasets(args):
    """List the catalogued data sets, whether this machine has them and from where. Data
    files are looked for in the folders of $HYFDCA_DATA (separated by os.pathsep), then a
    development checkout's ../shared/data and ~/hyfdca_data; Fashion-MNIST in
    /usr/share/datasets/fashion-mnist (apt-get install -y dataset-fashion-mnist)."""
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


def _problem(args):
    """(train FederatedDataset, validation (X, y)) of the data set and partition asked for."""
    fed, validation, positive = federated_problem(args.dataset, args.partition, seed=args.seed,
                                                  positive_class=args.positive_class)
    print(f"{fed} ({args.dataset}, {args.partition}); validation {validation[0].shape[0]} "
          f"samples" + (f"; one-vs-rest for class {positive}" if positive is not None else ""))
    return fed, validation


def cmd_train(args):
    """Train with HyFDCA on a catalogued data set and partition, compare with the
    centralized solver, write the history (CSV, JSON) and the convergence plot. ``demo``
    is this command on the embedded defaults. The run's state is checkpointed in
    ``--checkpoint`` (default OUTPUT/checkpoint) every ``--checkpoint-every`` rounds and
    at its end; ``--resume`` continues it. Ctrl-C or SIGTERM stops after the current
    round and keeps the work (history and checkpoint; exit code 130 or 143)."""
    from hyfdca._plots import plot_history

    out = prepare_output(args.output)
    checkpoint = Path(args.checkpoint) if args.checkpoint else out / "checkpoint"
    earlier = None if args.resume else latest_checkpoint(checkpoint)
    if earlier is not None:
        raise SystemExit(f"hyfdca: {checkpoint} holds the checkpoint of an earlier run "
                         f"({earlier.name}): add --resume to continue it, or choose another "
                         f"--output or --checkpoint")
    fed, validation = _problem(args)
    settings = HyFDCASettings.from_variant(
        args.variant, loss=args.loss, lam=args.lam, H=args.H, iic=args.iic,
        participation=args.participation, fraction=args.fraction,
        second_inner_product=args.second_inner_product, draw_block=args.draw_block)
    p_star, w_star = centralized_solution(*fed.reassemble(), loss=args.loss, lam=args.lam)
    print(f"{settings.variant} variant, loss={args.loss}, lam={args.lam:g}, "
          f"participation={args.participation} ({args.fraction:g}), P* = {p_star:.8f}")
    diverged = None
    with GracefulStop(abort_notice=lambda terminated: _abort_notice(args, terminated)) as stop:
        try:
            run, history = run_hyfdca(
                fed, settings, max_rounds=args.rounds, tol=args.tol, rel_tol=args.rel_tol,
                eval_every=args.eval_every, p_star=p_star, validation=validation,
                crypto=args.crypto, seed=args.seed, progress=not args.quiet,
                checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
                resume=args.resume, stop=stop)
        except Diverged as err:   # keep what it did
            diverged, history = err, err.history
    history.to_csv(out / "history.csv")
    history.to_json(out / "history.json")
    if diverged is not None:   # a resume would diverge again: free the default folder
        if not args.checkpoint:
            shutil.rmtree(checkpoint, ignore_errors=True)
        print(f"hyfdca: {diverged}\nhistory up to the divergence in {out}", file=sys.stderr)
        return 1
    if stop.signal is not None:
        print(f"hyfdca: {stop.signal.name} at round {run.round}: history in {out}, "
              f"checkpoint in {checkpoint} (continue with --resume)", file=sys.stderr)
        return stop.exit_code
    if not args.checkpoint:  # the default folder keeps only unfinished work
        shutil.rmtree(checkpoint)
    primal, dual = history.certified()  # run.model is the certified point with this primal
    X_val, y_val = validation
    accuracy, central_acc = (float(np.mean(sign_labels(X_val @ w) == y_val))
                             for w in (run.model, w_star))
    certificates = history.certificates.values()
    rtc = int(history.column("rtc").sum() + sum(c["rtc"] for c in certificates))
    print(f"\nafter {run.round} rounds and {len(certificates)} certificates ({rtc} round "
          f"trips; the rounds' own traffic {history.column('bytes_up').sum() / 1e6:.2f} MB "
          f"up, {history.column('bytes_down').sum() / 1e6:.2f} MB down):")
    print(f"  duality gap          {primal - dual:.3e}   (best primal - best dual)")
    print(f"  relative loss        {(primal - p_star) / p_star:.3e}   (P - P*) / P*")
    print(f"  validation accuracy  {accuracy:.4f}   (centralized solver: {central_acc:.4f})")
    print(f"  encryption           {run.server.evaluator.protection}")
    plot = plot_history(history, out / "convergence.png",
                        title=f"{args.dataset} {args.partition}",
                        reference_accuracy=central_acc)
    kept = f"; checkpoint: {checkpoint}" if args.checkpoint else ""
    print(f"history: {out / 'history.csv'}, {out / 'history.json'}; plot: {plot}{kept}")
    return 0


def prepare_output(path):
    """The output folder, created and checked writable before any work starts (an error
    after training would lose the run)."""
    if not str(path).strip():
        raise SystemExit("hyfdca: the output folder's name is empty")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"hyfdca: the output folder {out} is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise SystemExit(f"hyfdca: cannot write in the output folder {out}: "
                         f"{err.strerror or err}") from None
    return out


def cmd_profile(args):
    """Encryption cost profile: per backend and key size, the cost of encrypt, decrypt,
    add and multiply per value and per vector, throughput and bytes per value; then a
    HyFDCA run's time per round split into computation, encryption and communication at
    0, 0.2575 and 0.6 s per round trip (table and stacked bar chart), and per backend the
    wall time, encryption seconds and share, bytes per round and the ratio of paillier's
    encryption seconds to the backend's."""
    import json
    from dataclasses import asdict

    from hyfdca import profile

    backends = args.backends.split(",") if args.backends else list(BACKENDS)
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"unknown crypto backend(s) {unknown}; known: {sorted(BACKENDS)}")
    try:
        key_sizes = [int(k) for k in args.key_bits.split(",")]
    except ValueError:
        raise SystemExit(f"--key-bits must be comma-separated whole numbers, got "
                         f"{args.key_bits!r}") from None
    settings = HyFDCASettings.from_variant(args.variant, lam=args.lam, H=args.H, iic=args.iic,
                                           participation=args.participation,
                                           fraction=args.fraction, draw_block=args.draw_block)
    out = prepare_output(args.output)
    configs = []  # (backend, key bits or None): every key size only where there are keys
    for name in backends:
        has_keys = "n_length" in profile.backend_options(name, 2048)
        configs += [(name, bits) for bits in key_sizes] if has_keys else [(name, None)]

    costs = []
    for name, bits in configs:
        print(f"measuring {name}" + (f" at {bits} bits" if bits else "") + " ...", flush=True)
        costs += profile.measure_operations(name, key_bits=bits, n_values=args.n_values,
                                            repeats=args.repeats, seed=args.seed)
    table = profile.operations_table(costs)
    print(table)

    fed, _ = _problem(args)
    breakdowns = []
    for name, bits in configs:
        if bits not in (None, key_sizes[0]):
            continue  # the round breakdown at the first key size
        print(f"timing {args.rounds} HyFDCA rounds with {name} ...", flush=True)
        breakdowns.append(profile.round_breakdown(
            fed, settings, crypto=name, crypto_options=profile.backend_options(name, bits),
            rounds=args.rounds, seed=args.seed))
    rounds_table = profile.breakdown_table(breakdowns)
    costs_table = profile.round_costs_table(breakdowns)
    print(rounds_table)
    print(costs_table)
    (out / "operations.md").write_text(table + "\n")
    (out / "round_breakdown.md").write_text(rounds_table + "\n\n" + costs_table + "\n")
    (out / "profile.json").write_text(json.dumps(
        {"operations": [dict(asdict(c), per_value=c.per_value) for c in costs],
         "round_breakdown": breakdowns}, indent=1))
    plot = profile.plot_breakdown(breakdowns, out / "round_breakdown.png",
                                  title=f"HyFDCA time per round: {args.dataset} "
                                        f"{args.partition}")
    print(f"tables: {out / 'operations.md'}, {out / 'round_breakdown.md'}; plot: {plot}")
    return 0


def cmd_experiment(args):
    """The paper's convergence-rate experiments: HyFDCA against FedAvg and HyFEM on each
    data set x partition x participation fraction, hyperparameters by random search and
    Grey Relational Analysis, equal outer iterations and equal wall time; writes Figure 3
    style plots (PNG, PDF), the tuning and verdict tables and the results as JSON."""
    from hyfdca import experiments, profile

    if args.report_only:
        if not args.deterministic and args.backend != "plain":
            raise SystemExit("--report-only reads comparisons saved with reference or no "
                             "costs: add --deterministic or --backend plain, as the run had")
        if not (Path(args.output) / "comparisons").is_dir():
            raise SystemExit(f"--report-only: {args.output}/comparisons does not exist; "
                             "give the --output of the run to report")
    config = dict(experiments.QUICK if args.quick else experiments.FULL)
    for key in ("rounds", "tune_rounds", "max_candidates", "baseline_candidates",
                "eval_every"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    if args.datasets:
        wanted = args.datasets.split(",")
        unknown = sorted(set(wanted) - set(config["datasets"]))
        if unknown:
            raise SystemExit(f"data set(s) {unknown} not in this experiment: "
                             f"{sorted(config['datasets'])}")
        config["datasets"] = {k: v for k, v in config["datasets"].items() if k in wanted}
    if args.partitions:
        keep = args.partitions.split(",")
        offered = {p for partitions in config["datasets"].values() for p in partitions}
        unknown = sorted(set(keep) - offered)
        if unknown:
            raise SystemExit(f"partition(s) {unknown} not in this experiment's data sets: "
                             f"{sorted(offered)}")
        config["datasets"] = {k: tuple(p for p in v if p in keep)
                              for k, v in config["datasets"].items()}
    if args.held_out_test:
        config["held_out_test"] = True
    if args.fractions:
        try:
            config["fractions"] = tuple(float(f) for f in args.fractions.split(","))
        except ValueError:
            raise SystemExit(f"--fractions: not a comma-separated list of numbers: "
                             f"{args.fractions!r}") from None
    if args.jobs == 0 or args.jobs < -1:
        raise SystemExit(f"--jobs must be -1 (one per core) or a whole number >= 1, got "
                         f"{args.jobs}")
    try:
        experiments.check_config(config, args.latency)
    except ValueError as err:
        raise SystemExit(f"hyfdca experiment: {err}") from None
    costs = None
    if args.deterministic and args.key_bits != 2048:
        raise SystemExit("--deterministic charges the reference costs of 2048-bit keys; "
                         f"drop --key-bits {args.key_bits} or --deterministic")
    if args.deterministic:
        costs = experiments.REFERENCE_COSTS[args.backend]
        print(f"deterministic time model: {experiments.SECONDS_PER_OP:g} s per unit of local "
              f"work and the reference per-value costs of {args.backend}; no real-time "
              f"search budget")
    elif args.backend != "plain":
        print(f"measuring {args.backend} at {args.key_bits} bits for the time model ...")
        values = args.cost_values or profile.cost_values(args.backend)
        measured = profile.measure_operations(args.backend, key_bits=args.key_bits,
                                              n_values=values, repeats=1,
                                              one_per_ciphertext=True)
        costs = {c.operation: c.per_value for c in measured}
    print("encryption: none of these runs encrypts; " + (
        f"each HyFDCA round and certificate is charged the "
        f"{'reference' if args.deterministic else 'measured'}"
        f" per-operation costs of {args.backend} (its operation counts x cost per value)"
        if costs else "no encryption cost is charged (--backend plain)"))
    methods = args.methods.split(",") if args.methods else experiments.METHODS
    unknown = sorted(set(methods) - set(experiments.ALL_METHODS))
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; known: {list(experiments.ALL_METHODS)}")
    prepare_output(args.output)
    try:
        _, wins_iter, wins_time, total, wins_defaults = experiments.run_suite(
            config, args.output, methods=methods, costs=costs, latency=args.latency,
            seed=args.seed, engine=args.engine, deterministic=args.deterministic,
            n_jobs=args.jobs, scheduler=args.scheduler, report_only=args.report_only,
            overwrite=args.overwrite)
    except KeyboardInterrupt as err:
        terminated = isinstance(err, Terminated)
        resumable = ("the same command resumes from them" if args.deterministic or not costs
                     else "they were charged costs measured in this run, so only a run "
                          "with --deterministic or --backend plain resumes")
        print(f"\nhyfdca experiment: {'terminated' if terminated else 'interrupted'}; the "
              f"finished comparisons, and the finished runs of the others, are saved in "
              f"{args.output}/comparisons; {resumable}",
              file=sys.stderr)
        return 143 if terminated else 130
    if total == 0:   # every data set skipped: nothing ran, nothing was compared
        print(f"hyfdca experiment: none of the data sets {sorted(config['datasets'])} is on "
              f"this machine (see `hyfdca datasets`); nothing ran")
        print("headline: hyfdca_wins_iter=not-run hyfdca_wins_time=not-run "
              "defaults_wins_iter=not-run")
        return 0
    print((Path(args.output) / "verdict.md").read_text())
    print(f"figures and tables in {args.output}/")
    print(f"headline: hyfdca_wins_iter={wins_iter}/{total} hyfdca_wins_time={wins_time}/{total}"
          f" defaults_wins_iter={wins_defaults}/{total}")
    return 0


def cmd_keys(args):
    """Make the keys of a deployment (docs/deployment.md): ``clients.keys`` (the clients'
    KeyHolder and secure-sum masker: give it to every party over a secure channel, never
    to the server) and ``server.keys`` (the public evaluator the server loads)."""
    from hyfdca.flower import write_keys

    out = prepare_output(args.output)
    options = {"frac_bits": args.frac_bits}
    if args.crypto in ("paillier", "fast-paillier"):
        options["n_length"] = args.key_bits
    if args.loss is not None:  # slots sized for the loss's dual box (fast-paillier)
        loss_settings = HyFDCASettings.from_variant(DEFAULT_VARIANT, loss=args.loss)
        options.update(packing_options(args.crypto, loss_settings, args.frac_bits))
    clients, server = write_keys(out, args.crypto, **options)
    print(f"{args.crypto} keys at {args.frac_bits} fractional bits:\n"
          f"  {clients}  (secret: every party's SuperNode reads it; never the server)\n"
          f"  {server}  (public: the server's run configuration names it)")
    return 0


def cmd_split(args):
    """Split a catalogued data set by a partition spec into one party data file per
    client, as each party would hold its own block in a deployment; for trying a
    deployment on one machine (docs/deployment.md). The training part (the 75% that
    ``hyfdca run`` trains on: the same stratified split and seed) goes to client-<k>.npz
    (or client-<k>.libsvm with --format libsvm: the block, its global sample and feature
    ids, its labels); the validation quarter, split the same way
    (``feddata.partition.split_like``), to new-<k>.npz, each party's ``predict-file``,
    with its labels in new-labels.npy to score the prediction (no party of a deployment
    would hold them)."""
    import numpy as np

    from feddata.partition import split_like
    from hyfdca.flower import write_block

    out = prepare_output(args.output)
    fed, (X_new, y_new) = _problem(args)
    for k, block in enumerate(fed.blocks):
        write_block(out / f"client-{k}.{args.format}", block)
    last = fed.n_clients - 1
    print(f"{fed.n_clients} party files of the training part ({fed.n_samples} samples) in "
          f"{out} (client-0.{args.format} ... client-{last}.{args.format})")
    try:
        new = split_like(fed, X_new, seed=args.seed)
    except ValueError as err:
        print(f"no predict files: {err}")
        return 0
    for k, predict in enumerate(new.blocks):
        write_block(out / f"new-{k}.{args.format}", predict)
    np.save(out / "new-labels.npy", y_new)
    print(f"the validation quarter ({new.n_samples} samples) to predict: "
          f"new-0.{args.format} ... new-{last}.{args.format}, labels in new-labels.npy")
    return 0


def cmd_app(args):
    """Write the Flower app folder of a HyFDCA job (pyproject.toml with its run
    configuration) for ``flwr run FOLDER <superlink>`` (docs/deployment.md)."""
    import json

    from hyfdca.flower import write_app
    from hyfdca.flower._server_app import run_options

    settings = HyFDCASettings.from_variant(
        args.variant, loss=args.loss, lam=args.lam, H=args.H, iic=args.iic,
        participation=args.participation, fraction=args.fraction, draw_block=args.draw_block)
    timeout = args.phase_timeout
    if timeout is None:
        timeout = 0.0 if args.participation == "full" else 300.0
    if timeout and args.participation == "full":
        raise ValueError("--phase-timeout needs --participation fraction or cyclic (a "
                         "party that does not answer is then absent for the round); "
                         "use --participation fraction --fraction 1.0")
    config = {
        "num-clients": args.num_clients, "server-keys": str(Path(args.server_keys).resolve()),
        "settings": json.dumps(settings.as_dict()), "seed": args.seed,
        "frac-bits": args.frac_bits, "max-rounds": args.rounds, "eval-every": args.eval_every,
        "rel-tol": args.rel_tol or 0.0, "phase-timeout": timeout,
        "predict-samples": args.predict_samples,
        "output": str(Path(args.results).resolve())}
    run_options(config)   # what the ServerApp would refuse, refused before writing it
    folder = write_app(prepare_output(args.output), config)
    print(f"Flower app: {folder / 'pyproject.toml'}; run it with `flwr run {folder} "
          f"<superlink>`")
    return 0


def whole_number(minimum):
    """An argparse type: a whole number >= ``minimum``, refused by name otherwise."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got "
                                             f"{text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got "
                                             f"{value}")
        return value
    return parse


def _add_problem_options(p, *, dataset, partition, participation, fraction, lam):
    """Data set, partition, participation, lam, H or iic, variant: choices from the
    registries (catalogue, participation kinds, variants)."""
    p.add_argument("--dataset", default=dataset, choices=datasets.dataset_names())
    p.add_argument("--partition", default=partition, help=SPEC_HELP)
    p.add_argument("--participation", default=participation, choices=PARTICIPATION_KINDS)
    p.add_argument("--fraction", type=float, default=fraction,
                   help="clients available per round (fraction), or 1/subsets (cyclic)")
    p.add_argument("--lam", type=float, default=lam, help="L2 weight lambda")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--H", type=whole_number(1), help="inner steps per client and round")
    group.add_argument("--iic", type=float,
                       help="inner-iterations constant: H = iic x local samples")
    p.add_argument("--variant", default=DEFAULT_VARIANT, choices=VARIANT_NAMES)
    p.add_argument("--draw-block", type=whole_number(1), default=1,
                   help="draw samples in blocks of this many of one holder set (the "
                        "packed backend's slots: a round moves fewer ciphertexts)")
    p.add_argument("--positive-class", type=int, default=0,
                   help="multi-class data: index of the class trained one-vs-rest")
    p.add_argument("--seed", type=whole_number(0), default=0)


def _add_train_options(p, *, dataset, partition, participation, fraction, lam, rounds,
                       crypto="plain"):
    _add_problem_options(p, dataset=dataset, partition=partition,
                         participation=participation, fraction=fraction, lam=lam)
    p.add_argument("--loss", default="hinge", choices=sorted(LOSS_CODES))
    p.add_argument("--second-inner-product", action="store_true", default=None,
                   help="phase E every round (default: the variant's own; auto runs it where "
                        "the proximal outer loop is strong)")
    p.add_argument("--rounds", type=whole_number(0), default=rounds,
                   help="maximum outer iterations")
    p.add_argument("--tol", type=float, default=None, help="stop at this duality gap")
    p.add_argument("--rel-tol", type=float, default=None,
                   help="stop at this relative duality gap (P - D + e) / (D - e), e the "
                        "fixed point's rounding: it bounds (P - P*) / P*")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--crypto", default=crypto, choices=sorted(BACKENDS),
                   help=f"encryption backend (default {crypto}; paillier keys: 2048 bits)")
    p.add_argument("--output", default="hyfdca-output", help="folder for history and plots")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint folder, kept after the run (default: OUTPUT/checkpoint, "
                        "removed when the run finishes)")
    p.add_argument("--checkpoint-every", type=whole_number(1), default=100, metavar="ROUNDS",
                   help="rounds between checkpoints (one is also written at the end)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run saved in the checkpoint folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser():
    parser = argparse.ArgumentParser(prog="hyfdca", description=__doc__, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, **options):   # whole option names only: an abbreviation is refused
        return sub.add_parser(name, allow_abbrev=False, **options)

    p = command("datasets", help="list the data sets and where they come from",
                description=cmd_datasets.__doc__)
    p.set_defaults(func=cmd_datasets)

    p = command("demo", help="run the main job on the embedded default data",
                description="`hyfdca run` on the embedded default: breast cancer, "
                            "3x3 hybrid grid, half of the clients per round, BFV "
                            "lattice encryption, 300 rounds.")
    _add_train_options(p, dataset="breast_cancer", partition="3x3", participation="fraction",
                       fraction=0.5, lam=1e-2, rounds=300, crypto="bfv")
    p.set_defaults(func=cmd_train)

    p = command("run", help="train with HyFDCA on a data set and partition",
                description=cmd_train.__doc__)
    _add_train_options(p, dataset="a9a", partition="3x3", participation="full", fraction=1.0,
                       lam=1e-4, rounds=200)
    p.set_defaults(func=cmd_train)

    p = command("profile", help="encryption cost per operation and per HyFDCA round",
                description=cmd_profile.__doc__)
    p.add_argument("--backends", default=None,
                   help="comma-separated crypto backends (default: all)")
    p.add_argument("--key-bits", default="2048",
                   help="comma-separated key sizes for backends with keys (2048, 3072; "
                        "under 2048 only for quick tests)")
    p.add_argument("--n-values", type=whole_number(1), default=200,
                   help="values per vector (rounded up to whole ciphertexts of a packed "
                        "backend)")
    p.add_argument("--repeats", type=whole_number(1), default=1, help="best of this many timings")
    _add_problem_options(p, dataset="breast_cancer", partition="3x3",
                         participation="fraction", fraction=0.5, lam=1e-2)
    p.add_argument("--rounds", type=whole_number(1), default=3,
                   help="timed HyFDCA rounds per backend")
    p.add_argument("--output", default="hyfdca-profile", help="folder for tables and plot")
    p.set_defaults(func=cmd_profile)

    p = command("keys", help="make the key files of a Flower deployment",
                description=cmd_keys.__doc__)
    p.add_argument("--crypto", default="bfv", choices=sorted(set(BACKENDS) - {"plain"}))
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits")
    p.add_argument("--frac-bits", type=whole_number(1), default=32)
    p.add_argument("--loss", choices=sorted(LOSS_CODES), default=None,
                   help="the runs' loss: fast-paillier then sizes its slots for it (24 "
                        "per ciphertext for hinge, smoothed hinge, logistic, 18 for "
                        "squared and squared hinge, which have no dual box; 15 without "
                        "--loss, for any loss); a run of a loss the keys were not made "
                        "for is refused at set-up where it needs more")
    p.add_argument("--output", default="hyfdca-keys", help="folder for the two key files")
    p.set_defaults(func=cmd_keys)

    p = command("split", help="one party data file per client, for a deployment",
                description=cmd_split.__doc__)
    _add_problem_options(p, dataset="breast_cancer", partition="2x2",
                         participation="full", fraction=1.0, lam=1e-4)
    p.add_argument("--output", default="hyfdca-parties")
    p.add_argument("--format", choices=("npz", "libsvm"), default="npz",
                   help="party file format (LIBSVM: global feature indices, ids in a header)")
    p.set_defaults(func=cmd_split)

    p = command("app", help="write the Flower app folder of a HyFDCA job",
                description=cmd_app.__doc__)
    p.add_argument("--num-clients", type=whole_number(1), required=True)
    p.add_argument("--server-keys", required=True, help="server.keys of `hyfdca keys`")
    p.add_argument("--participation", default="fraction", choices=PARTICIPATION_KINDS)
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--lam", type=float, default=1e-4)
    p.add_argument("--loss", default="hinge", choices=sorted(LOSS_CODES))
    group = p.add_mutually_exclusive_group()
    group.add_argument("--H", type=whole_number(1))
    group.add_argument("--iic", type=float)
    p.add_argument("--variant", default=DEFAULT_VARIANT, choices=VARIANT_NAMES)
    p.add_argument("--draw-block", type=whole_number(1), default=1,
                   help="draw samples in blocks of this many of one holder set")
    p.add_argument("--seed", type=whole_number(0), default=0)
    p.add_argument("--frac-bits", type=whole_number(1), default=32)
    p.add_argument("--rounds", type=whole_number(0), default=100)
    p.add_argument("--eval-every", type=whole_number(1), default=10)
    p.add_argument("--rel-tol", type=float, default=None)
    p.add_argument("--phase-timeout", type=float, default=None,
                   help="seconds a phase waits for replies; a party that does not answer "
                        "in time is absent and may rejoin (default 300; 0: no limit, a "
                        "party that does not answer stops the run; participation 'full' "
                        "allows only 0)")
    p.add_argument("--predict-samples", type=whole_number(0), default=0,
                   help="after training, predict this many new samples from each party's "
                        "predict-file")
    p.add_argument("--results", default="hyfdca-results",
                   help="where the server writes model.npy and the history")
    p.add_argument("--output", default="hyfdca-app", help="the app folder")
    p.set_defaults(func=cmd_app)

    p = command("experiment", help="HyFDCA against its baselines, as in the paper",
                description=cmd_experiment.__doc__)
    p.add_argument("--quick", action="store_true",
                   help="CI-sized: embedded breast cancer, 2x2 and 3x3, fractions 0.5, 0.9")
    p.add_argument("--datasets", default=None, help="comma-separated subset of the data sets")
    p.add_argument("--partitions", default=None,
                   help="comma-separated subset of the partitions (e.g. 3x3,quadrants:5)")
    p.add_argument("--fractions", default=None,
                   help="comma-separated participation fractions (default 0.1,0.5,0.9)")
    p.add_argument("--held-out-test", action="store_true",
                   help="split the held-out quarter in two stratified halves: the searches "
                        "choose on one, every long run's accuracy is taken on the other "
                        "(the paper reports the accuracy on the set its search chose on)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods (default HyFDCA,FedAvg,HyFEM; also D3CA, "
                        "ADMM (full participation only))")
    p.add_argument("--rounds", type=whole_number(1), default=None,
                   help="outer iterations per final run")
    p.add_argument("--tune-rounds", type=whole_number(1), default=None,
                   help="rounds per search candidate")
    p.add_argument("--max-candidates", type=whole_number(1), default=None,
                   help="random-search draws of HyFDCA per setting")
    p.add_argument("--baseline-candidates", type=whole_number(1), default=None,
                   help="random-search draws of each baseline per setting (default: as "
                        "--max-candidates)")
    p.add_argument("--eval-every", type=whole_number(1), default=None,
                   help="rounds between evaluations (primal, accuracy)")
    p.add_argument("--backend", default="paillier", choices=sorted(set(BACKENDS) - {"bfv"}),
                   help="crypto backend whose measured costs HyFDCA's rounds are charged "
                        "(one value per ciphertext: the batched engine's operation counts; "
                        "packed costs inside a round: benchmarks/encrypted_rounds.py)")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--cost-values", type=whole_number(1), default=None,
                   help="values per vector when measuring the backend's costs (default: "
                        "enough for the per-call overhead to vanish: 20 for Paillier, "
                        "2,000 for mask)")
    p.add_argument("--latency", type=float, default=0.2575, help="seconds per round trip")
    p.add_argument("--jobs", type=int, default=1,
                   help="comparisons run at once in local processes (-1: one per core); "
                        "where one comparison is to run, this many of its runs at once")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the comparisons on the Dask cluster at ADDRESS (e.g. "
                        "tcp://10.0.0.5:8786; needs pip install 'hyfdca[cluster]')")
    p.add_argument("--deterministic", action="store_true",
                   help="time model from operation counts and reference per-value costs "
                        "(2048-bit keys), no real-time search budget: the same verdict, "
                        "tuning and results on every machine")
    p.add_argument("--engine", choices=ENGINES, default="batched",
                   help="HyFDCA's engine: batched (all clients per Numba call) or protocol "
                        "(per-client messages); same iterates and operation counts")
    p.add_argument("--seed", type=whole_number(0), default=0)
    p.add_argument("--output", default="hyfdca-experiment")
    p.add_argument("--report-only", action="store_true",
                   help="run no comparison: redraw the figures and tables from those "
                        "saved in OUTPUT/comparisons with these settings, whatever code "
                        "ran them (each one's source digest is printed); needs "
                        "--deterministic or --backend plain, as the run had")
    p.add_argument("--overwrite", action="store_true",
                   help="replace work saved in OUTPUT/comparisons with other settings "
                        "(without it such a run is refused; work of other code only is "
                        "computed again either way)")
    p.set_defaults(func=cmd_experiment)
    return parser


def _abort_notice(args, terminated):
    """The last line of a run ended by a signal at once: what it leaves."""
    return f"\nhyfdca: {'terminated' if terminated else 'interrupted'}{_saved_work(args)}"


def _saved_work(args):
    """What an abort leaves: the last checkpoint of a ``run`` or ``demo``, if any."""
    if args.func is not cmd_train:
        return " before any work was saved"
    folder = Path(args.checkpoint) if args.checkpoint else Path(args.output) / "checkpoint"
    try:
        latest = latest_checkpoint(folder)
    except (ValueError, OSError):
        latest = None
    if latest is None:
        return " before any work was saved"
    return f"; the checkpoint {latest} was saved before it (continue with --resume)"


def main(argv=None):
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # bad input: the library's message, no traceback
        print(f"hyfdca {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # before a run's graceful stop
        terminated = isinstance(err, Terminated)
        print(_abort_notice(args, terminated), file=sys.stderr)
        return 143 if terminated else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
