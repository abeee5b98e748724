# Sourced by scripts/demo and scripts/test: one ./.venv with one editable install of fabricmon,
# reused. pip runs again only when pyproject.toml changed or more extras are asked for, so the
# two scripts never reinstall the package under each other's feet.
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "fabricmon needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2; exit 1
fi
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo

# ensure_venv EXTRAS: EXTRAS is "" or a comma list such as "test,dashboards,bench".
ensure_venv() {
  local extras=$1 stamp=.venv/.fabricmon-installed key want have
  if ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' >/dev/null 2>&1; then
    # Debian splits venv/ensurepip into python3-venv.
    $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-venv >/dev/null
  fi
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  key=$(sha256sum pyproject.toml | cut -c1-16)
  # Installed extras are kept in the stamp; an install covers a request when it has every extra.
  have=$(sed -n "s/^$key //p" "$stamp" 2>/dev/null || true)
  want=$(printf '%s\n' ${extras//,/ } ${have//,/ } | sort -u | paste -sd, -)
  if [ -f "$stamp" ] && [ "$want" = "$have" ] && .venv/bin/python -c 'import fabricmon.agent' 2>/dev/null; then
    return 0
  fi
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # setuptools warns on every editable install that a working-directory folder named like the
  # package could shadow it; ours maps fabricmon.* onto agent/ and collectors/, so none can.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q -e ".${want:+[$want]}"
  echo "$key $want" > "$stamp"
}
