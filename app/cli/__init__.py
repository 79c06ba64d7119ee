"""The command line before Hydra sees it: directories claimed, `resume=` resolved, replaced or foreign keys refused."""
