"""``tern cache prune``: the per-user cache of the single-file build."""

from __future__ import annotations

import argparse

from runtime.cli.common import Commands, needs_subcommand


def add_commands(commands: Commands) -> None:
    cache = commands.add("cache", needs_subcommand, "manage the per-user cache of the single-file build")
    commands.group(cache, "cache_command").add("prune", cmd_cache_prune,
                                               "remove native bundles and compiled code this tern no longer uses")


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from runtime import _bundle

    if _bundle.running_manifest() is None:
        print("not running from tern.pyz: every extracted bundle counts as stale "
              "(the next pyz run re-extracts its own)")
    removed = _bundle.prune_cache()
    for path in removed:
        print(f"removed {path}")
    print(f"{len(removed)} stale entr{'y' if len(removed) == 1 else 'ies'} removed from {_bundle.cache_root()}")
    return 0
