#!/usr/bin/env bash
# Create/refresh the project's virtual environment (.venv) and the vendored MathJax.
# Called by `make book` and `make test`; safe and quick to run again.
#   - torch is installed only if the venv cannot import it (never reinstalled: an
#     unpinned torch drags in gigabytes of CUDA wheels; Colab keeps its own).
#   - pip runs only when requirements.txt, pyproject.toml or this script changed (stamp file).
#   - MathJax 3 comes from the npm registry so the built site needs no network at view time.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
MATHJAX_VERSION=3.2.2
# Sphinx copies this folder into _build/html/_static (see html_static_path in _config.yml).
STATIC_DIR="$VENV/share/path-book-static"
STAMP="$VENV/.path-book-deps"

if [ ! -x "$PY" ]; then
    echo "setup_env: creating $VENV"
    python3 -m venv "$VENV"
fi

if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "setup_env: installing $TORCH_SPEC"
    "$PY" -m pip install -q "$TORCH_SPEC"
fi

want="$(cat requirements.txt constraints.txt pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "setup_env: installing requirements.txt (versions from constraints.txt) and the project (editable)"
    "$PY" -m pip install -q -r requirements.txt -c constraints.txt   # pinned: upgrades are commits
    "$PY" -m pip install -q --no-deps -e .   # deps are in requirements.txt; keeps torch untouched
    "$PY" -m pip check || echo "setup_env: warning: pip check reports conflicts (see above)"
    echo "$want" > "$STAMP"
fi

if [ ! -f "$STATIC_DIR/mathjax/tex-svg-full.js" ]; then
    if ! command -v npm >/dev/null; then
        # Debian CI images run as root; elsewhere install Node.js yourself.
        echo "setup_env: npm not found, installing it with apt-get"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm
    fi
    echo "setup_env: fetching mathjax@$MATHJAX_VERSION from the npm registry"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "mathjax@$MATHJAX_VERSION" >/dev/null && tar xzf mathjax-*.tgz)
    mkdir -p "$STATIC_DIR"
    rm -rf "$STATIC_DIR/mathjax"
    # es5/ holds the combined tex-svg-full.js plus the lazily loaded components (menu, a11y,
    # speech rules). The other combined bundles are never loaded: leave them out (~10 MB).
    cp -r "$tmp/package/es5" "$STATIC_DIR/mathjax"
    (cd "$STATIC_DIR/mathjax" && rm -f tex-chtml*.js tex-mml-*.js tex-svg.js mml-*.js node-main.js)
fi

echo "setup_env: ok ($("$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'))"
