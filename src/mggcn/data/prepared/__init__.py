"""mggcn.data.prepared."""
