// Package vocab holds the words of the Kubernetes components that the
// exporter reads as evidence: the event reasons of the scheduler, the
// resourceclaim controller and the kubelet, the kubelet's container waiting
// reasons, the container runtime's wording for a failed CDI injection, and
// what makes a resource name an extended resource.
//
// It is a leaf (it imports nothing of this module), so that the trimmer,
// the index and the classifier read one list: wording tightened here is
// tightened everywhere.
package vocab

import (
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// Event reasons.
const (
	// FailedScheduling is the scheduler's: the pod did not fit (for DRA,
	// "cannot allocate all claims").
	FailedScheduling = "FailedScheduling"
	// FailedResourceClaimCreation is the resourceclaim controller's: a
	// template claim could not be generated.
	FailedResourceClaimCreation = "FailedResourceClaimCreation"
	// FailedPrepareDynamicResources is the kubelet's: NodePrepareResources
	// of a DRA driver failed.
	FailedPrepareDynamicResources = "FailedPrepareDynamicResources"
	// FailedCreatePodSandBox is the kubelet's when the runtime could not
	// create the pod sandbox.
	FailedCreatePodSandBox = "FailedCreatePodSandBox"
	// Failed is the kubelet's when a container could not be created or
	// started; it comes with the container's waiting reason
	// (CreateContainerError, RunContainerError, StartError).
	Failed = "Failed"
)

// deviceInjectionWording is how the container runtime and the kubelet word
// a container or sandbox that could not get its devices: containerd's and
// CRI-O's "CDI device injection failed", the CDI library's "unresolvable CDI
// devices" and "failed to inject CDI devices", a broken CDI spec, and the
// kubelet's own DRA wording. Never a bare "cdi": a path such as
// /opt/mcdis/run.sh contains it.
var deviceInjectionWording = []string{
	"cdi device", "cdi spec", "unresolvable cdi", "inject cdi", "cdi injection",
	"dynamic resource", "prepareresources", "resourceclaim",
}

// DeviceInjectionFailure reports whether a message (an event's, or a
// container's waiting or terminated message) says that the devices could
// not be injected into the container or sandbox.
func DeviceInjectionFailure(message string) bool {
	m := strings.ToLower(message)
	for _, w := range deviceInjectionWording {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// UnresolvedCDIDevices returns the device names of the CDI library's
// refusal of names no spec it loaded defines ("unresolvable CDI devices
// vendor/class=name, ...", tags.cncf.io/container-device-interface's
// cache, through containerd's and CRI-O's "CDI device injection failed"),
// or nil when the message is no such refusal.
func UnresolvedCDIDevices(message string) []string {
	const marker = "unresolvable cdi devices"
	i := strings.Index(strings.ToLower(message), marker)
	if i < 0 {
		return nil
	}
	var names []string
	for _, f := range strings.FieldsFunc(message[i+len(marker):], func(r rune) bool { return r == ',' || r == ' ' || r == ';' }) {
		if strings.Contains(f, "/") && strings.Contains(f, "=") {
			names = append(names, f)
		}
	}
	return names
}

// NodePrepareFailure reports whether an event says that the node failed to
// prepare the pod's devices: the kubelet's FailedPrepareDynamicResources,
// or a sandbox or container failure in the runtime's device wording.
func NodePrepareFailure(reason, message string) bool {
	switch reason {
	case FailedPrepareDynamicResources:
		return true
	case FailedCreatePodSandBox, Failed:
		return DeviceInjectionFailure(message)
	}
	return false
}

// RelevantEvent reports whether a Warning event about a pod is DRA
// evidence: the scheduler's FailedScheduling, the resourceclaim
// controller's FailedResourceClaimCreation, and node prepare failures.
func RelevantEvent(reason, message string) bool {
	switch reason {
	case FailedScheduling, FailedResourceClaimCreation:
		return true
	}
	return NodePrepareFailure(reason, message)
}

// ContainerCreateFailed reports whether a container waiting reason (or the
// reason of its last termination) says the runtime could not create or
// start the container: where a CDI injection failure shows.
func ContainerCreateFailed(reason string) bool {
	switch reason {
	case "CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun":
		return true
	}
	return false
}

// WaitsPastPrepare reports whether a container waiting reason comes only
// after the kubelet prepared the pod's devices in its current sync: an image
// pull, an invalid image, a missing ConfigMap or Secret.
func WaitsPastPrepare(reason string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError":
		return true
	}
	return false
}

// gangWaitingWording is how the scheduler's gang scheduling plugin words a
// pod held for its PodGroup's quorum ("waiting for minCount pods from a gang
// ...", "... tree to meet quorum", "minCount (4) is not yet satisfied").
var gangWaitingWording = []string{"waiting for mincount", "to meet quorum", "is not yet satisfied", "pod group"}

// GangWaiting reports whether a scheduler message says that the pod waits
// for the other members of its PodGroup.
func GangWaiting(message string) bool {
	m := strings.ToLower(message)
	for _, w := range gangWaitingWording {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

// CrashLoopBackOff is the kubelet's waiting reason for a container it
// restarts with back-off; the last termination says why it stopped.
const CrashLoopBackOff = "CrashLoopBackOff"

// IsExtendedResource reports whether a resource name is an extended resource
// (a domain-qualified name outside kubernetes.io, or the implicit DeviceClass
// name).
func IsExtendedResource(name string) bool {
	if strings.HasPrefix(name, resourceapi.ResourceDeviceClassPrefix) {
		return true
	}
	if !strings.Contains(name, "/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	return !strings.Contains(name, "kubernetes.io/")
}

// AllocationFailure reports whether a FailedScheduling message says that
// the scheduler could not allocate or reserve the pod's claims: the
// DynamicResources plugin words every such failure with "claim" ("N cannot
// allocate all claims", "resourceclaim ... not found", "resource claim ...
// is being deleted", "... in use"); a failure of CPU, affinity or taints
// alone does not.
func AllocationFailure(message string) bool {
	return strings.Contains(strings.ToLower(message), "claim")
}

// heldForOtherClaim is the NVIDIA DRA driver's refusal to prepare a device
// that it holds prepared for another claim (cmd/gpu-kubelet-plugin
// device_state.go:1526 of kubernetes-sigs/dra-driver-nvidia-gpu 9593204:
// "requested device %s is already allocated to different claim %s", the
// other claim's UID), as the kubelet passes it on in
// FailedPrepareDynamicResources.
var heldForOtherClaim = regexp.MustCompile(`requested device (\S+) is already allocated to different claim ([0-9a-fA-F-]{36})`)

// HeldForOtherClaim returns the device and the UID of the claim a driver
// says it holds the device prepared for; ok is false for any other message.
func HeldForOtherClaim(message string) (device, claimUID string, ok bool) {
	m := heldForOtherClaim.FindStringSubmatch(message)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}
