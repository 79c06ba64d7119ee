"""`python -m app <command> [hydra overrides ...]` (or `app`): the command word picks a Hydra entry point, which gets
the rest with Hydra's whole CLI; errors leave as one paragraph and a non-zero exit status."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import sys
from pathlib import Path

from app.cli import argv as argv_step
from app.cli.hydra_groups import LISTING_FLAGS, group_options_listed_from_one_copy
from app.commands import raise_carried
from app.errors import exit_status_for, report_failure
from app.processes import enable_crash_report, raise_on_stop_signals, stop_if_interrupted

# command word -> (module, function, one line of help); Hydra names the job after the module: train.log...
COMMANDS = {
    "train": ("app.commands.train", "main", "train a CNN; writes a run directory under outputs/ (-m: a sweep)"),
    "evaluate": ("app.commands.evaluate", "main", "loss, accuracy and confusion matrix of a run's last checkpoint "
                 "on its validation split: evaluate resume=<run dir>"),
    "predict": ("app.commands.predict", "main", "class probabilities for a folder or file of images, as CSV: "
                "predict resume=<run dir> input=<path>"),
    "report": ("app.commands.report", "main", "table and PNG plots over run directories or a sweep directory: "
               "report <sweep dir | run dirs...>"),
    "preview": ("app.commands.preview", "main", "preview.png: training samples beside their augmentations, as "
                "the loader makes them (config as for train)"),
    "stats": ("app.commands.stats", "main", "each band's mean, std, min, max and percentiles over the training "
              "split, into stats.json for data.normalize.stats (config as for train)"),
    "plan": ("app.commands.plan", "main", "the memory training will take, host and device, part by part, against "
             "the budget, with the fixes; the batch × resolution table (config as for train)"),
    "bench": ("app.commands.bench", "main", "time the input pipeline: this loader vs keras.utils.PyDataset vs "
              "tf.data vs serial; writes bench.json"),
    "export": ("app.commands.export", "main", "a run's model as a TensorFlow SavedModel, ONNX or LiteRT graph taking "
               "uint8 images, checked against Keras: export resume=<run dir> export.format=onnx"),
    "prepare": ("app.commands.prepare", "main", "a packed, pre-resized shard copy of the data, for faster "
                "training: prepare data=<source> prepare.out=<folder>"),
}

USAGE = "usage: python -m app <command> [hydra overrides ...] [-m]   (or: app <command> ...)\n\ncommands:\n" + \
    "\n".join(f"  {name:<10} {help_}" for name, (_, _, help_) in COMMANDS.items()) + \
    "\n\n`python -m app <command> --help` shows that command's config groups and Hydra's flags.\n" \
    "`eval \"$(app completion bash)\"` turns on tab completion of commands and overrides for `app`."

# Completes the command word itself, then hands the line to that command's Hydra (report's folders
# are left to bash's own file completion).
BASH_COMPLETION = """_app_complete()
{
    local cur=${COMP_WORDS[COMP_CWORD]}
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W "%s" -- "$cur"))
        return
    fi
    if [[ ${COMP_WORDS[1]} == report ]]; then  # not Hydra: its arguments are folders
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    local choices
    choices=$(COMP_LINE="$COMP_LINE" COMP_POINT=$COMP_POINT \\
        "${COMP_WORDS[0]}" "${COMP_WORDS[1]}" -sc query=bash 2>/dev/null)
    COMPREPLY=($(compgen -o nospace -o default -W "$choices" -- "$cur"))
}
COMP_WORDBREAKS=${COMP_WORDBREAKS//=}
complete -o nospace -o default -F _app_complete app"""


# Hydra's modes, of which a command line may give one: Hydra stops on two with a ValueError
MODES = {"-r": "--run", "--run": "--run", "-m": "--multirun", "--multirun": "--multirun", "-c": "--cfg",
         "--cfg": "--cfg", "-i": "--info", "--info": "--info", "-sc": "--shell-completion",
         "--shell-completion": "--shell-completion"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    word, rest = argv[0], argv[1:]
    if word == "completion":
        if rest != ["bash"]:
            print("usage: app completion bash   (then: eval \"$(app completion bash)\")", file=sys.stderr)
            return 2
        print(BASH_COMPLETION % " ".join(COMMANDS))
        return 0
    if word not in COMMANDS:
        print(f"error: unknown command {word!r}.\n\n{USAGE}", file=sys.stderr)
        return 2
    modes = list(dict.fromkeys(MODES[a] for a in rest if a in MODES))
    if len(modes) > 1:
        print(f"error: {' and '.join(modes)} cannot be given together: Hydra runs one mode at a time; keep "
              f"one of them (to see a sweep job's config: --cfg job without -m, with one value of each swept "
              "key).", file=sys.stderr)
        return 2
    module, function, _ = COMMANDS[word]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    enable_crash_report()
    # A scheduler's stop ends a command as Ctrl-C does, from its first moment; a sweep's parent is left alone.
    if not {"-m", "--multirun"} & set(rest):
        raise_on_stop_signals()
    status = 0
    try:
        if word != "report":  # Hydra's commands: their directory and `resume` are settled first
            rest = argv_step.claim_and_rewrite_argv(rest, word=word)
        if "query=bash" in rest and "COMP_LINE" in os.environ:  # completion: Hydra strips the program only
            program, _, line = os.environ["COMP_LINE"].partition(f" {word}")
            os.environ["COMP_LINE"] = program + line
        sys.argv = [f"python -m app {word}", *rest]
        entry = getattr(importlib.import_module(module), function)
        listing = set(rest) & set(LISTING_FLAGS)
        with group_options_listed_from_one_copy() if listing else contextlib.nullcontext():
            entry()
        raise_carried()  # a single run's failure, carried past Hydra's own line about it
        stop_if_interrupted()  # a stop whose raise was lost (in a `__del__`, say) is not ignored
    except SystemExit as stop:  # --help, --cfg and friends end this way
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:  # noqa: BLE001 - every failure leaves as a message and a status
        if isinstance(error, KeyboardInterrupt):  # stopping already: more Ctrl-C must not cut it short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        status = exit_status_for(error)
        report_failure(error, word)
        return status
    finally:
        _delete_empty_claims(word, failed=status != 0)
    return 0


def _delete_empty_claims(word: str, failed: bool) -> None:
    """Deletes claimed directories left empty, and their empty parents in the working directory (or a run's <command>/).
    A failed command other than train that wrote only its log (no bug's traceback) loses it and .hydra/ first."""
    here = os.path.abspath(os.curdir)
    for path in argv_step.CLAIMED:
        log = path / f"{word}.log"
        if failed and word != "train" and _only(path, log) and not _bug_logged(log):
            shutil.rmtree(path / ".hydra", ignore_errors=True)
            log.unlink()
        for folder in [path, *path.parents][:4]:
            made = folder == path or (folder == path.parent and folder.name == word)  # <run>/predict/<stamp>
            if not made and not os.path.abspath(folder).startswith(here + os.sep):
                break
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break


def _only(folder: Path, log: Path) -> bool:
    """Whether `log` (and Hydra's .hydra/) is all that `folder` holds."""
    try:
        return {p.name for p in folder.iterdir()} - {".hydra"} == {log.name}
    except OSError:
        return False


def _bug_logged(log: Path) -> bool:
    try:
        return "unexpected error" in log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
