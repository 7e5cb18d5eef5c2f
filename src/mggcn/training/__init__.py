"""mggcn.training."""
