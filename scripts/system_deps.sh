#!/bin/sh
# System packages (Debian names) that `make run` and `make test` need, installed when missing.
#
#   scripts/system_deps.sh run     python3-venv + PortAudio (libportaudio2: the microphone of `specscribe live`)
#   scripts/system_deps.sh test    the same + chromium, chromium-driver (browser tests), ffmpeg, espeak-ng
#
# Nothing missing: prints nothing, exits 0 (a few `command -v` checks, no apt).
# Missing, and root or passwordless sudo: apt-get update + apt-get install, then exits 0.
# Missing otherwise (or no apt-get): ONE line naming the exact command to run, exit 1, so that the
# Makefile stops before doing anything else. SPECSCRIBE_SKIP_SYSTEM_DEPS=1 skips all of this
# (another distribution, with the equivalents installed by hand).
set -eu

mode=${1:-}
case "$mode" in
  run|test) ;;
  *) echo "usage: $0 run|test" >&2; exit 2 ;;
esac
[ "${SPECSCRIBE_SKIP_SYSTEM_DEPS:-0}" = 1 ] && exit 0

have() { command -v "$1" >/dev/null 2>&1; }

# ldconfig lives in /sbin, which a normal user's PATH may lack.
ldconfig_cmd=""
for c in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
  if have "$c"; then ldconfig_cmd=$c; break; fi
done
has_lib() { [ -n "$ldconfig_cmd" ] && "$ldconfig_cmd" -p 2>/dev/null | grep -q "$1"; }

python=${PYTHON:-python3}
need=""
# Debian's python3 has no venv/ensurepip without python3-venv: `python3 -m venv` would fail.
if ! have "$python"; then
  need="$need python3 python3-venv"
elif ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need="$need python3-venv"
fi
has_lib libportaudio.so || need="$need libportaudio2"
if [ "$mode" = test ]; then
  have chromium || need="$need chromium"
  have chromedriver || need="$need chromium-driver"
  have ffmpeg || need="$need ffmpeg"
  have espeak-ng || need="$need espeak-ng"
fi
[ -z "$need" ] && exit 0
need=${need# }

if ! have apt-get; then
  echo "specscribe: missing system packages (Debian names): $need; install their equivalents with your package manager, then rerun (or set SPECSCRIBE_SKIP_SYSTEM_DEPS=1)" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  sudo=""
elif have sudo && sudo -n true >/dev/null 2>&1; then
  sudo="sudo -n"
else
  echo "specscribe: missing system packages; run this, then make $mode again: sudo apt-get update && sudo apt-get install -y --no-install-recommends $need" >&2
  exit 1
fi

echo "specscribe: installing system packages: $need" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# shellcheck disable=SC2086  # $need is a list of package names
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
