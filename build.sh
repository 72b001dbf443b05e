#!/usr/bin/env bash
# kernelgen's one entry point. Sets up what each command needs (skipping what is already
# there, so a second run is quick), then:
#
#   ./build.sh                 install kernelgen into .venv, build the wheel, assemble site/,
#                              serve it on 127.0.0.1:${PORT:-8000} (serve's options work here too)
#   ./build.sh install         .venv/bin/kernelgen and `import kernelgen` in .venv (an editable
#                              install of core/: `source .venv/bin/activate`)
#   ./build.sh wheel           build the wheel into dist/ (pip install dist/kernelgen-*.whl)
#   ./build.sh site            build the wheel and assemble the self-contained web site in site/
#   ./build.sh serve [--cors] [--isolated]
#                              serve site/ (assembles it first); --cors lets pages of any other
#                              origin embed it (web/kernelgen.js), --isolated sends COOP/COEP
#                              (cross-origin isolated: Stop interrupts Python in place)
#   ./build.sh test [ARGS...]  install every test tool and run the whole pytest suite (ARGS go to
#                              pytest, e.g. ./build.sh test -k wgsl; ./build.sh test -m "not tools"
#                              runs only the tests needing no wgpu/ptxas/Tint/Chromium)
#   ./build.sh fuzz [N]        run N random programs (default 300) on every device vs numpy, then
#                              N mutated bundle/safetensors/ONNX files (fuzz_files.py); summary
#   ./build.sh bench [ARGS...] run every benchmark against the peers (tinygrad, TF.js,
#                              onnxruntime-web, bare Pyodide): one table, bench/results.json
#
# Installs: Debian packages (Chromium, Mesa's Vulkan driver) with apt-get, a Python venv in
# .venv, npm packages in node_modules, and the Pyodide lockfile tool (Python >= 3.12) in
# .tools/. Only PyPI, npm and Debian's apt are used; nothing is fetched from anywhere else.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$PWD
VENV=$ROOT/.venv
TOOLS=$ROOT/.tools
PORT=${PORT:-8000}
MICROPIP_VERSION=0.11.1
APT_PACKAGES=(chromium mesa-vulkan-drivers libvulkan1)

log() { printf '\033[1m[build.sh]\033[0m %s\n' "$*" >&2; }
die() { printf '[build.sh] error: %s\n' "$*" >&2; exit 2; }

# pip, minus the warnings this machine's pip config prints for every package it looks up.
# With pipefail, the pipeline fails when pip does.
pip_quiet() {
  "$@" 2>&1 | { grep -v -e 'is ignored: it is neither a file nor a directory' \
                        -e "Running pip as the 'root' user" || true; }
}

# A stamp records what an install step installed; the step is skipped while it still matches.
stamp_matches() { [[ -f $1 && "$(cat "$1")" == "$2" ]]; }
fingerprint() { cat "$@" | sha256sum | cut -c1-16; }

# --- setup steps ---

setup_apt() {
  local missing=()
  for package in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$package")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  log "apt-get install ${missing[*]}"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    "${missing[@]}" >/dev/null
}

find_python() {  # the first Python >= $1 on PATH (pyenv versions included)
  local minor=$1
  for candidate in python3 python3.11 python3.12 python3.13 \
                   "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c "import sys; sys.exit(sys.version_info < (3, $minor))" 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  die "no Python >= 3.$minor found (install it, or put it on PATH)"
}

# .venv: setuptools to build the wheel; with extras (e.g. "test,webgpu,ptx"), kernelgen itself
# (editable) with those extras.
setup_venv() {
  local extras=${1:-}
  if [[ ! -x $VENV/bin/python ]]; then
    log "creating .venv"
    "$(find_python 11)" -m venv "$VENV"
  fi
  local stamp=$VENV/.kernelgen-stamp-${extras:-base} want
  want=$(fingerprint pyproject.toml)
  stamp_matches "$stamp" "$want" && return
  local packages=("setuptools>=68" wheel)
  [[ -n $extras ]] && packages+=(-e ".[$extras]")
  log "pip install ${packages[*]} into .venv"
  pip_quiet "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}"
  echo "$want" >"$stamp"
}

setup_npm() {
  local want
  want=$(fingerprint package.json package-lock.json)
  stamp_matches node_modules/.kernelgen-stamp "$want" && return
  log "npm ci (pyodide, webgpu)"
  # webgpu's only install script is for macOS; skip scripts.
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  echo "$want" >node_modules/.kernelgen-stamp
}

# pyodide's lockfile tool needs Python >= 3.12; it gets a venv of its own in .tools/.
setup_lockfile_tool() {
  local venv=$TOOLS/pyodide-lock-venv
  # The venv's scripts carry the absolute path it was made at in their #! line: run them through
  # its python, so a .tools/ shared with another checkout keeps working.
  [[ -f $venv/bin/pyodide ]] && "$venv/bin/python" -c "import pyodide_cli" 2>/dev/null && return
  log "installing the Pyodide lockfile tool into .tools/"
  rm -rf "$venv"
  "$(find_python 12)" -m venv "$venv"
  pip_quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    pyodide-cli 'pyodide-lock[wheel]' pkginfo
}

