"""The ``nodesmith`` command line (typer).

Commands import their dependencies lazily so ``nodesmith --help`` stays fast.
Exit codes (:mod:`nodesmith.cli.exits`): 0 success, 1 a step failed, 2 bad input (invalid manifests or arguments).
"""

from __future__ import annotations

from pathlib import Path  # noqa: TC003 - typer reads the annotations at run time
from typing import Annotated

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="nodesmith",
    help="Karpenter, serverless: simulate provisioning decisions, run the embedded demo or the kubectl playground.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def simulate(
    files: Annotated[
        list[Path],
        typer.Option("-f", "--filename", help="Manifest file (multi-document YAML); repeatable."),
    ],
    region: Annotated[str, typer.Option(help="AWS region of the instance catalogue.")] = "us-east-1",
    price_table: Annotated[
        Path | None,
        typer.Option(help="JSON price table {'prices': {type: USD/hour}}; else Pricing API or labelled estimates."),
    ] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="json or table.")] = "table",
    use_aws: Annotated[
        bool, typer.Option("--aws", help="Read the catalogue from real AWS, not the embedded one.")
    ] = False,
    disrupt: Annotated[
        bool, typer.Option("--disrupt", help="Print the voluntary disruption decisions for the snapshot instead.")
    ] = False,
    now: Annotated[
        str | None,
        typer.Option(help="With --disrupt: the time to judge the snapshot at (RFC 3339 or epoch seconds)."),
    ] = None,
    min_savings: Annotated[
        float, typer.Option(help="With --disrupt: smallest consolidation saving worth a disruption (USD/hour).")
    ] = 0.0,
    policy: Annotated[
        str,
        typer.Option(
            help="With --disrupt: consolidation policy, karpenter (Karpenter's multi/single-node) or nodesmith "
            "(wasteful nodes out, their pods re-packed at the lowest cost)."
        ),
    ] = "karpenter",
    packing: Annotated[
        str,
        typer.Option(help="karpenter (Karpenter's own grouping) or nodesmith (cost-aware re-packing)."),
    ] = "karpenter",
    capacity_reservations: Annotated[
        Path | None,
        typer.Option(
            help="Saved 'aws ec2 describe-capacity-reservations' JSON: the reservations EC2NodeClasses may select."
        ),
    ] = None,
) -> None:
    """Print what Nodesmith would launch for the given manifests, launching nothing.

    With ``--disrupt``, print the disruption decisions (expiration, emptiness, drift, consolidation)
    Nodesmith would take on the cluster snapshot the manifests describe.
    """
    from nodesmith.cli.simulate_catalogue import CatalogueSource

    source = CatalogueSource(region=region, price_table=price_table, use_aws=use_aws)
    if disrupt:
        from nodesmith.cli.disrupt import run_simulate_disrupt

        raise typer.Exit(
            run_simulate_disrupt(
                files=files, source=source, output=output, now=now, min_savings_per_hour=min_savings, policy=policy
            )
        )
    from nodesmith.cli.simulate import run_simulate

    raise typer.Exit(
        run_simulate(
            files=files,
            source=source,
            output=output,
            packing=packing,
            capacity_reservations=capacity_reservations,
        )
    )


@app.command()
def explain(
    pod: Annotated[str, typer.Argument(help="The pod: NAME or NAMESPACE/NAME.")],
    files: Annotated[
        list[Path],
        typer.Option("-f", "--filename", help="Manifest file (multi-document YAML); repeatable."),
    ],
    region: Annotated[str, typer.Option(help="AWS region of the instance catalogue.")] = "us-east-1",
    price_table: Annotated[Path | None, typer.Option(help="JSON price table, as for simulate.")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="table or json.")] = "table",
    packing: Annotated[str, typer.Option(help="karpenter or nodesmith, as for simulate.")] = "karpenter",
    use_aws: Annotated[bool, typer.Option("--aws", help="Read the catalogue from real AWS.")] = False,
) -> None:
    """Explain, per NodePool, why a pod schedules where it does or which constraint rules it out."""
    from nodesmith.cli.explain import run_explain

    raise typer.Exit(
        run_explain(
            pod=pod,
            files=files,
            region=region,
            price_table=price_table,
            output=output,
            packing=packing,
            use_aws=use_aws,
        )
    )


@app.command()
def demo(
    report: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML report here.")] = None,
    quiet: Annotated[bool, typer.Option(help="Print only the final JSON summary.")] = False,
) -> None:
    """Run the end-to-end demo on the embedded AWS (moto) and Kubernetes emulator."""
    from nodesmith.cli.demo import run_demo

    raise typer.Exit(run_demo(report=report, quiet=quiet))


@app.command()
def convert(
    files: Annotated[
        list[Path],
        typer.Option("-f", "--filename", help="Legacy manifest file or directory (multi-document YAML); repeatable."),
    ],
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", help="Write one converted file per input file here instead of to stdout."),
    ] = None,
    default_instance_profile: Annotated[
        str | None,
        typer.Option(help="instanceProfile for AWSNodeTemplates that relied on v0.31's aws.defaultInstanceProfile."),
    ] = None,
) -> None:
    """Convert Karpenter v1alpha5/v1beta1 manifests to v1 (YAML on stdout, notes on stderr)."""
    from nodesmith.cli.convert import run_convert

    raise typer.Exit(run_convert(files=files, output_dir=output_dir, default_instance_profile=default_instance_profile))


playground_app = typer.Typer(
    help="Run the embedded AWS and Kubernetes for kubectl, with the Lambdas live (Ctrl-C stops it).",
    invoke_without_command=True,
)
app.add_typer(playground_app, name="playground")

_STATE_DIR_HELP = "Directory of the kubeconfig and playground.json (default ~/.nodesmith/playground)."


@playground_app.callback()
def playground(
    ctx: typer.Context,
    state_dir: Annotated[Path | None, typer.Option("--dir", help=_STATE_DIR_HELP)] = None,
    cluster_name: Annotated[
        str, typer.Option(help="Cluster name: the kubeconfig's and the karpenter.sh/discovery tag value.")
    ] = "playground",
    tick: Annotated[float, typer.Option(min=0.1, help="Seconds between reconcile passes.")] = 1.0,
) -> None:
    """Start the playground, print the `export KUBECONFIG=...` line and run until Ctrl-C."""
    if ctx.invoked_subcommand is not None:
        return
    from nodesmith.cli.playground import DEFAULT_STATE_DIR, run_playground

    raise typer.Exit(run_playground(state_dir=state_dir or DEFAULT_STATE_DIR, cluster_name=cluster_name, tick=tick))


@playground_app.command("interrupt")
def playground_interrupt(
    node: Annotated[str, typer.Argument(help="The Node whose instance gets the warning.")],
    state_dir: Annotated[Path | None, typer.Option("--dir", help=_STATE_DIR_HELP)] = None,
) -> None:
    """Put a real-format EC2 Spot Instance Interruption Warning for NODE's instance on EventBridge."""
    from nodesmith.cli.playground import DEFAULT_STATE_DIR, run_interrupt

    raise typer.Exit(run_interrupt(state_dir=state_dir or DEFAULT_STATE_DIR, node=node))


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"nodesmith {version('nodesmith')}")
        except PackageNotFoundError:
            typer.echo("nodesmith (not installed: no package metadata)")
        raise typer.Exit(0)


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Karpenter, serverless: simulate provisioning decisions and run the embedded demo or playground."""


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
