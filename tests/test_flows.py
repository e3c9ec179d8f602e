"""The ope-cell flow end to end on a tiny local cell, under Prefect's test harness, with a real
MLflow SQLite store. The first run is killed (SIGKILL) inside world-model training and rerun:
finished stages are reused, the killed one is trained again, nothing half-written is left.
Then: every stage's artifact, the report, the MLflow runs, the Prefect artifacts,
evaluate-policy, and a rerun after a stage lost its completion marker."""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import mlflow
import numpy as np
import pytest
import yaml
from conftest import tiny_cell

from adwm_core import pipeline
from adwm_core.data import ESTIMATES, TRAJECTORIES, read_table
from adwm_core.ope.answers import RANKED_BY, SOURCES
from adwm_core.ope.statistics.recommend import BenchCalibration, withheld

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = ("behaviour", "ground-truth", "logprobs", "world-model", "psi", "adwm", "baselines", "report")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    from prefect.testing.utilities import prefect_test_harness

    root = tmp_path_factory.mktemp("flow")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root}/mlflow.db"
    with prefect_test_harness(server_startup_timeout=120):
        yield root
    del os.environ["MLFLOW_TRACKING_URI"]


@pytest.fixture(scope="module")
def killed_run(harness, tiny_policies):
    """The flow in its own process (embedded Prefect), killed once world-model training began and ground truth finished:
    (cell path, mtimes of the behaviour and ground-truth artifacts it had finished)."""
    cell = tiny_cell(harness / "tiny-flow.yaml", tiny_policies)
    shutil.rmtree(os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-flow"), ignore_errors=True)  # run first
    log = harness / "killed-run.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "-m", "flows.ope_cell", cell], cwd=REPO, start_new_session=True,
                                   stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 600
        # ground truth runs beside behaviour → world model in the DAG: wait for it to finish too
        while not (stage_folders("world-model") and _finished("ground-truth")) and process.poll() is None \
                and time.time() < deadline:
            time.sleep(0.2)
        assert process.poll() is None, f"the flow ended before world-model training started:\n{log.read_text()[-3000:]}"
        time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    (model,) = stage_folders("world-model")
    assert not os.path.exists(os.path.join(model, "_COMPLETE"))  # killed midway: not finished
    finished = {stage: os.path.getmtime(os.path.join(stage_folders(stage)[0], "_COMPLETE"))
                for stage in ("behaviour", "ground-truth")}
    return cell, finished


@pytest.fixture(scope="module")
def first_run(killed_run):
    from flows.ope_cell import ope_cell

    cell, _ = killed_run
    state = ope_cell(cell, return_state=True)
    return cell, state.result(), str(state.state_details.flow_run_id)


def test_a_killed_run_resumes_from_its_finished_stages_with_nothing_half_written(killed_run, first_run):
    _, finished = killed_run
    for stage, mtime in finished.items():
        (folder,) = stage_folders(stage)
        assert os.path.getmtime(os.path.join(folder, "_COMPLETE")) == mtime, f"{stage} was recomputed"
    (model,) = stage_folders("world-model")
    assert os.path.exists(os.path.join(model, "_COMPLETE"))
    leftovers = [name for _, _, names in os.walk(os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-flow"))
                 for name in names if ".tmp" in name]
    assert leftovers == []


def _finished(stage: str) -> bool:
    return any(os.path.exists(os.path.join(folder, "_COMPLETE")) for folder in stage_folders(stage))


def stage_folders(stage: str) -> list[str]:
    return sorted(glob.glob(os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-flow", stage, "*")))


def test_every_stage_leaves_a_finished_artifact_and_the_report_grades_every_estimator(first_run):
    _, report, _ = first_run
    for stage in STAGES:
        (folder,) = stage_folders(stage)
        assert os.path.exists(os.path.join(folder, "_COMPLETE")), stage
    (behaviour,) = stage_folders("behaviour")
    assert read_table(os.path.join(behaviour, "trajectories.parquet"), TRAJECTORIES).num_rows > 16
    (adwm,) = stage_folders("adwm")
    estimators = {r["estimator"] for r in read_table(os.path.join(adwm, "estimates.parquet"), ESTIMATES).to_pylist()}
    assert {"ADWM:reward_sum", "kNN-WM:reward_sum"} <= estimators  # success_similarity too when the tiny pool had a success
    text = open(os.path.join(report, "report.md")).read()
    for estimator in (*estimators, "IS", "WIS", "PDIS", "DR", "WDR", "FQE", "DM"):
        assert f"| {estimator} |" in text, estimator
    assert os.path.getsize(os.path.join(report, "estimates_vs_truth.png")) > 10_000


def test_mlflow_has_a_parent_run_with_a_nested_run_per_stage(first_run):
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    experiment = mlflow.get_experiment_by_name("cell/tiny-flow")
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags and r.info.status == "FINISHED"]
    assert len(parents) == 1  # the killed run never finished
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
    per_policy = {"ground-truth", "logprobs", "psi", "adwm", "baselines"}  # one run per π_e, named after it
    assert set(children) == {f"{s} [late]" if s in per_policy else s for s in STAGES}
    assert "train_dsm" in children["world-model"].data.metrics
    client = mlflow.MlflowClient()
    assert [a.path for a in client.list_artifacts(children["world-model"].info.run_id)] == ["world_model"]
    checkpoint = {a.path for a in client.list_artifacts(children["world-model"].info.run_id, "world_model")}
    assert any(path.endswith(".safetensors") for path in checkpoint), checkpoint
    assert "ADWM_reward_sum.rho" in children["report"].data.metrics
    (behaviour,), (model,) = stage_folders("behaviour"), stage_folders("world-model")
    for stage, context in (("behaviour", "behaviour"), ("world-model", "training")):  # the log as a dataset input
        (used,) = children[stage].inputs.dataset_inputs
        assert {t.key: t.value for t in used.tags}["mlflow.data.context"] == context
        assert json.loads(used.dataset.source)["uri"] == os.path.join(behaviour, "trajectories.parquet")
    registered = client.get_model_version_by_alias("adwm-world-model", "tiny-flow")  # models:/…@<cell>
    assert os.path.normpath(registered.tags["adwm.path"]) == os.path.normpath(model)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                             capture_output=True, text=True).stdout.strip()
    source = parents[0].data.tags.get("adwm.source")  # the code the run ran, ahead of its commit or not
    assert source == (None if head.returncode else head.stdout.strip() + ("+changes" if changed else ""))
    adwm = children["adwm [late]"].data.metrics  # the performance report reads these
    assert adwm["imagined_steps"] > 0 and adwm["transition_seconds"] > 0 and adwm["policy_seconds"] > 0
    truth = [r for r in runs if r.info.run_name == "ground-truth [late]" and r.data.params["reused"] == "False"]
    assert truth and {"seconds_eps_0", "seconds_eps_0.5", "seconds_eps_1"} <= set(truth[0].data.metrics)
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(children["report"].info.run_id)}
    assert {"report.md", "estimates_vs_truth.png"} <= artifacts


def test_the_closing_screen_says_what_happened_and_where_to_look(first_run):
    """What `python -m flows.ope_cell` (the demo) prints last: ρ per estimator, never a NaN,
    the report, plot and MLflow run, and how to open the UIs."""
    from tasks.report import closing_screen

    _, report, flow_run_id = first_run
    screen = closing_screen(report, flow_run_id)
    lines = screen.splitlines()
    for estimator in ("ADWM:reward_sum", "kNN-WM:reward_sum", "IS", "WIS", "DR", "FQE", "DM"):
        (line,) = [line for line in lines if line.split(" ")[0] == estimator]
        assert " ρ " in line and ("[" in line or "(" in line), line  # an interval, or the reason ρ is undefined
    assert "nan" not in screen.lower()
    assert f"{report}/report.md" in screen and f"{report}/estimates_vs_truth.png" in screen and "make up" in screen
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    (parent,) = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                   filter_string=f"params.flow_run_id = '{flow_run_id}'")
    assert parent.info.run_id in screen and "| estimator |" not in screen  # the full report stays in its file