# The site step's data tools: numpy and scikit-learn (the digits demo's training data set ships
# inside scikit-learn: nothing is downloaded but the package).
setup_site_data_tools() {
  "$VENV/bin/python" -c "import numpy, sklearn" 2>/dev/null && return
  log "pip install numpy scikit-learn into .venv (the digits demo's training data)"
  pip_quiet "$VENV/bin/python" -m pip install -q --disable-pip-version-check numpy scikit-learn
}

# The site step's API reference tool: pdoc renders the docstrings of kg's public names as HTML
# (site/api/) with its styles and search index inline or beside the pages, fetching nothing.
setup_api_doc_tool() {
  "$VENV/bin/python" -c "import pdoc" 2>/dev/null && return
  log "pip install pdoc into .venv (the API reference page)"
  pip_quiet "$VENV/bin/python" -m pip install -q --disable-pip-version-check pdoc
}

setup_xdg_runtime_dir() {  # Mesa complains without a writable XDG_RUNTIME_DIR
  if [[ -z ${XDG_RUNTIME_DIR:-} || ! -w ${XDG_RUNTIME_DIR:-/nonexistent} ]]; then
    export XDG_RUNTIME_DIR=$TOOLS/xdg-runtime
    mkdir -p "$XDG_RUNTIME_DIR"
    chmod 700 "$XDG_RUNTIME_DIR"
  fi
}

# .venv's `kernelgen` command and `import kernelgen`: an editable install of this checkout's
# core/ (skipped while .venv's kernelgen is already this checkout's).
setup_editable() {
  setup_venv
  local here
  here=$(cd / && env -u PYTHONPATH "$VENV/bin/python" -c \
    'import kernelgen, os; print(os.path.dirname(os.path.abspath(kernelgen.__file__)))' \
    2>/dev/null || true)
  [[ -x $VENV/bin/kernelgen && $here == "$ROOT/core/kernelgen" ]] && return
  log "pip install -e . into .venv (the kernelgen command and import kernelgen)"
  pip_quiet "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation -e .
}

# --- commands ---

build_wheel() {
  setup_venv
  rm -rf dist build
  log "building the wheel"
  pip_quiet "$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w dist .
  ls dist/kernelgen-*-py3-none-any.whl >/dev/null
}

