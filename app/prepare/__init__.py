"""`python -m app prepare`: a packed, pre-resized shard copy of a data source (app/data/shards.py). copy.py runs it;
rule.py: the stored short side; plan.py: which sample goes where; job.py, encode.py, tar.py: the shards; finish.py: the
index, bad_samples.txt and manifest; whole.py: the up-to-date check; payback.py: the summary line."""
