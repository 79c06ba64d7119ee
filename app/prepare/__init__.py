"""`python -m app prepare`: a packed, pre-resized shard copy of a data source (app/data/shards.py); copy.py runs it."""