# site/: index.html, web/, and pyodide/ holding the Pyodide runtime, the micropip and kernelgen
# wheels, and a pyodide-lock.json that lists both, so the page can loadPackage('kernelgen')
# from its own origin (see web/BUILDING.md).
assemble_site() {
  build_wheel
  setup_npm
  setup_lockfile_tool
  setup_site_data_tools
  setup_api_doc_tool
  local wheels=$TOOLS/wheels
  if [[ ! -f $wheels/micropip-$MICROPIP_VERSION-py3-none-any.whl ]]; then
    log "downloading micropip $MICROPIP_VERSION (for Pyodide's Python 3.14)"
    pip_quiet "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.14 -d "$wheels" "micropip==$MICROPIP_VERSION"
  fi
  log "assembling site/"
  rm -rf site
  mkdir -p site/pyodide
  cp index.html site/
  cp -r web site/web
  rm site/web/serve.py
  # The digits demo runs its exported bundle (no Python in the page unless asked for).
  PYTHONPATH=core "$VENV/bin/python" -m kernelgen export web/demos/digits_model.py \
    --out site/web/demos/digits_bundle >/dev/null
  # Its "Train in the page" trains on this split of scikit-learn's digits, from the site itself.
  PYTHONPATH=core "$VENV/bin/python" web/demos/digits_data.py site/web/demos/digits_data.json
  PYTHONPATH=core "$VENV/bin/python" web/demos/filters_model.py site/web/demos/filters_bundles
  # The Generate demo's language model (committed weights, examples/train_lm.py), exported too.
  if [[ -f web/demos/lm/weights.safetensors ]]; then
    PYTHONPATH=core "$VENV/bin/python" -m kernelgen export web/demos/lm_model.py \
      --out site/web/demos/lm_bundle >/dev/null
    cp examples/tiny_gpt.py site/web/demos/lm/   # the model's source, for training in the page
  fi
  # The API reference (the header's "API" link): kg, kg.nn, kg.optim, kg.onnx, the bundles and
  # the errors, from their docstrings; web/api-template shows Tensor's mixed-in methods.
  rm -r site/web/api-template
  PYTHONPATH=core "$VENV/bin/python" -m pdoc -t web/api-template --docformat markdown \
    --no-math --no-mermaid --footer-text "kernelgen API reference" \
    -o site/api kernelgen kernelgen.nn.optim kernelgen.errors >/dev/null
  # The page's service worker must sit at the site root to cover index.html; the editor is
  # Ace from npm (only the files the page loads).
  mv site/web/sw.js site/sw.js
  mkdir -p site/web/vendor/ace
  cp node_modules/ace-builds/src-min-noconflict/{ace.js,mode-python.js,theme-one_dark.js} \
    site/web/vendor/ace/
  cp -r node_modules/pyodide/. site/pyodide/
  rm -f site/pyodide/{package.json,README.md,*.d.ts,console*.html}
  cp "$wheels/micropip-$MICROPIP_VERSION-py3-none-any.whl" dist/kernelgen-*.whl site/pyodide/
  (
    cd site/pyodide
    local tool=$TOOLS/pyodide-lock-venv/bin
    "$tool/python" "$tool/pyodide" lockfile add-wheels --base-path . \
      --input pyodide-lock.json --output pyodide-lock.new.json ./*.whl >/dev/null
    mv pyodide-lock.new.json pyodide-lock.json
  )
}

serve_site() {  # ARGS: web/serve.py's options (--cors, --isolated)
  exec "$VENV/bin/python" web/serve.py --port "$PORT" --directory site "$@"
}

installed_note() {
  log "kernelgen is installed in .venv: .venv/bin/kernelgen --help, or source .venv/bin/activate"
}

run_tests() {
  setup_apt
  setup_venv test,webgpu,ptx
  setup_npm
  setup_bench_env   # tests/bench/test_bench_peers.py: the bench page's peers must stay correct
  setup_real_models
  setup_xdg_runtime_dir
  # Every tool must be there: a missing one fails its tests instead of skipping them.
  export KERNELGEN_REQUIRE_ALL=1
  # With no paths in ARGS, pytest runs testpaths from pyproject.toml: tests/.
  # In CI the slowest tests are listed, so the run's time can be watched against its budget.
  local durations=()
  [ -n "${CI:-}" ] && durations=(--durations=30)
  log "python -m pytest -q ${durations[*]} $*"
  exec "$VENV/bin/python" -m pytest -q "${durations[@]}" "$@"
}

run_fuzz() {
  setup_apt
  setup_venv test,webgpu,ptx
  setup_xdg_runtime_dir
  log "python tests/helpers/fuzz_runner.py ${1:-300}"
  exec "$VENV/bin/python" tests/helpers/fuzz_runner.py "${1:-300}" "${@:2}"
}

# .venv-bench: the peers, never imported by kernelgen: tinygrad 0.10.1 with the wgpu its WEBGPU
# device uses (same adapter as ours), TF.js with its WebGPU backend and onnxruntime-web (npm,
# served locally; bench/peers.py).
setup_bench_env() {
  local venv=$ROOT/.venv-bench want="tinygrad==0.10.1 wgpu==0.32.* numpy tfjs@4.22.0 ort-web@1.31.1"
  stamp_matches "$venv/.stamp" "$want" && return
  log "installing the benchmark peers into .venv-bench ($want)"
  [[ -x $venv/bin/python ]] || "$(find_python 11)" -m venv "$venv"
  pip_quiet "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    tinygrad==0.10.1 'wgpu==0.32.*' numpy
  mkdir -p "$venv/npm"
  npm install --prefix "$venv/npm" --no-audit --no-fund --loglevel=error \
    @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-webgpu@4.22.0 onnxruntime-web@1.31.1
  echo "$want" >"$venv/.stamp"
}

setup_real_models() {  # the pinned silero-vad wheel (11 MB): its models are checked in the tests (42)
  "$VENV/bin/python" -c 'import sys; sys.path.insert(0, "bench"); import pypi_models as m
m.wheel(*m.PACKAGES["silero"])' || die "could not fetch the silero-vad wheel (pip download)"
}

run_bench() {
  setup_apt
  setup_venv test,webgpu,ptx
  assemble_site
  setup_bench_env
  setup_xdg_runtime_dir
  log "python bench/run.py $*"
  exec "$VENV/bin/python" bench/run.py "$@"
}

not_implemented() {
  die "'./build.sh $1' is not implemented yet"
}

command=${1:-all}
[[ $# -gt 0 ]] && shift
[[ $command == --* ]] && set -- "$command" "$@" && command=all   # ./build.sh --cors
case $command in
  all) setup_editable; assemble_site; installed_note; serve_site "$@" ;;
  install) setup_editable; installed_note ;;
  wheel) build_wheel; log "built $(ls dist/kernelgen-*.whl): pip install it into any venv" ;;
  site) assemble_site ;;
  serve) assemble_site; serve_site "$@" ;;
  test) run_tests "$@" ;;
  fuzz) run_fuzz "$@" ;;
  bench) run_bench "$@" ;;
  -h | --help | help) sed -n '2,25p' "$0" | cut -c3- ;;
  *) die "unknown command '$command' (try ./build.sh help)" ;;
esac
