"""An image's pixels: read, decoded to the run's integers and bands, sized from its header."""
