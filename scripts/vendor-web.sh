#!/usr/bin/env bash
# Vendor the web view's front-end libraries from the npm registry into the package, so the web
# view works offline and loads nothing from a CDN. Run when scripts/web-vendor/package.json changes;
# the copied files are committed.
set -euo pipefail
cd "$(dirname "$0")/web-vendor"
npm ci --no-audit --no-fund 2>/dev/null || npm install --no-audit --no-fund
out=../../src/nodesleuth/web/static/vendor
mkdir -p "$out"
cp node_modules/d3/dist/d3.min.js "$out/"
cp node_modules/d3-flame-graph/dist/d3-flamegraph.min.js node_modules/d3-flame-graph/dist/d3-flamegraph.css \
   node_modules/d3-flame-graph/dist/d3-flamegraph-tooltip.min.js \
   node_modules/d3-flame-graph/dist/d3-flamegraph-colorMapper.min.js "$out/"
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css "$out/"
for p in d3 d3-flame-graph uplot; do
    printf '%s %s\n' "$p" "$(node -p "require('./node_modules/$p/package.json').version")"
done > "$out/VERSIONS"
cat "$out/VERSIONS"
