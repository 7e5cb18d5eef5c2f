"""mggcn.distributed."""
