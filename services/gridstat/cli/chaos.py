"""``gridstat chaos list|run SCENARIO``: the chaos suite against real processes on 127.0.0.1 (the
``netns-*`` scenarios: in network namespaces they create, with kernel faults on veth links; root).

Each scenario starts its own routers, leaf broker (and admission controller), injects one fault
and prints a table of invariants; the exit status is 0 when every invariant held.

``--kube`` runs the ``kube-*`` scenarios instead against a Helm release's pods (``--namespace``,
``--release``, optionally ``--kubeconfig``; kubectl on PATH): chaos.kube_scenarios.
"""

from __future__ import annotations

import argparse

from gridstat.errors import ValidationError


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the scenarios and what each checks")
    listing.add_argument("--kube", action="store_true", help="the kube-* scenarios (against a Helm release)")
    run = sub.add_parser("run", help="run scenarios and print their invariant tables")
    run.add_argument("--kube", action="store_true",
                     help="run kube-* scenarios against the pods of a Helm release (kubectl; kube-router-kill and "
                          "kube-path-loss act from the node and need root there)")
    run.add_argument("--kubeconfig", default="", metavar="PATH", help="with --kube: kubectl's kubeconfig "
                                                                      "(default: kubectl's own, $KUBECONFIG)")
    run.add_argument("--namespace", default="", metavar="NS", help="with --kube: the release's namespace")
    run.add_argument("--release", default="", metavar="NAME", help="with --kube: the Helm release name")
    run.add_argument("scenario", nargs="+", help="scenario names, or 'all'")
    run.add_argument("--seconds", type=float, default=2.0,
                     help="how long each fault lasts (a router dead or stopped, traffic impaired); 0.5..60")
    soak = sub.add_parser("soak", help="one router process under constant load: RSS and drops sampled "
                                       "(bench.soak; 30 minutes for the real figure)")
    soak.add_argument("--minutes", type=float, default=30.0)
    soak.add_argument("--rate", type=int, default=0,
                      help="offered events/s (default: half the router saturation headline in docs/benchmarks.md)")
    soak.add_argument("--window-s", type=float, default=10.0, help="seconds per sampled window")
    soak.add_argument("--rss-slack-mb", type=float, default=8.0, help="RSS growth tolerated after the first window")
    soak.add_argument("--heap-slack-mb", type=float, default=2.0,
                      help="traced Python heap growth tolerated after the first window")
    soak.add_argument("--loss-slack-pct", type=float, default=0.1, help="events lost in all tolerated, in %%")
    soak.add_argument("--tracemalloc", action="store_true",
                      help="run the router with --tracemalloc and judge its traced Python heap too (tracing "
                           "slows the router: the default rate is then bench.soak.TRACED_RATE)")
    run.add_argument("--auth", action="store_true",
                     help="authenticated event channels (broker --channel-auth all; the feed signs, subscribers "
                          "verify); adds the invariants that every channel is keyed and nothing legitimate is refused")


def run(args: argparse.Namespace) -> int:
    from gridstat.chaos import checks, scenarios

    if args.action == "soak":
        from gridstat.bench import soak as soaking

        if not 0.1 <= args.minutes <= 24 * 60 or not 1.0 <= args.window_s <= 600:
            raise ValidationError("--minutes must be 0.1..1440 and --window-s 1..600", field="minutes")
        rate, source = (args.rate, "--rate") if args.rate else (
            (soaking.TRACED_RATE, "the default of a traced router") if args.tracemalloc else soaking.default_rate())
        print(f"soak: {rate:,} events/s offered ({source})", flush=True)
        result = soaking.run_soak(minutes=args.minutes, rate=rate, window_s=args.window_s,
                                  rss_slack_mb=args.rss_slack_mb, heap_slack_mb=args.heap_slack_mb,
                                  loss_slack_pct=args.loss_slack_pct, tracemalloc=args.tracemalloc,
                                  log=lambda m: print(m, flush=True))
        print()
        print(soaking.report(result))
        return 0 if result.ok else 1
    if getattr(args, "kube", False):
        return _run_kube(args)
    if args.action == "list":
        listed = [(name, text) for name, (_, text) in scenarios.SCENARIOS.items()]
        print(checks.text_table(("scenario", "what"), listed))
        return 0
    names = list(scenarios.SCENARIOS) if args.scenario == ["all"] else args.scenario
    unknown = [n for n in names if n not in scenarios.SCENARIOS]
    if unknown:
        raise ValidationError(f"unknown scenario(s) {', '.join(unknown)}; 'gridstat chaos list' names them",
                              field="scenario")
    if not 0.5 <= args.seconds <= 60:
        raise ValidationError(f"--seconds must be within 0.5..60, got {args.seconds}", field="seconds")
    failed = 0
    for name in names:
        outcome = scenarios.run(name, args.seconds, auth=args.auth)
        print(checks.table(outcome), flush=True)
        print()
        failed += not outcome.ok
    return 1 if failed else 0


def _run_kube(args: argparse.Namespace) -> int:
    from gridstat.chaos import checks, kube, kube_scenarios

    scenarios = kube_scenarios.SCENARIOS
    if args.action == "list":
        print(checks.text_table(("scenario", "what"), [(name, text) for name, (_, text) in scenarios.items()]))
        return 0
    if args.auth:
        raise ValidationError("--auth is for the local scenarios; a release's channel auth is its values' choice",
                              field="auth")
    if not args.namespace or not args.release:
        raise ValidationError("--kube needs --namespace NS and --release NAME", field="release")
    names = list(scenarios) if args.scenario == ["all"] else args.scenario
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        raise ValidationError(f"unknown kube scenario(s) {', '.join(unknown)}; 'gridstat chaos list --kube' names "
                              "them", field="scenario")
    if not 0.5 <= args.seconds <= 60:
        raise ValidationError(f"--seconds must be within 0.5..60, got {args.seconds}", field="seconds")
    target = kube.KubeTarget(kube.Kubectl(args.namespace, kubeconfig=args.kubeconfig), args.release)
    target.check()
    failed = 0
    for name in names:
        outcome = kube_scenarios.run(name, target, args.seconds)
        print(checks.table(outcome), flush=True)
        print()
        failed += not outcome.ok
    return 1 if failed else 0