def test_prefect_holds_the_results_table_and_the_report(first_run):
    from prefect.artifacts import Artifact

    table = Artifact.get("tiny-flow-main-results")
    assert table is not None and "ADWM:reward_sum" in str(table.data)
    assert Artifact.get("tiny-flow-report") is not None
    assert progress_artifacts().get("tiny-flow: world-model rounds") == 100.0
    imagination = {d: v for d, v in progress_artifacts().items() if d.startswith("tiny-flow: imagined rollouts")}
    assert imagination and all(v == 100.0 and re.fullmatch(r"tiny-flow: imagined rollouts \[late\], seeds, "
                                                            r"imagined steps \d+\.\d/s", d)
                               for d, v in imagination.items()), imagination


def progress_artifacts() -> dict[str, float]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return {a.description: a.data for a in client.read_artifacts() if a.type == "progress"}


def test_a_rerun_with_a_second_policy_reuses_every_stage_of_the_first_and_redoes_an_unfinished_one(first_run, harness,
                                                                                                    tiny_policies):
    """The cell gains a π_e (as HotpotQA-cross ranks two): behaviour, world model and every stage of
    the first π_e are reused — but the first π_e's ADWM stage, whose completion marker is gone
    (as if killed), is computed again; the report ranks both π_e over their six points."""
    from flows.ope_cell import ope_cell

    cell, report, _ = first_run
    finished = {stage: [os.path.getmtime(os.path.join(f, "_COMPLETE")) for f in stage_folders(stage)]
                for stage in STAGES if stage not in ("adwm", "report")}
    (adwm,) = stage_folders("adwm")
    os.remove(os.path.join(adwm, "_COMPLETE"))
    two = yaml.safe_load(open(cell))
    two["evaluation"]["policies"].append({"label": "early", "model": tiny_policies["early"]})
    (harness / "tiny-flow-two.yaml").write_text(yaml.safe_dump(two))
    both = ope_cell(str(harness / "tiny-flow-two.yaml"))
    assert both != report
    for stage, mtimes in finished.items():
        now = {os.path.getmtime(os.path.join(f, "_COMPLETE")) for f in stage_folders(stage)}
        assert set(mtimes) <= now, f"{stage} was recomputed"
        assert len(stage_folders(stage)) == len(mtimes) + (stage in ("ground-truth", "logprobs", "psi", "baselines"))
    assert os.path.exists(os.path.join(adwm, "_COMPLETE")) and len(stage_folders("adwm")) == 2
    curves = json.load(open(os.path.join(both, "curves.json")))
    assert sorted(set(curves["policy"])) == ["early@p0", "late@p0"] and len(curves["epsilon"]) == 6
    assert "| ADWM:reward_sum |" in open(os.path.join(both, "report.md")).read()
    assert progress_artifacts().get("tiny-flow: ground-truth episodes of early") == 100.0


