#!/usr/bin/env bash
# Re-vendor Mermaid for the site: ./tools/vendor-mermaid.sh 11.17.2
#
# Why vendored: Material for MkDocs renders ```mermaid blocks with mermaid.js, which it
# fetches from a public CDN at view time unless a global `mermaid` is already defined.
# The site must not depend on a third party when a reader opens it (and the browser
# tests refuse every request that leaves the site), so the library ships with the site:
# overrides/main.html loads it on pages with a diagram, and Material uses it instead of
# the CDN. Mermaid 11 is the major version Material 9.x is written against.
#
# The file comes from the npm registry (the package's own dist/mermaid.min.js, the
# self-contained build); after running this, update the file name in
# overrides/main.html and delete the old version's files.
set -euo pipefail
version="${1:?usage: $0 MERMAID_VERSION (e.g. 11.17.2)}"
cd "$(dirname "$0")/.."
dest=docs/javascripts/vendor
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "mermaid@$version" >/dev/null && tar xzf "mermaid-$version.tgz")
mkdir -p "$dest"
cp "$work/package/dist/mermaid.min.js" "$dest/mermaid-$version.min.js"
cp "$work/package/LICENSE" "$dest/mermaid-$version.LICENSE.txt"
sha256sum "$dest/mermaid-$version.min.js"
echo "now point overrides/main.html at javascripts/vendor/mermaid-$version.min.js"
