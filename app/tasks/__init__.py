"""The run's task, one object a `data.task`, chosen here, once; docs/architecture.md's "Adding a task": what it owns."""

from __future__ import annotations

from app.schema.data import Task as TaskName
from app.tasks.base import Evaluation, Task
from app.tasks.classification import Classification
from app.tasks.multilabel import MultiLabel
from app.tasks.segmentation import Segmentation

__all__ = ["Evaluation", "Task", "task_of"]

TASKS: dict[TaskName, Task] = {TaskName.multiclass: Classification(), TaskName.multilabel: MultiLabel(),
                               TaskName.segmentation: Segmentation()}


def task_of(name: TaskName | str) -> Task:
    """The task of `data.task`, or of a copy's manifest (its task's name)."""
    return TASKS[TaskName(name)]