def test_evaluate_policy_scores_a_new_agent_against_the_trained_world_model(first_run, tiny_policies, harness):
    from flows.evaluate_policy import evaluate_policy

    cell, _, _ = first_run
    (model,) = stage_folders("world-model")
    trained = os.path.getmtime(os.path.join(model, "_COMPLETE"))
    scored = stage_folders("logprobs")
    path = evaluate_policy(cell, tiny_policies["early"], label="newcomer")
    assert stage_folders("logprobs") == scored and len(stage_folders("greedy")) == 1  # greedy actions, no log-probs
    rows = read_table(path, ESTIMATES).to_pylist()
    assert {r["policy"] for r in rows} == {"newcomer@p0"} and {r["epsilon"] for r in rows} == {0.0, 0.5, 1.0}
    assert {r["estimator"] for r in rows if r["estimator"].startswith("ADWM")} == {"ADWM:reward_sum"}  # Q̂ hand-over
    assert not any(r["estimator"].startswith("kNN-WM") for r in rows)  # the reference only when asked for

    def adwm_values(table: list[dict], policy: str) -> dict:
        return {(r["epsilon"], r["seed"]): r["value"] for r in table
                if r["estimator"] == "ADWM:reward_sum" and r["policy"] == policy}

    flow = [r for folder in stage_folders("adwm") if os.path.exists(os.path.join(folder, "estimates.parquet"))
            for r in read_table(os.path.join(folder, "estimates.parquet"), ESTIMATES).to_pylist()]
    # the cell's own π_e scored by evaluate-policy: its hand-over reads the greedy-action stage, the flow's the
    # log-prob stage; the same actions, so the same Ĵ
    again = read_table(evaluate_policy(cell, tiny_policies["late"], label="late-again"), ESTIMATES).to_pylist()
    assert adwm_values(flow, "late@p0") and adwm_values(again, "late-again@p0") == adwm_values(flow, "late@p0")
    assert stage_folders("world-model") == [model] and os.path.getmtime(os.path.join(model, "_COMPLETE")) == trained
    handing = yaml.safe_load(open(cell))  # the same cell, every off-log pair handed to FQE (no carry-over)
    handing["adwm"]["off_log"] = "fqe"
    (harness / "tiny-flow-fqe.yaml").write_text(yaml.safe_dump(handing))
    handed = read_table(evaluate_policy(str(harness / "tiny-flow-fqe.yaml"), tiny_policies["early"], label="newcomer",
                                        reference=True), ESTIMATES).to_pylist()
    assert {r["estimator"] for r in handed if r["estimator"].startswith("ADWM")} == {"ADWM:reward_sum"}
    assert "kNN-WM:reward_sum" in {r["estimator"] for r in handed}
    assert stage_folders("world-model") == [model]
    fresh = yaml.safe_load(open(cell))
    fresh["name"] = "never-run"
    other = harness / "never-run.yaml"
    other.write_text(yaml.safe_dump(fresh))
    with pytest.raises(FileNotFoundError, match="ope-cell/never-run"):
        evaluate_policy(str(other), tiny_policies["early"])


