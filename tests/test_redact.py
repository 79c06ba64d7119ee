"""app/redact.py's rule (storage_options' secrets as <redacted>: in configs, overrides, log lines),
what a config read back with <redacted> values becomes (app/config.py `load`, the resume path of
app/cli/argv.py), and app/hydra_files.py: Hydra's own files and log redacted, in a real
Hydra run and sweep of the app's conf whose task function is given the real values."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from app.cli.argv import claim_and_rewrite_argv
from app.config import conf_dir, load, to_plain
from app.hydra_files import rewrite_redacted
from app.redact import REDACTED, RedactingFilter, dropped_note, redacted, redacted_text
from app.runs.saved import resumed_config
from app.schema import register

register()
OPTIONS = {"key": "AKIAEXAMPLE", "Secret": "s3cr3t", "token": None, "endpoint_url": "http://key.example:9000",
           "region_name": "eu-west-1", "anon": False, "profile": "dev",
           "client_kwargs": {"aws_session_token": "tok", "verify": True},
           "credentials": {"user": "u", "pass": "p"}, "chain": [{"password": "pw", "name": "n"}, "plain"]}


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_secrets_at_any_depth_of_storage_options_are_redacted_and_the_rest_kept():
    config = {"data": {"storage_options": OPTIONS, "path": "s3://b/copy"}, "prepare": {"storage_options": OPTIONS},
              "model": {"key": "stays", "token": "stays"}}
    before = json.dumps(config)
    out = redacted(config)
    for options in (out["data"]["storage_options"], out["prepare"]["storage_options"]):
        assert options["key"] == options["Secret"] == REDACTED  # any case
        assert options["client_kwargs"] == {"aws_session_token": REDACTED, "verify": True}
        assert options["credentials"] == REDACTED  # a secret's whole value, a mapping too
        assert options["chain"] == [{"password": REDACTED, "name": "n"}, "plain"]
        # negative controls: what is no secret stays, so do empty ones
        assert options["token"] is None
        assert {k: options[k] for k in ("endpoint_url", "region_name", "anon", "profile")} == \
            {k: OPTIONS[k] for k in ("endpoint_url", "region_name", "anon", "profile")}
    assert out["model"] == {"key": "stays", "token": "stays"} and out["data"]["path"] == "s3://b/copy"
    assert json.dumps(config) == before  # a new container: the config itself keeps its values


@pytest.mark.parametrize(("text", "expected"), [
    ("data.storage_options.secret=abc", "data.storage_options.secret='<redacted>'"),
    ("data.storage_options.client_kwargs.aws_session_token=t", "data.storage_options.client_kwargs."
                                                              "aws_session_token='<redacted>'"),
    ("+data.storage_options={key: AKIA, secret: 's p', endpoint_url: http://127.0.0.1:1}",
     "+data.storage_options={key: '<redacted>', secret: '<redacted>', endpoint_url: http://127.0.0.1:1}"),
    ("data.storage_options={client_kwargs: {aws_session_token: T, region_name: eu}, anon: false}",
     "data.storage_options={client_kwargs: {aws_session_token: '<redacted>', region_name: eu}, anon: false}"),
    ("data.storage_options.secret=${oc.env:S}", "data.storage_options.secret='<redacted>'"),
    ("#0 : seed=1 data.storage_options.token=abc trainer.epochs=1",
     "#0 : seed=1 data.storage_options.token='<redacted>' trainer.epochs=1"),
    # negative controls: a key's name inside a value, an endpoint, an empty value, no storage_options
    ("data.storage_options.endpoint_url=http://s3.key.host:9000", None),
    ("data.storage_options.secret=null", None),
    ("model.key=3 trainer.token=4", None),
])
def test_overrides_and_log_lines_are_redacted(text, expected):
    assert redacted_text(text) == (text if expected is None else expected)
    assert redacted([text]) == [text if expected is None else expected]


def test_the_log_filter_redacts_a_record_and_its_own_note_survives_it():
    record = logging.LogRecord("hydra", logging.INFO, __file__, 1, "#%d : %s", (0, "data.storage_options.key=AKIA"),
                               None)
    assert RedactingFilter().filter(record) and record.getMessage() == "#0 : data.storage_options.key='<redacted>'"
    plain = logging.LogRecord("app", logging.INFO, __file__, 1, "epoch %d", (1,), None)
    RedactingFilter().filter(plain)
    assert plain.msg == "epoch %d" and plain.args == (1,)  # untouched
    note = dropped_note(["data.storage_options.key", "data.storage_options.client_kwargs.aws_session_token"])
    assert redacted_text(note) == note and "data.storage_options.<key>=" in note


def test_a_redacted_value_is_left_out_on_load_and_said_once(caplog):
    cfg = composed("data=prepared", "data.path=/x", "+data.storage_options={key: '<redacted>', endpoint_url: e, "
                   "client_kwargs: {aws_session_token: '<redacted>', region_name: r}}")
    with caplog.at_level(logging.INFO, logger="app.config"):
        config = load(cfg)
    assert config.data.storage_options == {"endpoint_url": "e", "client_kwargs": {"region_name": "r"}}
    (line,) = [r.getMessage() for r in caplog.records if "not saved" in r.getMessage()]
    assert "data.storage_options.key, data.storage_options.client_kwargs.aws_session_token" in line
    caplog.clear()  # negative control: real values are kept, nothing said
    config = load(composed("data=prepared", "data.path=/x", "+data.storage_options={key: k, endpoint_url: e}"))
    assert config.data.storage_options == {"key": "k", "endpoint_url": "e"} and not caplog.records


def test_a_resume_takes_a_secret_given_again_and_drops_the_others(tmp_path, caplog):
    saved = redacted(to_plain(composed("data=prepared", "data.path=/x",
                                       "+data.storage_options={key: AKIA, secret: s3, endpoint_url: e}")))
    assert saved["data"]["storage_options"] == {"key": REDACTED, "secret": REDACTED, "endpoint_url": "e"}
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    argv = claim_and_rewrite_argv([f"resume={run}", "data.storage_options.secret=n3w"], word="evaluate")
    # the command composes on the default data group (no storage_options): the key is forced in
    assert "++data.storage_options.secret=n3w" in argv and f"hydra.run.dir={run}" not in argv
    cfg = composed("++data.storage_options.secret=n3w", f"resume={run}")
    with caplog.at_level(logging.INFO, logger="app.config"):
        config = load(resumed_config(saved, cfg, ["++data.storage_options.secret=n3w", f"resume={run}"]))
    assert config.data.storage_options == {"secret": "n3w", "endpoint_url": "e"}
    (line,) = [r.getMessage() for r in caplog.records if "not saved" in r.getMessage()]
    assert "(data.storage_options.key)" in line  # the secret given again is not named


def test_a_yaml_file_is_rewritten_only_when_it_holds_a_secret(tmp_path):
    path = tmp_path / "hydra.yaml"
    path.write_text(yaml.safe_dump({"hydra": {"overrides": {"task": ["data.storage_options.secret=s3", "seed=1"]},
                                              "job": {"override_dirname": "data.storage_options.secret=s3,seed=1"}}}))
    assert rewrite_redacted(path)
    saved = yaml.safe_load(path.read_text())["hydra"]
    assert saved["overrides"]["task"] == ["data.storage_options.secret='<redacted>'", "seed=1"]
    assert saved["job"]["override_dirname"] == "data.storage_options.secret='<redacted>',seed=1"
    before = path.stat().st_mtime_ns
    assert not rewrite_redacted(path) and path.stat().st_mtime_ns == before  # nothing left: not written again
    assert not rewrite_redacted(tmp_path / "missing.yaml")


# A task function under the app's own conf (its callbacks, its logging) that records what it is given
# outside the run's folder and logs the secret: Hydra's run and sweep as the app's commands use them.
PROBE = """
import json, logging, os, sys
from pathlib import Path
import hydra
from hydra.core.hydra_config import HydraConfig
from app.config import conf_dir
from app.schema import register
register()

