# shellcheck shell=bash
# Sourced by scripts/test, scripts/bench, scripts/demo and chaos/run, so that they find and
# install missing Debian packages the same way; each of them says which packages it needs and
# why.
#
#   need_debian WHO PACKAGE:CHECK...
#
# installs, in one apt-get run (through sudo unless root), every PACKAGE whose CHECK fails, and
# says so on stderr as WHO. A CHECK starting with `/` is a file that must exist (a glob: at
# least one match); any other CHECK is a command that must be on the PATH. With
# NEED_DEBIAN_DRY_RUN=1 it prints the apt-get command instead of running it, to try a script's
# checks on a machine that has everything.

need_debian() {
  local who=$1 pair
  shift
  local missing=()
  for pair in "$@"; do
    need_debian_present "${pair#*:}" || missing+=("${pair%%:*}")
  done
  ((${#missing[@]})) || return 0
  echo "$who: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  if [ -n "${NEED_DEBIAN_DRY_RUN:-}" ]; then
    echo "$who: would run: ${sudo:+$sudo }apt-get install -y -qq --no-install-recommends ${missing[*]}" >&2
    return 0
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Whether CHECK holds: a file (or a glob's match) exists, or a command is on the PATH.
need_debian_present() {
  case $1 in
    /*) compgen -G "$1" >/dev/null ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}
