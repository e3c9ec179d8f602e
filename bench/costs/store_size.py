"""What the bench's store costs a user who clones it, and what guards it (issue 86's must-shows).

- its size in the tree (what ``du`` counts), per cell and per stage, against ``MAX_STORE_BYTES``;
- per commit that touched ``bench/store``, the bytes of the blobs it added or changed there (what
  ``git log --stat`` lists by file), and per day, so no submission is read as over 150 MB;
- a deliberate re-key, done in this process only (one stage's version bumped in ``pipeline.STAGES``):
  the kept stages it turns stale and the message ``tests/test_store.py`` fails with.

→ bench/results/store_size.{json,md}. Usage: ``python -m bench.costs.store_size [--bump STAGE]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from collections import Counter, defaultdict

from adwm_core import pipeline
from bench import store
from bench.common import REPO, RESULTS, machine

MiB = 2**20


def git(*arguments: str, given: str | None = None) -> str:
    return subprocess.run(["git", *arguments], cwd=REPO, check=True, capture_output=True, text=True,
                          input=given).stdout


def tree_bytes() -> tuple[int, Counter, Counter]:
    """The store's files in the working tree: their total bytes, and the bytes per cell and per stage."""
    per_cell, per_stage = Counter(), Counter()
    for path in store.STORE.rglob("*"):
        if path.is_file():
            parts = path.relative_to(store.STORE).parts
            per_cell[parts[0] if len(parts) > 1 else "(index files)"] += path.stat().st_size
            per_stage[parts[1] if len(parts) > 2 else "(index files)"] += path.stat().st_size
    return sum(per_cell.values()), per_cell, per_stage


def commits_added_bytes() -> list[dict]:
    """Per commit touching ``bench/store`` (oldest first): its date, subject and the bytes of the blobs it
    added or changed under it."""
    log = git("log", "--reverse", "--date=short", "--format=%H%x09%ad%x09%s", "--", "bench/store")
    commits = [dict(zip(("commit", "date", "subject"), line.split("\t", 2))) for line in log.splitlines()]
    for commit in commits:
        changed = git("diff-tree", "-r", "--no-commit-id", "--root", "--diff-filter=AM", commit["commit"],
                      "--", "bench/store")
        blobs = [line.split()[3] for line in changed.splitlines()]
        sizes = git("cat-file", "--batch-check=%(objectsize)", given="\n".join(blobs) + "\n") if blobs else ""
        commit.update(files=len(blobs), added_bytes=sum(int(size) for size in sizes.split()))
    return commits


def deliberate_re_key(stage: str) -> dict:
    """``stage``'s version bumped here only: what turns stale and the message the store's test prints."""
    bumped = dataclasses.replace(pipeline.STAGES[stage], version=(pipeline.STAGES[stage].version or 0) + 1)
    original, pipeline.STAGES[stage] = pipeline.STAGES[stage], bumped
    try:
        found = store.stale()
        message = store.rebuild_message(found)
    finally:
        pipeline.STAGES[stage] = original
    return {"stage": stage, "version": bumped.version, "stale": [str(p.relative_to(store.STORE)) for p in found],
            "message": message}


def render(report: dict) -> str:
    days = report["per_day"]
    lines = [
        "# The bench's store: its size, its commits, and a deliberate re-key",
        "",
        (f"Written by `python -m bench.costs.store_size` at `{report['head']}` "
        f"({report['machine']['cpus']} CPUs, {report['machine']['date']})."),
        "",
        (f"**In the tree:** {report['tree_bytes'] / MiB:.1f} MiB (`du -sh bench/store` counts the same way), "
        f"cap {store.MAX_STORE_BYTES / MiB:.0f} MiB (`MAX_STORE_BYTES`, tested)."),
        "",
        "| stage | MiB |", "|---|---|",
        *[f"| {stage} | {size / MiB:.1f} |"
          for stage, size in sorted(report["per_stage"].items(), key=lambda item: -item[1])],
        "",
        "| cell | MiB |", "|---|---|",
        *[f"| {cell} | {size / MiB:.1f} |" for cell, size in sorted(report["per_cell"].items())],
        "",
        (f"**Commits that touched bench/store** ({len(report['commits'])}): the bytes of the blobs each "
        f"added or changed there. Largest commit {max(c['added_bytes'] for c in report['commits']) / MiB:.1f} "
        f"MiB; largest day {max(days.values()) / MiB:.1f} MiB (a day holds one or more submissions); "
        f"all ever added {sum(days.values()) / MiB:.1f} MiB."),
        "",
        "| day | MiB added |", "|---|---|",
        *[f"| {day} | {size / MiB:.1f} |" for day, size in sorted(days.items())],
        "",
        "| commit | date | files | MiB added | subject |", "|---|---|---|---|---|",
        *[f"| `{c['commit'][:7]}` | {c['date']} | {c['files']} | {c['added_bytes'] / MiB:.2f} | {c['subject'][:90]} |"
          for c in report["commits"]],
        "",
        (f"**A deliberate re-key** (in this process only: `{report['re_key']['stage']}` at version "
        f"{report['re_key']['version']}): {len(report['re_key']['stale'])} kept stages turn stale, and "
        "`tests/test_store.py::test_every_kept_stage_is_named_by_todays_keys` fails with:"),
        "",
        "```", report["re_key"]["message"], "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bump", default="ground-truth", choices=[name for name, stage in pipeline.STAGES.items()
                                                                    if stage.version is not None])
    total, per_cell, per_stage = tree_bytes()
    commits = commits_added_bytes()
    per_day: dict[str, int] = defaultdict(int)
    for commit in commits:
        per_day[commit["date"]] += commit["added_bytes"]
    report = {"head": git("rev-parse", "--short", "HEAD").strip(), "machine": machine(), "tree_bytes": total,
              "per_cell": dict(per_cell), "per_stage": dict(per_stage), "per_day": dict(per_day),
              "commits": commits, "re_key": deliberate_re_key(parser.parse_args().bump)}
    (RESULTS / "store_size.json").write_text(json.dumps(report, indent=1) + "\n")
    (RESULTS / "store_size.md").write_text(render(report))
    print(render(report))


if __name__ == "__main__":
    main()
