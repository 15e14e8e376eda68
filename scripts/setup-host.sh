#!/usr/bin/env bash
# Bring a fresh Debian/Ubuntu host to the state cellblock's demo and tests need.
# Idempotent: every step checks before it acts, so running it twice changes nothing.
#
#   system packages  bubblewrap debootstrap docker.io runsc postgresql libseccomp2 ...
#   docker           daemon running, runsc registered as a runtime (with --network=none)
#
# Needs root (it installs packages and starts dockerd). Prints what it does.
set -euo pipefail

log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E "$0" "$@"; fi
  echo "setup-host.sh must run as root (it installs packages and starts dockerd)" >&2
  exit 1
fi

PACKAGES=(bubblewrap debootstrap docker.io runsc postgresql postgresql-client libseccomp2
          util-linux iproute2 procps ca-certificates python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "system packages present"
fi

# --- docker: register gVisor's runsc, then make sure the daemon runs -----------------
DAEMON_JSON=/etc/docker/daemon.json
mkdir -p /etc/docker
changed=0
if ! python3 - "$DAEMON_JSON" <<'PY'
import json, sys
path = sys.argv[1]
try:
    cfg = json.load(open(path))
except (FileNotFoundError, ValueError):
    sys.exit(1)
rt = cfg.get("runtimes", {}).get("runsc", {})
args = rt.get("runtimeArgs", [])
sys.exit(0 if rt.get("path") == "/usr/bin/runsc" and {"--network=none", "--oci-seccomp"} <= set(args) else 1)
PY
then
  log "registering runsc as a docker runtime in $DAEMON_JSON"
  python3 - "$DAEMON_JSON" <<'PY'
import json, sys
path = sys.argv[1]
try:
    cfg = json.load(open(path))
except (FileNotFoundError, ValueError):
    cfg = {}
# --network=none is required: without it runsc refuses containers with no network.
# --oci-seccomp makes gVisor enforce our seccomp profile inside its kernel too (without
# it the profile is ignored and cellblock refuses to run gvisor sandboxes).
# No --platform=kvm: it hangs on some hosts.
cfg.setdefault("runtimes", {})["runsc"] = {
    "path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--oci-seccomp"]}
json.dump(cfg, open(path, "w"), indent=2)
PY
  changed=1
fi

if ! timeout 10 docker info >/dev/null 2>&1; then
  if pgrep -x dockerd >/dev/null; then
    log "dockerd is running but not answering yet; waiting"
  else
    log "starting dockerd"
    if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
      systemctl start docker
    else
      setsid nohup dockerd >/var/log/cellblock-dockerd.log 2>&1 < /dev/null &
    fi
  fi
  for _ in $(seq 1 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  timeout 10 docker info >/dev/null 2>&1 || { echo "dockerd did not come up; see /var/log/cellblock-dockerd.log" >&2; exit 1; }
elif [ "$changed" -eq 1 ]; then
  log "reloading dockerd configuration"
  pkill -HUP -x dockerd || true
  sleep 1
fi
for _ in $(seq 1 20); do
  docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q runsc && break
  sleep 0.5
done
docker info --format '{{json .Runtimes}}' | grep -q runsc || { echo "runsc is not registered with dockerd" >&2; exit 1; }
log "docker ready (runtimes: $(docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}'))"
