"""`prepare`'s shard copies: their layout, storage (a folder or a URL) and checks, read as splits."""
