"""mggcn.tools."""
