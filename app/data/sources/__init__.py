"""Each data=option's source (folder, table, cifar, synthetic), and the one a config names."""
