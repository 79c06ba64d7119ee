"""data.task=multilabel: a table's label cell as a set of class names (data.label_separator, data.none_label), or a 0/1
column a class; the sets as 0/1 uint8 vectors, and a row's stratum (its rarest label) so rare classes reach val."""

from __future__ import annotations

from collections import Counter

import numpy as np

TRUE, FALSE, UNCERTAIN = {"1", "1.0", "true"}, {"0", "0.0", "false", ""}, {"-1", "-1.0"}
NONE = "\0none"  # the stratum of a row with no label


class LabelFault(ValueError):
    """A label cell that cannot be read: the column it is in, and why."""

    def __init__(self, column: str, why: str):
        super().__init__(why)
        self.column, self.why = column, why


def from_cell(text: str, *, separator: str, none_label: str | None, column: str = "") -> tuple[str, ...]:
    """A cell's classes, sorted, once each; empty or `none_label`: none; `none_label` beside a class: a LabelFault."""
    names = sorted({name.strip() for name in text.split(separator) if name.strip()})
    if none_label is None or none_label not in names:
        return tuple(names)
    others = [name for name in names if name != none_label]
    if others:
        raise LabelFault(column, f"{none_label!r} (data.none_label) means no class, yet the cell also names "
                                 f"{', '.join(others)}")
    return ()


def from_columns(values: dict, columns: list[str], uncertain: str | None) -> tuple[str, ...]:
    """The classes whose 0/1 column holds 1 (an uncertain -1: data.uncertain's zero or one, else refused)."""
    found = []
    for column in columns:
        cell = values.get(column)
        text = "" if cell is None or cell != cell else str(cell).strip().lower()  # NaN (cell != cell): empty
        if text in UNCERTAIN:
            if uncertain is None:
                raise LabelFault(column, f"{cell!r} marks an uncertain label: set data.uncertain=zero or "
                                         "data.uncertain=one to read it so")
            text = "1" if uncertain == "one" else "0"
        if text not in TRUE | FALSE:
            raise LabelFault(column, f"{cell!r} is not 0 or 1 (a class's column holds 1 where the image shows it)")
        if text in TRUE:
            found.append(column)
    return tuple(found)


def text(label, class_names: list[str]) -> str:
    """A label as a caption shows it: its class, or (a 0/1 vector) its classes joined by `+`, `(none)` for none."""
    if np.ndim(label) == 0:
        return class_names[int(label)]
    return "+".join(name for name, on in zip(class_names, label, strict=True) if on) or "(none)"


def vectors(sets: list[tuple[str, ...]], class_names: list[str]) -> np.ndarray:
    """One 0/1 uint8 row a label set, a column a class in `class_names`' order."""
    index = {name: i for i, name in enumerate(class_names)}
    out = np.zeros((len(sets), len(class_names)), np.uint8)
    for row, names in enumerate(sets):
        out[row, [index[name] for name in names]] = 1
    return out


def strata(sets: list[tuple[str, ...]]) -> list[str]:
    """Each set's rarest class over all `sets` (ties: by name), the stratum a split draws it from; NONE for none."""
    counts = Counter(name for names in sets for name in names)
    return [min(names, key=lambda name: (counts[name], name)) if names else NONE for names in sets]
