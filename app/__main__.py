"""`python -m app <command> [hydra overrides ...]`: the command word picks a Hydra entry point.

Hydra has no subcommands, so the word is taken off `sys.argv` and the rest is handed to that
command's own `@hydra.main`, which keeps Hydra's whole CLI (`-m`, `--cfg`, `hydra.*`).
Errors reach here as exceptions (HYDRA_FULL_ERROR makes Hydra re-raise them) and leave as one
paragraph and a non-zero exit status.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

# command word -> (module, function, one line of help, overrides that come first)
COMMANDS = {
    "train": ("app.commands.train", "main", "train a CNN; writes a run directory under outputs/ (-m: a sweep)", []),
    "evaluate": ("app.commands.evaluate", "main", "loss, accuracy and confusion matrix of a run's last checkpoint "
                 "on its validation split: evaluate resume=<run dir>", ["hydra.job.name=evaluate"]),
    "predict": ("app.commands.predict", "main", "class probabilities for a folder or file of images, as CSV: "
                "predict resume=<run dir> input=<path>", ["hydra.job.name=predict"]),
    "report": ("app.commands.report", "main", "table and PNG plots over run directories or a sweep directory: "
               "report <sweep dir | run dirs...>", []),
    "bench": ("app.commands.bench", "main", "time the input pipeline: this loader vs keras.utils.PyDataset vs "
              "serial; writes bench.json", ["hydra.job.name=bench"]),
}

USAGE = "usage: python -m app <command> [hydra overrides ...] [-m]\n\ncommands:\n" + "\n".join(
    f"  {name:<10} {help_}" for name, (_, _, help_, _) in COMMANDS.items()
) + "\n\n`python -m app <command> --help` shows that command's config groups and Hydra's flags."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    word, rest = argv[0], argv[1:]
    if word not in COMMANDS:
        print(f"error: unknown command {word!r}.\n\n{USAGE}", file=sys.stderr)
        return 2
    module, function, _, first = COMMANDS[word]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    from app.errors import exit_status_for

    try:
        if word != "report":  # Hydra's commands: their directory and `resume` are settled first
            from app.resume import prepare_argv

            rest = prepare_argv(rest, word=word)
        sys.argv = [f"python -m app {word}", *first, *rest]
        entry = getattr(importlib.import_module(module), function)
        entry()
    except SystemExit as stop:  # --help, --cfg and friends end this way
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:  # noqa: BLE001 - every failure leaves as a message and a status
        if isinstance(error, KeyboardInterrupt):  # stopping already: more Ctrl-C must not cut it short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return exit_status_for(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
