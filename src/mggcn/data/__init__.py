"""mggcn.data."""
