# Sourced by the scripts: which Python interpreter xstage uses.
#   PYTHON=/path/to/python  a user's own environment (setup installs the pinned packages into it)
#   otherwise               the project's environment, XSTAGE_VENV (default: .venv in the checkout)
xstage_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
XSTAGE_VENV=${XSTAGE_VENV:-$xstage_root/.venv}
if [ -n "${PYTHON:-}" ]; then
  XSTAGE_PYTHON=$PYTHON
else
  XSTAGE_PYTHON=$XSTAGE_VENV/bin/python
fi
export XSTAGE_PYTHON