@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg):
    given = dict(cfg.data.storage_options)
    Path(os.environ["GIVEN"], Path(HydraConfig.get().runtime.output_dir).name + ".json").write_text(json.dumps(given))
    logging.getLogger("probe").info("given data.storage_options.secret=%s", given["secret"])

main()
"""
SECRET_OPTIONS = "+data.storage_options={key: AKIAEXAMPLE, secret: s3cr3tvalue, endpoint_url: http://127.0.0.1:1}"


def files_holding(folder: Path, text: str) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and text.encode() in
                  p.read_bytes())


@pytest.mark.slow
def test_hydra_files_and_logs_of_a_run_and_a_sweep_hold_no_secret_and_the_task_gets_them(tmp_path):
    script, given = tmp_path / "probe.py", tmp_path / "given"
    script.write_text(textwrap.dedent(PROBE))
    given.mkdir()
    common = ["data=prepared", "data.path=/x", SECRET_OPTIONS]
    env = {"GIVEN": str(given), "PATH": "/usr/bin:/bin", "HYDRA_FULL_ERROR": "1"}
    printed = ""
    for args in (["hydra.run.dir=out/run", *common], ["-m", "seed=0,1", *common, "hydra.sweep.dir=out/sweep"]):
        done = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        printed += done.stdout + done.stderr
    for name in ("run", "0", "1"):  # the run and each job were given the real values
        assert json.loads((given / f"{name}.json").read_text())["secret"] == "s3cr3tvalue"
    out = tmp_path / "out"
    assert files_holding(out, "s3cr3tvalue") == files_holding(out, "AKIAEXAMPLE") == []
    assert "s3cr3tvalue" not in printed and "AKIAEXAMPLE" not in printed and "#1 : seed=1" in printed
    # negative controls: the options were written, redacted, in every file Hydra keeps of them
    for name in ("run/.hydra/config.yaml", "run/.hydra/hydra.yaml", "run/.hydra/overrides.yaml", "sweep/multirun.yaml",
                 "sweep/1/.hydra/config.yaml", "sweep/1/.hydra/hydra.yaml", "sweep/1/.hydra/overrides.yaml"):
        text = (out / name).read_text()
        assert "127.0.0.1" in text and "<redacted>" in text, name
    assert "given data.storage_options.secret='<redacted>'" in (out / "run" / "probe.log").read_text()
