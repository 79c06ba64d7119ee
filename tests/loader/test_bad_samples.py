"""app/loader/bad_samples.py through a real enqueuer, its worker processes and threads: a bad
file raises, is skipped or stands in by policy; a worker's failure or MemoryError is named."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from loaders import assert_clean, make
from marked import MarkedSplit, index_of

from app.data.source import FileSplit
from app.errors import DataError, MachineError, WorkerError
from app.loader import messages
from app.loader.bad_samples import BadSamples


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_worker_exception_reaches_the_consumer_with_traceback(processes, children):
    with pytest.raises(WorkerError) as caught, make(MarkedSplit(16, crash_at=9), processes=processes) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    message = str(caught.value)
    assert "sample 9" in message and "/data/marked/00009.png" in message and "decoder exploded" in message
    assert "RuntimeError: decoder exploded on purpose at 9" in caught.value.worker_traceback
    assert_clean(children)


def test_bad_sample_raise_names_the_file(children):
    with pytest.raises(DataError, match=r"sample 5 of the train split \(/data/marked/00005.png\).*truncated"), \
            make(MarkedSplit(16, bad=(5,))) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    assert_clean(children)


def test_bad_sample_skip_keeps_batches_full_and_logs(tmp_path, children):
    bad_log = tmp_path / "bad_samples.txt"
    split = MarkedSplit(16, bad=(5, 6))
    runs = []
    for _ in range(2):
        with make(split, on_bad_sample="skip", max_bad_fraction=0.2, bad_log=bad_log) as enq:
            runs.append([index_of(im) for b, _ in enq.batches("train", np.arange(16), epoch=0) for im in b])
    assert runs[0] == runs[1]  # the stand-in is deterministic
    assert len(runs[0]) == 16 and 5 not in runs[0] and 6 not in runs[0]
    assert runs[0][5] == runs[0][6] == 7  # the next readable sample stands in
    lines = bad_log.read_text().splitlines()
    assert any("/data/marked/00005.png" in line and "truncated" in line for line in lines)
    assert len(lines) == 2  # the second run (a resume's loader) lists nothing its list holds already
    with pytest.raises(DataError, match="above data.max_bad_fraction=0.1"), \
            make(split, on_bad_sample="skip", max_bad_fraction=0.1, bad_log=bad_log) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    assert_clean(children)


@pytest.mark.parametrize("workers", [2, 0], ids=["processes", "in-process"])
def test_a_stand_in_brings_its_own_label(workers, tmp_path, children):
    """A skipped sample's place holds the next readable image: its label must be that image's,
    not the bad sample's (training on mislabelled stand-ins)."""
    split = MarkedSplit(16, bad=(4, 5, 10))  # labels i % 3: 4 → 1 and 5 → 2, their stand-in 6 → 0
    with make(split, workers=workers, on_bad_sample="skip", max_bad_fraction=0.5,
              bad_log=tmp_path / "bad.txt") as enq:
        pairs = [(index_of(im), int(y)) for b, labels in enq.batches("train", np.arange(16), epoch=0)
                 for im, y in zip(b, labels, strict=True)]
    assert [i for i, _ in pairs] == [0, 1, 2, 3, 6, 6, 6, 7, 8, 9, 11, 11, 12, 13, 14, 15]
    assert all(y == split.labels[i] for i, y in pairs)  # every label is its image's
    assert split.labels[[4, 5, 10]].tolist() != split.labels[[6, 6, 11]].tolist()  # which the bad ones' are not
    assert_clean(children)


class OutOfMemoryAt(MarkedSplit):
    def read(self, i, decode=None, drawn=None):
        if i == 5:
            raise MemoryError()  # what a thread decoding a huge image meets
        return super().read(i, decode)


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_memory_error_in_a_worker_is_named_as_such(processes, children):
    """A MemoryError with threads came out as "unexpected … (a bug)"."""
    with pytest.raises(MachineError, match=r"ran out of memory on sample 5 .*lower queue.workers or queue.max_size"), \
            make(OutOfMemoryAt(16), processes=processes) as enq:
        list(enq.batches("train", np.arange(16), epoch=0))
    assert_clean(children)


def test_a_split_with_nothing_readable_near_a_bad_sample_says_so(tmp_path, children):
    """Under skip, when no sample that could stand in is readable either, the message says the
    split has nothing readable there, and does not advise the skip already set."""
    with pytest.raises(DataError) as caught, make(MarkedSplit(6, bad=tuple(range(6))), on_bad_sample="skip",
                                                  max_bad_fraction=1.0, bad_log=tmp_path / "bad.txt") as enq:
        list(enq.batches("train", np.arange(6), epoch=0))
    message = str(caught.value)
    assert "none of the 5 samples after it that could stand in" in message and "no readable image there" in message
    assert "set data.on_bad_sample=skip" not in message
    assert_clean(children)


def test_a_class_with_every_sample_skipped_is_warned_of(tmp_path, caplog, children):
    split = MarkedSplit(9, bad=(1, 4, 7))  # labels i % 3: every sample of class 1
    with make(split, on_bad_sample="skip", max_bad_fraction=0.5, bad_log=tmp_path / "bad.txt") as enq:
        list(enq.batches("train", np.arange(9), epoch=0))
    gone = [r.getMessage() for r in caplog.records if "every sample of class" in r.getMessage()]
    assert gone == [f"every sample of class 1 ({split.describe(1)}, ...) of the train split (3 files) could not be "
                    f"loaded: the train split has none of that class left; see {tmp_path / 'bad.txt'}"]
    caplog.clear()
    with make(MarkedSplit(9, bad=(1, 4)), on_bad_sample="skip", max_bad_fraction=0.5,  # negative control
              bad_log=tmp_path / "bad2.txt") as enq:
        list(enq.batches("train", np.arange(9), epoch=0))
    assert not [r for r in caplog.records if "every sample of class" in r.getMessage()]
    assert_clean(children)


def test_bad_samples_txt_keeps_one_row_a_file_whatever_its_name(tmp_path):
    """A file name may hold a tab, a newline or a quote: bad_samples.txt stays one row of four
    tab-separated fields a file, read back by csv with delimiter='\\t'."""
    names = ["/data/a\tb.jpg", "/data/new\nline.jpg", '/data/q"uote.jpg', "/data/plain.jpg"]
    log = tmp_path / "bad_samples.txt"
    bad = BadSamples({"train": FileSplit(names + ["/data/good.jpg"], [0, 1, 0, 1, 0])}, 1.0, log)
    for index, where in enumerate(names):
        skipped = messages.Skipped(slot=0, position=index, index=index, where=where, detail="empty file", stand_in=4)
        bad.take(skipped, "train")
    with open(log, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows == [["train", str(i), where, "empty file"] for i, where in enumerate(names)]
    assert log.read_text().splitlines()[-1] == "train\t3\t/data/plain.jpg\tempty file"  # plain names as before


def test_a_message_names_the_list_of_bad_files_only_where_one_is_kept(tmp_path):
    """bench keeps no bad_samples.txt: its messages do not send the user to one."""
    split = {"train": FileSplit(["/data/a.jpg", "/data/b.jpg"], [0, 1])}
    for log in (None, tmp_path / "bad_samples.txt"):
        with pytest.raises(DataError) as caught:
            BadSamples(split, 0.1, log).take(messages.Skipped(slot=0, position=0, index=0, where="/data/a.jpg",
                                                              detail="empty file", stand_in=1), "train")
        assert str(caught.value).endswith(f"(last: /data/a.jpg: empty file){'; see ' + str(log) if log else ''}.")
