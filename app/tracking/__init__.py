"""What a run reports as it trains (TensorBoard event files, scalars.csv, an MLflow run), behind one writer."""
