"""mggcn.utils."""
