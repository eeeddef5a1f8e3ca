"""Repository-only code: builds and regenerates parts of the site (never installed)."""
