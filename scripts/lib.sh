# shellcheck shell=bash disable=SC2034 # the variables set here are for the scripts sourcing it
# scripts/lib.sh: what Parley's shell scripts share; sourced, never run. Sets ROOT (the
# repository), PROG (the script's path, for messages) and TARGET (cargo's target directory), and
# gives die, timed steps, locks, pinned virtualenvs and throwaway databases.
#
# Functions handed to `step`, `with_lock` or `||` run with errexit ignored (bash's rule for any
# function called in a condition), so they chain their commands with && or `|| return`.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=$(realpath -s --relative-to="$ROOT" "$0" 2>/dev/null || basename "$0")
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET == /* ]] || TARGET=$ROOT/$TARGET
PYTHON=${PYTHON:-python3}

die() {
  echo "$PROG: $*" >&2
  exit 1
}

# --- timed steps ---------------------------------------------------------------------------------

STEPS=()      # one line per finished step, for steps_report
STEP_NOW=""   # the step running now, reported if the script is interrupted
STEP_T0=0
LOCK_FD=""    # set by hold_lock: steps' commands do not inherit it

# step NAME CMD...: prints "==> NAME", runs CMD, records "ok|FAIL <seconds> NAME" and returns
# CMD's status: under set -e a failed step ends the script, unless called as `step ... || ...`.
step() {
  local name=$1 rc=0
  shift
  STEP_NOW=$name STEP_T0=$SECONDS
  echo "==> $name"
  if [[ -n $LOCK_FD ]]; then
    "$@" {LOCK_FD}>&- || rc=$? # servers started by CMD must not keep holding the lock
  else
    "$@" || rc=$?
  fi
  STEPS+=("$(printf '%-4s %5ss  %s' "$([[ $rc == 0 ]] && echo ok || echo FAIL)" $((SECONDS - STEP_T0)) "$name")")
  STEP_NOW=""
  return "$rc"
}

# steps_report TITLE [STATUS]: the table of steps, the total and the exit status (default $?:
# call it first thing in the EXIT trap); returns that status.
steps_report() {
  local rc=${2:-$?}
  [[ -z $STEP_NOW ]] || STEPS+=("$(printf 'STOP %5ss  %s (interrupted)' $((SECONDS - STEP_T0)) "$STEP_NOW")")
  echo
  echo "== $1"
  [[ ${#STEPS[@]} -eq 0 ]] || printf '  %s\n' "${STEPS[@]}"
  echo "  total ${SECONDS}s, exit $rc"
  return "$rc"
}

# --- locks ---------------------------------------------------------------------------------------

# with_lock FILE CMD...: runs CMD holding an exclusive lock on FILE (parallel runs share
# installs), waiting for it. A lock that cannot be taken is an error, never a run without it.
with_lock() {
  local file=$1 fd rc=0
  shift
  mkdir -p "$(dirname "$file")" && exec {fd}>"$file" || return
  if ! flock "$fd"; then
    exec {fd}>&-
    echo "$PROG: cannot lock $file" >&2
    return 1
  fi
  "$@" {fd}>&- || rc=$? # CMD's children must not hold the lock after we release it
  exec {fd}>&-
  return "$rc"
}

# hold_lock FILE WAITING_MESSAGE: takes an exclusive lock on FILE until the script exits,
# printing WAITING_MESSAGE first if another process holds it.
hold_lock() {
  if ! { mkdir -p "$(dirname "$1")" && exec {LOCK_FD}>"$1"; }; then
    die "cannot open $1"
  fi
  flock -n "$LOCK_FD" && return 0
  echo "$2" >&2
  flock "$LOCK_FD" || die "cannot lock $1"
}

# --- Debian packages -----------------------------------------------------------------------------

# apt_install COMMAND PACKAGE: installs PACKAGE (Debian) unless COMMAND is already on PATH (or,
# when COMMAND is a path, exists). Needs root; otherwise says what to install and fails.
apt_install() {
  if [[ $1 == */* ]]; then [[ -e $1 ]] && return 0; else command -v "$1" >/dev/null && return 0; fi
  [[ $(id -u) == 0 ]] || die "$1 is missing: install it (apt-get install $2)"
  echo "$PROG: installing $2 (apt-get)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

# --- virtualenvs ---------------------------------------------------------------------------------

