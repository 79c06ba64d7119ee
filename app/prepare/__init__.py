"""`python -m app prepare`: a packed, pre-resized shard copy of a source (app/data/copies/shards.py): copy.py."""
