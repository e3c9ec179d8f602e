"""ope-cell: every stage of one cell, independent branches concurrently (docs/operations.md, 'Orchestration').

    policies ─┬─> behaviour ─┬─> log-probs ───────────────┬─> baselines ─┐
              │              └─> world model ─┬───────────┘              ├─> report
              │                               └─> ψ ─> ADWM ─────────────┤
              └─> ground truth ──────────────────────────────────────────┘

Stages right of behaviour and world model (and ground truth) run once per π_e of the cell.
Each stage is declared in adwm_core/pipeline.py (settings, inputs, outputs, key); which of them
run, and after what, is ``pipeline.plan(cell)`` (ψ where π_e reads soft tokens, the log-prob or
greedy-action stage where it is read, ground truth where the cell is graded, ``policies`` where
the cell trains a tiny family), and a stage whose artifact is complete is reused. Behaviour data is collected live, or imported from the user's logs
(``behaviour.logs``; flows/evaluate_logs.py builds such a cell from the command line).
"""

from __future__ import annotations

import mlflow
import yaml
from prefect import flow
from prefect.futures import PrefectFuture, wait
from prefect.runtime import flow_run

from adwm_core.cell import CellConfig
from adwm_core.policies.local_models import smollm2_dir
from adwm_core.smoke import smoke_cell
from flows.cells import cell_config_path
from flows.runners import cell_task_runner
from tasks.common import cell_run
from tasks.policies import prepare_policies
from tasks.report import closing_screen, publish
from tasks.stages import submit_plan


@flow(name="ope-cell", log_prints=True, task_runner=cell_task_runner())
def ope_cell(cell: str = "local-simonsays", smoke: bool = False, stand_in: str | None = None) -> str:
    """Run cell ``cell`` (a name under deployments/ or a YAML path); returns the report's folder.
    ``smoke``: the cell as ``<cell>-smoke``, with stand-in models (``stand_in``, default
    SmolLM2-135M-Instruct), on CPU, scaled to minutes (adwm_core/smoke.py)."""
    config, overlay = load_cell(cell, smoke, stand_in)
    if overlay:
        print(f"smoke overlay of {cell}:\n{yaml.safe_dump(overlay, sort_keys=False)}")
    return run_cell(config, smoke_overlay=overlay)


def load_cell(cell: str, smoke: bool = False, stand_in: str | None = None) -> tuple[CellConfig, dict | None]:
    """The cell's config as written, or with the smoke overlay (and the overlay) when ``smoke``."""
    if not smoke:
        if stand_in is not None:
            raise ValueError(f"stand_in={stand_in!r} only applies in smoke mode (smoke=True)")
        return CellConfig.load(cell_config_path(cell)), None
    return smoke_cell(cell_config_path(cell), stand_in or smollm2_dir())


def run_cell(config: CellConfig, smoke_overlay: dict | None = None) -> str:
    """Every stage of ``config``, inside the calling flow run; returns the report's folder."""
    with cell_run(config.name, flow_run.get_name() or config.name) as parent:
        mlflow.log_params({"cell": config.name, "flow_run_id": flow_run.get_id() or "local"})
        mlflow.log_dict(config.model_dump(mode="json"), "cell_config.json")
        if smoke_overlay:
            mlflow.set_tag("smoke", "true")
            mlflow.log_dict(smoke_overlay, "smoke_overlay.json")
        config = prepare_policies(config)
        futures = submit_plan(config, parent)
        wait(list(futures.values()))  # the branches a failure does not hold back run to their end and are kept
        check_stages(futures)
        result = futures[next(reversed(futures))].result()
        publish(config.name, result)
    print(f"report: {result.file('report')}")
    return result.path


class StageFailed(RuntimeError):
    """A cell's stage failed without an error of its own (crashed): named, with the stages it held back."""


def check_stages(futures: dict[tuple[str, str | None], PrefectFuture]) -> None:
    """Where a stage of the plan failed, raise the first failed stage's own error (a caller still
    catches the ``ValueError`` of a bad setting), with a note that names the failed stages and their
    errors first, then those they held back and those finished and kept for a rerun."""
    def named(index: tuple[str, str | None]) -> str:
        return index[0] + (f" [{index[1]}]" if index[1] else "")

    states = {index: future.state for index, future in futures.items()}
    failed = [index for index, state in states.items() if state.is_failed() or state.is_crashed()]
    if not failed:
        return
    errors = {index: states[index].result(raise_on_failure=False) for index in failed}
    held = [named(index) for index, state in states.items() if not state.is_final()]
    kept = [named(index) for index, state in states.items() if state.is_completed()]
    summary = ("; ".join(f"stage {named(index)} failed: {type(error).__name__}: "
                         f"{str(error).splitlines()[0] if str(error) else ''}" for index, error in errors.items())
               + (f" — it held back {', '.join(held)}" if held else "")
               + (f"; finished and kept for a rerun: {', '.join(kept)}" if kept else ""))
    first = next((error for error in errors.values() if isinstance(error, Exception)), None)
    if first is None:
        raise StageFailed(summary)
    first.add_note(summary)
    raise first


def failure_line(error: BaseException) -> str:
    """What a failed run says last: the stages summary :func:`check_stages` noted, else the error."""
    notes = getattr(error, "__notes__", None)
    return notes[-1] if notes else f"{type(error).__name__}: {error}"


if __name__ == "__main__":
    import argparse
    import atexit
    import sys

    parser = argparse.ArgumentParser(description="Run one cell's flow here (docs/operations.md, 'Orchestration').")
    parser.add_argument("cell", nargs="?", default="local-simonsays", help="a name under deployments/ or a YAML path")
    parser.add_argument("--smoke", action="store_true", help="stand-in models, CPU, minutes (cell <cell>-smoke)")
    parser.add_argument("--stand-in", help="model folder every policy maps to in smoke mode (default SmolLM2-135M)")
    args = parser.parse_args()
    if args.stand_in and not args.smoke:
        parser.error("--stand-in only applies with --smoke")
    failure: list[str] = []  # said at exit, registered first so it runs last: after the embedded server's own lines
    atexit.register(lambda: failure and print(failure[0], file=sys.stderr, flush=True))
    state = ope_cell(args.cell, smoke=args.smoke, stand_in=args.stand_in, return_state=True)
    if not state.is_completed():  # the last line names the failed stage and its error, after every traceback
        failure.append(f"ope-cell {args.cell}: {failure_line(state.result(raise_on_failure=False))}")
        sys.exit(1)
    print(closing_screen(state.result(), str(state.state_details.flow_run_id)))
