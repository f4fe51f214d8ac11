package index

import "strings"

// Event reasons the decision tree reads as evidence.
const (
	ReasonFailedScheduling              = "FailedScheduling"
	ReasonFailedPrepareDynamicResources = "FailedPrepareDynamicResources"
	ReasonFailedResourceClaimCreation   = "FailedResourceClaimCreation"
)

// RelevantEvent reports whether a Warning event about a pod is DRA evidence:
// the scheduler's FailedScheduling, the resourceclaim controller's
// FailedResourceClaimCreation, and node-side preparation failures.
func RelevantEvent(reason, message string) bool {
	switch reason {
	case ReasonFailedScheduling, ReasonFailedResourceClaimCreation:
		return true
	}
	return IsNodePrepareFailure(reason, message)
}

// IsNodePrepareFailure reports whether an event describes a node failing to
// prepare a pod's devices: the kubelet's FailedPrepareDynamicResources, or
// a sandbox or container failure whose message names CDI or DRA.
func IsNodePrepareFailure(reason, message string) bool {
	if reason == ReasonFailedPrepareDynamicResources {
		return true
	}
	if reason != "FailedCreatePodSandBox" && reason != "Failed" {
		return false
	}
	m := strings.ToLower(message)
	return strings.Contains(m, "cdi") || strings.Contains(m, "dynamic resource") ||
		strings.Contains(m, "resourceclaim") || strings.Contains(m, "prepareresources")
}
