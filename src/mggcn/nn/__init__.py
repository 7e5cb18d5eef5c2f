"""mggcn.nn."""
