"""app/commands/report.py: the table's columns."""

import json

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
