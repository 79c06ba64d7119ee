"""app/commands/report.py: the table's columns."""

import json
import subprocess
import sys

import pytest

from app.commands.report import table


def _runs(tmp_path, summaries: list[dict]):
    runs = []
    for i, summary in enumerate(summaries):
        (tmp_path / str(i)).mkdir(parents=True)
        (tmp_path / str(i) / "summary.json").write_text(json.dumps(summary))
        runs.append(tmp_path / str(i))
    return runs


def test_tags_are_a_column_when_any_run_has_them(tmp_path):
    tagged = _runs(tmp_path / "a", [{"tags": ["baseline", "lr"], "overrides": ["seed=1"]},
                                    {"overrides": ["seed=2"]}])
    swept, columns, rows = table(tagged)
    assert columns[:3] == ["run", "tags", "seed"] and [r["tags"] for r in rows] == ["baseline,lr", ""]
    _, columns, _ = table(_runs(tmp_path / "b", [{"tags": []}, {}]))  # negative control: no tags, no column
    assert "tags" not in columns


def _figure_of(tmp_path, summaries):
    import matplotlib

    matplotlib.use("Agg")
    from app.commands.report import figure

    swept, _, rows = table(_runs(tmp_path, summaries))
    return swept, rows, figure(swept[0], swept, rows)


def test_plots_start_at_zero_show_each_repeat_the_prediction_and_the_best_trial(tmp_path):
    lr = ["0.0001", "0.001", "0.001", "0.01"]  # a repeat at 0.001, and a span of 100×: a log axis
    accuracy = [0.5, 0.6, 0.7, 0.4]
    summaries = [{"overrides": [f"optimizer.learning_rate={v}"], "images_per_s": 200.0 + i,
                  "peak_memory_mb": 1000.0 + 10 * i, "memory_plan": {"host_peak_mib": 1100.0},
                  "val_accuracy": accuracy[i], "status": "completed"} for i, v in enumerate(lr)]
    swept, rows, fig = _figure_of(tmp_path / "a", summaries)
    memory, speed, accuracy = fig.axes
    assert swept == ["optimizer.learning_rate"] and rows[0]["predicted_peak_mb"] == 1100.0
    for ax in (memory, speed, accuracy):
        assert ax.get_ylim()[0] == 0 and ax.get_xscale() == "log"
    assert accuracy.get_ylim()[1] == 1.0
    points = [line for line in memory.lines if line.get_marker() == "o"][0]
    assert sorted(points.get_ydata()) == [1000.0, 1010.0, 1020.0, 1030.0]  # every run, the repeat too
    mean = [line for line in memory.lines if line.get_linestyle() == "-"][0]
    assert list(mean.get_ydata()) == [1000.0, 1015.0, 1030.0]  # the repeat's mean
    predicted = [line for line in memory.lines if line.get_linestyle() == "--"]
    assert predicted and list(predicted[0].get_ydata()) == [1100.0] * 3
    star = [line for line in accuracy.lines if line.get_marker() == "*"][0]
    assert list(star.get_xdata()) == [0.001] and list(star.get_ydata()) == [0.7]
    # negative control: names on a category axis, no prediction line when runs have no plan
    names = [{"overrides": [f"model={m}"], "images_per_s": 1.0, "peak_memory_mb": 900.0, "val_accuracy": 0.5}
             for m in ("resnet", "keras_app")]
    _, _, other = _figure_of(tmp_path / "b", names)
    assert other.axes[0].get_xscale() == "linear" and not [x for x in other.axes[0].lines if x.get_linestyle() == "--"]


def test_a_sweep_judged_by_its_monitor_has_its_column_and_its_best_by_the_monitors_mode(tmp_path):
    """trainer.monitor=val_loss (min): a val_loss column, and the best trial the lowest loss, not the best accuracy."""
    summaries = [{"overrides": [f"seed={i}"], "images_per_s": 1.0, "peak_memory_mb": 900.0, "val_accuracy": acc,
                  "val_loss": loss, "best": {"monitor": "val_loss", "mode": "min", "value": loss, "checkpoint": "x"},
                  "status": "completed"} for i, (acc, loss) in enumerate([(0.9, 0.5), (0.6, 0.2), (0.7, 0.4)])]
    swept, columns, _ = table(_runs(tmp_path / "t", summaries))
    assert columns[-2:] == ["val_loss", "status"] and "val_accuracy" in columns
    _, _, fig = _figure_of(tmp_path / "f", summaries)
    star = [line for line in fig.axes[2].lines if line.get_marker() == "*"][0]
    assert list(star.get_ydata()) == [0.2] and fig.axes[2].get_title() == "val_loss"
    plain = [{k: v for k, v in summary.items() if k != "best"} for summary in summaries]  # negative control
    assert "val_loss" not in table(_runs(tmp_path / "p", plain))[1]
    star = [line for line in _figure_of(tmp_path / "q", plain)[2].axes[2].lines if line.get_marker() == "*"][0]
    assert list(star.get_ydata()) == [0.9]


