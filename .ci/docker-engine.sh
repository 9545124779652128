#!/usr/bin/env bash
# Make a Docker engine answer on this machine, for CI only.
#
# CI machines here ship the docker CLI but no daemon, and two things about them
# stop `docker run --privileged` (which kind needs):
#   - the capability bounding set lacks some capabilities (CAP_MAC_OVERRIDE),
#     and Docker asks runc for every capability it knows, so runc fails with
#     "unable to apply caps: operation not permitted";
#   - the hard limit on open files is low (20000), below Docker's default.
# So this script installs Debian's docker.io, registers a small runc wrapper
# that drops capabilities outside the bounding set from each OCI spec, caps
# the containers' nofile limit at the hard limit, and starts dockerd.
#
# On a machine where `docker info` already answers, it does nothing at all.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  echo "docker-engine: an engine answers; nothing to do"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "docker-engine: no engine answers and not root; start one yourself" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
if ! command -v dockerd >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1; then
  echo "docker-engine: apt-get install docker.io jq"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io jq iptables >/dev/null
fi

wrapper=/usr/local/libexec/podkeeper/runc-bounded-caps
mkdir -p "$(dirname "$wrapper")"
cat > "$wrapper.new" <<'WRAPPER'
#!/bin/sh
# OCI runtime wrapper installed by podkeeper's .ci/docker-engine.sh: removes
# from the OCI spec every capability outside this process's bounding set
# (config.json of the bundle for create/run, the --process file for exec),
# then runs runc with the same arguments.
set -eu
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
names="CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE"
allowed=""
i=0
for n in $names; do
  if [ $(( (0x$bnd >> i) & 1 )) = 1 ]; then allowed="$allowed\"$n\","; fi
  i=$((i + 1))
done
allowed="[${allowed%,}]"

# filter FILE PREFIX: keep only allowed capabilities in PREFIX.capabilities (PREFIX .process or empty)
filter() {
  [ -f "$1" ] || return 0
  tmp="$1.bounded.$$"
  jq --argjson ok "$allowed" "
    if $2.capabilities then
      $2.capabilities |= with_entries(.value |= (if type == \"array\" then map(select(. as \$c | \$ok | index(\$c))) else . end))
    else . end" "$1" > "$tmp" && mv "$tmp" "$1"
}

cmd=""; bundle="."; process=""; prev=""
for a in "$@"; do
  case "$prev" in
    --bundle|-b) bundle=$a ;;
    --process|-p) [ "$cmd" = exec ] && process=$a ;;
  esac
  case "$a" in
    --bundle=*) bundle=${a#--bundle=} ;;
    --process=*) process=${a#--process=} ;;
    create|run|exec) [ -z "$cmd" ] && cmd=$a ;;
  esac
  prev=$a
done
case "$cmd" in
  create|run) filter "$bundle/config.json" .process ;;
  exec) [ -n "$process" ] && filter "$process" "" ;;
esac
exec /usr/bin/runc "$@"
WRAPPER
chmod 755 "$wrapper.new"
mv "$wrapper.new" "$wrapper"

nofile=$(ulimit -Hn)
mkdir -p /etc/docker
cat > /etc/docker/daemon.json <<JSON
{
  "runtimes": { "bounded-caps": { "path": "$wrapper" } },
  "default-runtime": "bounded-caps",
  "default-ulimits": { "nofile": { "Name": "nofile", "Hard": $nofile, "Soft": $nofile } },
  "storage-driver": "overlay2"
}
JSON

echo "docker-engine: starting dockerd (log /var/log/podkeeper-dockerd.log)"
nohup setsid dockerd >/var/log/podkeeper-dockerd.log 2>&1 </dev/null &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "docker-engine: ready ($(docker version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done
echo "docker-engine: dockerd did not answer within 60 s; its log:" >&2
tail -50 /var/log/podkeeper-dockerd.log >&2
exit 1