def test_a_pool_without_a_success_is_refused_before_world_model_training(harness, tiny_policies):
    """Success-bank guidance needs a successful behaviour episode: with none (one-step episodes
    cannot win), the flow fails before any world-model work, keeping the behaviour it collected."""
    from flows.ope_cell import ope_cell

    config = yaml.safe_load(open(tiny_cell(harness / "unread.yaml", tiny_policies)))
    config["name"] = "tiny-unread"
    config["env"]["max_steps"] = 1
    config["adwm"]["guidance"] = "success_bank"
    del config["ground_truth"]
    (harness / "unread.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=r"none of the 24 behaviour episodes succeeded.*adwm.guidance"):
        ope_cell(str(harness / "unread.yaml"))
    cell = os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-unread")
    (behaviour,) = glob.glob(os.path.join(cell, "behaviour", "*"))
    assert os.path.exists(os.path.join(behaviour, "_COMPLETE"))
    assert not any(read_table(os.path.join(behaviour, "trajectories.parquet"), TRAJECTORIES)["success"].to_pylist())
    assert not os.path.exists(os.path.join(cell, "world-model"))


def evaluate_argv(first_run, logs, *options: str) -> list[str]:
    """``adwm evaluate`` on the tiny cell's behaviour exported to JSONL at ``logs``, at toy sizes,
    its agents loaded in-process, ``options`` added (the agents among them)."""
    from adwm_core.data.logs import export_jsonl

    (behaviour,) = stage_folders("behaviour")
    export_jsonl(read_table(os.path.join(behaviour, "trajectories.parquet"), TRAJECTORIES), str(logs))
    config = yaml.safe_load(open(first_run[0]))
    settings = ["world_model.steps=20", "adwm.n_rollouts=4", "adwm.horizon=4", "adwm.seeds=[0]", "adwm.n_bootstrap=50",
                "adwm.guidance=none", "baselines.n_bootstrap=50", "baselines.fqe.epochs=2"]
    return ["evaluate", "--logs", str(logs), "--env", config["env"]["name"], "--task", config["env"]["task"],
            "--agent-backend", "transformers", "--epsilons", "0,1", *options,
            *(arg for setting in settings for arg in ("--set", setting))]


def test_adwm_evaluate_scores_an_agent_from_exported_logs_and_reuses_its_world_model(first_run, tiny_policies,
                                                                                     harness, capsys):
    """The command line on the tiny cell's behaviour exported to JSONL (no log-probs in it, no
    pool), its stages in this process where no Prefect server is configured: Ĵ with intervals per
    estimator and ε, the importance-sampling family not applicable; run again as the tracked flow
    (--tracked), every stage is reused; malformed logs stop it before any stage, with file and line."""
    from flows.cli import main

    argv = evaluate_argv(first_run, harness / "tiny-logs.jsonl", "--agent-model", tiny_policies["late"])
    logs = argv[argv.index("--logs") + 1]
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "stages run in this process" in out  # no $PREFECT_API_URL: no flow, no Prefect server to start
    assert "world-model: computing " in out and "imagined rollouts" in captured.err  # each stage said, bars shown
    assert "Ĵ [95 % bootstrap interval]" in out
    for estimator in ("ADWM:reward_sum", "DM", "FQE"):
        assert sum(line.startswith(estimator + " ") and "Ĵ = " in line for line in out.splitlines()) == 2, out
    assert "not applicable: IS, PDIS, WIS, WPDIS, DR, WDR — the behaviour log-probs are unknown" in out
    cell = os.path.join(os.environ["ADWM_HOME"], "cells", "logs-tiny-logs")
    (model,) = glob.glob(os.path.join(cell, "world-model", "*", "_COMPLETE"))
    trained = os.path.getmtime(model)
    assert main([*argv, "--tracked"]) == 0  # the tracked flow reuses what the in-process run computed
    tracked = capsys.readouterr().out
    assert tracked.count("Ĵ = ") == out.count("Ĵ = ") and "stages run in this process" not in tracked
    assert glob.glob(os.path.join(cell, "world-model", "*", "_COMPLETE")) == [model] and os.path.getmtime(model) == trained

    broken = harness / "broken.jsonl"
    broken.write_text(open(logs).readline() + '{"item_id": 1, "conversations": [{"from": "human", "value": "o"}, '
                      '{"from": "critic", "value": "a"}], "reward": 0, "success": false}\n')
    argv[argv.index(logs)] = str(broken)
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"{broken}:2: conversations[1].from: unknown role 'critic'" in error
    assert not os.path.exists(os.path.join(os.environ["ADWM_HOME"], "cells", "logs-broken"))  # refused before any stage


def test_adwm_evaluate_ranks_several_agents_on_one_world_model_and_records_the_run(first_run, tiny_policies, harness,
                                                                                  capsys, monkeypatch):
    """Two agents in one run (--agent-model twice) on the logs' first 6 episodes: one import and
    one world model, both agents ranked with a verdict on the pair and what the log cannot tell
    about each, then topped up by 2 live episodes per point (--live 2); --seed shifts the recipe's seeds except
    where --set names them; --output-path writes the estimates, the config, versions and the
    commit; an endpoint in $ADWM_AGENT_BASE_URL beside a local backend is refused."""
    from flows.cli import main

    output = harness / "ranked.json"
    monkeypatch.delenv("ADWM_AGENT_BASE_URL", raising=False)
    argv = evaluate_argv(first_run, harness / "ranked.jsonl", "--agent-model", tiny_policies["late"], "--agent-model",
                         tiny_policies["early"], "--limit", "6", "--seed", "3", "--output-path", str(output),
                         "--live", "2")
    assert main(argv) == 0
    out = capsys.readouterr().out
    topped = out[out.index("ADWM + 2 live episodes per point (PPI++"):].splitlines()
    assert sum(line.split()[0] in ("early@p0", "late@p0") for line in topped[2:6]) == 4, out  # 2 agents × 2 ε
    assert "verdicts with the live episodes, at ε=0:" in out
    ranking = out[out.index("agents by ADWM:reward_sum at ε=0"):].split("\n\n")[0].splitlines()
    assert sorted(line.split()[1] for line in ranking[1:3]) == ["early@p0", "late@p0"], out
    why = withheld(RANKED_BY, BenchCalibration.shipped().interval_coverage())
    if why:  # ADWM's own intervals held J too rarely on the bench: no interval, no verdict of its own
        assert why in ranking[0] and not any(" vs " in line or "best: " in line for line in ranking), out
    else:
        (verdict,) = [line for line in ranking if " vs " in line]
        assert ("better" in verdict or "cannot tell from these logs" in verdict) and "the log alone:" in verdict, out
        assert ranking[-1].startswith("best: ")
    cannot = out[out.index("what the log cannot tell"):]
    assert all(f"{agent} at ε=0: " in cannot for agent in ("early@p0", "late@p0")), out
    headline, live = out.index("Recommended: "), out.index("+ 2 live episodes per point (mean ρ")
    alone, table = out.index("Live only, beside it: the same 2 live episodes"), out.index("Ĵ [95 %")
    recommended, sharpened, live_only = (out[headline:live].splitlines(), out[live:alone].splitlines(),
                                         out[alone:table].splitlines())
    assert headline < live < alone < table and "bench cells" in recommended[0], out
    for lines in (recommended, sharpened, live_only):  # the headline, with the live episodes, and them alone
        assert sum(bool(re.match(r"(early|late)@p0 ε=\d+: ", line.strip())) for line in lines) == 4, out  # the points
        listed = [line for line in lines if re.match(r"  (early|late)@p0 ε=\d+ vs (early|late)@p0 ε=\d+: ", line)]
        counted = [int(m.group(1)) for m in (re.match(r"  cannot tell the other (\d+) pair", line) for line in lines) if m]
        assert len(listed) + sum(counted) == 6, out  # every pair of points: listed (--pairs agents) or counted

    cell = os.path.join(os.environ["ADWM_HOME"], "cells", "logs-ranked-first6")
    assert len(glob.glob(os.path.join(cell, "world-model", "*", "_COMPLETE"))) == 1
    (imported,) = glob.glob(os.path.join(cell, "behaviour", "*", "trajectories.parquet"))
    assert len(set(read_table(imported, TRAJECTORIES)["episode"].to_pylist())) == 6

    record = json.loads(output.read_text())
    assert {(r["policy"], r["estimator"], r["epsilon"]) for r in record["results"]} >= {
        (agent, "ADWM:reward_sum", eps) for agent in ("early@p0", "late@p0") for eps in (0.0, 1.0)}
    assert record["config"]["world_model"]["seed"] == 3 and record["config"]["baselines"]["seeds"] == [3]
    assert record["config"]["adwm"]["seeds"] == [0]  # --set names it: the user's value wins
    assert {"torch", "prefect", "mlflow"} <= set(record["versions"]) and "commit" in record

    monkeypatch.setenv("ADWM_AGENT_BASE_URL", "http://127.0.0.1:9/v1/completions")
    assert main(argv) == 2  # an endpoint from the environment and a local backend: refused before any stage
    assert "not both" in capsys.readouterr().err


def test_the_python_api_reproduces_adwm_evaluate_and_selects_the_best_agent(first_run, tiny_policies, harness,
                                                                            capsys):
    """The Python API, without Prefect: the logs as a file and as a DataFrame of steps give the
    same trajectories; two agents run in this process; `adwm evaluate` with the same arguments
    then reuses every stage and its results hold the API's numbers; another alpha recomputes
    the estimator stages only, with narrower intervals; select_best ranks the agents with a
    verdict on the pair, and each estimator's ρ and regret@k against given true values; cannot_tell
    says what answered each agent's imagined steps."""
    from adwm_core.api import LoggedEpisodes, OffPolicyEvaluation, agent
    from flows.cli import main

    output, samples = harness / "api.json", harness / "api-samples.jsonl"
    argv = evaluate_argv(first_run, harness / "api-logs.jsonl", "--agent-model", tiny_policies["late"],
                         "--agent-model", tiny_policies["early"], "--name", "api-example", "--output-path", str(output),
                         "--log-samples", str(samples), "--set", "ground_truth.episodes=4")
    settings = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--set")
    settings = {key: yaml.safe_load(value) for key, value in settings.items()}
    env, task = argv[argv.index("--env") + 1], argv[argv.index("--task") + 1]

    logs = LoggedEpisodes.from_file(argv[argv.index("--logs") + 1], env, task)
    steps = logs.to_pandas()
    columns = ["episode", "t", "observation", "action", "reward", "success", "done", "next_observation",
               "task_description"]
    from_frame = LoggedEpisodes.from_dataframe(steps[columns].sample(frac=1.0, random_state=0), env, task)
    assert from_frame.n_episodes == logs.n_episodes > 1
    assert from_frame.steps.select(columns).equals(logs.steps.select(columns))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['success'\]"):
        LoggedEpisodes.from_dataframe(steps.drop(columns="success"), env, task)

    messages: list[str] = []
    agents = [agent(tiny_policies["late"], backend="transformers"), agent(tiny_policies["early"], backend="transformers")]
    ope = OffPolicyEvaluation(logs, agents, epsilons=[0, 1], settings=settings, name="api-example", log=messages.append)
    values = ope.estimate_policy_values()
    assert set(values.index) == {(a, e) for a in ("late@p0", "early@p0") for e in (0.0, 1.0)}
    assert {"ADWM:reward_sum", "kNN-WM:reward_sum", "DM", "FQE"} <= set(values.columns)
    cell = os.path.join(os.environ["ADWM_HOME"], "cells", "api-example")
    computed = sorted(glob.glob(os.path.join(cell, "*", "*", "_COMPLETE")))
    assert computed == sorted(os.path.join(pipeline.locate(ope.config, step.name, step.policy).path, "_COMPLETE")
                              for step in pipeline.plan(ope.config))  # the API ran its cell's plan, all of it only

    assert main(argv) == 0
    capsys.readouterr()
    assert sorted(glob.glob(os.path.join(cell, "*", "*", "_COMPLETE"))) == computed  # the CLI computed nothing
    record = json.loads(output.read_text())
    first_seed = {}
    for row in record["results"]:
        first_seed[row["estimator"]] = min(first_seed.get(row["estimator"], row["seed"]), row["seed"])
    cli = {(r["policy"], r["epsilon"], r["estimator"]): r["value"] for r in record["results"]
           if r["seed"] == first_seed[r["estimator"]]}
    for (label, epsilon), row in values.iterrows():
        for estimator, value in row.dropna().items():
            assert cli[label, epsilon, estimator] == value

    # --log-samples: ADWM's imagined episodes (2 agents × 2 ε × 4 rollouts × 1 seed), readable as logs
    assert ope.log_samples(str(harness / "api-samples-again.jsonl")) == 16
    assert samples.read_text() == (harness / "api-samples-again.jsonl").read_text()
    imagined = LoggedEpisodes.from_file(str(samples), env, task)
    assert imagined.n_episodes == 16 and set(imagined.steps["policy"].to_pylist()) == {"late@p0", "early@p0"}
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert {(r["policy"], r["epsilon"]) for r in records} == set(values.index)
    assert all(turn["source"] in SOURCES for r in records for turn in r["conversations"][1::2])

    wide, narrow = ope.estimate_intervals(alpha=0.05), ope.estimate_intervals(alpha=0.5)
    assert len(glob.glob(os.path.join(cell, "world-model", "*", "_COMPLETE"))) == 1
    assert len(glob.glob(os.path.join(cell, "adwm", "*", "_COMPLETE"))) == 4  # two agents × two levels
    adwm = (wide.estimator == "ADWM:reward_sum")
    assert ((narrow.upper - narrow.lower)[adwm] <= (wide.upper - wide.lower)[adwm] + 1e-12).all()
    assert (wide.value == narrow.value).all()
    student = ope.estimate_intervals(ci="t")
    assert set(student.estimator) == {"DM", "FQE"}  # no concentration interval for imagined rollouts

    truth = {("late@p0", 0.0): 1.0, ("early@p0", 0.0): 0.2, ("late@p0", 1.0): 0.1, ("early@p0", 1.0): 0.0}
    selection = ope.select_best(true_values=truth, top_k=2)
    assert set(selection.ranking.agent) == {"late@p0", "early@p0"} and selection.best in (None, selection.ranking.agent[0])
    (pair,) = selection.verdicts.itertuples()
    assert {pair.a, pair.b} == {"late@p0", "early@p0"} and pair.lower <= pair.upper
    assert (selection.best is None) == (pair.better is None)
    assert (selection.ranking.log_lower <= selection.ranking.log_upper).all()
    recommended = ope.recommended()
    # the selection's verdict is the recommended estimate's (the product's), ADWM's paired one an instrument beside it
    (product,) = [v for v in recommended.verdicts.itertuples() if {v.a, v.b} == {"late@p0 ε=0", "early@p0 ε=0"}]
    assert (product.difference, product.lower, product.upper) == (pair.difference, pair.lower, pair.upper)
    assert selection.source == recommended.source and list(selection.ranking.value) == sorted(
        [recommended.estimates.value[(agent, 0.0)] for agent in selection.ranking.agent], reverse=True)
    (instrument,) = selection.instruments.itertuples()
    assert {instrument.a, instrument.b} == {"late@p0", "early@p0"} and instrument.lower <= instrument.upper
    assert recommended.source in values.columns and "Recommended: " + recommended.source in str(recommended)
    assert set(recommended.estimates.index) == set(values.index)
    assert ((recommended.estimates.lower <= recommended.estimates.value)
            & (recommended.estimates.value <= recommended.estimates.upper)).all()
    assert len(recommended.verdicts) == 6 and recommended.verdicts.better.isna().eq(
        recommended.verdicts.live_episodes.notna() | (recommended.verdicts.difference == 0)).all()
    said = ope.cannot_tell()
    assert set(said) == {"late@p0", "early@p0"}
    assert all(abs(sum(s["shares"].values()) - 1) < 1e-9 and s["steps"] > 0 for s in said.values())
    metrics = selection.metrics.set_index("estimator")
    assert {"ADWM:reward_sum", "FQE"} <= set(metrics.index) and (metrics.n_points == 4).all()
    assert (metrics.regret_at_2 <= metrics.regret_at_1).all() and (metrics.rho.between(-1, 1) | metrics.rho.isna()).all()
    assert np.isnan(metrics.rho["DM"])  # DM never reads π_e: one value for every candidate, no ranking (NaN)
    graded = ope.select_best(top_k=2).metrics.set_index("estimator")  # by the cell's own ground truth
    truth = ope.true_values()
    assert set(truth) == set(values.index) and (graded.n_points == 4).all()
    first_seed_adwm = values["ADWM:reward_sum"]
    assert graded.nmae["ADWM:reward_sum"] == pytest.approx(
        np.mean([abs(first_seed_adwm[point] - truth[point]) for point in truth]) / np.ptp(list(truth.values())))


def test_a_killed_adwm_stage_resumes_from_its_finished_seeds(first_run, harness, monkeypatch):
    """The ADWM stage with a third seed, killed (SIGKILL) once some (estimator, seed) units were
    kept: the rerun imagines only the missing units, and every seed's rows are those an
    uninterrupted run gives (seeds 0 and 1: the first run's own rows)."""
    from adwm_core.cell import CellConfig
    from adwm_core.ope.imagination.rollouts import ImaginedRollouts

    config = yaml.safe_load(open(first_run[0]))
    config["adwm"]["seeds"] = [0, 1, 2]
    path = harness / "tiny-flow-three-seeds.yaml"
    path.write_text(yaml.safe_dump(config))
    cell = CellConfig.load(str(path))
    (policy,) = cell.evaluation.policies
    folder = pipeline.stage_key(cell, "adwm", policy)[0][:16]
    units = os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-flow", "adwm", folder, pipeline.UNITS)
    script = ("import sys; from adwm_core import pipeline; from adwm_core.cell import CellConfig; "
              "c = CellConfig.load(sys.argv[1]); pipeline.run(c, 'adwm', c.evaluation.policies[0])")
    process = subprocess.Popen([sys.executable, "-c", script, str(path)], cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while len(glob.glob(os.path.join(units, "*.pkl"))) < 2 and process.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, "the stage finished before it could be killed"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    kept = len(glob.glob(os.path.join(units, "*.pkl")))
    assert 2 <= kept < 6 and not os.path.exists(os.path.join(os.path.dirname(units), "_COMPLETE"))

    imagined = []
    run = ImaginedRollouts.run
    monkeypatch.setattr(ImaginedRollouts, "run", lambda self, *a, **k: imagined.append(a[-1]) or run(self, *a, **k))
    messages = []
    artifact = pipeline.run(cell, "adwm", policy, log=messages.append)
    assert len(imagined) == 6 - kept  # ADWM and kNN-WM × 3 seeds, less the units kept
    assert any(f"resuming from {kept} finished unit(s)" in m for m in messages), messages
    assert not os.path.exists(units)  # a finished stage keeps no units
    resumed = read_table(artifact.file("estimates"), ESTIMATES).to_pylist()
    first = pipeline.run(CellConfig.load(first_run[0]), "adwm", policy, log=messages.append)  # reused
    before = read_table(first.file("estimates"), ESTIMATES).to_pylist()
    assert len(imagined) == 6 - kept  # the first run's stage was reused, not imagined again
    assert [r for r in resumed if r["seed"] < 2] == before and {r["seed"] for r in resumed} == {0, 1, 2}


def stage_reuse(flow_run_id: str) -> dict[str, bool]:
    """Stage run name → whether that stage was reused, in the flow run ``flow_run_id``'s MLflow runs."""
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    (parent,) = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                   filter_string=f"params.flow_run_id = '{flow_run_id}'")
    children = mlflow.search_runs([parent.info.experiment_id], output_format="list",
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return {r.info.run_name: r.data.params["reused"] == "True" for r in children}


def finished_markers() -> dict[str, dict[str, int]]:
    """Stage → {artifact folder: its completion marker's mtime} of the tiny cell."""
    return {stage: {f: os.stat(os.path.join(f, "_COMPLETE")).st_mtime_ns for f in stage_folders(stage)}
            for stage in STAGES}


def test_a_copied_artifact_root_with_moved_models_reuses_every_stage(first_run, harness, tiny_policies, monkeypatch):
    """Keys name what computed an artifact, not where it lies: the cell's artifacts copied to
    another root, and its models to another folder, are all found again."""
    from flows.ope_cell import ope_cell

    cell, _, _ = first_run
    copy = harness / "copied-root"
    shutil.copytree(os.path.join(os.environ["ADWM_HOME"], "cells", "tiny-flow"), copy / "cells" / "tiny-flow")
    shutil.copytree(os.path.dirname(tiny_policies["late"]), copy / "models")
    moved = yaml.safe_load(open(cell))
    for spec in moved["behaviour"]["pool"] + moved["evaluation"]["policies"]:
        spec["model"] = str(copy / "models" / os.path.basename(spec["model"]))
    (harness / "tiny-flow-moved.yaml").write_text(yaml.safe_dump(moved))
    monkeypatch.setenv("ADWM_HOME", str(copy))
    state = ope_cell(str(harness / "tiny-flow-moved.yaml"), return_state=True)
    assert state.is_completed()
    reused = stage_reuse(str(state.state_details.flow_run_id))
    per_policy = {"ground-truth", "logprobs", "psi", "adwm", "baselines"}
    assert set(reused) == {f"{s} [late]" if s in per_policy else s for s in STAGES}
    assert all(reused.values()), reused


def test_a_change_to_an_estimators_code_recomputes_its_stage_and_the_report_and_nothing_else(first_run, harness):
    """The repository copied with one line of code added to the estimators' module, and the cell
    run from the copy: the baselines stage (whose code that is) and the report that reads it
    are computed again; every other stage is reused."""
    cell, _, _ = first_run
    repo = harness / "changed-repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".git", ".venv", ".adwm", "__pycache__", ".pytest_cache"))
    estimators = repo / "adwm_core" / "ope" / "classical" / "estimators.py"
    estimators.write_text(estimators.read_text() + "\nCHANGED_BY_A_TEST = True\n")
    before = finished_markers()
    log = harness / "changed-repo.log"
    with open(log, "w") as output:
        done = subprocess.run([sys.executable, "-m", "flows.ope_cell", cell], cwd=repo, stdout=output,
                              stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(repo)), timeout=900)
    assert done.returncode == 0, log.read_text()[-3000:]
    after = finished_markers()
    added = {stage: sorted(set(after[stage]) - set(before[stage])) for stage in STAGES}
    assert {stage for stage, folders in added.items() if folders} == {"baselines", "report"}, added
    assert len(added["baselines"]) == 1 and len(added["report"]) == 1
    for stage, folders in before.items():
        assert {f: after[stage][f] for f in folders} == folders, f"{stage} was touched"
