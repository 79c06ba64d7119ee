"""`python -m app prepare`: a packed, pre-resized shard copy of a data source, in the layout
app/data/shards.py describes.

    rule.py     prepare.short_side: the short side stored (auto: what the transforms need)
    encode.py   a worker's share: one source sample → its stored image (spawned processes import it)
    plan.py     which sample goes into which shard; what a killed or finished prepare left
    tar.py      one shard written whole or not at all, with its members' byte offsets
    job.py      the job: the workers, the progress bar, the shards in order, resume
    finish.py   the index of each split, bad_samples.txt and manifest.json, written last
    whole.py    the up-to-date check: what of a finished copy is missing or damaged, to write again
    copy.py     the whole: refusals, plan or resume, shards, index, summary
    payback.py  the summary line: bytes, time, and after how many epochs the time pays back

Never imports TensorFlow, the model, the loader or training: its workers import app.data only.
"""
