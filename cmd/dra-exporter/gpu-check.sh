#!/usr/bin/env bash
# gpu-check: verify the dra-exporter node agent on a host with an NVIDIA GPU, offline.
#
# `make gpu-check` writes bin/gpu-check.sh: this script with the dra-exporter binary (cgo, glibc)
# appended after the __PAYLOAD__ line (tar.gz, base64). Copy that one file to a GPU host (no registry,
# no cluster needed) and run it there:
#
#   ./gpu-check.sh                            DCGM where it starts, NVML otherwise; compare with nvidia-smi
#   ./gpu-check.sh --gpu.source=nvml          NVML alone (or dcgm; --dcgm.hostengine-address=host:5555)
#   ./gpu-check.sh --fake fake.json           no GPU: a simulated node (internal/gpu/gpufake's JSON)
#
# It runs `dra-exporter gpu-check` as the chart runs the agent, as far as a shell can: uid 0 with every
# capability dropped and no_new_privs (setpriv); the chart's seccomp profile and read-only root file
# system are not reproduced. It prints, for every GPU and MIG instance, each field's raw reading (type,
# status, value) beside the agent's series and nvidia-smi's figure, which source and field groups serve.
# Exit status: 0 all agree, 1 a disagreement or no GPU source, 2 it cannot run here.
set -euo pipefail

if [[ "${1:-}" == "--bundle" ]]; then
	# --bundle BINARY OUT: write this script with BINARY appended (make gpu-check does).
	bin=$2 out=$3
	{ sed '/^__PAYLOAD__$/q' "$0"; tar -C "$(dirname "$bin")" -czf - "$(basename "$bin")" | base64; } >"$out"
	chmod +x "$out"
	exit 0
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed '1,/^__PAYLOAD__$/d' "$0" | base64 -d 2>/dev/null | tar -C "$dir" -xzf - 2>/dev/null || true
if [[ ! -x "$dir/dra-exporter" ]]; then
	echo "gpu-check: this copy carries no dra-exporter binary; run make gpu-check and use bin/gpu-check.sh" >&2
	exit 2
fi

args=()
fake=""
while (($#)); do
	case "$1" in
	--fake) fake=$2; shift 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
if [[ -n "$fake" ]]; then
	args+=("--gpu.fake-file=$fake" "--nvidia-smi=fake")
	echo ">> no GPU: the simulated node $fake (its nvidia-smi rendered from the same machine)"
elif ! command -v nvidia-smi >/dev/null; then
	echo "gpu-check: nvidia-smi not found: no NVIDIA GPU driver here. Copy this script to a GPU host, or run it with --fake FILE." >&2
	exit 2
else
	nvidia-smi -L
fi

"$dir/dra-exporter" version | head -1
run=("$dir/dra-exporter" gpu-check "${args[@]}")
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
	echo ">> as the chart runs the agent: uid 0, every capability dropped, no_new_privs"
	run=(setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "${run[@]}")
else
	echo ">> not root or no setpriv: running with this shell's own privileges, not the chart's"
fi
"${run[@]}"
exit
__PAYLOAD__
