#!/usr/bin/env bash
# gpu-check: prove the dra-exporter node agent on a host with an NVIDIA GPU, offline, in under 5 minutes.
#
# `make gpu-check` writes bin/gpu-check.sh: this script with the dra-exporter binary (cgo, glibc)
# appended after the __PAYLOAD__ line (tar.gz, base64). Copy that one file to a GPU host (no registry,
# no cluster needed) and run it there as root:
#
#   ./gpu-check.sh                            DCGM where it starts, NVML otherwise
#   ./gpu-check.sh --gpu.source=nvml          NVML alone (or dcgm; --dcgm.hostengine-address=host:5555)
#   ./gpu-check.sh --json report.json         the checks as JSON too (name, status, evidence)
#   ./gpu-check.sh --allow-not-proven=load    a check that may end not proven (repeatable)
#   ./gpu-check.sh --fake fake.json --fake-tools DIR
#                                             no GPU: a simulated node (internal/node/gpu/gpufake's JSON) and
#                                             the fake nvidia-smi, gpu-burn and nvidia-driver-proc of
#                                             cmd/dra-exporter/testdata/fakenvidia in DIR
#
# What it does (docs/node-agent.md says what that proves and what it cannot):
#  1. a GPU load for the reads on one GPU (--load-gpu, index 0 by default): dcgmproftester13/12/11
#     (ships with DCGM; -t 1004, tensor pipes), else python3 with a CUDA torch (matrix products), else
#     none: the load check is then not proven;
#  2. the load started inside a scratch cgroup v2 shaped as a pod's
#     (dra-gpu-check.<pid>/kubepods.slice/kubepods-pod<uid>.slice/cri-containerd-<id>.scope), created
#     here and removed on exit; the agent must attribute its GPU process to <uid>;
#  3. the agent's read with every capability dropped and no_new_privs (setpriv), once in a PID
#     namespace of its own (unshare --pid), once in the host's (the chart's hostPID default), each
#     comparing with nvidia-smi (--query-gpu, --query-compute-apps, -q) and /proc/driver/nvidia.
# It only reads the GPU: no nvidia-smi option that sets anything (MIG, persistence, clocks, power,
# ECC, compute mode, reset) is used, and a test greps this file for them.
# Exit status: 0 every check passed, 1 a check failed or is not proven (and not allowed), 2 it cannot
# run here.
set -euo pipefail

if [[ "${1:-}" == "--bundle" ]]; then
	# --bundle BINARY OUT: write this script with BINARY appended (make gpu-check does).
	bin=$2 out=$3
	{ sed '/^__PAYLOAD__$/q' "$0"; tar -C "$(dirname "$bin")" -czf - "$(basename "$bin")" | base64; } >"$out"
	chmod +x "$out"
	exit 0
fi

start=$SECONDS
dir=$(mktemp -d)
cgtop=""
load_pid=""
leaf=""

# stop_load ends the load and every process it started (all in its cgroup when there is one).
stop_load() {
	if [[ -n "$leaf" && -f "$leaf/cgroup.procs" ]]; then
		while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$leaf/cgroup.procs"
	fi
	if [[ -n "$load_pid" ]]; then
		kill -- "-$load_pid" 2>/dev/null || kill "$load_pid" 2>/dev/null || true
		wait "$load_pid" 2>/dev/null || true
		load_pid=""
	fi
}
cleanup() {
	stop_load
	if [[ -n "$cgtop" && -d "$cgtop" ]]; then
		# leaves first; a directory still holding a process stays (said below)
		find "$cgtop" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ ! -d "$cgtop" ]] || echo "gpu-check: could not remove the scratch cgroup $cgtop" >&2
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sed '1,/^__PAYLOAD__$/d' "$0" | base64 -d 2>/dev/null | tar -C "$dir" -xzf - 2>/dev/null || true
if [[ ! -x "$dir/dra-exporter" ]]; then
	echo "gpu-check: this copy carries no dra-exporter binary; run make gpu-check and use bin/gpu-check.sh" >&2
	exit 2
fi