def test_an_auto_value_shows_what_it_chose(tmp_path):
    runs = _runs(tmp_path, [{"overrides": ["queue.workers=auto", "queue.max_size=auto"],
                             "queue_auto": {"workers": 2, "max_size": 1}},
                            {"overrides": ["queue.workers=1", "queue.max_size=auto"]},  # failed before choosing
                            {"overrides": ["queue.workers=3", "queue.max_size=2"]}])
    _, _, rows = table(runs)
    assert [(r["queue.workers"], r["queue.max_size"]) for r in rows] == [("auto (2)", "auto (1)"), ("1", "auto"),
                                                                         ("3", "2")]


def test_a_second_report_keeps_the_first_and_failed_runs_say_why(tmp_path, monkeypatch, capsys):
    from app.commands.report import main

    runs = _runs(tmp_path / "sweep", [{"status": "completed", "overrides": ["seed=1"], "val_accuracy": 0.5},
                                      {"status": "failed", "overrides": ["seed=2"],
                                       "message": "config key `queue.max_size` = 0 is not allowed"}])
    monkeypatch.chdir(tmp_path)
    main([str(r) for r in runs])
    first = (tmp_path / "report" / "report.csv").read_text()
    (tmp_path / "report" / "report.csv").write_text(first + "a note of mine\n")
    main([str(r) for r in runs])
    assert (tmp_path / "report" / "report.csv").read_text() == first + "a note of mine\n"  # kept
    assert (tmp_path / "report-1" / "report.csv").read_text() == first  # the new one beside it
    out = capsys.readouterr().out
    assert f"{runs[1]} (failed): config key `queue.max_size` = 0 is not allowed" in out
    assert "config key `queue.max_size` = 0 is not allowed" in first.splitlines()[2]  # the CSV's message column
    assert "config key" not in first.splitlines()[1]  # negative control: a completed run has none


def test_a_sweeps_jobs_come_in_order_with_any_other_run_folder_after_them(tmp_path):
    from app.commands.report import find_runs

    for job in ("10", "2", "0"):
        (tmp_path / job).mkdir()
        (tmp_path / job / "summary.json").write_text("{}")
    assert [p.name for p in find_runs([tmp_path])] == ["0", "2", "10"]  # negative control: numbers only
    (tmp_path / "2 copy").mkdir()
    (tmp_path / "2 copy" / "summary.json").write_text("{}")
    assert [p.name for p in find_runs([tmp_path])] == ["0", "2", "10", "2 copy"]


def test_a_path_that_does_not_exist_is_named_as_such(tmp_path):
    from app.commands.report import find_runs
    from app.errors import DataError

    with pytest.raises(DataError, match=f"{tmp_path / 'nowhere'} does not exist: give a run directory"):
        find_runs([tmp_path / "nowhere"])
    with pytest.raises(DataError, match="no run directory"):  # negative control: there, but holding no run
        find_runs([tmp_path])


def test_one_runs_report_goes_to_report_and_a_sweeps_into_its_folder(tmp_path, monkeypatch):
    """A run's folder is its record: `report <run dir>` leaves it as it was."""
    from app.commands.report import main

    runs = _runs(tmp_path / "sweep", [{"status": "completed", "overrides": ["seed=1"]},
                                      {"status": "completed", "overrides": ["seed=2"]}])
    monkeypatch.chdir(tmp_path)
    main([str(runs[0])])
    assert sorted(p.name for p in runs[0].iterdir()) == ["summary.json"]
    assert (tmp_path / "report" / "report.csv").exists()
    main([str(tmp_path / "sweep")])
    assert (tmp_path / "sweep" / "report.csv").exists()  # negative control: a sweep's folder gets its report


@pytest.mark.slow
def test_a_file_or_a_report_csv_of_the_users_at_out_is_refused_and_an_earlier_report_replaced(tmp_path):
    """Through `python -m app report`, as a user types it."""
    runs = _runs(tmp_path / "sweep", [{"overrides": ["seed=1"]}, {"overrides": ["seed=2"]}])

    def report(out):
        return subprocess.run([sys.executable, "-m", "app", "report", *map(str, runs), "--out", str(out)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300)

    (tmp_path / "a_file").write_text("mine")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "report.csv").write_text("name,amount\nrent,900\n")
    for out, what in ((tmp_path / "a_file", "is a file, where report writes a folder"),
                      (tmp_path / "mine", "holds report.csv, which report did not write")):
        refused = report(out)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"error: --out {out} {what}" in refused.stderr and "give --out another folder" in refused.stderr
    assert (tmp_path / "a_file").read_text() == "mine"
    assert (tmp_path / "mine" / "report.csv").read_text() == "name,amount\nrent,900\n"
    # the advice followed: another folder, written; a second report there replaces the first
    for _ in range(2):
        written = report(tmp_path / "reports")
        assert written.returncode == 0, written.stderr
    assert (tmp_path / "reports" / "report.csv").read_text().startswith("run,seed,")
