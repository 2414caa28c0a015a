"""Options shared by every command that opens a location."""

from __future__ import annotations

import argparse

from tidemark.storage import S3Options


def storage_options() -> argparse.ArgumentParser:
    """A parent parser: ``--s3-endpoint`` and ``--s3-region``, accepted after the subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("storage")
    group.add_argument(
        "--s3-endpoint",
        metavar="URL",
        default=None,
        help="S3-compatible endpoint for s3:// locations (default: $TIDEMARK_S3_ENDPOINT, else AWS)",
    )
    group.add_argument("--s3-region", metavar="REGION", default=None, help="S3 region (default: boto3's)")
    return parent


def s3_options(args: argparse.Namespace) -> S3Options:
    return S3Options(endpoint_url=args.s3_endpoint, region=args.s3_region)