args=()
main_args=()
fake=""
tools=""
load_seconds=150
load_gpu=0
while (($#)); do
	case "$1" in
	--fake) fake=$2; shift 2 ;;
	--fake-tools) tools=$2; shift 2 ;;
	--load-seconds) load_seconds=$2; shift 2 ;;
	--load-gpu) load_gpu=$2; shift 2 ;;
	--json) main_args+=("--json=$2"); shift 2 ;;
	--json=* | --allow-not-proven=* | --expect-pod=*) main_args+=("$1"); shift ;;
	--allow-not-proven) main_args+=("--allow-not-proven=$2"); shift 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
if ! [[ "$load_seconds" =~ ^[0-9]+$ && "$load_gpu" =~ ^[0-9]+$ ]]; then
	echo "gpu-check: --load-seconds $load_seconds --load-gpu $load_gpu: want whole numbers (seconds, a GPU index)" >&2
	exit 2
fi

if [[ -n "$fake" ]]; then
	for t in gpu-burn nvidia-driver-proc nvidia-smi; do
		if [[ ! -x "$tools/$t" ]]; then
			echo "gpu-check: --fake needs --fake-tools DIR holding $t (make gpu-check FAKE=... builds them)" >&2
			exit 2
		fi
	done
	# The agent, nvidia-smi and the burn read one copy of the machine; the burn adds itself to it.
	cp "$fake" "$dir/machine.json"
	export GPUFAKE_FILE="$dir/machine.json"
	PATH="$tools:$PATH"
	"$tools/nvidia-driver-proc" "$dir/driver"
	args+=("--gpu.fake-file=$dir/machine.json" "--driver-proc=$dir/driver")
	echo ">> FAKE: the simulated node $fake; this proves the script's and the checks' logic, not a GPU"
elif ! command -v nvidia-smi >/dev/null; then
	echo "gpu-check: nvidia-smi not found: no NVIDIA GPU driver here. Copy this script to a GPU host, or run it with --fake FILE." >&2
	exit 2
fi
nvidia-smi -L
"$dir/dra-exporter" version | head -1

# 1. The load generator.
load=()
load_desc=""
load_missing=""
if [[ -n "$fake" ]]; then
	load=("$tools/gpu-burn" -i "$load_gpu" -d "$load_seconds")
	load_desc="gpu-burn (fake: a 1 GiB process on the simulated GPU $load_gpu), $load_seconds s"
elif pt=$(command -v dcgmproftester13 || command -v dcgmproftester12 || command -v dcgmproftester11); then
	# DCGM's GPU ids are NVML's indexes.
	load=("$pt" --no-dcgm-validation -t 1004 -i "$load_gpu" -d "$load_seconds")
	load_desc="$(basename "$pt") --no-dcgm-validation -t 1004 -i $load_gpu (tensor pipes), $load_seconds s"
