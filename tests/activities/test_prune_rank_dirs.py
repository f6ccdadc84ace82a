"""A node agent's start-up pruning of rank dirs and /tmp aliases: what a workflow may still adopt stays,
what no live process holds goes, and nobody else's symlinks are touched."""

from __future__ import annotations

from pathlib import Path

from activities.ranks import prune_rank_dirs


def _rank(ranks: Path, name: str, aliases: Path) -> tuple[Path, Path]:
    (ranks / name / "tmp").mkdir(parents=True)
    alias = aliases / f"berth-{abs(hash(name)) % 16**12:012x}"
    alias.symlink_to(ranks / name / "tmp", target_is_directory=True)
    return ranks / name, alias


def test_prunes_dead_ranks_and_their_aliases_but_keeps_live_ones(tmp_path: Path) -> None:
    ranks, aliases = tmp_path / "nodes" / "node-1" / "ranks", tmp_path / "tmp"
    aliases.mkdir()
    live_dir, live_alias = _rank(ranks, "wf-1-copy-0-r0", aliases)
    dead_dir, dead_alias = _rank(ranks, "wf-0-copy-0-r0", aliases)
    dangling = aliases / "berth-0123456789ab"
    dangling.symlink_to(tmp_path / "gone" / "tmp")
    elsewhere_dir = tmp_path / "other-state" / "nodes" / "node-1" / "ranks" / "wf-9-copy-0-r0" / "tmp"
    elsewhere_dir.mkdir(parents=True)
    elsewhere = aliases / "berth-ba9876543210"  # another stack's live rank: not ours to judge
    elsewhere.symlink_to(elsewhere_dir)
    unrelated = aliases / "berth-notes"  # not an alias name of ours
    unrelated.symlink_to(tmp_path / "nowhere")

    removed = prune_rank_dirs(ranks, {live_dir}, alias_dir=aliases)

    assert live_dir.is_dir() and live_alias.is_symlink()
    assert not dead_dir.exists() and not dead_alias.is_symlink() and not dangling.is_symlink()
    assert elsewhere.is_symlink() and unrelated.is_symlink()
    assert sorted(removed) == sorted([dead_dir.name, dead_alias.name, dangling.name])


def test_no_ranks_dir_yet_is_fine(tmp_path: Path) -> None:
    assert prune_rank_dirs(tmp_path / "absent", set(), alias_dir=tmp_path) == []
