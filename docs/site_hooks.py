"""MkDocs hooks (mkdocs.yml): README.md is the site's home page. Links are written for GitHub, where README.md links
to ``docs/X.md`` and the pages to ``../README.md``; on the site those become ``X.md`` and ``index.md``."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

README = Path(__file__).resolve().parents[1] / "README.md"


def on_files(files, config):
    files.append(File.generated(config, "index.md", content=README.read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "index.md":
        return markdown.replace("](docs/", "](")
    return markdown.replace("](../README.md", "](index.md")