# venv_install NAME PROBE... -- PIP_ARGS...: makes .parley/venv-NAME (gitignored) hold PIP_ARGS
# (pins, or -r FILE relative to ROOT), unless its stamp says it already does and PROBE (a command
# run in the venv's directory) works. Quiet: the pip log is shown only on failure. Parallel runs
# wait for each other. With VENV_CHECK_ONLY=1 it only says (by its status) whether it is ready.
venv_install() {
  local name=$1 probe=() venv want prev="" arg
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do
    probe+=("$1")
    shift
  done
  [[ ${1:-} == -- ]] || { echo "venv_install: no -- before the pip arguments" >&2; return 2; }
  shift
  venv=$ROOT/.parley/venv-$name
  # The stamp: the arguments and the content of every requirements file.
  want="$*"
  for arg in "$@"; do
    if [[ $prev == -r ]]; then want+=" $(sha256sum <"$ROOT/$arg" | cut -d' ' -f1)" || return; fi
    prev=$arg
  done
  _venv_ok "$venv" "$want" "${probe[@]}" && return 0
  [[ -z ${VENV_CHECK_ONLY:-} ]] || return 1
  with_lock "$ROOT/.parley/venv-$name.lock" _venv_make "$venv" "$want" "${probe[@]}" -- "$@"
}

# The project's Python tools, one virtualenv each: the pins (here or in the requirements file)
# and the probe that proves an install works.
SAM_CLI_VERSION=1.170.0 # aws-sam-cli: rust-cargolambda is no longer a beta build method here
CFN_LINT_VERSION=1.58.0
MOTO_VERSION=5.2.5
venv_aws() {
  venv_install aws test -x bin/sam -a -x bin/cfn-lint -- \
    "aws-sam-cli==$SAM_CLI_VERSION" "cfn-lint==$CFN_LINT_VERSION"
}
# cargo-lambda, and ziglang: the linker `cargo lambda build` (and so `sam build`) uses.
venv_lambda() { venv_install lambda bin/cargo-lambda lambda --version -- -r tests/lambda/requirements.txt; }
venv_interop() { venv_install interop bin/python -c 'import mcp' -- -r tests/interop/requirements.txt; }
# Playwright for the page's browser test; it drives Debian's chromium, never a browser of its own.
venv_page() { venv_install page bin/python -c 'import playwright.sync_api' -- -r tests/page/requirements.txt; }
venv_moto() { venv_install moto test -x bin/moto_server -- "moto[server]==$MOTO_VERSION"; }
VENVS=$ROOT/.parley # venv NAME is $VENVS/venv-NAME

# npm_ci DIR PROBE: `npm ci` in DIR (relative to ROOT; its package.json + package-lock.json, so
# exact versions) unless its stamp says it already did and DIR/node_modules/PROBE exists. Quiet:
# the log is shown only on failure. Parallel runs wait for each other.
npm_ci() { with_lock "$VENVS/npm-${1//\//-}.lock" _npm_ci "$1" "$2"; }
_npm_ci() {
  local dir=$ROOT/$1 log=$VENVS/npm-${1//\//-}.log want
  local stamp=$dir/node_modules/.parley-stamp
  want=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1) || return
  if [[ -f $stamp && $(<"$stamp") == "$want" && -e $dir/node_modules/$2 ]]; then return 0; fi
  command -v npm >/dev/null || { echo "$PROG: npm is not installed" >&2; return 1; }
  echo "$PROG: npm ci in $1" >&2
  if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
    echo "$want" >"$stamp"
    return
  fi
  tail -n 30 "$log" >&2
  return 1
}

# _venv_ok VENV STAMP PROBE...
_venv_ok() {
  local venv=$1 want=$2
  shift 2
  [[ -x $venv/bin/python && -f $venv/.parley-stamp && $(<"$venv/.parley-stamp") == "$want" ]] &&
    (cd "$venv" && "$@") >/dev/null 2>&1
}