elif command -v python3 >/dev/null && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	# CUDA_DEVICE_ORDER=PCI_BUS_ID numbers the devices as NVML does.
	load=(env CUDA_DEVICE_ORDER=PCI_BUS_ID python3 -c 'import sys, time, torch
a = torch.randn(8192, 8192, device="cuda:" + sys.argv[2])
end = time.time() + float(sys.argv[1])
while time.time() < end:
    b = a @ a
    torch.cuda.synchronize()' "$load_seconds" "$load_gpu")
	load_desc="python3 torch matrix products on GPU $load_gpu, $load_seconds s"
else
	load_missing="no dcgmproftester12/11 (DCGM) and no python3 with a CUDA torch: reads taken idle"
fi

# 2. A scratch cgroup v2 shaped as a pod's, the load inside it.
uid=$(cat /proc/sys/kernel/random/uuid)
cid=$(tr -d '-' </proc/sys/kernel/random/uuid)$(tr -d '-' </proc/sys/kernel/random/uuid)
cgroot=""
for r in /sys/fs/cgroup /sys/fs/cgroup/unified; do
	if [[ -f "$r/cgroup.controllers" && -w "$r/cgroup.procs" ]]; then cgroot=$r; break; fi
done
cg_missing=""
if [[ -z "$cgroot" ]]; then
	cg_missing="no writable cgroup v2 hierarchy (root needed): the join is not proven"
elif [[ ${#load[@]} -eq 0 ]]; then
	cg_missing="no load to place in a pod's cgroup"
else
	cgtop="$cgroot/dra-gpu-check.$$"
	leaf="$cgtop/kubepods.slice/kubepods-pod${uid//-/_}.slice/cri-containerd-$cid.scope"
	if ! mkdir -p "$leaf" 2>"$dir/mkdir.err"; then
		cg_missing="cannot create a cgroup under $cgroot: $(head -1 "$dir/mkdir.err")"
		leaf=""
	fi
fi
if [[ ${#load[@]} -gt 0 ]]; then
	echo ">> load: $load_desc${leaf:+, in the cgroup of pod $uid}"
	# Its own process group (setsid, where there is one), so that stop_load ends all of it.
	session=()
	if command -v setsid >/dev/null; then session=(setsid); fi
	# shellcheck disable=SC2016 # $$ and $1 are the inner shell's
	"${session[@]}" bash -c 'if [[ -n $1 ]]; then echo $$ >"$1/cgroup.procs"; fi; shift; exec "$@"' gpu-check-load "$leaf" "${load[@]}" &
	load_pid=$!
	# Wait until the load is a GPU process (CUDA starts in seconds; a minute at most) and its
	# processes stay the same for 2 s (a generator may start one worker per GPU, one after another).
	listed=""
	previous="none"
	for _ in $(seq 30); do
		if ! kill -0 "$load_pid" 2>/dev/null; then
			load_missing="the load exited before it showed on a GPU: $load_desc"
			load=()
			break
		fi
		listed=""
		while read -r pid; do
			if [[ -z "$leaf" ]] || grep -qx "$pid" "$leaf/cgroup.procs"; then listed+="$pid "; fi
		done < <(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits 2>/dev/null | cut -d, -f1 | tr -d ' ')
		[[ -z "$listed" || "$listed" != "$previous" ]] || break
		previous=$listed
		sleep 2
	done
	if [[ ${#load[@]} -gt 0 && -z "$listed" ]]; then
		echo ">> the load is not listed as a GPU process after 60 s"
	elif [[ -n "$leaf" ]]; then
		echo ">> the load's GPU processes: $listed"
	else
		echo ">> GPU processes (no cgroup tells the load's apart): $listed"
	fi
	if [[ -n "$leaf" ]]; then
		while read -r pid; do main_args+=("--expect-pod=$pid=$uid"); done <"$leaf/cgroup.procs"
	fi
else
	echo ">> no load: $load_missing"
fi
if [[ ${#load[@]} -gt 0 ]]; then
	main_args+=("--load=$load_desc")
else
	main_args+=("--load.missing=$load_missing")
fi
[[ -z "$cg_missing" ]] || echo ">> join: $cg_missing"

# 3. The chart's restrictions: uid 0, every capability dropped, no_new_privs.
drop=()
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
	drop=(setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all --)
else
	echo ">> not root or no setpriv: the runs keep this shell's privileges (the restricted checks end not proven)"
fi
own_log="$dir/own-pid-namespace.log"
if command -v unshare >/dev/null && [[ $(id -u) == 0 ]]; then
	echo ">> run 1: every capability dropped, a PID namespace of its own (no hostPID)"
	unshare --pid --fork --mount-proc "${drop[@]}" "$dir/dra-exporter" gpu-check "${args[@]}" --json="$dir/own.json" >"$own_log" 2>&1 || true
	if [[ -f "$dir/own.json" ]]; then
		main_args+=("--own-pid-namespace-report=$dir/own.json")
	else
		main_args+=("--own-pid-namespace.missing=the run in its own PID namespace gave no report: $(tail -1 "$own_log")")
	fi
else
	main_args+=("--own-pid-namespace.missing=no unshare, or not root: the run without the host PID namespace was not made")
fi

echo ">> run 2: every capability dropped, the host's PID namespace (the chart's hostPID default)"
rc=0
"${drop[@]}" "$dir/dra-exporter" gpu-check "${args[@]}" "${main_args[@]}" || rc=$?
stop_load
echo ">> gpu-check took $((SECONDS - start)) s"
exit "$rc"
__PAYLOAD__