# _venv_make VENV STAMP PROBE... -- PIP_ARGS...: under the lock.
_venv_make() {
  local venv=$1 want=$2 probe=() log
  shift 2
  while [[ $1 != -- ]]; do
    probe+=("$1")
    shift
  done
  shift
  _venv_ok "$venv" "$want" "${probe[@]}" && return 0 # a parallel run installed it meanwhile
  echo "$PROG: installing $* into ${venv#"$ROOT/"}" >&2
  log=$venv.log
  rm -rf "$venv"
  if { "$PYTHON" -m venv "$venv" &&
    (cd "$ROOT" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$@") &&
    (cd "$venv" && "${probe[@]}"); } >"$log" 2>&1; then
    echo "$want" >"$venv/.parley-stamp"
    return
  fi
  tail -n 30 "$log" >&2
  echo "$PROG: installing $* into ${venv#"$ROOT/"} failed (full log: ${log#"$ROOT/"})" >&2
  rm -rf "$venv"
  return 1
}

# --- the build -----------------------------------------------------------------------------------

# build_workspace: THE debug build. scripts/test, scripts/dev and tests/*/run all build every
# target of every package (so one feature set: `cargo run -p X` would resolve another and
# compile again) and run the binaries from $TARGET/debug. Quiet (warnings and errors still
# show); with BUILD_PROGRESS=1 and a terminal on stderr, cargo's own progress ("Compiling x",
# then a bar of crates done of all) instead, so a first build of minutes is not a silent one.
build_workspace() {
  local quiet=--quiet
  [[ ${BUILD_PROGRESS:-0} == 1 && -t 2 ]] && quiet=
  cargo build ${quiet:+"$quiet"} --workspace --all-targets
}

# --- the local Postgres (scripts/pg) -------------------------------------------------------------

# One install of the server's binaries per machine (PARLEY_PG_INSTALL, default /var/tmp/parley-pg:
# pgserver from PyPI, 34 MB), one server per clone: PG_HOME (PARLEY_PG_HOME) holds its
# data, socket, log, the Rust tests' private clusters and the locks of scripts/test, by default
# a directory named after this clone's path, so two clones on a machine never share databases.
# Under /var/tmp, not the clone: when run as root the server runs as a system user, who must
# be able to reach its directory (a clone under /root is closed to it).
PG_BASE=/var/tmp/parley-pg
PG_INSTALL=${PARLEY_PG_INSTALL:-$PG_BASE}
PG_HOME=${PARLEY_PG_HOME:-$PG_BASE/clones/$(basename "$ROOT" | tr -c 'A-Za-z0-9._\n-' _)-$(printf %s "$ROOT" | sha256sum | cut -c1-8)}

# --- processes and databases ---------------------------------------------------------------------

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# stop_pid PID: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# scratch_db PREFIX: a database PREFIX_<random> beside DATABASE_URL's (a superuser URL),
# migrated and loaded with `parley demo-data --feedback 2000` from $TARGET/debug (build first).
# Sets SCRATCH_DB and SCRATCH_URL, or SCRATCH_ERROR when it fails; call scratch_db_drop from the
# EXIT trap.
SCRATCH_DB=""
SCRATCH_URL=""
SCRATCH_ERROR=""
_scratch_created=0
scratch_db() {
  local name url out
  name=${1}_$(rand_hex 6)
  [[ -n ${DATABASE_URL:-} ]] || { SCRATCH_ERROR="set DATABASE_URL to a superuser URL of a running Postgres"; return 1; }
  _pg_tools || return
  # DATABASE_URL with its database name replaced (query parameters such as sslmode are kept).
  url=$("$PYTHON" -c '
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
if p.scheme not in ("postgres", "postgresql"):
    sys.exit("DATABASE_URL must be a postgres:// URL")
print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$DATABASE_URL" "$name" 2>&1) ||
    { SCRATCH_ERROR=$url; return 1; }
  out=$("${_pg_bin}createdb" --maintenance-db "$DATABASE_URL" "$name" 2>&1) ||
    { SCRATCH_ERROR="createdb $name: $out"; return 1; }
  SCRATCH_DB=$name SCRATCH_URL=$url _scratch_created=1
  out=$(DATABASE_URL=$url "$TARGET/debug/parley" migrate 2>&1) ||
    { SCRATCH_ERROR="parley migrate: $(tail -n 5 <<<"$out")"; return 1; }
  out=$(DATABASE_URL=$url "$TARGET/debug/parley" demo-data --feedback 2000 2>&1) ||
    { SCRATCH_ERROR="parley demo-data: $(tail -n 5 <<<"$out")"; return 1; }
}

scratch_db_drop() {
  [[ $_scratch_created == 1 ]] || return 0
  "${_pg_bin}dropdb" --if-exists --force --maintenance-db "$DATABASE_URL" "$SCRATCH_DB" >/dev/null 2>&1 ||
    echo "$PROG: could not drop database $SCRATCH_DB" >&2
  _scratch_created=0
}

# createdb/dropdb from $PARLEY_PG_BIN, else `scripts/pg bin`, else PATH.
_pg_bin=""
_pg_tools() {
  local dir
  if [[ -n ${PARLEY_PG_BIN:-} && -x $PARLEY_PG_BIN/createdb ]]; then
    _pg_bin=$PARLEY_PG_BIN/
  elif dir=$("$ROOT/scripts/pg" bin 2>/dev/null) && [[ -x $dir/createdb ]]; then
    _pg_bin=$dir/
  elif command -v createdb >/dev/null && command -v dropdb >/dev/null; then
    _pg_bin=""
  else
    SCRATCH_ERROR="no createdb/dropdb (set PARLEY_PG_BIN, or run scripts/pg install)"
    return 1
  fi
}
